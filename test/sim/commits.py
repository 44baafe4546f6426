"""Committing transactions to source tables: generated or explicit rows -> log + source table."""
import json
import math
from decimal import Decimal

from . import timeutil
from .catalog import q
from .errors import SqlError

_WORDS = ["new", "paid", "shipped", "packed", "returned", "open", "held", "north", "south", "east", "west",
          "Zürich", "Łódź", "São Paulo", "O'Brien", "naïve", "東京"]


class Lateness:
    """How far before its commit a generated date/time value lies (``--lateness``, ``@lateness``).

    SPEC: ``exp:MEAN`` (exponential, mean seconds), ``pareto:ALPHA:SCALE`` (Pareto type I: at least SCALE
    seconds, P(lateness > x) = (SCALE / x) ** ALPHA), ``uniform:MAX`` (0 .. MAX seconds), each optionally
    followed by ``,neg:FRACTION``: that fraction of the values lies 0 .. 2 s *after* the commit (clock skew).
    ``none`` (or NULL/empty) is no Lateness at all: the generator's original values (up to two seconds
    before the commit, in UTC)."""

    def __init__(self, spec, kind, params, neg):
        self.spec, self.kind, self.params, self.neg = spec, kind, params, neg

    def draw(self, rng):
        """Seconds before the commit (negative: after it), drawn from ``rng``."""
        if self.neg and rng.random() < self.neg:
            return -rng.uniform(0.0, 2.0)
        if self.kind == "exp":
            return rng.expovariate(1.0 / self.params[0])
        if self.kind == "pareto":
            alpha, scale = self.params
            return scale * rng.paretovariate(alpha)
        return rng.uniform(0.0, self.params[0])


def parse_lateness(spec):
    """SPEC text -> Lateness, or None for ``none``; ValueError with the reason when it is not one."""
    text = (spec or "").strip()
    if text.lower() in ("", "none"):
        return None
    parts = [p.strip() for p in text.split(",")]
    neg = 0.0
    if len(parts) == 2 and parts[1].lower().startswith("neg:"):
        neg = _number(parts[1][4:], "neg")
        if not 0.0 <= neg <= 1.0:
            raise ValueError("neg:FRACTION must be between 0 and 1")
    elif len(parts) != 1:
        raise ValueError("expected DIST[,neg:FRACTION]")
    fields = parts[0].split(":")
    kind = fields[0].lower()
    want = {"exp": 1, "pareto": 2, "uniform": 1}
    if kind not in want:
        raise ValueError("the distribution is none, exp:MEAN, pareto:ALPHA:SCALE or uniform:MAX")
    if len(fields) - 1 != want[kind]:
        raise ValueError("%s takes %d number(s)" % (kind, want[kind]))
    params = [_number(f, kind) for f in fields[1:]]
    if kind in ("exp", "pareto") and min(params) <= 0:
        raise ValueError("%s needs positive numbers" % kind)
    if kind == "uniform" and params[0] < 0:
        raise ValueError("uniform:MAX needs MAX >= 0")
    return Lateness(text, kind, params, neg)


def _number(text, what):
    try:
        v = float(text)
    except ValueError:
        raise ValueError("%r is not a number (%s)" % (text, what))
    if not math.isfinite(v):
        raise ValueError("%r is not a finite number (%s)" % (text, what))
    return v


def lateness_arg(spec):
    """A @lateness argument -> Lateness or None (Msg 50000 naming the problem)."""
    try:
        return parse_lateness(spec)
    except ValueError as e:
        raise SqlError(50000, "Invalid @lateness '%s': %s." % (spec, e), 16, 1)


