"""Translate parsed T-SQL SELECTs to sqlite SQL, tracking the T-SQL type of every result column.

The translator resolves names against the simulator's catalog (so unknown
objects give Msg 208 and unbound columns Msg 207/4104), checks permissions
(Msg 229), maps T-SQL functions to sqlite expressions or registered Python
functions, and keeps a SqlType for each expression so COLMETADATA is right
even when every value is NULL."""
from dataclasses import dataclass, field

from . import ast as A
from .. import permissions as P
from .. import sqltypes as T
from .. import timeutil
from .. import catalog
from ..catalog import fold, q
from ..errors import SqlError, insufficient_args, invalid_column, invalid_object, permission_denied
from .builtins import BUILTINS, unify

ALL_CHANGES = "fn_cdc_get_all_changes_"
NET_CHANGES = "fn_cdc_get_net_changes_"


@dataclass
class Compiled:
    sql: str
    params: dict
    columns: list                      # [(name, SqlType)]
    reads: list = field(default_factory=list)    # capture instances whose change data is read
    assigns: list = None               # SELECT @v = ...: variable names per column


class Source:
    """A FROM item visible to column references."""

    def __init__(self, alias, sql_alias, columns, table=None):
        self.alias = alias                       # as written (None for an unaliased derived table)
        self.sql_alias = sql_alias
        self.columns = columns                   # [(name, SqlType)]
        self.table = table
        self._by_name = {}
        for n, t in columns:
            self._by_name.setdefault(fold(n), (n, t))

    def find(self, name):
        """A column of this source under the database collation."""
        return self._by_name.get(fold(name))


class Scope:
    def __init__(self, parent=None):
        self.parent = parent
        self.sources = []
        self.aliases = {}                        # select-list aliases (ORDER BY)


def lit_str(s):
    return "'" + s.replace("'", "''") + "'"


def lit_value(v):
    """A Python value as a sqlite literal."""
    if v is None:
        return "NULL"
    if isinstance(v, (bytes, bytearray)):
        return "X'%s'" % bytes(v).hex()
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, (int, float)):
        return repr(v)
    return lit_str(str(v))


