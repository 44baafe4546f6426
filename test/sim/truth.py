"""Ground truth for verifying a consumer: the real capture watermark, real change counts, and the event
times of captured rows (counts per event period, exact lateness quantiles)."""
import datetime as _dt
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from . import lsn as L
from . import sqltypes as T
from . import timeutil
from .catalog import fold, q
from .errors import SqlError
from .procs import ResultSet


def watermark(db):
    """The instant before which every commit is in the change tables, and no later one can be stamped.

    It is the earliest commit time of the transactions still waiting in the log for an instance that
    will capture it, or the server's wall clock (no later commit can be stamped before it) when that is
    earlier or nothing waits. Commit times are what the server's wall clock stamped: after it was
    stepped back (sim.step_clock) the wall clock may lie before commits already captured."""
    pending = db.pending_truth_t300()
    wall = max(db.now_t300(), db.last_commit_t300) + db.step_t300()
    t = wall if pending is None else min(pending, wall)
    max_time = None
    if db.max_lsn is not None:
        r = db.conn.execute("SELECT tran_end_time FROM cdc.lsn_time_mapping WHERE start_lsn = ?",
                            (db.max_lsn,)).fetchone()
        max_time = r[0] if r else None
    cols = [("watermark_utc", T.datetime2(7)), ("watermark_local", T.DATETIME), ("max_lsn", T.LSN),
            ("max_lsn_time_local", T.DATETIME), ("pending_transactions", T.INT), ("clock_utc", T.datetime2(7))]
    npend = sum(1 for r in db.log if r.kind == "txn")
    return ResultSet(cols, [(timeutil.t300_text(t), db.local_text(t), db.max_lsn, max_time, npend,
                             timeutil.naive_text(db.now().replace(tzinfo=None)))])


def counts(db, table_oid, after_lsn, t_from, t_to, granularity):
    """Inserts/updates/deletes committed per UTC period [t_from, t_to), empty periods included."""
    if granularity <= 0:
        raise SqlError(50000, "@granularity_seconds must be positive", 16, 1)
    g = int(granularity * 300)
    a = timeutil.text_to_t300(t_from)
    b = timeutil.text_to_t300(t_to)
    start = a - a % g if a >= 0 else a
    cur = db.conn.execute(
        "SELECT (commit_t300 - ?) / ?, SUM(ins), SUM(upd), SUM(del), COUNT(*) FROM sim_truth WHERE table_oid = ? "
        "AND commit_t300 >= ? AND commit_t300 < ? AND commit_lsn > ? GROUP BY 1", (start, g, table_oid, start, b,
                                                                                   after_lsn))
    got = {r[0]: r[1:] for r in cur}
    rows = []
    p = start
    i = 0
    while p < b:
        c = got.get(i, (0, 0, 0, 0))
        rows.append((timeutil.t300_text(p), timeutil.t300_text(p + g)) + tuple(int(x) for x in c))
        p += g
        i += 1
        if i > 1_000_000:
            raise SqlError(50000, "too many periods", 16, 1)
    cols = [("period_start_utc", T.datetime2(7)), ("period_end_utc", T.datetime2(7)), ("inserts", T.BIGINT),
            ("updates", T.BIGINT), ("deletes", T.BIGINT), ("transactions", T.BIGINT)]
    return ResultSet(cols, rows)


