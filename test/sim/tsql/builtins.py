"""T-SQL functions: each maps a call to sqlite SQL and a result type.

CDC functions read the session's sqlite snapshot (subqueries on
cdc.lsn_time_mapping) or registered Python functions (``sim_*``, see
sim/functions.py); time functions are per-statement constants, as in SQL Server."""
from . import ast as A
from .. import sqltypes as T
from .. import timeutil
from ..catalog import q
from ..errors import SqlError

_PREC = ["datetimeoffset", "datetime2", "datetime", "smalldatetime", "date", "time", "float", "decimal", "numeric",
         "bigint", "int", "smallint", "tinyint", "bit", "nvarchar", "nchar", "varchar", "char", "varbinary", "binary"]
MAP_OPS = {"largest less than": ("MAX", "<"), "largest less than or equal": ("MAX", "<="),
           "smallest greater than": ("MIN", ">"), "smallest greater than or equal": ("MIN", ">=")}


def unify(types):
    """Result type of CASE/UNION/arithmetic: SQL Server's data type precedence (simplified)."""
    types = [t for t in types if t is not None]
    if not types:
        return T.INT
    best = min(types, key=lambda t: _PREC.index(t.name) if t.name in _PREC else 99)
    nullable = any(t.nullable for t in types)
    same = [t for t in types if t.name == best.name]
    if best.is_string or best.is_binary:
        n = T.MAX if any(t.length == T.MAX for t in same) else max(t.length for t in same)
        return T.SqlType(best.name, n, nullable=nullable)
    if best.name in ("decimal", "numeric"):
        s = max(t.scale for t in same)
        p = min(38, max(t.precision - t.scale for t in same) + s)
        return T.SqlType("decimal", precision=p, scale=s, nullable=nullable)
    if best.is_temporal:
        return T.SqlType(best.name, scale=max(t.scale for t in same), nullable=nullable)
    return T.SqlType(best.name, nullable=nullable)


BUILTINS = {}


def builtin(*names):
    def deco(f):
        for n in names:
            BUILTINS[n] = f
        return f
    return deco


def _fname(e):
    return ".".join(e.parts)


# --- aggregates and windows ------------------------------------------------------------

def _over(tr, e, scope):
    if e.over is None:
        return ""
    parts = []
    if e.over.partition:
        parts.append("PARTITION BY " + ", ".join(tr.expr(x, scope)[0] for x in e.over.partition))
    if e.over.order:
        parts.append("ORDER BY " + ", ".join(tr.expr(x, scope)[0] + (" DESC" if d else "") for x, d in e.over.order))
    return " OVER (%s)" % " ".join(parts)


@builtin("count", "count_big")
def f_count(tr, e, scope):
    t = (T.BIGINT if e.parts[-1].lower() == "count_big" else T.INT).null(False)
    if e.star:
        return "COUNT(*)" + _over(tr, e, scope), t
    (s, _), = tr.args(e, scope, 1)
    return "COUNT(%s%s)%s" % ("DISTINCT " if e.distinct else "", s, _over(tr, e, scope)), t


@builtin("sum")
def f_sum(tr, e, scope):
    (s, t), = tr.args(e, scope, 1)
    if t.name in ("int", "smallint", "tinyint", "bit"):
        rt = T.INT
    elif t.name == "bigint":
        rt = T.BIGINT
    elif t.name in ("decimal", "numeric"):
        rt = T.SqlType("decimal", precision=38, scale=t.scale)
    else:
        rt = T.FLOAT
    return "SUM(%s%s)%s" % ("DISTINCT " if e.distinct else "", s, _over(tr, e, scope)), rt


@builtin("avg")
def f_avg(tr, e, scope):
    (s, t), = tr.args(e, scope, 1)
    sql = "AVG(%s%s)%s" % ("DISTINCT " if e.distinct else "", s, _over(tr, e, scope))
    if t.is_integer:
        return "CAST(%s AS INTEGER)" % sql, T.SqlType("bigint" if t.name == "bigint" else "int")
    return sql, T.FLOAT if t.name == "float" else T.SqlType("decimal", precision=38, scale=max(6, t.scale))


