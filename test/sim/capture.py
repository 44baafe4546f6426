"""The capture job: scans the log in cycles and fills change tables and cdc.lsn_time_mapping.

One cycle = up to ``maxscans`` scans of up to ``maxtrans`` log records each;
every scan commits as one sqlite transaction, so ``fn_cdc_get_max_lsn`` moves
one consistent scan boundary at a time and lags the log until the next cycle.
When a cycle finds the log drained and the mapping table has been silent for
``dummy_interval`` seconds, it writes a dummy row (``tran_id = 0x00``)."""
from collections import defaultdict

from . import dmviews
from . import lsn as L
from .catalog import fold, update_mask


def _project(txn, inst, cache):
    """Change rows of ``txn`` as cdc.<ci>_CT tuples for instance ``inst``."""
    key = (txn.columns, id(inst))
    idx = cache.get(key)
    if idx is None:
        pos = {n.lower(): i for i, n in enumerate(txn.columns)}
        idx = [pos.get(c.name.lower()) for c in inst.captured]
        cache[key] = idx
    start = L.to_bytes(txn.commit_lsn)
    ncap = len(inst.captured)
    ords = {c.name.lower(): i for i, c in enumerate(inst.captured, 1)}
    out = []
    all_mask = inst.all_mask
    simple = all(i is not None for i in idx) and idx == list(range(len(idx)))
    for seq, op, vals, changed in txn.changes:
        if changed is None:
            mask = all_mask
        else:
            mask = update_mask([ords[n.lower()] for n in changed if n.lower() in ords], ncap)
        if simple and len(vals) == ncap:
            row = (start, None, L.to_bytes(seq), op, mask) + vals + (1,)
        else:
            row = (start, None, L.to_bytes(seq), op, mask) + tuple(
                None if i is None or i >= len(vals) else vals[i] for i in idx) + (1,)
        out.append(row)
    return out


def _rec_lsn(rec):
    """The LSN a log record sits at (a transaction's commit, a DDL's or an enable's own)."""
    return rec.commit_lsn if rec.kind == "txn" else rec.lsn


def scan(db, limit):
    """Process up to ``limit`` log records in one transaction; returns how many were read."""
    batch = []
    while db.log and len(batch) < limit:
        batch.append(db.log.popleft())
    now = db.now_t300()
    if not batch:
        dmviews.record_scan(db, now, now, 0, None, None, 0, 0, 0, None)
        return 0
    per_inst = defaultdict(list)
    mapping, ddl, enabled = [], [], []
    cache = {}
    for rec in batch:
        if rec.kind == "txn":
            touched = False
            for inst in db.instances_of(rec.table):
                if inst.create_lsn < rec.commit_lsn and fold(inst.name) in db.instances:
                    per_inst[inst].extend(_project(rec, inst, cache))
                    touched = True
            if touched:
                mapping.append((L.to_bytes(rec.commit_lsn), db.stamp_text(rec.begin_t300 + rec.step),
                                db.stamp_text(rec.stamp_t300), rec.tran_id, L.to_bytes(rec.begin_lsn)))
        elif rec.kind == "enable":
            if fold(rec.instance.name) in db.instances:
                enabled.append(rec)
        elif rec.kind == "ddl":
            for inst in db.instances_of(rec.table):
                if inst.create_lsn < rec.lsn:
                    ddl.append((rec.table.object_id, inst.object_id, int(rec.required_column_update),
                                rec.command, L.to_bytes(rec.lsn), db.stamp_text(rec.t300)))
    c = db.conn
    c.execute("BEGIN")
    try:
        for inst, rows in per_inst.items():
            ncols = len(inst.ct.columns)
            c.executemany("INSERT INTO %s VALUES (%s)" % (inst.ct.phys, ",".join("?" * ncols)), rows)
        if mapping:
            c.executemany("INSERT INTO cdc.lsn_time_mapping VALUES (?, ?, ?, ?, ?)", mapping)
        if ddl:
            c.executemany("INSERT INTO cdc.ddl_history VALUES (?, ?, ?, ?, ?, ?)", ddl)
        for rec in enabled:
            c.execute("UPDATE cdc.change_tables SET start_lsn = ? WHERE object_id = ?",
                      (L.to_bytes(rec.lsn), rec.instance.object_id))
        c.execute("COMMIT")
    except BaseException:
        c.execute("ROLLBACK")
        raise
    for rec in enabled:
        rec.instance.start_lsn = L.to_bytes(rec.lsn)
    if mapping:
        db.max_lsn = mapping[-1][0]
        db.last_mapping_t300 = max(r.end_t300 for r in batch if r.kind == "txn")
        db.lsn_at_last_mapping = L.from_bytes(db.max_lsn)
    db.stats["scans"] += 1
    first, last = batch[0], batch[-1]
    dmviews.record_scan(db, now, db.now_t300(), len(batch), L.to_bytes(_rec_lsn(first)), L.to_bytes(_rec_lsn(last)),
                        len(mapping), sum(len(r) for r in per_inst.values()), len(ddl),
                        (mapping[-1][0], mapping[-1][2]) if mapping else None)
    db.stats["captured_records"] += len(batch)
    return len(batch)


def cycle(db, now_t300=None):
    """One capture cycle (what the job does every pollinginterval seconds)."""
    if not db.cdc_enabled or not db.capture_running:
        return 0
    total = 0
    cfg = db.cfg
    for _ in range(max(1, cfg.maxscans)):
        n = scan(db, max(1, cfg.maxtrans))
        total += n
        if n < cfg.maxtrans:
            break
    if not db.log:
        maybe_dummy(db, db.now_t300() if now_t300 is None else now_t300)
    db.stats["cycles"] += 1
    return total


def maybe_dummy(db, now_t300):
    """Write a dummy mapping row after ``dummy_interval`` seconds without one (log drained)."""
    cfg = db.cfg
    if cfg.dummy_interval <= 0 or not db.cdc_enabled:
        return None
    if db.last_mapping_t300 is not None and now_t300 - db.last_mapping_t300 < cfg.dummy_interval * 300:
        return None
    if not cfg.dummy_on_idle_log and db.activity_lsn <= db.lsn_at_last_mapping:
        return None
    t = max(now_t300, db.last_commit_t300)
    lsn = db.next_lsn()
    local = db.stamp_text(t + db.step_t300())          # the server's wall clock, stepped or not
    c = db.conn
    c.execute("INSERT INTO cdc.lsn_time_mapping VALUES (?, ?, ?, ?, NULL)", (L.to_bytes(lsn), local, local, b"\x00"))
    db.max_lsn = L.to_bytes(lsn)
    db.last_mapping_t300 = t
    db.lsn_at_last_mapping = lsn
    db.last_commit_t300 = max(db.last_commit_t300, t)
    db.stats["dummy_rows"] += 1
    return lsn