def commits(db, table_oid, t_from, t_to):
    """Every committed transaction (optionally of one table) with its capture status."""
    captured_upto = L.from_bytes(db.max_lsn) if db.max_lsn else 0
    pending = {r.commit_lsn for r in db.log if r.kind == "txn"}
    sql = "SELECT commit_lsn, commit_t300, table_oid, ins, upd, del, tracked FROM sim_truth WHERE 1=1"
    args = []
    if table_oid is not None:
        sql += " AND table_oid = ?"
        args.append(table_oid)
    if t_from:
        sql += " AND commit_t300 >= ?"
        args.append(timeutil.text_to_t300(t_from))
    if t_to:
        sql += " AND commit_t300 < ?"
        args.append(timeutil.text_to_t300(t_to))
    rows = []
    for lsn_b, t, oid, i, u, d, tracked in db.conn.execute(sql + " ORDER BY commit_lsn", args):
        tab = db.by_oid.get(oid)
        n = L.from_bytes(lsn_b)
        rows.append((lsn_b, timeutil.t300_text(t), db.local_text(t), tab.display if tab else None, i, u, d,
                     int(bool(tracked) and n not in pending and n <= captured_upto)))
    cols = [("commit_lsn", T.LSN), ("commit_time_utc", T.datetime2(7)), ("commit_time_local", T.DATETIME),
            ("table_name", T.nvarchar(257)), ("inserts", T.INT), ("updates", T.INT), ("deletes", T.INT),
            ("captured", T.BIT)]
    return ResultSet(cols, rows)


# --- event time ------------------------------------------------------------------------------------
#
# Instants below are integers of 1/(3 * 10**7) s since 0001-01-01 UTC: both 100 ns (datetime2,
# datetimeoffset) and 1/300 s (datetime, commit instants) are whole numbers of it, so every difference
# is exact.

_U = 30_000_000                                       # units per second
_U_DAY = 86400 * _U
_U_1900 = (timeutil._ORD_1900 - 1) * _U_DAY
_U_EPOCH = (_dt.date(1970, 1, 1).toordinal() - 1) * _U_DAY
_EVENT_TYPES = ("datetime", "datetime2", "smalldatetime", "date", "datetimeoffset")


def _event_rows(db, table_text, column, after_lsn, upto_lsn, capture_instance):
    """(column type, [(commit_lsn, operation, value)]) of the captured change rows (operations 1, 2 and 4)
    of ``table``'s capture instance (the oldest capturing ``column``, or ``capture_instance``) with
    after_lsn < __$start_lsn <= upto_lsn."""
    table = db.user_table(table_text)
    src_col = table.column(column)
    if src_col is None:
        raise SqlError(207, "Invalid column name '%s'." % column, 16, 1)
    insts = db.instances_of(table)
    if capture_instance:
        insts = [i for i in insts if fold(i.name) == fold(capture_instance)]
    if not insts:
        raise SqlError(22985, "Change data capture has not been enabled for source table '%s.%s'."
                       % (table.schema, table.name) if not capture_instance else
                       "Change data capture instance '%s' has not been enabled for the source table '%s.%s'."
                       % (capture_instance, table.schema, table.name), 16, 1)
    hits = [(i, c) for i in insts for c in i.captured if fold(c.name) == fold(src_col.name)]
    if not hits:
        raise SqlError(50000, "Column '%s' is not captured by a capture instance of %s." % (column, table.display),
                       16, 1)
    inst, col = min(hits, key=lambda h: h[0].create_lsn)
    if col.type.name not in _EVENT_TYPES:
        raise SqlError(50000, "Column '%s' is %s, not datetime, datetime2, smalldatetime, date or "
                       "datetimeoffset." % (col.name, col.type.decl()), 16, 1)
    sql = ('SELECT "__$start_lsn", "__$operation", %s FROM %s WHERE "__$operation" IN (1, 2, 4)'
           % (q(col.name), inst.ct.phys))
    args = []
    if after_lsn is not None:
        sql += ' AND "__$start_lsn" > ?'
        args.append(bytes(after_lsn).ljust(10, b"\0")[:10])
    if upto_lsn is not None:
        sql += ' AND "__$start_lsn" <= ?'
        args.append(bytes(upto_lsn).ljust(10, b"\0")[:10])
    return col.type, db.conn.execute(sql + ' ORDER BY "__$start_lsn", "__$seqval"', args).fetchall()


def _earliest_offset_seconds(tz, naive_local):
    """UTC offset (s) giving the earliest instant a local wall time may denote: in a fall-back hour the first
    (summer) reading, in a spring-forward gap the later offset (as the worker's local_to_instant_earliest)."""
    if tz is timeutil.UTC:
        return 0
    offs = [naive_local.replace(tzinfo=tz, fold=f).utcoffset().total_seconds() for f in (0, 1)]
    return int(max(offs))