@builtin("min", "max")
def f_minmax(tr, e, scope):
    (s, t), = tr.args(e, scope, 1)
    return "%s(%s)%s" % (e.parts[-1].upper(), s, _over(tr, e, scope)), t.null(True)


@builtin("string_agg")
def f_string_agg(tr, e, scope):
    (s, t), (sep, _) = tr.args(e, scope, 2)
    return "group_concat(%s, %s)" % (s, sep), T.NVARCHAR_MAX


def _grouping_args(tr, e, scope, fn):
    """SQL of GROUPING/GROUPING_ID arguments, each of which must be a GROUP BY expression (Msg 8161)."""
    g = tr.gs
    out = []
    for i, a in enumerate(e.args, 1):
        sql = None
        if g is not None and not g.suspended:
            g.suspended += 1
            try:
                sql, _ = tr.expr(a, scope)
            finally:
                g.suspended -= 1
        if sql is None or sql not in g.keys:
            raise SqlError(8161, "Argument %d of the %s function does not match any of the expressions in the "
                           "GROUP BY clause." % (i, fn), 16, 1)
        out.append(sql)
    return out


@builtin("grouping")
def f_grouping(tr, e, scope):
    """GROUPING(col): tinyint 1 when the row's grouping set aggregates the GROUP BY expression away."""
    if len(e.args) != 1 or e.star:
        raise SqlError(174, "The grouping function requires 1 argument(s).", 15, 1)
    sql, = _grouping_args(tr, e, scope, "GROUPING")
    return ("1" if sql in tr.gs.away else "0"), T.TINYINT.null(False)


@builtin("grouping_id")
def f_grouping_id(tr, e, scope):
    """GROUPING_ID(a, b, ...): int whose bits (first argument most significant) are GROUPING of each."""
    if not e.args or e.star:
        raise SqlError(174, "The grouping_id function requires 1 to 32 arguments.", 15, 1)
    keys = _grouping_args(tr, e, scope, "GROUPING_ID")
    v = 0
    for sql in keys:
        v = v * 2 + (1 if sql in tr.gs.away else 0)
    return str(v), T.INT.null(False)


@builtin("row_number", "rank", "dense_rank")
def f_rownum(tr, e, scope):
    if e.over is None:
        raise SqlError(10753, "The function '%s' must have an OVER clause." % e.parts[-1], 15, 1)
    return "%s()%s" % (e.parts[-1].upper(), _over(tr, e, scope)), T.BIGINT.null(False)


# --- scalar ---------------------------------------------------------------------------

@builtin("isnull")
def f_isnull(tr, e, scope):
    (a, ta), (b, tb) = tr.args(e, scope, 2)
    return "IFNULL(%s, %s)" % (a, b), ta.null(tb.nullable)


@builtin("coalesce")
def f_coalesce(tr, e, scope):
    args = tr.args(e, scope)
    if len(args) < 2:
        raise SqlError(189, "The coalesce function requires 2 to n arguments.", 15, 1)
    return "COALESCE(%s)" % ", ".join(a for a, _ in args), unify([t for _, t in args])


@builtin("nullif")
def f_nullif(tr, e, scope):
    (a, ta), (b, _) = tr.args(e, scope, 2)
    return "NULLIF(%s, %s)" % (a, b), ta.null(True)


@builtin("iif")
def f_iif(tr, e, scope):
    (c, _), (a, ta), (b, tb) = tr.args(e, scope, 3)
    return "(CASE WHEN %s THEN %s ELSE %s END)" % (c, a, b), unify([ta, tb])


@builtin("len")
def f_len(tr, e, scope):
    (a, _), = tr.args(e, scope, 1)
    return "length(rtrim(%s))" % a, T.INT


@builtin("datalength")
def f_datalength(tr, e, scope):
    (a, t), = tr.args(e, scope, 1)
    if t.is_binary:
        return "length(%s)" % a, T.INT
    return "(length(CAST(%s AS BLOB)) * %d)" % (a, 2 if t.name.startswith("n") else 1), T.INT


