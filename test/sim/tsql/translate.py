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
from .. import dmviews, sysviews, timeutil
from .. import catalog
from ..catalog import fold, q
from ..errors import SqlError, invalid_column, invalid_object, permission_denied
from . import cdc_tvf, cte
from .builtins import BUILTINS, unify

@dataclass
class Compiled:
    sql: str
    params: dict
    columns: list                      # [(name, SqlType)]
    reads: list = field(default_factory=list)    # capture instances whose change data is read
    assigns: list = None               # SELECT @v = ...: variable names per column


class Source:
    """A FROM item visible to column references."""

    def __init__(self, alias, sql_alias, columns, table=None, display=None):
        self.alias = alias                       # as written (None for an unaliased derived table)
        self.sql_alias = sql_alias
        self.columns = columns                   # [(name, SqlType)]
        self.table = table
        self.display = display or alias          # how SQL Server names it in Msg 8120 ('x', 'dbo.orders')
        self.remap = None                        # {column: sql} when the source is read through a CTE
        self._by_name = {}
        for n, t in columns:
            self._by_name.setdefault(fold(n), (n, t))

    def find(self, name):
        """A column of this source under the database collation."""
        return self._by_name.get(fold(name))

    def ref(self, name):
        """sqlite SQL of column ``name`` (as ``find`` returned it)."""
        if self.remap is not None:
            return self.remap[name]
        return "%s.%s" % (self.sql_alias, q(name))


AGGREGATES = {"count", "count_big", "sum", "avg", "min", "max", "string_agg", "stdev", "stdevp", "var", "varp",
              "checksum_agg"}


def is_aggregate(e):
    """An aggregate function call (not a window function)."""
    return isinstance(e, A.Call) and e.over is None and len(e.parts) == 1 and e.parts[0].lower() in AGGREGATES


def has_aggregate(node):
    """An aggregate call anywhere in ``node`` (an AST node or a list of them), outside nested SELECTs."""
    if isinstance(node, (list, tuple)):
        return any(has_aggregate(x) for x in node)
    if not isinstance(node, A.Node) or isinstance(node, (A.SubQ, A.Exists, A.Select)):
        return False
    if is_aggregate(node):
        return True
    if isinstance(node, A.InList):
        return has_aggregate(node.expr) or has_aggregate(node.items)
    return any(has_aggregate(getattr(node, f, None)) for f in node.__slots__ if f != "text")


class GroupCtx:
    """The grouping of one query level while its select list, HAVING and ORDER BY compile.

    ``keys``: sqlite SQL of every GROUP BY expression (of every grouping set) -> its type; ``away``:
    the keys aggregated away in the grouping set being compiled (they read as NULL there, GROUPING()
    gives 1).  Column references outside aggregates collect in ``pending`` until an enclosing
    expression turns out to be a key; what is left is Msg 8120 (8121 HAVING, 8127 ORDER BY)."""

    def __init__(self, keys, away=(), composite=False):
        self.keys = keys
        self.away = set(away)
        self.composite = composite               # some key is an expression, not a bare column
        self.pending = []
        self.suspended = 0                       # > 0 inside an aggregate's arguments
        self.raw = False                         # compiling without replacing keys (see Translator.expr)
        self.replaced = 0                        # keys replaced by NULL so far
        self.saw_agg = False


_NOT_GROUPED = {
    8120: "Column '%s' is invalid in the select list because it is not contained in either an aggregate "
          "function or the GROUP BY clause.",
    8121: "Column '%s' is invalid in the HAVING clause because it is not contained in either an aggregate "
          "function or the GROUP BY clause.",
    8127: 'Column "%s" is invalid in the ORDER BY clause because it is not contained in either an aggregate '
          'function or the GROUP BY clause.'}


class Scope:
    def __init__(self, parent=None):
        self.parent = parent
        self.sources = []
        self.aliases = {}                        # select-list aliases (ORDER BY)


