"""Ground truth for verifying a consumer: the real capture watermark and real change counts."""
from . import lsn as L
from . import sqltypes as T
from . import timeutil
from .errors import SqlError
from .procs import ResultSet


def watermark(db):
    """The instant before which every commit is in the change tables.

    It is the commit time of the oldest transaction still waiting in the log
    for an instance that will capture it, or the clock when nothing waits."""
    pending = db.pending_truth_t300()
    now = db.now_t300()
    t = pending if pending is not None else max(now, db.last_commit_t300)
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