@builtin("upper", "lower", "ltrim", "rtrim", "trim", "reverse")
def f_str1(tr, e, scope):
    (a, t), = tr.args(e, scope, 1)
    fn = e.parts[-1].lower()
    if fn == "reverse":
        return "sim_reverse(%s)" % a, t
    return "%s(%s)" % (fn, a), t if t.is_string else T.nvarchar(4000)


@builtin("substring")
def f_substring(tr, e, scope):
    (a, t), (s, _), (n, _) = tr.args(e, scope, 3)
    return "substr(%s, %s, %s)" % (a, s, n), t


@builtin("left", "right")
def f_leftright(tr, e, scope):
    (a, t), (n, _) = tr.args(e, scope, 2)
    if e.parts[-1].lower() == "left":
        return "substr(%s, 1, %s)" % (a, n), t
    return "(CASE WHEN %s >= length(%s) THEN %s ELSE substr(%s, -(%s)) END)" % (n, a, a, a, n), t


@builtin("replace")
def f_replace(tr, e, scope):
    (a, t), (b, _), (c, _) = tr.args(e, scope, 3)
    return "replace(%s, %s, %s)" % (a, b, c), T.nvarchar(4000) if not t.is_string else t


@builtin("replicate")
def f_replicate(tr, e, scope):
    """REPLICATE(string, n): NULL for a negative count; the result keeps the string's type, and like
    SQL Server it is cut at 8,000 bytes unless the string is a (max) type."""
    (a, t), (n, _) = tr.args(e, scope, 2)
    rt = t if t.is_string else T.SqlType("varchar", 30)
    limit = 0 if rt.length == T.MAX else (4000 if rt.name in ("nvarchar", "nchar") else 8000)
    return "sim_replicate(%s, %s, %d)" % (a, n, limit), T.SqlType(
        "nvarchar" if rt.name in ("nvarchar", "nchar") else "varchar",
        T.MAX if rt.length == T.MAX else limit)


@builtin("charindex")
def f_charindex(tr, e, scope):
    args = tr.args(e, scope)
    if len(args) not in (2, 3):
        raise SqlError(174, "The charindex function requires 2 to 3 arguments.", 15, 1)
    return "instr(lower(%s), lower(%s))" % (args[1][0], args[0][0]), T.INT


@builtin("concat")
def f_concat(tr, e, scope):
    args = tr.args(e, scope)
    return "(" + " || ".join("IFNULL(sim_cast(%s, 'nvarchar(max)', %s, NULL), '')" % (a, _qs(t.decl()))
                             for a, t in args) + ")", T.nvarchar(4000)


def _qs(s):
    return "'" + s.replace("'", "''") + "'"


@builtin("abs", "floor", "ceiling", "sign")
def f_math1(tr, e, scope):
    (a, t), = tr.args(e, scope, 1)
    fn = {"ceiling": "sim_ceiling", "floor": "sim_floor", "sign": "sign", "abs": "abs"}[e.parts[-1].lower()]
    return "%s(%s)" % (fn, a), t


@builtin("log")
def f_log(tr, e, scope):
    """LOG(x [, base]): the natural (or base) logarithm as float; SQL Server raises 3623 for x <= 0
    and for a base <= 0 or 1 (the event-time sketch buckets lateness with CEILING(LOG(x) / LOG(g)))."""
    args = tr.args(e, scope)
    if len(args) not in (1, 2):
        raise SqlError(189, "The log function requires 1 to 2 arguments.", 15, 1)
    return "sim_log(%s, %s)" % (args[0][0], args[1][0] if len(args) > 1 else "NULL"), T.FLOAT


@builtin("round")
def f_round(tr, e, scope):
    args = tr.args(e, scope)
    return "round(%s, %s)" % (args[0][0], args[1][0] if len(args) > 1 else "0"), args[0][1]


@builtin("newid")
def f_newid(tr, e, scope):
    return "sim_newid()", T.nvarchar(36)


# --- time -----------------------------------------------------------------------------