def lit_str(s):
    """A string as a sqlite literal (a NUL character, which sqlite's SQL text cannot hold, as char(0))."""
    if "\x00" in s:
        return "(%s)" % " || char(0) || ".join(lit_str(p) for p in s.split("\x00"))
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
        self.gs = None                  # GroupCtx of the query level whose select list is compiling
        self.ctes = []                  # 'name AS MATERIALIZED (...)' prepended to the statement
        self.cte_frames = []            # the WITH clauses in scope: [{folded name: cte.CteDef}]
        self.outer_hits = []            # scopes outer column references resolved to (correlation)
        self.scope_of = {}              # id(Source) -> the Scope it belongs to

    # --- entry points -----------------------------------------------------------

    def compile_select(self, sel):
        scope = Scope()
        sql, cols = self.select(sel, scope, top=True)
        sql = self.with_ctes(sql)
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
        return Compiled(self.with_ctes("SELECT " + sql), self.params, [("", t)], self.reads)

    def with_ctes(self, sql):
        """The statement with the common table expressions grouping sets materialise."""
        if not self.ctes:
            return sql
        return "WITH %s %s" % (", ".join(self.ctes), sql)

    # --- SELECT -----------------------------------------------------------------------

    def new_alias(self):
        self.n_alias += 1
        return "_s%d" % self.n_alias

    def select(self, sel, outer, top=False, derived=False):
        """-> (sqlite SQL, [(name, SqlType)]); a derived table needs a name for every column."""
        saved, self.gs = self.gs, None           # a nested query has its own grouping
        frames = len(self.cte_frames)
        try:
            if sel.ctes:
                cte.define(self, sel.ctes, Scope)
            return self._select(sel, outer, derived)
        finally:
            self.gs = saved
            del self.cte_frames[frames:]

    def _select(self, sel, outer, derived):
        scope = Scope(outer)
        hits_mark = len(self.outer_hits)
        from_sql = self.from_(sel.from_, scope) if sel.from_ is not None else None
        where_sql = self.expr(sel.where, scope)[0] if sel.where is not None else None
        order_done = False
        if sel.gsets is not None:
            core, cols, order_done = self.grouping_sets(sel, scope, outer, from_sql, where_sql, hits_mark, derived)
            out = [core]
        else:
            group_sql = []
            if sel.group or has_aggregate([it.expr for it in sel.items]) or has_aggregate(sel.having):
                keys = {}
                group_sql = [self.group_key(g, scope, keys) for g in sel.group or []]
                self.gs = GroupCtx(keys)
            items_sql, cols = self.select_items(sel, scope, derived)
            out = ["SELECT"]
            if sel.distinct:
                out.append("DISTINCT")
            out.append(", ".join("%s AS %s" % (x, q(n)) if n else x for x, (n, _) in zip(items_sql, cols)))
            if from_sql:
                out.append("FROM " + from_sql)
            if where_sql is not None:
                out.append("WHERE " + where_sql)
            if group_sql:
                out.append("GROUP BY " + ", ".join(group_sql))
            if sel.having is not None:
                out.append("HAVING " + self.checked(sel.having, scope, 8121)[0])
        for kind, other in sel.unions or []:
            osql, ocols = self.select(other, outer)
            if len(ocols) != len(cols):
                raise SqlError(205, "All queries combined using a UNION, INTERSECT or EXCEPT operator must have an "
                               "equal number of expressions in their target lists.", 16, 1)
            cols = [(n, unify([t, ot])) for (n, t), (_, ot) in zip(cols, ocols)]
            out.append(kind + " " + osql)
        if sel.order and not order_done:
            parts = []
            for e, desc in sel.order:
                if isinstance(e, A.Lit) and e.kind == "int":
                    s = str(e.value)
                elif isinstance(e, A.Name) and len(e.parts) == 1 and fold(e.parts[0]) in scope.aliases:
                    s = scope.aliases[fold(e.parts[0])][0]
                else:
                    s = self.checked(e, scope, 8127)[0]
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

    def checked(self, e, scope, number):
        """Compile ``e`` of a grouped query: a column outside aggregates and GROUP BY keys is Msg ``number``."""
        g = self.gs
        if g is not None:
            del g.pending[:]
        sql, t = self.expr(e, scope)
        if g is not None and g.pending:
            raise SqlError(number, _NOT_GROUPED[number] % g.pending[0], 16, 1)
        return sql, t

    def select_items(self, sel, scope, derived):
        """The select list -> ([sqlite SQL], [(name, SqlType)]), registering aliases for ORDER BY."""
        items_sql, cols = [], []
        g = self.gs
        for i, it in enumerate(sel.items):
            if isinstance(it.expr, A.Star):
                srcs = scope.sources
                if it.expr.qualifier:
                    srcs = [self.source_by_qualifier(scope, it.expr.qualifier, "*")]
                if not srcs:
                    raise SqlError(263, "Must specify table to select from.", 16, 1)
                for s in srcs:
                    for n, t in s.columns:
                        sql = s.ref(n)
                        if g is not None:
                            if sql not in g.keys:
                                raise SqlError(8120, _NOT_GROUPED[8120] % (
                                    "%s.%s" % (s.display, n) if s.display else n), 16, 1)
                            if sql in g.away:
                                sql, t = "NULL", t.null(True)
                        items_sql.append(sql)
                        cols.append((n, t))
                continue
            sql, t = self.checked(it.expr, scope, 8120)
            name = it.alias
            if name is None and isinstance(it.expr, A.Name):
                name = it.expr.parts[-1]
            if name is None and derived:
                raise SqlError(8155, "No column name was specified for column %d of '%s'." % (i + 1, derived),
                               16, 2)
            if name is not None:
                scope.aliases.setdefault(fold(name), (q(name), t))
            items_sql.append(sql)
            cols.append((name or "", t))
        return items_sql, cols

    def group_key(self, g, scope, keys):
        """Compile one GROUP BY expression into ``keys``; Msg 164 without a column of this query, 144 with an
        aggregate."""
        probe = GroupCtx({})
        saved, self.gs = self.gs, probe
        try:
            sql, t = self.expr(g, scope)
        finally:
            self.gs = saved
        if probe.saw_agg or isinstance(g, (A.SubQ, A.Exists)):
            raise SqlError(144, "Cannot use an aggregate or a subquery in an expression used for the group by "
                           "list of a GROUP BY clause.", 15, 1)
        if not probe.pending:
            raise SqlError(164, "Each GROUP BY expression must contain at least one column that is not an outer "
                           "reference.", 15, 1)
        keys.setdefault(sql, t)
        return sql

    def grouping_sets(self, sel, scope, outer, from_sql, where_sql, hits_mark, derived):
        """GROUP BY GROUPING SETS / ROLLUP / CUBE / (): one GROUP BY per grouping set over the same rows,
        combined with UNION ALL; in each, the keys outside the set read NULL and GROUPING() gives 1.
        The FROM/WHERE rows are computed once (a materialised CTE) unless they are correlated with an
        outer query.  An empty set is the grand total: one row even over no rows, as on SQL Server.
        -> (SQL, columns, whether ORDER BY was applied)."""
        ancestors = set()
        s = outer
        while s is not None:
            ancestors.add(id(s))
            s = s.parent
        correlated = any(id(h) in ancestors for h in self.outer_hits[hits_mark:])
        if from_sql is None:
            rows_from = ""
        elif correlated:
            rows_from = "FROM " + from_sql + (" WHERE " + where_sql if where_sql is not None else "")
        else:
            name = "_gs%d" % (len(self.ctes) + 1)
            body = []
            for src in scope.sources:
                src.remap = {}
                for i, (n, _) in enumerate(src.columns):
                    cname = "%s_%d" % (src.sql_alias, i)
                    body.append("%s.%s AS %s" % (src.sql_alias, q(n), q(cname)))
                    src.remap[n] = "%s.%s" % (name, q(cname))
            self.ctes.append("%s AS MATERIALIZED (SELECT %s FROM %s%s)" % (
                name, ", ".join(body) or "1 AS _one", from_sql,
                " WHERE " + where_sql if where_sql is not None else ""))
            rows_from = "FROM " + name
        keys, sets = {}, []
        for gset in sel.gsets:
            ss = []
            for g in gset:
                k = self.group_key(g, scope, keys)
                if k not in ss:
                    ss.append(k)
            sets.append(ss)
        # ORDER BY: select-list positions and aliases read the result; other expressions are hidden columns
        # computed in every branch.
        names = []
        for it in sel.items:
            if isinstance(it.expr, A.Star):
                names = None
                break
            names.append(it.alias or (it.expr.parts[-1] if isinstance(it.expr, A.Name) else None))
        order, hidden = [], []
        if sel.order and not sel.unions:
            for e, desc in sel.order:
                ref = None
                if isinstance(e, A.Lit) and e.kind == "int":
                    ref = e.value - 1
                elif isinstance(e, A.Name) and len(e.parts) == 1 and names:
                    hit = [i for i, n in enumerate(names) if n is not None and fold(n) == fold(e.parts[0])]
                    ref = hit[0] if hit else None
                if ref is None:
                    if sel.distinct:
                        raise SqlError(145, "ORDER BY items must appear in the select list if SELECT DISTINCT is "
                                       "specified.", 15, 1)
                    hidden.append(e)
                    order.append(("_o%d" % (len(hidden) - 1), desc))
                else:
                    order.append(("_c%d" % ref, desc))
        composite = any(not isinstance(g, A.Name) for gset in sel.gsets for g in gset)
        branches, cols = [], None
        for ss in sets:
            g = self.gs = GroupCtx(keys, [k for k in keys if k not in ss], composite)
            items_sql, bcols = self.select_items(sel, scope, derived)
            having = self.checked(sel.having, scope, 8121)[0] if sel.having is not None else None
            hid = [self.checked(e, scope, 8127)[0] for e in hidden]
            if cols is None:
                cols = bcols
            else:
                cols = [(n, t.null(t.nullable or bt.nullable)) for (n, t), (_, bt) in zip(cols, bcols)]
            sel_list = ["%s AS %s" % (x, q("_c%d" % i)) for i, x in enumerate(items_sql)]
            sel_list += ["%s AS %s" % (h, q("_o%d" % i)) for i, h in enumerate(hid)]
            parts = ["SELECT " + ", ".join(sel_list)]
            if not ss and not g.saw_agg:
                parts.append("FROM (SELECT 1) AS _one")
                if having is not None:
                    parts.append("WHERE " + having)
            else:
                if rows_from:
                    parts.append(rows_from)
                if ss:
                    parts.append("GROUP BY " + ", ".join(ss))
                if having is not None:
                    parts.append("HAVING " + having)
            branches.append(" ".join(parts))
        for ref, _ in order:
            if ref.startswith("_c") and not 0 <= int(ref[2:]) < len(cols):
                raise SqlError(108, "The ORDER BY position number %d is out of range of the number of items in "
                               "the select list." % (int(ref[2:]) + 1), 15, 1)
        outer_list = ", ".join("_gw.%s%s" % (q("_c%d" % i), " AS " + q(n) if n else "")
                               for i, (n, _) in enumerate(cols))
        sql = "SELECT %s%s FROM (%s) AS _gw" % ("DISTINCT " if sel.distinct else "", outer_list,
                                                " UNION ALL ".join(branches))
        if order:
            sql += " ORDER BY " + ", ".join("_gw.%s%s" % (q(r), " DESC" if d else "") for r, d in order)
        return sql, cols, bool(order)

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
            cte.check_order_by(node.select)
            sql, cols = self.select(node.select, Scope(scope.parent), derived=node.alias)
            alias = self.new_alias()
            self.add_source(scope, Source(node.alias, alias, cols))
            return "(%s) AS %s" % (sql, alias)
        if node.args is not None:
            return self.tvf(node, scope)
        named = cte.lookup(self, node.parts)
        if named is not None:
            alias = self.new_alias()
            self.add_source(scope, Source(node.alias or named.name, alias, named.columns))
            return "%s AS %s" % (named.sql_name, alias)
        table = self.resolve_table(node.parts)
        self.check_read(table)
        alias = self.new_alias()
        cols = [(c.name, c.type) for c in table.columns]
        self.add_source(scope, Source(node.alias or table.name, alias, cols, table,
                                      node.alias or ".".join(node.parts)))
        phys = sysviews.dynamic_sql(table.name, self.ctx) if table.dynamic else table.phys
        return "%s AS %s" % (phys, alias)

    def add_source(self, scope, src):
        scope.sources.append(src)
        self.scope_of[id(src)] = scope

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
        if len(parts) == 1 and parts[0].startswith("@"):
            tv = getattr(self.ctx, "table_vars", {}).get(parts[0][1:])
            if tv is None:
                raise SqlError(1087, 'Must declare the table variable "%s".' % parts[0], 15, 2)
            return tv
        schema, name, written = self.resolve_parts(parts)
        t = None
        if self.ctx.database.lower() == self.db.name.lower() or fold(schema) == "sys":
            t = self.db.table(schema, name)
        if t is None:
            raise invalid_object(written)
        return t

    def check_snapshot(self):
        """SNAPSHOT isolation reads data only where ALLOW_SNAPSHOT_ISOLATION is ON (Msg 3952;
        learn.microsoft.com SET TRANSACTION ISOLATION LEVEL)."""
        if getattr(self.ctx, "isolation", 2) == 5 and not self.db.allow_snapshot_isolation:
            raise SqlError(3952, "Snapshot isolation transaction failed accessing database '%s' because snapshot "
                           "isolation is not allowed in this database. Use ALTER DATABASE to allow snapshot "
                           "isolation." % self.db.name, 16, 1)

    def check_read(self, table):
        login = self.ctx.login
        if table.kind == "tablevar":
            return
        if table.dynamic:
            dmviews.check(table.name, self.ctx)
        if table.kind in ("user", "change_table", "cdc_meta"):
            self.check_snapshot()
        if table.kind == "change_table":
            inst = table.instance
            if not P.can_read_change_table(login, inst):
                raise permission_denied(table.name, self.db.name, "cdc")
            self.reads.append(inst)
        elif not P.can_select(login, table):
            raise permission_denied(table.name, self.db.name, table.schema)

    def tvf(self, node, scope):
        """cdc.fn_cdc_get_all_changes_<ci> / fn_cdc_get_net_changes_<ci> as a derived table (cdc_tvf.py)."""
        return cdc_tvf.tvf(self, node, scope, Scope, Source)

    # --- expressions -----------------------------------------------------------------

    def expr(self, e, scope):
        """-> (sqlite SQL, SqlType).  In a grouped query (``self.gs``) an expression that is a GROUP BY key
        of the current grouping set stands for the key (NULL when the set aggregates it away)."""
        m = getattr(self, "x_" + type(e).__name__)
        g = self.gs
        if g is None or g.suspended or g.raw:
            return m(e, scope)
        if is_aggregate(e):
            g.suspended += 1
            g.saw_agg = True
            try:
                return m(e, scope)
            finally:
                g.suspended -= 1
        mark, replaced = len(g.pending), g.replaced
        sql, t = m(e, scope)
        if g.composite and g.replaced > replaced:
            # A part of this expression was a key aggregated away; the whole may still be another key
            # (GROUPING SETS ((b), (b + 1))): compare it as written.
            g.raw = True
            try:
                raw, _ = m(e, scope)
            finally:
                g.raw = False
            if raw in g.keys:
                sql = raw
        if sql in g.keys:
            del g.pending[mark:]
            if sql in g.away:
                g.replaced += 1
                return "NULL", t.null(True)
        return sql, t

    def column_ref(self, src, name, local):
        """A column of ``src``; ``local``: of the query being compiled (else an outer reference)."""
        if not local:
            self.outer_hits.append(self.scope_of.get(id(src)))
        elif self.gs is not None and not self.gs.suspended:
            self.gs.pending.append("%s.%s" % (src.display, name) if src.display else name)
        return src.ref(name)

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
                    return self.column_ref(hits[0], n, s is scope), t
                if fold(col) in s.aliases and s is scope:
                    return s.aliases[fold(col)]
                s = s.parent
            raise invalid_column(col)
        src = self.source_by_qualifier(scope, parts[:-1], col)
        hit = src.find(col)
        if hit is None:
            raise invalid_column(col)
        return self.column_ref(src, hit[0], any(x is src for x in scope.sources)), hit[1]

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
        """A string compared with a date/time of type ``t``: converted to ``t`` (a literal at compile time)."""
        kind = t.name if t.name in ("datetime", "smalldatetime", "date") else "datetime2"
        if isinstance(node, A.Lit) and node.kind in ("str", "nstr"):
            conv = {"datetime": timeutil.to_datetime, "smalldatetime": timeutil.to_smalldatetime,
                    "date": timeutil.to_date}.get(kind, timeutil.to_datetime2)
            try:
                v = conv(node.value)
            except timeutil.OutOfRange:
                raise SqlError(242, "The conversion of a varchar data type to a %s data type resulted in an "
                               "out-of-range value." % kind, 16, 3)
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
        if "(" not in e.type_text and not t.alias and t.name in ("char", "varchar", "nchar", "nvarchar", "binary",
                                                                  "varbinary"):
            t = T.SqlType(t.name, 30)        # CAST/CONVERT without a length: 30 (learn.microsoft.com CAST)
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
                self.now = self.db.wall_now()
            self.params[pname] = self.ctx.constant(name, self.now)
        return ":" + pname

    def lsn_literal(self, b):
        return lit_value(b)
