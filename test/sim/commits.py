"""Committing transactions to source tables: generated or explicit rows -> log + source table."""
import json
from decimal import Decimal

from . import timeutil
from .catalog import q
from .errors import SqlError

_WORDS = ["new", "paid", "shipped", "packed", "returned", "open", "held", "north", "south", "east", "west",
          "Zürich", "Łódź", "São Paulo", "O'Brien", "naïve", "東京"]


def _gen_value(col, rng, commit_t300, tz):
    """A plausible random value for a column (deterministic through ``rng``)."""
    t = col.type
    n = t.name
    if n in ("int", "bigint", "smallint"):
        return rng.randint(1, 30000)
    if n == "tinyint":
        return rng.randint(0, 255)
    if n == "bit":
        return rng.randint(0, 1)
    if n in ("decimal", "numeric"):
        return round(rng.uniform(1, 999), t.scale)
    if n == "float":
        return rng.uniform(0, 1000)
    if t.is_string:
        w = rng.choice(_WORDS)
        return w if t.length == -1 else w[:t.length]
    if t.is_binary:
        k = 8 if t.length in (-1, 0) else min(t.length, 8)
        return bytes(rng.getrandbits(8) for _ in range(k))
    if t.is_temporal:
        # Event time: up to two seconds before the commit, in UTC.
        ev = commit_t300 - rng.randint(0, 600)
        naive = timeutil.t300_to_naive(ev)
        text = timeutil.naive_text(naive)
        if n == "datetime":
            return timeutil.to_datetime(text)
        if n == "datetimeoffset":
            return timeutil.dto_text(text, 0)
        if n == "date":
            return text[:10] + " 00:00:00.0000000"
        return timeutil.to_datetime2(text, t.scale)
    return None


def normalize(col, v):
    """A value given by a test (JSON/T-SQL) -> the stored representation for the column type."""
    if v is None:
        return None
    t = col.type
    try:
        if t.is_integer:
            return int(v)
        if t.name in ("decimal", "numeric", "float"):
            return float(Decimal(str(v)))
        if t.is_binary:
            if isinstance(v, str):
                return bytes.fromhex(v[2:] if v.lower().startswith("0x") else v)
            return bytes(v)
        if t.is_temporal:
            if t.name == "datetime":
                return timeutil.to_datetime(str(v))
            if t.name == "datetimeoffset":
                days, ns, off = timeutil.parse(str(v))
                return timeutil.dto_text(timeutil.canon(days, ns), off or 0)
            return timeutil.to_datetime2(str(v), t.scale if t.name == "datetime2" else 7)
        return str(v)
    except (ValueError, TypeError):
        raise SqlError(245, "Conversion failed when converting the value '%s' to data type %s." % (v, t.type_name()),
                       16, 1)


