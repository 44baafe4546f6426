"""Common table expressions for the translator (learn.microsoft.com, "WITH common_table_expression").

A CTE is compiled once, in the statement's scope, into a sqlite CTE ``_cteN(columns) AS (query)``
prepended to the statement; a one-part table name in FROM that names a CTE of the statement reads it
(CTE names hide tables of the same name).  Each column needs a name (Msg 8155), names are unique
(8156), a column list matches the query's width (8158/8159).  Recursive CTEs (the CTE's own name in
its definition) are not modelled: Msg 50000 says so rather than a wrong answer."""
from ..catalog import fold, q
from ..errors import SqlError

_DEFINING = object()


class CteDef:
    """A compiled CTE: its sqlite name and its columns [(name, SqlType)]."""

    def __init__(self, name, sql_name, columns):
        self.name = name
        self.sql_name = sql_name
        self.columns = columns


def define(tr, ctes, scope_cls):
    """Compile the WITH clause ``ctes`` (A.Cte list) into a new frame of ``tr.cte_frames``; each CTE sees the
    ones before it.  Returns the frame (the caller pops it when the statement's SELECT is compiled)."""
    frame = {}
    tr.cte_frames.append(frame)
    for c in ctes:
        key = fold(c.name)
        if key in frame:
            raise SqlError(239, "Duplicate common table expression name '%s' was specified." % c.name, 16, 1)
        frame[key] = _DEFINING
        sql, cols = tr.select(c.select, scope_cls(), derived=None if c.columns else c.name)
        check_order_by(c.select)
        cols = _named(c, cols)
        tr.n_cte = getattr(tr, "n_cte", 0) + 1
        sql_name = "_cte%d" % tr.n_cte
        tr.ctes.append("%s(%s) AS (%s)" % (sql_name, ", ".join(q(n) for n, _ in cols), sql))
        frame[key] = CteDef(c.name, sql_name, cols)
    return frame


def _named(c, cols):
    """The CTE's columns under their final names (column list or the query's), checked as SQL Server does."""
    if c.columns is not None:
        if len(cols) > len(c.columns):
            raise SqlError(8158, "'%s' has more columns than were specified in the column list." % c.name, 16, 1)
        if len(cols) < len(c.columns):
            raise SqlError(8159, "'%s' has fewer columns than were specified in the column list." % c.name, 16, 1)
        cols = [(n, t) for n, (_, t) in zip(c.columns, cols)]
    seen = set()
    for i, (n, _) in enumerate(cols):
        if not n:
            raise SqlError(8155, "No column name was specified for column %d of '%s'." % (i + 1, c.name), 16, 2)
        if fold(n) in seen:
            raise SqlError(8156, "The column '%s' was specified multiple times for '%s'." % (n, c.name), 16, 1)
        seen.add(fold(n))
    return cols


def check_order_by(sel):
    """ORDER BY in a CTE or derived table needs TOP or OFFSET (Msg 1033)."""
    if sel.order and sel.top is None and sel.offset is None:
        raise SqlError(1033, "The ORDER BY clause is invalid in views, inline functions, derived tables, subqueries, "
                       "and common table expressions, unless TOP, OFFSET or FOR XML is also specified.", 15, 1)


def lookup(tr, parts):
    """The CteDef a one-part FROM name refers to, or None."""
    if len(parts) != 1 or parts[0].startswith("@"):
        return None
    key = fold(parts[0])
    for frame in reversed(tr.cte_frames):
        d = frame.get(key)
        if d is _DEFINING:
            raise SqlError(50000, "The simulator does not run recursive common table expressions ('%s' refers to "
                           "itself)." % parts[0], 16, 1)
        if d is not None:
            return d
    return None