@builtin("getdate", "current_timestamp")
def f_getdate(tr, e, scope):
    return tr.const("getdate"), T.DATETIME.null(False)


@builtin("getutcdate")
def f_getutcdate(tr, e, scope):
    return tr.const("getutcdate"), T.DATETIME.null(False)


@builtin("sysdatetime")
def f_sysdatetime(tr, e, scope):
    return tr.const("sysdatetime"), T.datetime2(7).null(False)


@builtin("sysutcdatetime")
def f_sysutcdatetime(tr, e, scope):
    return tr.const("sysutcdatetime"), T.datetime2(7).null(False)


@builtin("sysdatetimeoffset")
def f_sysdatetimeoffset(tr, e, scope):
    return tr.const("sysdatetimeoffset"), T.datetimeoffset(7).null(False)


def _part(tr, e, scope, name):
    if not e.args or not isinstance(e.args[0], A.Keyword):
        raise SqlError(155, "'%s' is not a recognized %s option." % (
            e.args[0].parts[-1] if e.args and isinstance(e.args[0], A.Name) else "?", name), 15, 1)
    return e.args[0].word.lower()


def _temporal_arg(tr, node, scope):
    s, t = tr.expr(node, scope)
    if t.is_string:
        if isinstance(node, A.Lit):
            return "'%s'" % timeutil.to_datetime(node.value), T.DATETIME
        return "sim_dtnorm(%s, 'datetime')" % s, T.DATETIME
    return s, t


@builtin("datepart")
def f_datepart(tr, e, scope):
    if len(e.args) != 2:
        raise SqlError(174, "The datepart function requires 2 argument(s).", 15, 1)
    part = _part(tr, e, scope, "datepart")
    s, t = _temporal_arg(tr, e.args[1], scope)
    return "sim_datepart('%s', %s)" % (part, s), T.INT


@builtin("datename")
def f_datename(tr, e, scope):
    part = _part(tr, e, scope, "datename")
    s, t = _temporal_arg(tr, e.args[1], scope)
    return "CAST(sim_datepart('%s', %s) AS TEXT)" % (part, s), T.nvarchar(30)


@builtin("dateadd")
def f_dateadd(tr, e, scope):
    if len(e.args) != 3:
        raise SqlError(174, "The dateadd function requires 3 argument(s).", 15, 1)
    part = _part(tr, e, scope, "dateadd")
    n, _ = tr.expr(e.args[1], scope)
    s, t = _temporal_arg(tr, e.args[2], scope)
    return "sim_dateadd('%s', %s, %s, '%s')" % (part, n, s, t.decl()), t


def _datediff_arg(tr, node, scope):
    """DATEDIFF "implicitly casts string literals as a datetime2 type" (its documentation)."""
    s, t = tr.expr(node, scope)
    if t.is_string:
        if isinstance(node, A.Lit):
            try:
                return "'%s'" % timeutil.to_datetime2(node.value)
            except ValueError:
                raise SqlError(241, "Conversion failed when converting date and/or time from character string.",
                               16, 1)
        return "sim_dtnorm(%s, 'datetime2')" % s
    return s


@builtin("datediff", "datediff_big")
def f_datediff(tr, e, scope):
    """DATEDIFF[_BIG](datepart, start, end): datepart boundaries crossed (int / bigint)."""
    if len(e.args) != 3:
        raise SqlError(174, "The datediff function requires 3 argument(s).", 15, 1)
    part = _part(tr, e, scope, "datediff")
    a = _datediff_arg(tr, e.args[1], scope)
    b = _datediff_arg(tr, e.args[2], scope)
    return "sim_datediff('%s', %s, %s)" % (part, a, b), T.BIGINT if e.parts[-1].lower().endswith("big") else T.INT


@builtin("todatetimeoffset")
def f_todto(tr, e, scope):
    (a, t), (o, _) = tr.args(e, scope, 2)
    return "sim_todto(%s, %s)" % (a, o), T.datetimeoffset(t.scale if t.name == "datetime2" else 3)


