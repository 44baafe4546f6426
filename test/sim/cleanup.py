"""The cleanup job: retention-based low watermark, raised first, rows deleted after.

Step 1 raises ``start_lsn`` of every capture instance below the new low
watermark in one transaction (``fn_cdc_get_min_lsn`` moves at once); step 2
deletes change rows and mapping rows below it, ``threshold`` rows per DELETE.
The two steps can be separated (``hold``) so tests can observe the window in
which a reader sees the new min LSN but old rows are still there."""
import datetime as _dt

from . import lsn as L
from . import timeutil
from .errors import SqlError


def low_watermark(db, retention_minutes=None):
    """New low watermark: (commit time of max LSN - retention) mapped to the smallest LSN
    among the mapping entries sharing the last commit time at or before it."""
    if not db.cdc_enabled or db.max_lsn is None:
        return None
    c = db.conn
    row = c.execute("SELECT tran_end_time FROM cdc.lsn_time_mapping WHERE start_lsn = ?", (db.max_lsn,)).fetchone()
    if row is None:
        return None
    minutes = db.cfg.retention if retention_minutes is None else retention_minutes
    threshold = timeutil.naive_text(timeutil.text_to_naive(row[0]) - _dt.timedelta(minutes=minutes))
    t = c.execute("SELECT MAX(tran_end_time) FROM cdc.lsn_time_mapping WHERE tran_end_time <= ?",
                  (threshold,)).fetchone()[0]
    if t is None:
        return None
    return c.execute("SELECT MIN(start_lsn) FROM cdc.lsn_time_mapping WHERE tran_end_time = ?", (t,)).fetchone()[0]


def raise_low(db, low):
    """Step 1: every instance whose start_lsn is below ``low`` gets ``low``, in one transaction."""
    c = db.conn
    c.execute("BEGIN")
    raised = []
    for inst in db.instances.values():
        if inst.start_lsn is not None and inst.start_lsn < low:
            c.execute("UPDATE cdc.change_tables SET start_lsn = ? WHERE object_id = ?", (low, inst.object_id))
            raised.append(inst)
    c.execute("COMMIT")
    for inst in raised:
        inst.start_lsn = low
    return raised


def delete_rows(db, low, threshold=None):
    """Step 2: delete change rows below each instance's start_lsn and mapping rows below ``low``."""
    threshold = threshold or db.cfg.threshold
    c = db.conn
    deleted_ct = deleted_map = 0
    for inst in list(db.instances.values()):
        bound = inst.start_lsn if inst.start_lsn is not None else low
        bound = min(bound, low) if bound is not None else low
        while True:
            n = c.execute("DELETE FROM %s WHERE rowid IN (SELECT rowid FROM %s WHERE \"__$start_lsn\" < ? LIMIT ?)"
                          % (inst.ct.phys, inst.ct.phys), (bound, threshold)).rowcount
            deleted_ct += n
            if n < threshold:
                break
    while True:
        n = c.execute("DELETE FROM cdc.lsn_time_mapping WHERE rowid IN (SELECT rowid FROM cdc.lsn_time_mapping "
                      "WHERE start_lsn < ? LIMIT ?)", (low, threshold)).rowcount
        deleted_map += n
        if n < threshold:
            break
    db.cleanup.deleted_change_rows += deleted_ct
    db.cleanup.deleted_mapping_rows += deleted_map
    return deleted_ct, deleted_map


def run(db, retention_minutes=None, low_lsn=None, hold=False):
    """A cleanup run.  Returns (low watermark or None, change rows deleted, mapping rows deleted)."""
    db.require_cdc()
    if db.cleanup.held_low is not None:
        raise SqlError(50000, "a held cleanup is pending; EXEC sim.cleanup_release first", 16, 1)
    if low_lsn is not None:
        low = bytes(low_lsn).ljust(10, b"\x00")[:10]
        exists = db.conn.execute("SELECT 1 FROM cdc.lsn_time_mapping WHERE start_lsn = ?", (low,)).fetchone()
        if not exists:
            raise SqlError(22964, "LSN %s, specified as the new low end point for change table cleanup must "
                           "represent the start_lsn value of a current entry in the cdc.lsn_time_mapping table. "
                           "Choose an LSN value that satisfies this requirement." % L.hexlit(low))
    else:
        low = low_watermark(db, retention_minutes)
    db.cleanup.runs += 1
    if low is None:
        return None, 0, 0
    raise_low(db, low)
    db.cleanup.last_low = low
    if hold:
        db.cleanup.held_low = low
        return low, 0, 0
    ct, mp = delete_rows(db, low)
    return low, ct, mp


def release(db):
    """Finish a held cleanup (step 2)."""
    low = db.cleanup.held_low
    if low is None:
        return None, 0, 0
    db.cleanup.held_low = None
    ct, mp = delete_rows(db, low)
    return low, ct, mp
