"""Catalog views of indexes and columns, and the dynamic management views a JDBC client reads.

Every sys.* view is computed from the catalog when a statement reads it (``dynamic_sql``): ``sys.databases``
(every database of the instance), ``sys.schemas``, ``sys.tables``, ``sys.indexes``, ``sys.index_columns`` and
``sys.columns`` (model.Database.sys_rows), ``sys.dm_exec_sessions`` and ``sys.dm_db_partition_stats``
(sessions and row counts change all the time) and the views of dmviews.py.  A database has no sqlite tables
of its own for them, which keeps creating one (and 1,000 of them) cheap.
Column lists follow the views' documentation on learn.microsoft.com (a subset of their columns)."""
from dataclasses import dataclass, field

from . import dmviews
from . import sqltypes as T
from .catalog import SYS_VIEWS, Column, q


def _cols(spec):
    return [Column(n, t, t.nullable, i) for i, (n, t) in enumerate(spec, 1)]


SYSNAME_NN = T.SYSNAME.null(False)
INT_NN = T.INT.null(False)
BIT_NN = T.BIT.null(False)
TINY_NN = T.TINYINT.null(False)

STORED = {
    "indexes": _cols([("object_id", INT_NN), ("name", T.SYSNAME), ("index_id", INT_NN), ("type", TINY_NN),
                      ("type_desc", T.nvarchar(60)), ("is_unique", T.BIT), ("data_space_id", T.INT),
                      ("ignore_dup_key", T.BIT), ("is_primary_key", T.BIT), ("is_unique_constraint", T.BIT),
                      ("fill_factor", TINY_NN), ("is_padded", T.BIT), ("is_disabled", T.BIT),
                      ("is_hypothetical", T.BIT), ("allow_row_locks", T.BIT), ("allow_page_locks", T.BIT),
                      ("has_filter", T.BIT), ("filter_definition", T.NVARCHAR_MAX)]),
    "index_columns": _cols([("object_id", INT_NN), ("index_id", INT_NN), ("index_column_id", INT_NN),
                            ("column_id", INT_NN), ("key_ordinal", TINY_NN), ("partition_ordinal", TINY_NN),
                            ("is_descending_key", T.BIT), ("is_included_column", T.BIT)]),
    "columns": _cols([("object_id", INT_NN), ("name", T.SYSNAME), ("column_id", INT_NN),
                      ("system_type_id", TINY_NN), ("user_type_id", INT_NN), ("max_length", T.SMALLINT.null(False)),
                      ("precision", TINY_NN), ("scale", TINY_NN), ("collation_name", T.SYSNAME),
                      ("is_nullable", T.BIT), ("is_ansi_padded", BIT_NN), ("is_rowguidcol", BIT_NN),
                      ("is_identity", BIT_NN), ("is_computed", BIT_NN), ("is_sparse", T.BIT),
                      ("is_column_set", T.BIT)]),
}

DYNAMIC = {
    # learn.microsoft.com sys.dm_exec_sessions: without VIEW SERVER STATE a login sees its own session only.
    "dm_exec_sessions": _cols([
        ("session_id", T.SMALLINT.null(False)), ("login_time", T.DATETIME.null(False)),
        ("host_name", T.nvarchar(128)), ("program_name", T.nvarchar(128)),
        ("client_interface_name", T.nvarchar(32)), ("login_name", T.nvarchar(128).null(False)),
        ("status", T.nvarchar(30).null(False)), ("database_id", T.SMALLINT),
        ("is_user_process", BIT_NN), ("text_size", T.INT), ("language", T.nvarchar(128)),
        ("date_format", T.nvarchar(3)), ("date_first", T.SMALLINT), ("quoted_identifier", T.BIT),
        ("arithabort", T.BIT), ("ansi_null_dflt_on", T.BIT), ("ansi_defaults", T.BIT), ("ansi_warnings", T.BIT),
        ("ansi_padding", T.BIT), ("ansi_nulls", T.BIT), ("concat_null_yields_null", T.BIT),
        ("transaction_isolation_level", T.SMALLINT.null(False)), ("lock_timeout", INT_NN),
        ("deadlock_priority", INT_NN), ("open_transaction_count", INT_NN)]),
    # sys.dm_db_partition_stats: one row per partition (one partition per index or heap here).
    "dm_db_partition_stats": _cols([
        ("partition_id", T.BIGINT.null(False)), ("object_id", INT_NN), ("index_id", INT_NN),
        ("partition_number", INT_NN), ("in_row_data_page_count", T.BIGINT.null(False)),
        ("in_row_used_page_count", T.BIGINT.null(False)), ("in_row_reserved_page_count", T.BIGINT.null(False)),
        ("used_page_count", T.BIGINT.null(False)), ("reserved_page_count", T.BIGINT.null(False)),
        ("row_count", T.BIGINT.null(False))]),
}

