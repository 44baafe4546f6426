"""ODBC catalog procedures: sp_tables, sp_columns[_100], sp_pkeys, sp_statistics[_100].

What JDBC's DatabaseMetaData calls (getTables, getColumns through a table variable and INSERT ... EXEC
sp_columns_100, getPrimaryKeys, getIndexInfo).  Result sets and arguments follow the procedures'
documentation (learn.microsoft.com "sp_tables", "sp_columns", "sp_pkeys", "sp_statistics"); the per-type
values of sp_columns follow ODBC SQLColumns as SQL Server reports it ("Catalog Metadata" for the date/time
types: DATA_TYPE, COLUMN_SIZE, BUFFER_LENGTH, DECIMAL_DIGITS, SQL_DATA_TYPE, SQL_DATETIME_SUB, SS_DATA_TYPE).
sp_columns_100 and sp_statistics_100 are the undocumented SQL Server 2008+ variants the drivers call: the same
rows with sp_columns_100's extra SS_* columns.  sp_columns_170 (SQL Server 2025) does not exist here, as on
SQL Server 2019/2022: the driver falls back to sp_columns_100 on its Msg 2812."""
import re

from . import catalog
from . import permissions as P
from . import sqltypes as T
from . import sysviews
from .catalog import fold
from .errors import SqlError
from .procs import INT, REQUIRED, ResultSet, proc

SYSNAME, SMALLINT, TINYINT = T.SYSNAME, T.SMALLINT, T.TINYINT
NV384 = T.nvarchar(384)
VARCHAR = lambda n: T.SqlType("varchar", n)  # noqa: E731

TABLES_COLUMNS = [("TABLE_QUALIFIER", SYSNAME), ("TABLE_OWNER", SYSNAME), ("TABLE_NAME", SYSNAME),
                  ("TABLE_TYPE", VARCHAR(32)), ("REMARKS", VARCHAR(254))]
COLUMNS_COLUMNS = [("TABLE_QUALIFIER", SYSNAME), ("TABLE_OWNER", SYSNAME), ("TABLE_NAME", SYSNAME),
                   ("COLUMN_NAME", SYSNAME), ("DATA_TYPE", SMALLINT), ("TYPE_NAME", SYSNAME), ("PRECISION", INT),
                   ("LENGTH", INT), ("SCALE", SMALLINT), ("RADIX", SMALLINT), ("NULLABLE", SMALLINT),
                   ("REMARKS", VARCHAR(254)), ("COLUMN_DEF", T.nvarchar(4000)), ("SQL_DATA_TYPE", SMALLINT),
                   ("SQL_DATETIME_SUB", SMALLINT), ("CHAR_OCTET_LENGTH", INT), ("ORDINAL_POSITION", INT),
                   ("IS_NULLABLE", VARCHAR(254))]
COLUMNS_100_EXTRA = [("SS_IS_SPARSE", SMALLINT), ("SS_IS_COLUMN_SET", SMALLINT), ("SS_IS_COMPUTED", SMALLINT),
                     ("SS_IS_IDENTITY", SMALLINT), ("SS_UDT_CATALOG_NAME", T.nvarchar(128)),
                     ("SS_UDT_SCHEMA_NAME", T.nvarchar(128)), ("SS_UDT_ASSEMBLY_TYPE_NAME", T.NVARCHAR_MAX),
                     ("SS_XML_SCHEMACOLLECTION_CATALOG_NAME", T.nvarchar(128)),
                     ("SS_XML_SCHEMACOLLECTION_SCHEMA_NAME", T.nvarchar(128)),
                     ("SS_XML_SCHEMACOLLECTION_NAME", T.nvarchar(128))]
PKEYS_COLUMNS = [("TABLE_QUALIFIER", SYSNAME), ("TABLE_OWNER", SYSNAME), ("TABLE_NAME", SYSNAME),
                 ("COLUMN_NAME", SYSNAME), ("KEY_SEQ", SMALLINT), ("PK_NAME", SYSNAME)]
STATISTICS_COLUMNS = [("TABLE_QUALIFIER", SYSNAME), ("TABLE_OWNER", SYSNAME), ("TABLE_NAME", SYSNAME),
                      ("NON_UNIQUE", SMALLINT), ("INDEX_QUALIFIER", SYSNAME), ("INDEX_NAME", SYSNAME),
                      ("TYPE", SMALLINT), ("SEQ_IN_INDEX", SMALLINT), ("COLUMN_NAME", SYSNAME),
                      ("COLLATION", T.SqlType("char", 1)), ("CARDINALITY", INT), ("PAGES", INT),
                      ("FILTER_CONDITION", VARCHAR(128))]