def event_instant(value, t, tz):
    """A stored date/time value -> its UTC instant in 1/(3e7) s: a datetimeoffset by its own offset, any other
    type as local wall time in ``tz`` (earliest instant when ambiguous).  None for NULL."""
    if value is None:
        return None
    if t.name == "datetimeoffset":
        days, ns, _ = timeutil.parse_dto(value)
        return (days * timeutil.NS100_PER_DAY + ns) * 3
    days, ns, _ = timeutil.parse(value)
    if t.name == "datetime":
        local = days * _U_DAY + timeutil.ticks_of(ns) * 100_000
    else:
        local = (days * timeutil.NS100_PER_DAY + ns) * 3
    naive = _dt.datetime.fromordinal(days + 1) + _dt.timedelta(microseconds=ns // 10)
    return local - _earliest_offset_seconds(tz, naive) * _U


def _u_text(u):
    """An instant in 1/(3e7) s (a whole number of 100 ns) -> canonical datetime2(7) text."""
    days, rest = divmod(u, _U_DAY)
    return timeutil.canon(days, rest // 3)


def event_counts(db, table, column, granularity, after_lsn, upto_lsn, capture_instance=None):
    """Inserts/updates/deletes of the captured change rows per UTC event period (floor(epoch seconds /
    granularity)); rows with a NULL event time in one last row with a NULL period."""
    if granularity is None or granularity <= 0:
        raise SqlError(50000, "@granularity_seconds must be positive", 16, 1)
    t, rows = _event_rows(db, table, column, after_lsn, upto_lsn, capture_instance)
    g = int(granularity) * _U
    got = {}
    slot_of_op = {2: 0, 4: 1, 1: 2}
    for _, op, value in rows:
        ev = event_instant(value, t, db.tz)
        p = None if ev is None else (ev - _U_EPOCH) // g
        c = got.setdefault(p, [0, 0, 0])
        c[slot_of_op[op]] += 1
    out = [(_u_text(_U_EPOCH + p * g),) + tuple(got[p]) for p in sorted(k for k in got if k is not None)]
    if None in got:
        out.append((None,) + tuple(got[None]))
    cols = [("period_start_utc", T.datetime2(7)), ("inserts", T.BIGINT), ("updates", T.BIGINT),
            ("deletes", T.BIGINT)]
    return ResultSet(cols, out)


def lateness(db, table, column, after_lsn, upto_lsn, quantiles, capture_instance=None):
    """Exact nearest-rank quantiles (the ceil(q * n)-th smallest) of commit instant minus event instant, in
    whole milliseconds (floored), over the captured change rows with an event time."""
    qs = []
    for part in (quantiles if quantiles is not None else "0.5,0.9,0.99,0.999").split(","):
        try:
            qv = Decimal(part.strip())
        except InvalidOperation:
            qv = None
        if qv is None or not qv.is_finite() or not 0 <= qv <= 1:
            raise SqlError(50000, "@quantiles is a comma list of numbers between 0 and 1, not '%s'" % quantiles,
                           16, 1)
        qs.append(qv)
    t, rows = _event_rows(db, table, column, after_lsn, upto_lsn, capture_instance)
    commit_u = {lsn_b: t300 * 100_000 + _U_1900 for lsn_b, t300 in db.conn.execute(
        "SELECT commit_lsn, commit_t300 FROM sim_truth WHERE table_oid = ?", (db.user_table(table).object_id,))}
    late = []
    for lsn_b, _, value in rows:
        ev = event_instant(value, t, db.tz)
        if ev is not None:
            late.append((commit_u[bytes(lsn_b)] - ev) // (_U // 1000))
    late.sort()
    n = len(late)
    out = []
    for qv in qs:
        rank = max(1, int((qv * n).to_integral_value(rounding=ROUND_CEILING)))
        out.append((float(qv), late[rank - 1] if n else None, n))
    cols = [("quantile", T.FLOAT), ("lateness_ms", T.BIGINT), ("rows", T.BIGINT)]
    return ResultSet(cols, out)