DYNAMIC.update(dmviews.COLUMNS)
# sys.databases lists every database of the instance: computed when read (created at run time, 1,000 of them)
DYNAMIC["databases"] = SYS_VIEWS["databases"]

# sys.types ids (system_type_id, user_type_id) of the types the simulator has.
TYPE_IDS = {"tinyint": 48, "smallint": 52, "int": 56, "bigint": 127, "bit": 104, "decimal": 106, "numeric": 108,
            "float": 62, "real": 59, "datetime": 61, "smalldatetime": 58, "date": 40, "time": 41, "datetime2": 42,
            "datetimeoffset": 43, "nvarchar": 231, "varchar": 167, "nchar": 239, "char": 175, "binary": 173,
            "varbinary": 165}
FIXED_LENGTH = {"tinyint": 1, "smallint": 2, "int": 4, "bigint": 8, "bit": 1, "float": 8, "real": 4,
                "datetime": 8, "smalldatetime": 4, "date": 3}
PRECISION = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19, "bit": 1, "float": 53, "real": 24,
             "datetime": 23, "smalldatetime": 16, "date": 10}


def type_row(t):
    """(system_type_id, user_type_id, max_length, precision, scale) as sys.columns shows them."""
    n = t.name
    sid = TYPE_IDS.get(n, 0)
    uid = 256 if t.alias == "sysname" else sid
    if t.is_string or t.is_binary:
        per = 2 if n in ("nvarchar", "nchar") else 1
        return sid, uid, -1 if t.length == T.MAX else t.length * per, 0, 0
    if n in ("decimal", "numeric"):
        return sid, uid, {5: 5, 9: 9, 13: 13, 17: 17}[T._decimal_size(t.precision)], t.precision, t.scale
    if n in ("datetime2", "datetimeoffset", "time"):
        base = {"time": 3, "datetime2": 6, "datetimeoffset": 8}[n]
        frac = 0 if t.scale <= 2 else 1 if t.scale <= 4 else 2
        prec = {"time": 8, "datetime2": 19, "datetimeoffset": 26}[n] + (t.scale + 1 if t.scale else 0)
        return sid, uid, base + frac, prec, t.scale
    if n == "datetime":
        return sid, uid, 8, 23, 3
    return sid, uid, FIXED_LENGTH.get(n, 0), PRECISION.get(n, 0), 0


@dataclass
class Index:
    name: str
    index_id: int
    type: int                      # 0 heap, 1 clustered, 2 nonclustered
    unique: bool
    primary_key: bool
    columns: list = field(default_factory=list)   # [Column] in key order


def indexes_of(table):
    """The indexes SQL Server would have: a source table its clustered primary key (PK_<name> on the key
    column, as sim.create_table declares it); a change table the unique clustered index CDC creates on
    (__$start_lsn, __$command_id, __$seqval, __$operation) named <capture instance>_CT_clustered_idx; the
    cdc metadata tables are heaps here."""
    if table.kind == "user":
        return [Index("PK_" + table.name, 1, 1, True, True, [table.columns[table.key]])]
    if table.kind == "change_table":
        cols = [table.column(n) for n in ("__$start_lsn", "__$command_id", "__$seqval", "__$operation")]
        return [Index(table.name + "_clustered_idx", 1, 1, True, False, [c for c in cols if c is not None])]
    if table.kind == "cdc_meta":
        return [Index(None, 0, 0, False, False, [])]
    return []


TYPE_DESC = {0: "HEAP", 1: "CLUSTERED", 2: "NONCLUSTERED"}