@builtin("switchoffset")
def f_switchoffset(tr, e, scope):
    (a, t), (o, _) = tr.args(e, scope, 2)
    return "sim_switchoffset(%s, %s)" % (a, o), t


# --- metadata -------------------------------------------------------------------------

@builtin("db_name")
def f_db_name(tr, e, scope):
    if e.args:
        (a, _), = tr.args(e, scope, 1)
        return "sim_db_name(%s)" % a, T.nvarchar(128)
    return _qs(tr.ctx.database), T.nvarchar(128)


@builtin("db_id")
def f_db_id(tr, e, scope):
    if e.args:
        (a, _), = tr.args(e, scope, 1)
        return "sim_db_id(%s)" % a, T.SMALLINT
    return "sim_db_id(%s)" % _qs(tr.ctx.database), T.SMALLINT


@builtin("object_id")
def f_object_id(tr, e, scope):
    args = tr.args(e, scope)
    if len(args) not in (1, 2):
        raise SqlError(174, "The object_id function requires 1 to 2 arguments.", 15, 1)
    return "sim_object_id(%s)" % args[0][0], T.INT


@builtin("object_name", "object_schema_name")
def f_object_name(tr, e, scope):
    args = tr.args(e, scope)
    if len(args) not in (1, 2):
        raise SqlError(174, "The %s function requires 1 to 2 arguments." % e.parts[-1].lower(), 15, 1)
    fn = "sim_object_name" if e.parts[-1].lower() == "object_name" else "sim_object_schema_name"
    return "%s(%s)" % (fn, args[0][0]), T.SYSNAME


@builtin("schema_name")
def f_schema_name(tr, e, scope):
    if not e.args:
        return "'dbo'", T.SYSNAME
    (a, _), = tr.args(e, scope, 1)
    return "sim_schema_name(%s)" % a, T.SYSNAME


@builtin("suser_sname", "suser_name", "user_name", "current_user", "session_user", "system_user", "user")
def f_user(tr, e, scope):
    return _qs(tr.ctx.login.name), T.SYSNAME


@builtin("host_name")
def f_host_name(tr, e, scope):
    return _qs(tr.ctx.hostname or ""), T.nvarchar(128)


@builtin("app_name")
def f_app_name(tr, e, scope):
    return _qs(tr.ctx.appname or ""), T.nvarchar(128)


@builtin("serverproperty")
def f_serverproperty(tr, e, scope):
    (a, _), = tr.args(e, scope, 1)
    return "sim_serverproperty(%s)" % a, T.nvarchar(128)


@builtin("databasepropertyex")
def f_databasepropertyex(tr, e, scope):
    """DATABASEPROPERTYEX(database, property): Collation (the --collation), Status, ... (sql_variant)."""
    (a, _), (b, _) = tr.args(e, scope, 2)
    return "sim_databasepropertyex(%s, %s)" % (a, b), T.nvarchar(128)


# --- CDC ------------------------------------------------------------------------------

def _binary_arg(t):
    """A binary(10) LSN argument: character data does not convert implicitly (Msg 257)."""
    if t is not None and (t.is_string or t.name in ("text", "ntext")):
        raise SqlError(257, "Implicit conversion from data type %s to binary is not allowed. Use the CONVERT "
                       "function to run this query." % t.type_name(), 16, 3)


def _cdc_table(tr):
    if not tr.db.cdc_enabled or tr.ctx.database.lower() != tr.db.name.lower():
        return None
    return "cdc.lsn_time_mapping"


@builtin("sys.fn_cdc_get_max_lsn")
def f_max_lsn(tr, e, scope):
    tr.args(e, scope, 0, "sys.fn_cdc_get_max_lsn")
    m = _cdc_table(tr)
    return ("(SELECT MAX(start_lsn) FROM %s)" % m if m else "CAST(NULL AS BLOB)"), T.LSN


@builtin("sys.fn_cdc_get_min_lsn")
def f_min_lsn(tr, e, scope):
    (a, _), = tr.args(e, scope, 1, "sys.fn_cdc_get_min_lsn")
    return "sim_min_lsn(%s)" % a, T.LSN