def commit(db, table, inserts=0, updates=0, deletes=0, rows=None, at=None, duration_ms=0):
    """Commit one transaction on ``table`` (caller holds db.lock) and return the LogTxn.

    Generated operations: ``inserts`` new rows (next key), ``updates`` of
    random existing rows (one non-key column changes), ``deletes`` of random
    existing rows.  Explicit ``rows``: JSON list of objects with "op"
    (insert/update/delete) and column values (the key column picks the row)."""
    rng = db.rng
    cols = table.columns
    key = cols[table.key]
    commit_t300 = max(db.now_t300(), db.last_commit_t300) if at is None else None
    if at is not None:
        commit_t300 = timeutil.t300_of(at.replace(tzinfo=None))
    begin_lsn = db.next_lsn()
    changes = []
    ins = upd = dele = 0
    c = db.conn
    saved = (list(table.key_list), dict(table.key_pos), table.next_key)
    c.execute("BEGIN")
    try:
        ops = []
        if rows:
            try:
                spec = json.loads(rows) if isinstance(rows, str) else rows
            except ValueError as e:
                raise SqlError(13609, "JSON text is not properly formatted. %s" % e, 16, 4)
            if isinstance(spec, dict):
                spec = [spec]
            for r in spec:
                r = {k.lower(): v for k, v in r.items()}
                op = str(r.pop("op", "insert")).lower()[:1]
                ops.append((op, r))
        else:
            ops = [("i", None)] * inserts + [("u", None)] * updates + [("d", None)] * deletes
        ins_sql = "INSERT INTO %s VALUES (%s)" % (table.phys, ", ".join("?" * len(cols)))
        sel_sql = "SELECT * FROM %s WHERE %s = ?" % (table.phys, q(key.name))
        del_sql = "DELETE FROM %s WHERE %s = ?" % (table.phys, q(key.name))
        pending_inserts = []
        for op, given in ops:
            if op == "i":
                if given is not None and key.name.lower() in given:
                    k = int(given[key.name.lower()])
                else:
                    k = table.next_key
                if k in table.key_pos:
                    raise SqlError(2627, "Violation of PRIMARY KEY constraint 'PK_%s'. Cannot insert duplicate key "
                                   "in object '%s'. The duplicate key value is (%s)." % (table.name, table.display, k),
                                   14, 1)
                table.next_key = max(table.next_key, k + 1)
                if given is not None:
                    vals = tuple(k if i == table.key else normalize(col, given.get(col.name.lower()))
                                 for i, col in enumerate(cols))
                else:
                    vals = tuple(k if i == table.key else _gen_value(col, rng, commit_t300, db.tz)
                                 for i, col in enumerate(cols))
                pending_inserts.append(vals)
                table.add_key(k)
                changes.append((db.next_lsn(), 2, vals, None))
                ins += 1
                continue
            if pending_inserts:
                c.executemany(ins_sql, pending_inserts)
                pending_inserts = []
            if given is not None:
                if key.name.lower() not in given:
                    raise SqlError(50000, "explicit %s rows need the key column %s" % (
                        "update" if op == "u" else "delete", key.name), 16, 1)
                k = int(given[key.name.lower()])
                if k not in table.key_pos:
                    raise SqlError(50000, "no row with %s = %s in %s" % (key.name, k, table.display), 16, 1)
            else:
                if not table.key_list:
                    raise SqlError(50000, "%s has no rows to %s" % (table.display, "update" if op == "u" else "delete"),
                                   16, 1)
                k = table.key_list[rng.randrange(len(table.key_list))]
            old = c.execute(sel_sql, (k,)).fetchone()
            if op == "u":
                new = list(old)
                if given is not None:
                    changed = set()
                    for i, col in enumerate(cols):
                        if i != table.key and col.name.lower() in given:
                            new[i] = normalize(col, given[col.name.lower()])
                            changed.add(col.name)
                else:
                    cands = [i for i in range(len(cols)) if i != table.key]
                    i = next((j for j in cands if cols[j].type.name in ("decimal", "numeric")), None)
                    if i is None and cands:
                        i = cands[0]
                    if i is None:
                        # Only a key column: the update rewrites the row unchanged (the key stays).
                        changed = {cols[table.key].name}
                    else:
                        new[i] = _gen_value(cols[i], rng, commit_t300, db.tz)
                        changed = {cols[i].name}
                new = tuple(new)
                c.execute("UPDATE %s SET %s WHERE %s = ?" % (
                    table.phys, ", ".join("%s = ?" % q(col.name) for col in cols), q(key.name)), new + (k,))
                seq = db.next_lsn()
                changes.append((seq, 3, tuple(old), changed))
                changes.append((seq, 4, new, changed))
                upd += 1
            elif op == "d":
                c.execute(del_sql, (k,))
                table.remove_key(k)
                changes.append((db.next_lsn(), 1, tuple(old), None))
                dele += 1
            else:
                raise SqlError(50000, "unknown op %r (insert, update or delete)" % op, 16, 1)
        if pending_inserts:
            c.executemany(ins_sql, pending_inserts)
        txn = db.record_commit(table, begin_lsn, changes, (ins, upd, dele), at=at, duration_ms=duration_ms)
        c.execute("COMMIT")
        return txn
    except BaseException:
        c.execute("ROLLBACK")
        table.key_list, table.key_pos, table.next_key = saved
        raise