class Translator:
    """Compiles one statement; ``ctx`` is the session (catalog, login, variables, evaluation)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.db = ctx.db
        self.params = {}
        self.reads = []
        self.n_alias = 0
        self.var_params = {}

    # --- entry points -----------------------------------------------------------

    def compile_select(self, sel):
        scope = Scope()
        sql, cols = self.select(sel, scope, top=True)
        assigns = None
        if any(it.assign for it in sel.items):
            if not all(it.assign for it in sel.items):
                raise SqlError(141, "A SELECT statement that assigns a value to a variable must not be combined "
                               "with data-retrieval operations.", 15, 1)
            assigns = [it.assign for it in sel.items]
        return Compiled(sql, self.params, cols, self.reads, assigns)

    def compile_expr(self, e):
        """A scalar expression outside any FROM (DECLARE/SET/EXEC arguments)."""
        sql, t = self.expr(e, Scope())
        return Compiled("SELECT " + sql, self.params, [("", t)], self.reads)

    # --- SELECT -----------------------------------------------------------------------

    def new_alias(self):
        self.n_alias += 1
        return "_s%d" % self.n_alias

    def select(self, sel, outer, top=False, derived=False):
        """-> (sqlite SQL, [(name, SqlType)]); a derived table needs a name for every column."""
        scope = Scope(outer)
        from_sql = self.from_(sel.from_, scope) if sel.from_ is not None else None
        items_sql, cols = [], []
        for i, it in enumerate(sel.items):
            if isinstance(it.expr, A.Star):
                srcs = scope.sources
                if it.expr.qualifier:
                    srcs = [self.source_by_qualifier(scope, it.expr.qualifier, "*")]
                if not srcs:
                    raise SqlError(263, "Must specify table to select from.", 16, 1)
                for s in srcs:
                    for n, t in s.columns:
                        items_sql.append("%s.%s" % (s.sql_alias, q(n)))
                        cols.append((n, t))
                continue
            sql, t = self.expr(it.expr, scope)
            name = it.alias
            if name is None and isinstance(it.expr, A.Name):
                name = it.expr.parts[-1]
            if name is None and derived:
                raise SqlError(8155, "No column name was specified for column %d of '%s'." % (i + 1, derived),
                               16, 2)
            if name is not None:
                items_sql.append("%s AS %s" % (sql, q(name)))
                scope.aliases.setdefault(fold(name), (q(name), t))
            else:
                items_sql.append(sql)
            cols.append((name or "", t))
        out = ["SELECT"]
        if sel.distinct:
            out.append("DISTINCT")
        out.append(", ".join(items_sql))
        if from_sql:
            out.append("FROM " + from_sql)
        if sel.where is not None:
            out.append("WHERE " + self.expr(sel.where, scope)[0])
        if sel.group:
            out.append("GROUP BY " + ", ".join(self.expr(g, scope)[0] for g in sel.group))
        if sel.having is not None:
            out.append("HAVING " + self.expr(sel.having, scope)[0])
        for kind, other in sel.unions or []:
            osql, ocols = self.select(other, outer)
            if len(ocols) != len(cols):
                raise SqlError(205, "All queries combined using a UNION, INTERSECT or EXCEPT operator must have an "
                               "equal number of expressions in their target lists.", 16, 1)
            cols = [(n, unify([t, ot])) for (n, t), (_, ot) in zip(cols, ocols)]
            out.append(kind + " " + osql)
        if sel.order:
            parts = []
            for e, desc in sel.order:
                if isinstance(e, A.Lit) and e.kind == "int":
                    s = str(e.value)
                elif isinstance(e, A.Name) and len(e.parts) == 1 and fold(e.parts[0]) in scope.aliases:
                    s = scope.aliases[fold(e.parts[0])][0]
                else:
                    s = self.expr(e, scope)[0]
                parts.append(s + (" DESC" if desc else ""))
            out.append("ORDER BY " + ", ".join(parts))
        limit = None
        if sel.top is not None:
            limit = self.expr(sel.top, scope)[0]
        if sel.fetch is not None or sel.offset is not None:
            limit = self.expr(sel.fetch, scope)[0] if sel.fetch is not None else "-1"
            out.append("LIMIT %s OFFSET %s" % (limit, self.expr(sel.offset, scope)[0]))
        elif limit is not None:
            out.append("LIMIT " + limit)
        return " ".join(out), cols

    def source_by_qualifier(self, scope, parts, colname):
        want = [fold(p) for p in parts]
        s = scope
        while s:
            for src in s.sources:
                if src.alias is not None and [fold(src.alias)] == want[-1:]:
                    if len(want) == 1 or (src.table is not None and fold(src.table.schema) == want[-2]):
                        return src
            s = s.parent
        raise SqlError(4104, 'The multi-part identifier "%s" could not be bound.' % ".".join(parts + [colname])
                       if colname != "*" else 'The multi-part identifier "%s" could not be bound.' % ".".join(parts),
                       16, 1)

    # --- FROM -----------------------------------------------------------------------

    def from_(self, node, scope):
        if isinstance(node, A.Join):
            left = self.from_(node.left, scope)
            right = self.from_(node.right, scope)
            if node.kind == "CROSS":
                return "%s CROSS JOIN %s" % (left, right)
            on = self.expr(node.on, scope)[0]
            kind = {"INNER": "JOIN", "LEFT": "LEFT JOIN", "RIGHT": "RIGHT JOIN", "FULL": "FULL JOIN"}[node.kind]
            return "%s %s %s ON %s" % (left, kind, right, on)
        if isinstance(node, A.Derived):
            sql, cols = self.select(node.select, Scope(scope.parent), derived=node.alias)
            alias = self.new_alias()
            scope.sources.append(Source(node.alias, alias, cols))
            return "(%s) AS %s" % (sql, alias)
        if node.args is not None:
            return self.tvf(node, scope)
        table = self.resolve_table(node.parts)
        self.check_read(table)
        alias = self.new_alias()
        cols = [(c.name, c.type) for c in table.columns]
        scope.sources.append(Source(node.alias or table.name, alias, cols, table))
        return "%s AS %s" % (table.phys, alias)

    def resolve_parts(self, parts):
        """[db.]schema.name -> (schema, name) in the current database, or Msg 208."""
        written = ".".join(parts)
        parts = list(parts)
        if len(parts) == 3:
            if parts[0].lower() != self.ctx.database.lower():
                raise invalid_object(written)
            parts = parts[1:]
        if len(parts) == 2:
            schema = parts[0] or "dbo"
            return schema, parts[1], written
        if len(parts) == 1:
            return "dbo", parts[0], written
        raise invalid_object(written)

    def resolve_table(self, parts):
        schema, name, written = self.resolve_parts(parts)
        t = None
        if self.ctx.database.lower() == self.db.name.lower() or fold(schema) == "sys":
            t = self.db.table(schema, name)
        if t is None:
            raise invalid_object(written)
        return t

    def check_read(self, table):
        login = self.ctx.login
        if table.kind == "change_table":
            inst = table.instance
            if not P.can_read_change_table(login, inst):
                raise permission_denied(table.name, self.db.name, "cdc")
            self.reads.append(inst)
        elif not P.can_select(login, table):
            raise permission_denied(table.name, self.db.name, table.schema)

    def tvf(self, node, scope):
        """cdc.fn_cdc_get_all_changes_<ci>(from, to, option) as a derived table."""
        schema, name, written = self.resolve_parts(node.parts)
        lname = fold(name)
        inst = None
        if fold(schema) == "cdc" and self.db.cdc_enabled and self.ctx.database.lower() == self.db.name.lower():
            for prefix in (ALL_CHANGES, NET_CHANGES):
                if lname.startswith(prefix):
                    inst = self.db.instances.get(lname[len(prefix):])
                    if inst is not None and prefix == NET_CHANGES and not inst.supports_net_changes:
                        inst = None
                    kind = prefix
                    break
        if inst is None:
            raise invalid_object(written)
        fname = kind + inst.name
        if not P.can_access_instance(self.ctx.login, inst):
            raise permission_denied(fname, self.db.name, "cdc")
        if len(node.args) != 3:
            raise SqlError(216 if len(node.args) < 3 else 8144,
                           "Parameters were not supplied for the function 'cdc.%s'." % fname
                           if len(node.args) < 3 else
                           "Procedure or function cdc.%s has too many arguments specified." % fname, 16, 1)
        args_sql = [self.expr(a, Scope())[0] for a in node.args]
        lo, hi, opt = self.ctx.evaluate("SELECT " + ", ".join(args_sql), self.params)
        opt = (opt or "").strip().lower() if isinstance(opt, str) else None
        max_lsn = self.ctx.evaluate("SELECT MAX(start_lsn) FROM cdc.lsn_time_mapping", {})[0]
        fn313 = insufficient_args("cdc.%s ... " % kind)     # SQL Server: "... cdc.fn_cdc_get_all_changes_ ... ."
        ok_opts = ("all", "all update old") if kind == ALL_CHANGES else ("all", "all with mask", "all with merge")
        if (opt not in ok_opts or not isinstance(lo, bytes) or not isinstance(hi, bytes) or max_lsn is None
                or inst.start_lsn is None):
            raise fn313
        lo, hi = lo.ljust(10, b"\0")[:10], hi.ljust(10, b"\0")[:10]
        if lo < inst.start_lsn or hi > max_lsn or lo > hi:
            raise fn313
        self.reads.append(inst)
        ct = inst.ct.phys
        cap = [c.name for c in inst.captured]
        if kind == ALL_CHANGES:
            cols = [("__$start_lsn", T.LSN.null(False)), ("__$seqval", T.LSN.null(False)),
                    ("__$operation", T.INT.null(False)), ("__$update_mask", T.varbinary(128))]
            cols += [(c.name, c.type.null(True)) for c in inst.captured]
            where = '"__$start_lsn" >= %s AND "__$start_lsn" <= %s' % (lit_value(lo), lit_value(hi))
            if opt == "all":
                where += ' AND "__$operation" <> 3'
            sql = ('SELECT "__$start_lsn", "__$seqval", "__$operation", "__$update_mask"%s FROM %s WHERE %s '
                   'ORDER BY "__$start_lsn", "__$seqval", "__$operation"'
                   % ("".join(", " + q(n) for n in cap), ct, where))
        else:
            sql, cols = self.net_changes(inst, lo, hi, opt)
        alias = self.new_alias()
        scope.sources.append(Source(node.alias or fname, alias, cols))
        return "(%s) AS %s" % (sql, alias)

    def net_changes(self, inst, lo, hi, opt):
        """Net changes per key: the last image of each row changed in [lo, hi]."""
        key = q(inst.index_columns[0])
        cap = [q(c.name) for c in inst.captured]
        rng = '"__$start_lsn" >= %s AND "__$start_lsn" <= %s' % (lit_value(lo), lit_value(hi))
        ct = inst.ct.phys
        op = ('CASE WHEN f."__$operation" = 2 AND l."__$operation" = 1 THEN NULL '
              'WHEN l."__$operation" = 1 THEN 1 WHEN f."__$operation" = 2 THEN %s ELSE %s END'
              % ("5" if opt == "all with merge" else "2", "5" if opt == "all with merge" else "4"))
        mask = 'l."__$update_mask"' if opt == "all with mask" else "NULL"
        sql = ("SELECT * FROM (SELECT l.\"__$start_lsn\" AS \"__$start_lsn\", %s AS \"__$operation\", "
               "%s AS \"__$update_mask\"%s FROM "
               "(SELECT %s AS k, MIN(\"__$start_lsn\" || \"__$seqval\") AS fk, MAX(\"__$start_lsn\" || \"__$seqval\") "
               "AS lk FROM %s WHERE %s AND \"__$operation\" <> 3 GROUP BY %s) AS g "
               "JOIN %s AS f ON f.%s = g.k AND (f.\"__$start_lsn\" || f.\"__$seqval\") = g.fk "
               "AND f.\"__$operation\" <> 3 "
               "JOIN %s AS l ON l.%s = g.k AND (l.\"__$start_lsn\" || l.\"__$seqval\") = g.lk "
               "AND l.\"__$operation\" <> 3) WHERE \"__$operation\" IS NOT NULL ORDER BY \"__$start_lsn\""
               % (op, mask, "".join(", l.%s AS %s" % (c, c) for c in cap), key, ct, rng, key, ct, key, ct, key))
        cols = [("__$start_lsn", T.LSN.null(False)), ("__$operation", T.INT), ("__$update_mask", T.varbinary(128))]
        cols += [(c.name, c.type.null(True)) for c in inst.captured]
        return sql, cols

    # --- expressions -----------------------------------------------------------------

    def expr(self, e, scope):
        """-> (sqlite SQL, SqlType)"""
        m = getattr(self, "x_" + type(e).__name__)
        return m(e, scope)

    def x_Lit(self, e, scope):
        k, v = e.kind, e.value
        if k == "int":
            return str(v), (T.INT if -2**31 <= v < 2**31 else T.BIGINT).null(False)
        if k == "num":
            digits = v.lstrip("-").replace(".", "")
            scale = len(v.split(".")[1]) if "." in v else 0
            return v, T.SqlType("decimal", precision=max(len(digits), 1), scale=scale)
        if k == "float":
            return repr(v), T.FLOAT
        if k == "str":
            return lit_str(v), T.SqlType("varchar", max(1, len(v)))
        if k == "nstr":
            return lit_str(v), T.nvarchar(max(1, len(v)))
        if k == "hex":
            return "X'%s'" % v.hex(), T.varbinary(max(1, len(v)))
        return "NULL", T.INT

    def x_Var(self, e, scope):
        value, t = self.ctx.variable(e.name)
        pname = self.var_params.get(e.name)
        if pname is None:
            pname = self.var_params[e.name] = "v%d" % len(self.var_params)
        self.params[pname] = value
        return ":" + pname, t

    def x_SysVar(self, e, scope):
        v, t = self.ctx.sysvar(e.name)
        return lit_value(v), t

    def x_Keyword(self, e, scope):
        return lit_str(e.word), T.nvarchar(30)

    def x_Name(self, e, scope):
        parts = e.parts
        col = parts[-1]
        if len(parts) == 1:
            s = scope
            while s:
                hits = [src for src in s.sources if src.find(col)]
                if len(hits) > 1:
                    raise SqlError(209, "Ambiguous column name '%s'." % col, 16, 1)
                if hits:
                    n, t = hits[0].find(col)
                    return "%s.%s" % (hits[0].sql_alias, q(n)), t
                if fold(col) in s.aliases and s is scope:
                    return s.aliases[fold(col)]
                s = s.parent
            raise invalid_column(col)
        src = self.source_by_qualifier(scope, parts[:-1], col)
        hit = src.find(col)
        if hit is None:
            raise invalid_column(col)
        return "%s.%s" % (src.sql_alias, q(hit[0])), hit[1]

    def x_Star(self, e, scope):
        raise SqlError(102, "Incorrect syntax near '*'.", 15, 1)

    def x_SubQ(self, e, scope):
        sql, cols = self.select(e.select, scope)
        if len(cols) != 1:
            raise SqlError(116, "Only one expression can be specified in the select list when the subquery is not "
                           "introduced with EXISTS.", 16, 1)
        return "(%s)" % sql, cols[0][1].null(True)

    def x_Exists(self, e, scope):
        sql, _ = self.select(e.subquery, scope)
        return "EXISTS (%s)" % sql, T.BIT

    def x_Not(self, e, scope):
        return "NOT (%s)" % self.expr(e.expr, scope)[0], T.BIT

    def x_Unary(self, e, scope):
        s, t = self.expr(e.expr, scope)
        return "(%s%s)" % (e.op, s), t

    def x_IsNull(self, e, scope):
        s, _ = self.expr(e.expr, scope)
        return "(%s IS %sNULL)" % (s, "NOT " if e.negated else ""), T.BIT

    def coerce_pair(self, le, re, scope):
        """Compile two compared operands, normalising a string side to the other's temporal form."""
        ls, lt = self.expr(le, scope)
        rs, rt = self.expr(re, scope)
        if lt.is_temporal and rt.is_string:
            rs = self.as_temporal(re, rs, lt)
        elif rt.is_temporal and lt.is_string:
            ls = self.as_temporal(le, ls, rt)
        return ls, lt, rs, rt

    def as_temporal(self, node, sql, t):
        kind = "datetime" if t.name == "datetime" else "datetime2"
        if isinstance(node, A.Lit) and node.kind in ("str", "nstr"):
            try:
                v = timeutil.to_datetime(node.value) if kind == "datetime" else timeutil.to_datetime2(node.value)
            except ValueError:
                raise SqlError(241, "Conversion failed when converting date and/or time from character string.",
                               16, 1)
            return lit_str(v)
        return "sim_dtnorm(%s, '%s')" % (sql, kind)

    def x_Bin(self, e, scope):
        op = e.op
        if op in ("AND", "OR"):
            return "(%s %s %s)" % (self.expr(e.left, scope)[0], op, self.expr(e.right, scope)[0]), T.BIT
        if op in ("=", "<>", "<", ">", "<=", ">="):
            ls, lt, rs, rt = self.coerce_pair(e.left, e.right, scope)
            return "(%s %s %s%s)" % (ls, op, rs, self.collate(lt, rt)), T.BIT
        ls, lt = self.expr(e.left, scope)
        rs, rt = self.expr(e.right, scope)
        if op == "+" and (lt.is_string or rt.is_string):
            t = T.nvarchar(T.MAX if T.MAX in (lt.length, rt.length) else min(4000, lt.length + rt.length))
            return "(%s || %s)" % (ls, rs), t
        if op == "+" and (lt.is_binary and rt.is_binary):
            return "sim_binconcat(%s, %s)" % (ls, rs), T.varbinary(min(8000, lt.length + rt.length))
        if op in ("+", "-") and lt.is_temporal and rt.is_numeric:
            return "sim_dateadd('day', %s%s, %s, '%s')" % ("-" if op == "-" else "", rs, ls, lt.decl()), lt
        if op == "^":
            return "((%s | %s) - (%s & %s))" % (ls, rs, ls, rs), unify([lt, rt])
        t = unify([lt, rt])
        if op in ("/", "%"):
            rs = "sim_nonzero(%s)" % rs
        if op == "/" and t.name in ("decimal", "float"):
            return "(CAST(%s AS REAL) / %s)" % (ls, rs), t
        return "(%s %s %s)" % (ls, op, rs), t

    def collate(self, lt, rt):
        """String comparisons follow the database collation (CI: NOCASE, CS: binary), whatever the operands."""
        if not (lt.is_string and rt.is_string):
            return ""
        return " COLLATE BINARY" if catalog.CASE_SENSITIVE else " COLLATE NOCASE"

    def x_InList(self, e, scope):
        s, t = self.expr(e.expr, scope)
        neg = "NOT " if e.negated else ""
        if e.subquery is not None:
            sub, _ = self.select(e.subquery, scope)
            return "(%s %sIN (%s))" % (s, neg, sub), T.BIT
        items = []
        for it in e.items:
            isql, it_t = self.expr(it, scope)
            if t.is_temporal and it_t.is_string:
                isql = self.as_temporal(it, isql, t)
            items.append(isql)
        return "(%s%s %sIN (%s))" % (s, self.collate(t, t), neg, ", ".join(items)), T.BIT

    def x_Between(self, e, scope):
        s, t = self.expr(e.expr, scope)
        parts = []
        for b in (e.low, e.high):
            bs, bt = self.expr(b, scope)
            if t.is_temporal and bt.is_string:
                bs = self.as_temporal(b, bs, t)
            parts.append(bs)
        return "(%s%s %sBETWEEN %s AND %s)" % (s, self.collate(t, t), "NOT " if e.negated else "", parts[0],
                                                parts[1]), T.BIT

    def x_Like(self, e, scope):
        s, _ = self.expr(e.expr, scope)
        p, _ = self.expr(e.pattern, scope)
        return "(%s %sLIKE %s)" % (s, "NOT " if e.negated else "", p), T.BIT

    def x_Case(self, e, scope):
        parts = ["CASE"]
        if e.operand is not None:
            parts.append(self.expr(e.operand, scope)[0])
        types = []
        for c, r in e.whens:
            cs = self.expr(c, scope)[0]
            rs, rt = self.expr(r, scope)
            parts.append("WHEN %s THEN %s" % (cs, rs))
            if not (isinstance(r, A.Lit) and r.kind == "null"):
                types.append(rt)
        if e.else_ is not None:
            es, et = self.expr(e.else_, scope)
            parts.append("ELSE " + es)
            if not (isinstance(e.else_, A.Lit) and e.else_.kind == "null"):
                types.append(et)
        parts.append("END")
        return "(" + " ".join(parts) + ")", unify(types).null(True) if types else T.INT

    def x_Cast(self, e, scope):
        try:
            t = T.parse_type(e.type_text)
        except T.UnknownType:
            raise SqlError(243, "Type %s is not a defined system type." % e.type_text, 16, 2)
        s, st = self.expr(e.expr, scope)
        style = self.expr(e.style, scope)[0] if e.style is not None else "NULL"
        if t.is_integer and st.is_numeric and e.style is None:
            return "CAST(%s AS INTEGER)" % s, t
        return "sim_cast(%s, %s, %s, %s)" % (s, lit_str(t.decl() if not t.alias else "nvarchar(128)"),
                                              lit_str(st.decl()), style), t

    def x_Call(self, e, scope):
        parts = [p for p in e.parts]
        if len(parts) == 3:
            if parts[0].lower() != self.ctx.database.lower():
                raise invalid_object(".".join(parts))
            parts = parts[1:]
        key = ".".join(p.lower() for p in parts)
        h = BUILTINS.get(key)
        if h is None:
            name = ".".join(e.parts)
            if len(parts) == 1:
                raise SqlError(195, "'%s' is not a recognized built-in function name." % name, 15, 10)
            raise SqlError(4121, 'Cannot find either column "%s" or the user-defined function or aggregate "%s", '
                           'or the name is ambiguous.' % (parts[0], name), 16, 1)
        return h(self, e, scope)

    # --- helpers for builtins -------------------------------------------------------

    def args(self, e, scope, n=None, name=None):
        if n is not None and len(e.args) != n:
            fn = name or ".".join(e.parts)
            if len(e.args) < n:
                raise SqlError(313, "An insufficient number of arguments were supplied for the procedure or "
                               "function %s." % fn, 16, 3)
            raise SqlError(174, "The %s function requires %d argument(s)." % (fn, n), 15, 1)
        return [self.expr(a, scope) for a in e.args]

    def const(self, name):
        """Bind a per-statement constant (current time values) as a parameter."""
        pname = "c_" + name
        if pname not in self.params:
            if getattr(self, "now", None) is None:
                self.now = self.db.now()
            self.params[pname] = self.ctx.constant(name, self.now)
        return ":" + pname

    def lsn_literal(self, b):
        return lit_value(b)