@builtin("sys.fn_cdc_increment_lsn", "sys.fn_cdc_decrement_lsn")
def f_inc_lsn(tr, e, scope):
    (a, at), = tr.args(e, scope, 1, _fname(e))
    _binary_arg(at)
    return "sim_lsn_add(%s, %d)" % (a, 1 if "increment" in e.parts[-1].lower() else -1), T.LSN


@builtin("sys.fn_cdc_map_lsn_to_time")
def f_map_lsn(tr, e, scope):
    (a, at), = tr.args(e, scope, 1, "sys.fn_cdc_map_lsn_to_time")
    _binary_arg(at)
    m = _cdc_table(tr)
    if not m:
        return "CAST(NULL AS TEXT)", T.DATETIME
    # "(SELECT arg)": an aggregate argument (MIN(c.[__$start_lsn])) then belongs to the outer query.
    if tr.db.cfg.map_absent == "next":
        return ("(SELECT tran_end_time FROM %s WHERE start_lsn >= (SELECT %s) ORDER BY start_lsn LIMIT 1)"
                % (m, a)), T.DATETIME
    return "(SELECT tran_end_time FROM %s WHERE start_lsn = (SELECT %s))" % (m, a), T.DATETIME


@builtin("sys.fn_cdc_map_time_to_lsn")
def f_map_time(tr, e, scope):
    if len(e.args) != 2:
        tr.args(e, scope, 2, "sys.fn_cdc_map_time_to_lsn")
    m = _cdc_table(tr)
    op_node, t_node = e.args
    ts, tt = tr.expr(t_node, scope)
    if isinstance(t_node, A.Lit) and t_node.kind in ("str", "nstr"):
        try:
            ts = _qs(timeutil.to_datetime(t_node.value))
        except ValueError:
            raise SqlError(241, "Conversion failed when converting date and/or time from character string.", 16, 1)
    else:
        ts = "sim_dtnorm(%s, 'datetime')" % ts
    if not m:
        return "CAST(NULL AS BLOB)", T.LSN
    if isinstance(op_node, A.Lit) and op_node.kind in ("str", "nstr"):
        op = op_node.value.strip().lower()
        if op not in MAP_OPS:
            raise SqlError(313, "An insufficient number of arguments were supplied for the procedure or function "
                           "sys.fn_cdc_map_time_to_lsn.", 16, 3)
        agg, cmp = MAP_OPS[op]
        return "(SELECT %s(start_lsn) FROM %s WHERE tran_end_time %s %s)" % (agg, m, cmp, ts), T.LSN
    os_, _ = tr.expr(op_node, scope)
    cases = " ".join("WHEN %s THEN (SELECT %s(start_lsn) FROM %s WHERE tran_end_time %s %s)"
                     % (_qs(k), agg, m, cmp, ts) for k, (agg, cmp) in MAP_OPS.items())
    return "(CASE sim_map_op(%s) %s END)" % (os_, cases), T.LSN


@builtin("sys.fn_cdc_is_bit_set")
def f_is_bit_set(tr, e, scope):
    (p, _), (mk, _) = tr.args(e, scope, 2, "sys.fn_cdc_is_bit_set")
    return "sim_is_bit_set(%s, %s)" % (p, mk), T.BIT


@builtin("sys.fn_cdc_get_column_ordinal")
def f_col_ordinal(tr, e, scope):
    (ci, _), (col, _) = tr.args(e, scope, 2, "sys.fn_cdc_get_column_ordinal")
    return "sim_column_ordinal(%s, %s)" % (ci, col), T.INT


@builtin("sys.fn_cdc_has_column_changed")
def f_has_col_changed(tr, e, scope):
    (ci, _), (col, _), (mk, _) = tr.args(e, scope, 3, "sys.fn_cdc_has_column_changed")
    return "sim_is_bit_set(sim_column_ordinal(%s, %s), %s)" % (ci, col, mk), T.BIT


__all__ = ["BUILTINS", "unify", "q"]