def like_regex(pattern):
    """A T-SQL LIKE pattern (%, _, [abc], [a-z], [^a]; no escape character: the drivers write a literal
    wildcard as [%] / [_]) as a compiled regex, case-insensitive unless the collation is case-sensitive."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%":
            out.append(".*")
        elif c == "_":
            out.append(".")
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("]", "^") else i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:j]
                neg = body.startswith("^")
                if neg:
                    body = body[1:]
                cls = "".join("-" if ch == "-" and 0 < k < len(body) - 1 else re.escape(ch)
                              for k, ch in enumerate(body))
                out.append("[%s%s]" % ("^" if neg else "", cls))
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z", 0 if catalog.CASE_SENSITIVE else re.IGNORECASE | re.DOTALL)


def _matcher(value, use_pattern=True):
    """A predicate for a name argument: NULL matches everything; patterns per LIKE (or exact)."""
    if value is None:
        return lambda name: True
    if use_pattern:
        rx = like_regex(value)
        return lambda name: rx.match(name) is not None
    return lambda name: fold(name) == fold(value)


def _check_qualifier(s, qualifier):
    """Msg 15250 when the qualifier names another database than the current one (as the catalog
    procedures document: they only look in the current database)."""
    if qualifier not in (None, "") and qualifier.lower() != s.database.lower():
        raise SqlError(15250, "The database name component of the object qualifier must be the name of the "
                       "current database.", 16, 1)


def _objects(s):
    """Tables and views of the current database the login may see (metadata visibility)."""
    out = []
    for t in s.db.tables.values():
        if s.database.lower() != s.db.name.lower() and t.kind != "sys":
            continue
        if t.kind in ("user", "change_table", "cdc_meta", "sys") and P.can_see(s.login, t):
            out.append(t)
    return out


def _table_type(t):
    """TABLE for tables of the database (dbo and cdc: SQL Server's cdc tables are user tables shipped by
    Microsoft, type 'U'), SYSTEM TABLE for the sys catalog views."""
    return "SYSTEM TABLE" if t.kind == "sys" else "TABLE"


@proc("sys.sp_tables", [("table_name", NV384, None), ("table_owner", NV384, None), ("table_qualifier", SYSNAME, None),
                        ("table_type", VARCHAR(100), None), ("fusepattern", T.BIT, 1)])
def sp_tables(s, table_name, table_owner, table_qualifier, table_type, fusepattern):
    """Tables and views that can appear in a FROM clause, ordered by TABLE_TYPE, QUALIFIER, OWNER, NAME.
    @table_type is a list like "'TABLE','VIEW'" (each type in single quotes)."""
    _check_qualifier(s, table_qualifier)
    pat = fusepattern is None or bool(fusepattern)
    name_ok, owner_ok = _matcher(table_name, pat), _matcher(table_owner, pat)
    types = None
    if table_type is not None:
        types = {t for t in ("TABLE", "SYSTEM TABLE", "VIEW") if "'%s'" % t in table_type}
    rows = []
    for t in _objects(s):
        tt = _table_type(t)
        if (types is None or tt in types) and name_ok(t.name) and owner_ok(t.schema):
            rows.append((s.database, t.schema, t.name, tt, None))
    rows.sort(key=lambda r: (r[3], r[0], fold(r[1]), fold(r[2])))
    return [ResultSet(TABLES_COLUMNS, rows)]


# ODBC SQLColumns facts per type: DATA_TYPE (ODBC 3), SQL_DATA_TYPE, SQL_DATETIME_SUB, SS_DATA_TYPE (NOT NULL,
# NULL), RADIX.
_ODBC = {
    "bit": (-7, -7, None, (50, 104), None), "tinyint": (-6, -6, None, (48, 38), 10),
    "smallint": (5, 5, None, (52, 38), 10), "int": (4, 4, None, (56, 38), 10), "bigint": (-5, -5, None, (127, 38), 10),
    "decimal": (3, 3, None, (55, 106), 10), "numeric": (2, 2, None, (63, 108), 10),
    "float": (6, 6, None, (62, 109), 10), "real": (7, 7, None, (59, 109), 10),
    "datetime": (93, 9, 3, (61, 111), None), "smalldatetime": (93, 9, 3, (58, 111), None),
    "date": (91, 9, 1, (0, 0), None), "time": (-154, -154, None, (0, 0), None),
    "datetime2": (93, 9, 3, (0, 0), None), "datetimeoffset": (-155, -155, None, (0, 0), None),
    "nvarchar": (-9, -9, None, (39, 39), None), "nchar": (-8, -8, None, (47, 47), None),
    "varchar": (12, 12, None, (39, 39), None), "char": (1, 1, None, (47, 47), None),
    "varbinary": (-3, -3, None, (37, 37), None), "binary": (-2, -2, None, (45, 45), None),
}


def odbc_column(t, odbcver=3):
    """(DATA_TYPE, TYPE_NAME, PRECISION, LENGTH, SCALE, RADIX, SQL_DATA_TYPE, SQL_DATETIME_SUB,
    CHAR_OCTET_LENGTH, SS_DATA_TYPE) of a column of type ``t``.  (max) types report PRECISION/LENGTH 0 (the
    JDBC driver's ZeroFixupFilter turns 0 into 2147483647)."""
    n = t.name
    data_type, sql_type, sub, ss, radix = _ODBC.get(n, (None, None, None, (0, 0), None))
    ss_type = ss[1] if t.nullable else ss[0]
    name = t.alias or n
    scale = None
    if n in ("nvarchar", "nchar"):
        prec = 0 if t.length == T.MAX else t.length
        length = octet = 0 if t.length == T.MAX else 2 * t.length
    elif n in ("varchar", "char", "varbinary", "binary"):
        prec = length = octet = 0 if t.length == T.MAX else t.length
    else:
        octet = None
        if n in ("decimal", "numeric"):
            prec, length, scale = t.precision, t.precision + 2, t.scale
        elif n in ("tinyint", "smallint", "int", "bigint"):
            prec, length, scale = {"tinyint": (3, 1), "smallint": (5, 2), "int": (10, 4), "bigint": (19, 8)}[n] + (0,)
        elif n == "bit":
            prec, length = 1, 1
        elif n == "float":
            prec, length = 15, 8
        elif n == "real":
            prec, length = 7, 4
        elif n == "datetime":
            prec, length, scale = 23, 16, 3
        elif n == "smalldatetime":
            prec, length, scale = 16, 16, 0
        elif n == "date":
            prec, length, scale = 10, 6, 0
        elif n == "time":
            prec, length, scale = 8 + (t.scale + 1 if t.scale else 0), 10 if t.scale <= 4 else 12, t.scale
        elif n == "datetime2":
            prec, length, scale = 19 + (t.scale + 1 if t.scale else 0), 16, t.scale
        elif n == "datetimeoffset":
            prec, length, scale = 26 + (t.scale + 1 if t.scale else 0), 20, t.scale
        else:
            prec = length = None
    if odbcver != 3:
        # ODBC 2 names the date/time types SQL_DATE 9, SQL_TIME 10, SQL_TIMESTAMP 11.
        data_type = {91: 9, 92: 10, 93: 11}.get(data_type, data_type)
        sql_type = {9: 11}.get(sql_type, sql_type) if n != "date" else 9
        sub = None
    return data_type, name, prec, length, scale, radix, sql_type, sub, octet, ss_type


def _columns(s, table_name, table_owner, table_qualifier, column_name, odbcver, fusepattern, extended):
    _check_qualifier(s, table_qualifier)
    pat = fusepattern is None or bool(fusepattern)
    name_ok, owner_ok, col_ok = _matcher(table_name, pat), _matcher(table_owner, pat), _matcher(column_name, pat)
    rows = []
    tables = sorted((t for t in _objects(s) if name_ok(t.name) and owner_ok(t.schema)),
                    key=lambda t: (fold(t.schema), fold(t.name)))
    for t in tables:
        for c in t.columns:
            if not col_ok(c.name):
                continue
            dt, tn, prec, length, scale, radix, sqlt, sub, octet, ss = odbc_column(c.type.null(c.nullable),
                                                                                 odbcver or 2)
            row = (s.database, t.schema, t.name, c.name, dt, tn, prec, length, scale, radix, int(c.nullable), None,
                   None, sqlt, sub, octet, c.column_id, "YES" if c.nullable else "NO")
            if extended:
                row += (0, 0, int(c.computed), 0, None, None, None, None, None, None)
            rows.append(row + (ss,))
    cols = COLUMNS_COLUMNS + (COLUMNS_100_EXTRA if extended else []) + [("SS_DATA_TYPE", TINYINT)]
    return [ResultSet(cols, rows)]


@proc("sys.sp_columns", [("table_name", NV384, REQUIRED), ("table_owner", NV384, None),
                         ("table_qualifier", SYSNAME, None), ("column_name", NV384, None), ("odbcver", INT, 2)])
def sp_columns(s, table_name, table_owner, table_qualifier, column_name, odbcver):
    """Columns of the tables/views matching the patterns (ODBC SQLColumns)."""
    return _columns(s, table_name, table_owner, table_qualifier, column_name, odbcver, 1, False)


@proc("sys.sp_columns_100", [("table_name", NV384, REQUIRED), ("table_owner", NV384, None),
                             ("table_qualifier", SYSNAME, None), ("column_name", NV384, None),
                             ("namescope", INT, 0), ("odbcver", INT, 2), ("fusepattern", T.BIT, 1)])
def sp_columns_100(s, table_name, table_owner, table_qualifier, column_name, namescope, odbcver, fusepattern):
    """sp_columns plus the SQL Server 2008 columns (sparse, column set, computed, identity, UDT, XML)."""
    return _columns(s, table_name, table_owner, table_qualifier, column_name, odbcver, fusepattern, True)


def _exact_tables(s, table_name, table_owner):
    """Tables named exactly ``table_name`` (sp_pkeys and sp_statistics take no wildcards), of ``table_owner``
    or, without an owner, of the default schema dbo."""
    out = []
    for t in _objects(s):
        if fold(t.name) == fold(table_name or "") and fold(t.schema) == fold(table_owner or "dbo"):
            out.append(t)
    return out


@proc("sys.sp_pkeys", [("table_name", SYSNAME, REQUIRED), ("table_owner", SYSNAME, None),
                       ("table_qualifier", SYSNAME, None)])
def sp_pkeys(s, table_name, table_owner, table_qualifier):
    """Primary key columns of one table, ordered by KEY_SEQ."""
    _check_qualifier(s, table_qualifier)
    rows = []
    for t in _exact_tables(s, table_name, table_owner):
        for ix in sysviews.indexes_of(t):
            if ix.primary_key:
                rows += [(s.database, t.schema, t.name, c.name, k, ix.name) for k, c in enumerate(ix.columns, 1)]
    return [ResultSet(PKEYS_COLUMNS, rows)]


def _statistics(s, table_name, table_owner, table_qualifier, index_name, is_unique, accuracy):
    _check_qualifier(s, table_qualifier)
    if (is_unique or "N").upper() not in ("Y", "N") or (accuracy or "Q").upper() not in ("Q", "E"):
        raise SqlError(15251, "Invalid '%s' specified. It must be '%s'." % (
            ("is_unique", "Y or N") if (is_unique or "N").upper() not in ("Y", "N") else ("accuracy", "Q or E")),
            16, 1)
    ix_ok = _matcher(index_name if index_name is not None else "%")
    rows = []
    for t in _exact_tables(s, table_name, table_owner):
        n = sysviews.row_count(s.conn, t)
        pages = sysviews.pages(n)
        rows.append((s.database, t.schema, t.name, None, None, None, 0, None, None, None, n, pages, None))
        for ix in sysviews.indexes_of(t):
            if ix.type == 0 or not ix_ok(ix.name) or ((is_unique or "N").upper() == "Y" and not ix.unique):
                continue
            for k, c in enumerate(ix.columns, 1):
                rows.append((s.database, t.schema, t.name, 0 if ix.unique else 1, t.name, ix.name,
                             1 if ix.type == 1 else 3, k, c.name, "A", n if ix.unique else None, pages, None))
    rows.sort(key=lambda r: (r[3] is not None, r[3] or 0, r[6], r[5] or "", r[7] or 0))
    return [ResultSet(STATISTICS_COLUMNS, rows)]


_STAT_PARAMS = [("table_name", SYSNAME, REQUIRED), ("table_owner", SYSNAME, None), ("table_qualifier", SYSNAME, None),
                ("index_name", SYSNAME, "%"), ("is_unique", T.SqlType("char", 1), "N"),
                ("accuracy", T.SqlType("char", 1), "Q")]


@proc("sys.sp_statistics", _STAT_PARAMS)
def sp_statistics(s, table_name, table_owner, table_qualifier, index_name, is_unique, accuracy):
    """The table's statistics row (TYPE 0: rows, pages) and one row per index column (SQLStatistics)."""
    return _statistics(s, table_name, table_owner, table_qualifier, index_name, is_unique, accuracy)


@proc("sys.sp_statistics_100", _STAT_PARAMS)
def sp_statistics_100(s, table_name, table_owner, table_qualifier, index_name, is_unique, accuracy):
    """sp_statistics as SQL Server 2008+ drivers call it (same rows)."""
    return _statistics(s, table_name, table_owner, table_qualifier, index_name, is_unique, accuracy)