def stored_rows(tables):
    """Rows of the stored views for ``tables`` -> {view: [row tuples]}."""
    out = {"indexes": [], "index_columns": [], "columns": []}
    for t in tables:
        for c in t.columns:
            sid, uid, ml, prec, scale = type_row(c.type)
            coll = "SQL_Latin1_General_CP1_CI_AS" if c.type.is_string else None
            out["columns"].append((t.object_id, c.name, c.column_id, sid, uid, ml, prec, scale, coll,
                                   int(c.nullable), 1 if c.type.is_string or c.type.is_binary else 0, 0, 0,
                                   int(c.computed), 0, 0))
        for ix in indexes_of(t):
            out["indexes"].append((t.object_id, ix.name, ix.index_id, ix.type, TYPE_DESC[ix.type], int(ix.unique),
                                   1, 0, int(ix.primary_key), 0, 0, 0, 0, 0, 1, 1, 0, None))
            for k, c in enumerate(ix.columns, 1):
                out["index_columns"].append((t.object_id, ix.index_id, k, c.column_id, k, 0, 0, 0))
    return out


def row_count(conn, table):
    return conn.execute("SELECT COUNT(*) FROM %s" % table.phys).fetchone()[0]


def pages(rows):
    """8 KB pages used by ``rows`` rows (an estimate: the simulator has no pages)."""
    return 0 if not rows else 1 + rows // 100


def _values_sql(columns, rows, many=False):
    from .tsql.translate import lit_value
    names = [c.name for c in columns]
    if not rows:
        return "(SELECT %s WHERE 0)" % ", ".join("NULL AS %s" % q(n) for n in names)
    if many or len(rows) > 400:        # a VALUES list: no limit on its rows (a UNION ALL stops at 500 terms)
        from . import catalog
        coll = [" COLLATE NOCASE" if c.type.is_string and not catalog.CASE_SENSITIVE else "" for c in columns]
        return "(SELECT %s FROM (VALUES %s))" % (
            ", ".join("column%d%s AS %s" % (i, coll[i - 1], q(n)) for i, n in enumerate(names, 1)),
            ", ".join("(%s)" % ", ".join(lit_value(v) for v in r) for r in rows))
    sel = []
    for r in rows:
        sel.append("SELECT " + ", ".join("%s AS %s" % (lit_value(v), q(n)) for v, n in zip(r, names)))
    return "(%s)" % " UNION ALL ".join(sel)


def dynamic_sql(name, ctx):
    """sqlite SQL (a parenthesised query) of a dynamic view as ``ctx`` (the session) may see it."""
    if name == "databases":
        inst = ctx.db.instance
        rows = [("master", 1, 0, 1, "ON", 0)]
        for db in sorted(inst.databases.values(), key=lambda d: d.db_id):
            snap = int(db.allow_snapshot_isolation)
            rows.append((db.name, db.db_id, int(db.cdc_enabled), snap, "ON" if snap else "OFF", 0))
        return _values_sql(DYNAMIC[name], rows, many=True)
    if name == "dm_exec_sessions":
        sessions = ctx.server.session_list() if ctx.login.sysadmin else [ctx]
        rows = []
        for s in sessions:
            if s.login is None:
                continue
            rows.append((s.spid, s.login_time, s.hostname, s.appname, s.client_interface, s.login.name,
                         "running" if s is ctx else "sleeping", s.database_id(), 1,
                         s.wire.textsize, "us_english", "mdy", 7, 1, 1, 1, 0, 1, 1, 1, 1, s.isolation,
                         s.lock_timeout, 0, s.trancount))
        return _values_sql(DYNAMIC[name], rows)
    if name in ("schemas", "tables") or name in STORED:
        return _values_sql(ctx.db.table("sys", name).columns, ctx.db.sys_rows(name, ctx.login), many=True)
    if name == "dm_db_partition_stats":
        rows = []
        for t in ctx.db.tables.values():
            if t.kind not in ("user", "change_table", "cdc_meta"):
                continue
            n = row_count(ctx.conn, t)
            for ix in indexes_of(t)[:1]:
                p = pages(n)
                rows.append((t.object_id * 256 + ix.index_id, t.object_id, ix.index_id, 1, p, p, p, p, p, n))
        return _values_sql(DYNAMIC[name], rows)
    if name in dmviews.COLUMNS:
        return _values_sql(DYNAMIC[name], dmviews.rows(name, ctx))
    raise KeyError(name)