def _late_value(t, seconds, commit_t300, tz):
    """The value an application writing SYSDATETIME() (SYSDATETIMEOFFSET() for datetimeoffset) stores for an
    event ``seconds`` before the commit instant: the server zone's local wall time of that instant, in the
    column's type."""
    days, tick = divmod(commit_t300, timeutil.TICKS_PER_DAY)
    commit_ns = (days + timeutil._ORD_1900 - 1) * timeutil.NS100_PER_DAY + timeutil.ns_of_ticks(tick)
    ev = commit_ns - int(round(seconds * 10_000_000))
    d, ns = divmod(ev, timeutil.NS100_PER_DAY)
    off = timeutil.offset_minutes(tz, timeutil.text_to_naive(timeutil.canon(d, ns)))
    d, ns = divmod(ev + off * 600_000_000, timeutil.NS100_PER_DAY)
    text = timeutil.canon(d, ns)
    n = t.name
    if n == "datetime":
        return timeutil.to_datetime(text)
    if n == "smalldatetime":
        return timeutil.to_smalldatetime(text)
    if n == "date":
        return timeutil.to_date(text)
    if n == "datetimeoffset":
        return timeutil.dto_text(timeutil.canon(d, timeutil.round_ns(ns, t.scale)), off)
    if n == "time":
        return timeutil.to_datetime2(text, t.scale)[11:]
    return timeutil.to_datetime2(text, t.scale)


def _gen_value(col, rng, commit_t300, tz, lateness=None):
    """A plausible random value for a column (deterministic through ``rng``); date/time values follow
    ``lateness`` when given."""
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
        if lateness is not None:
            return _late_value(t, lateness.draw(rng), commit_t300, tz)
        # Event time: up to two seconds before the commit, in UTC.
        ev = commit_t300 - rng.randint(0, 600)
        naive = timeutil.t300_to_naive(ev)
        text = timeutil.naive_text(naive)
        if n == "datetime":
            return timeutil.to_datetime(text)
        if n == "smalldatetime":
            return timeutil.to_smalldatetime(text)
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
            if t.name == "smalldatetime":
                return timeutil.to_smalldatetime(str(v))
            if t.name == "date":
                return timeutil.to_date(str(v))
            if t.name == "datetimeoffset":
                days, ns, off = timeutil.parse(str(v))
                return timeutil.dto_text(timeutil.canon(days, ns), off or 0)
            return timeutil.to_datetime2(str(v), t.scale if t.name == "datetime2" else 7)
        return str(v)
    except timeutil.OutOfRange:
        raise SqlError(242, "The conversion of a nvarchar data type to a %s data type resulted in an out-of-range "
                       "value." % t.type_name(), 16, 3)
    except (ValueError, TypeError):
        raise SqlError(245, "Conversion failed when converting the value '%s' to data type %s." % (v, t.type_name()),
                       16, 1)


def commit(db, table, inserts=0, updates=0, deletes=0, rows=None, at=None, duration_ms=0, lateness=None):
    """Commit one transaction on ``table`` (caller holds db.lock) and return the LogTxn.

    Generated operations: ``inserts`` new rows (next key), ``updates`` of
    random existing rows (one non-key column changes), ``deletes`` of random
    existing rows.  Explicit ``rows``: JSON list of objects with "op"
    (insert/update/delete) and column values (the key column picks the row).  ``lateness`` (a Lateness):
    generated date/time values lie that far before the commit, in the server's local time."""
    rng = db.rng
    cols = table.columns
    key = cols[table.key]
    commit_t300 = max(db.now_t300(), db.last_commit_t300) if at is None else None
    if at is not None:
        commit_t300 = timeutil.t300_of(at.replace(tzinfo=None))
        if lateness is not None:
            commit_t300 = max(commit_t300, db.last_commit_t300)     # the instant record_commit stamps
    commit_t300 += db.step_t300()          # an application's SYSDATETIME() reads the server's wall clock
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
                    vals = tuple(k if i == table.key else _gen_value(col, rng, commit_t300, db.tz, lateness)
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
                        new[i] = _gen_value(cols[i], rng, commit_t300, db.tz, lateness)
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
