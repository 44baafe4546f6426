"""Event-time partitions (issue 14): the worker's per-range statement (GROUP BY GROUPING SETS, GROUPING(),
DATEDIFF_BIG, CEILING(LOG(...)), DISTINCT and joined derived tables) against values computed here; late-row
traffic (--lateness, @lateness); the ground truth sim.truth_event_counts / sim.truth_lateness."""
import datetime as dt
import json
import math
import re
import struct

import pymssql
import pytest

from simproc import Simulator
from tdsraw import Raw

GAMMA = 1.0202020202020201          # (1 + 0.01) / (1 - 0.01), as the worker sends it (%.17g)
SLOT = 900
START = "2026-03-01T00:00:00Z"


# --- the statement, exactly as src/mssql/tsql.c builds it -------------------------------------------

def quote_ident(name):
    return "[" + name.replace("]", "]]") + "]"


def statement(instance, column, dto=False):
    fn = quote_ident("fn_cdc_get_all_changes_" + instance)
    col = quote_ident(column)
    ev = ("CONVERT(datetime2(7), SWITCHOFFSET(a.%s, '+00:00'))" if dto else "CONVERT(datetime2(7), a.%s)") % col
    return ("SELECT GROUPING(x.k) AS gk, GROUPING(x.b) AS gb, x.k, x.op, x.b, COUNT_BIG(*) AS n,\n"
            "       DATEDIFF_BIG(millisecond, '19000101', MIN(x.ev)) AS min_ms,\n"
            "       DATEDIFF_BIG(millisecond, '19000101', MAX(x.ev)) AS max_ms\n"
            "  FROM (SELECT r.op, r.ev,\n"
            "               CASE WHEN r.ev IS NULL THEN NULL WHEN r.ev < '19000101' THEN CONVERT(bigint, -1)\n"
            "                    ELSE DATEDIFF_BIG(second, '19000101', r.ev) / @slot END AS k,\n"
            "               CASE WHEN r.ev IS NULL THEN NULL\n"
            "                    WHEN DATEDIFF_BIG(millisecond, r.ev, t.ct) > 0\n"
            "                    THEN CONVERT(bigint, CEILING(LOG(CONVERT(float, "
            "DATEDIFF_BIG(millisecond, r.ev, t.ct))) / LOG(@gamma)))\n"
            "                    WHEN DATEDIFF_BIG(millisecond, r.ev, t.ct) = 0 THEN CONVERT(bigint, -1)\n"
            "                    ELSE CONVERT(bigint, -2) END AS b\n"
            "          FROM (SELECT a.[__$start_lsn] AS l, a.[__$operation] AS op, %s AS ev\n"
            "                  FROM [cdc].%s(@from, @to, N'all') AS a) AS r\n"
            "          JOIN (SELECT d.l, sys.fn_cdc_map_lsn_to_time(d.l) AS ct\n"
            "                  FROM (SELECT DISTINCT f.[__$start_lsn] AS l\n"
            "                          FROM [cdc].%s(@from, @to, N'all') AS f) AS d) AS t ON t.l = r.l) AS x\n"
            " GROUP BY GROUPING SETS ((x.k, x.op), (x.b), ())" % (ev, fn, fn))


def exec_text(stmt, lo, hi, slot=SLOT, gamma=GAMMA):
    return ("EXEC sys.sp_executesql N'%s', N'@from binary(10), @to binary(10), @slot bigint, @gamma float', "
            "@from = 0x%s, @to = 0x%s, @slot = %d, @gamma = %.17g;"
            % (stmt.replace("'", "''"), lo.hex().upper(), hi.hex().upper(), slot, gamma))


def run_events(sim, instance, column, lo, hi, dto=False, slot=SLOT):
    """The statement's rows as sorted tuples (gk, gb, k, op, b, n, min_ms, max_ms)."""
    cur = sim.control().cursor()
    cur.execute(exec_text(statement(instance, column, dto), lo, hi, slot))
    return sorted(cur.fetchall(), key=_key)


def _key(row):
    return tuple((v is not None, v if v is not None else 0) for v in row)


# --- the expected result, computed independently ------------------------------------------------------

_TEXT = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?)?$")


def ns100(text):
    """'yyyy-mm-dd hh:mm:ss.fffffff' (a wall time) -> 100 ns units since 1900-01-01 00:00 (negative before)."""
    m = _TEXT.match(text)
    y, mo, d, h, mi, s, frac = m.groups()
    days = (dt.date(int(y), int(mo), int(d)) - dt.date(1900, 1, 1)).days
    secs = (int(h or 0) * 60 + int(mi or 0)) * 60 + int(s or 0)
    return (days * 86400 + secs) * 10 ** 7 + int((frac or "").ljust(7, "0"))


def as_datetime(text):
    """A datetime2(7) wall time stored into datetime: nearest 1/300 s (half up), read back exact to 100 ns
    (CONVERT(datetime2(7), datetime) on compatibility level 130 and later)."""
    v = ns100(text)
    day, rest = divmod(v, 86400 * 10 ** 7)
    ticks = (rest * 300 + 5 * 10 ** 6) // 10 ** 7
    return day * 86400 * 10 ** 7 + (ticks * 2 * 10 ** 7 + 300) // 600


def as_smalldatetime(text):
    """Nearest minute: 29.998 s or less down, 29.999 s or more up."""
    v = ns100(text)
    ms = (v + 5000) // 10 ** 4
    minute = ms // 60000 + (1 if ms % 60000 >= 29999 else 0)
    return minute * 60 * 10 ** 7


def as_date(text):
    v = ns100(text)
    return v - v % (86400 * 10 ** 7)


def as_datetime2(text, scale):
    unit = 10 ** (7 - scale)
    return (ns100(text) + unit // 2) // unit * unit


def expected(changes, slot=SLOT, gamma=GAMMA):
    """changes: [(operation, event in 100 ns since 1900 or None, commit time as 100 ns since 1900)] -> the rows
    SQL Server returns: per (slot, operation), per lateness bucket, and the grand total."""
    groups = {}

    def add(key, ev):
        g = groups.setdefault(key, [0, None, None])
        g[0] += 1
        if ev is not None:
            ms = ev // 10 ** 4                    # DATEDIFF_BIG(millisecond, '19000101', ev): boundaries
            g[1] = ms if g[1] is None else min(g[1], ms)
            g[2] = ms if g[2] is None else max(g[2], ms)
    for op, ev, ct in changes:
        if ev is None:
            k = b = None
        else:
            k = -1 if ev < 0 else (ev // 10 ** 7) // slot
            late = ct // 10 ** 4 - ev // 10 ** 4        # DATEDIFF_BIG(millisecond, ev, ct)
            b = math.ceil(math.log(late) / math.log(gamma)) if late > 0 else -1 if late == 0 else -2
        add((0, 1, k, op, None), ev)
        add((1, 0, None, None, b), ev)
        add((1, 1, None, None, None), ev)
    groups.setdefault((1, 1, None, None, None), [0, None, None])
    return sorted((key + tuple(v) for key, v in groups.items()), key=_key)


# --- helpers ---------------------------------------------------------------------------------------

def commit(sim, rows, at, table="dbo.orders"):
    """One transaction of explicit rows at UTC ``at`` -> its start_lsn."""
    rs = sim.call("sim.commit", table=table, rows=json.dumps(rows), at=at)
    return rs[0][0]["start_lsn"]


def lsn_range(sim, instance):
    r = sim.query("SELECT sys.fn_cdc_get_min_lsn(N'%s') AS lo, sys.fn_cdc_get_max_lsn() AS hi" % instance)[0]
    return r["lo"], r["hi"]


def make_table(sim, name, columns):
    sim.call("sim.create_table", name=name, columns=columns)
    sim.call("sim.enable_table", name=name)


def colmetadata(payload):
    """The first COLMETADATA of a response -> [(name, token, size)] for the integer types it holds."""
    i = payload.index(b"\x81")
    n = struct.unpack_from("<H", payload, i + 1)[0]
    i += 3
    out = []
    for _ in range(n):
        tok = payload[i + 6]
        i += 7
        size = {0x30: 1, 0x34: 2, 0x38: 4, 0x7F: 8}.get(tok)
        if tok == 0x26:
            size = payload[i]
            i += 1
        ln = payload[i]
        out.append((payload[i + 1:i + 1 + 2 * ln].decode("utf-16-le"), tok, size))
        i += 1 + 2 * ln
    return out


def errors_in(payload):
    """(number, class, message) of every ERROR token in a response of simple results."""
    out = []
    for m in re.finditer(re.escape(b"\xAA"), payload):
        i = m.start()
        try:
            number, state, cls = struct.unpack_from("<iBB", payload, i + 3)
            ln = struct.unpack_from("<H", payload, i + 9)[0]
            text = payload[i + 11:i + 11 + 2 * ln].decode("utf-16-le")
        except (struct.error, UnicodeDecodeError):
            continue
        if 100 <= number < 100000 and 0 < cls < 26 and text.endswith("."):
            out.append((number, cls, text))
    return out


# === part 1: the statement =============================================================================

def test_statement_matches_independent_computation(make_sim):
    sim = make_sim(dummy_interval=0)
    c1 = "2026-03-01 00:10:00"
    rows1 = [("2026-03-01 00:09:55.5", 1), ("2026-03-01 00:10:00", 2), ("2026-03-01 00:10:01.25", 3),
             (None, 4), ("2026-02-28 23:44:59.9999999", 5), ("1899-12-31 23:59:59.9995", 6),
             ("2026-03-01 00:00:00.1234567", 7)]
    lsn1 = commit(sim, [{"op": "insert", "order_id": k, "created_at": v} for v, k in rows1], c1)
    c2 = "2026-03-01 00:20:00"
    lsn2 = commit(sim, [{"op": "update", "order_id": 1, "created_at": "2026-03-01 00:19:00"},
                        {"op": "delete", "order_id": 2},
                        {"op": "insert", "order_id": 8, "created_at": "2026-03-01 00:15:00"},
                        {"op": "update", "order_id": 4, "amount": 3}], c2)
    sim.call("sim.advance", seconds=10)
    lo, hi = lsn_range(sim, "dbo_orders")
    first = [(2, None if v is None else ns100(v), ns100(c1)) for v, _ in rows1]
    second = [(4, ns100("2026-03-01 00:19:00"), ns100(c2)),         # the update's after image (3 is not read)
              (1, ns100("2026-03-01 00:10:00"), ns100(c2)),         # the delete carries the deleted row's value
              (2, ns100("2026-03-01 00:15:00"), ns100(c2)),
              (4, None, ns100(c2))]                                 # updated row with a NULL event time
    got = run_events(sim, "dbo_orders", "created_at", lo, hi)
    assert got == expected(first + second)
    # the buckets the worker relies on are there: zero lateness, event after commit, NULL, before 1900
    assert (1, 0, None, None, -1, 1, ns100(c1) // 10 ** 4, ns100(c1) // 10 ** 4) in got
    assert any(r[:5] == (1, 0, None, None, -2) for r in got)
    assert any(r[:5] == (0, 1, -1, 2, None) and r[6] == -1 for r in got)       # floor(-0.5 ms)
    assert (1, 1, None, None, None, len(first) + len(second)) == got[-1][:6]
    # one commit of the range only
    got2 = run_events(sim, "dbo_orders", "created_at", lsn2, hi)
    assert got2 == expected(second)
    assert lsn1 < lsn2


def test_empty_range_has_the_grand_total_row(make_sim):
    sim = make_sim(dummy_interval=0)
    lsn = commit(sim, [{"op": "insert", "order_id": 1, "created_at": "2026-03-01 00:00:30"}], "2026-03-01 00:01:00")
    commit(sim, [{"op": "insert", "order_id": 2, "created_at": "2026-03-01 00:01:30"}], "2026-03-01 00:02:00")
    sim.call("sim.advance", seconds=10)
    after = (int.from_bytes(lsn, "big") + 1).to_bytes(10, "big")        # no change row has this LSN
    assert run_events(sim, "dbo_orders", "created_at", after, after) == [(1, 1, None, None, None, 0, None, None)]


def test_result_types_on_the_wire(make_sim):
    sim = make_sim(dummy_interval=0)
    commit(sim, [{"op": "insert", "order_id": 1, "created_at": "2026-03-01 00:00:30"}], "2026-03-01 00:01:00")
    sim.call("sim.advance", seconds=10)
    lo, hi = lsn_range(sim, "dbo_orders")
    r = Raw(sim.port)
    r.prelogin()
    r.login()
    r.batch(exec_text(statement("dbo_orders", "created_at"), lo, hi))
    _, payload = r.message()
    r.close()
    meta = {name: (tok, size) for name, tok, size in colmetadata(payload)}
    assert [n for n, _, _ in colmetadata(payload)] == ["gk", "gb", "k", "op", "b", "n", "min_ms", "max_ms"]
    assert meta["gk"][1] == meta["gb"][1] == 1                          # tinyint
    assert meta["k"] == meta["b"] == meta["min_ms"] == meta["max_ms"] == (0x26, 8)   # bigint, nullable
    assert meta["op"] == (0x26, 4)                                      # int, NULL in the bucket rows
    assert meta["n"][1] == 8                                            # COUNT_BIG: bigint
    assert not errors_in(payload)


def test_every_event_column_type(make_sim):
    sim = make_sim(dummy_interval=0)
    make_table(sim, "ev_types", "[id] int NOT NULL, [t_dt] datetime, [t_sdt] smalldatetime, [t_date] date, "
                                "[t_dt2] datetime2(3), [t_dto] datetimeoffset(7)")
    c = "2026-03-01 00:10:00"
    vals = [("2026-03-01 00:09:59.9955", "2026-03-01 00:09:29.998", "2026-03-01 13:00:00",
             "2026-03-01 00:09:59.9996", "2026-03-01 05:40:00 +05:30"),
            ("2026-03-01 00:10:00.0016", "2026-03-01 00:09:30", "2026-02-27 23:59:59.9999999",
             "2026-03-01 00:09:59.9994", "2026-02-28 19:09:59.1234567 -05:00"),
            ("2026-03-01 00:10:00.9983", "2026-03-01 00:10:29.999", "2026-03-02", "2026-03-01 00:10:01",
             "2026-03-01 00:10:00.0000001 +00:00"),
            (None, None, None, None, None)]
    commit(sim, [{"op": "insert", "id": i, "t_dt": a, "t_sdt": b, "t_date": d, "t_dt2": e, "t_dto": f}
                 for i, (a, b, d, e, f) in enumerate(vals, 1)], c, table="dbo.ev_types")
    commit(sim, [{"op": "delete", "id": 1}], "2026-03-01 00:30:00", table="dbo.ev_types")
    sim.call("sim.advance", seconds=10)
    lo, hi = lsn_range(sim, "dbo_ev_types")
    ct1, ct2 = ns100(c), ns100("2026-03-01 00:30:00")

    def utc_of_dto(text):
        wall, off = text.rsplit(" ", 1)
        sign = -1 if off[0] == "-" else 1
        return ns100(wall) - sign * (int(off[1:3]) * 60 + int(off[4:6])) * 60 * 10 ** 7

    conv = {"t_dt": as_datetime, "t_sdt": as_smalldatetime, "t_date": as_date,
            "t_dt2": lambda v: as_datetime2(v, 3), "t_dto": utc_of_dto}
    for j, col in enumerate(["t_dt", "t_sdt", "t_date", "t_dt2", "t_dto"]):
        f = conv[col]
        changes = [(2, None if row[j] is None else f(row[j]), ct1) for row in vals]
        changes.append((1, f(vals[0][j]), ct2))
        got = run_events(sim, "dbo_ev_types", col, lo, hi, dto=(col == "t_dto"))
        assert got == expected(changes), col
    # spot checks of the rounding that matters: smalldatetime 00:09:30 is 00:10 (zero lateness), 00:10:29.999
    # is 00:11 (after the commit); datetime2(3) .9996 is 00:10:00.000; datetime .9955 s is tick 299 (.997)
    sdt = run_events(sim, "dbo_ev_types", "t_sdt", lo, hi)
    assert any(r[:6] == (1, 0, None, None, -1, 1) for r in sdt) and any(r[:5] == (1, 0, None, None, -2) for r in sdt)
    assert as_datetime("2026-03-01 00:09:59.9955") % 10 ** 7 == 9966667


def test_datetimeoffset_column_in_a_zone(make_sim):
    """A datetimeoffset event is switched to UTC, while the commit time is the server's local wall time: the
    raw lateness is off by the zone's offset (the worker corrects it), exactly as on SQL Server."""
    sim = make_sim(dummy_interval=0, timezone="Europe/Berlin")
    make_table(sim, "dto_ev", "[id] int NOT NULL, [ts] datetimeoffset(3)")
    commit(sim, [{"op": "insert", "id": 1, "ts": "2026-03-01 00:09:00 +00:00"},
                 {"op": "insert", "id": 2, "ts": "2026-03-01 01:09:30.5 +01:00"},
                 {"op": "insert", "id": 3, "ts": None}], "2026-03-01 00:10:00", table="dbo.dto_ev")
    sim.call("sim.advance", seconds=10)
    lo, hi = lsn_range(sim, "dbo_dto_ev")
    ct = ns100("2026-03-01 01:10:00")                                   # tran_end_time: local CET
    changes = [(2, ns100("2026-03-01 00:09:00"), ct), (2, ns100("2026-03-01 00:09:30.5"), ct), (2, None, ct)]
    got = run_events(sim, "dbo_dto_ev", "ts", lo, hi, dto=True)
    assert got == expected(changes)
    late = [r for r in got if r[:2] == (1, 0) and r[4] is not None]
    b = math.ceil(math.log(3_630_000) / math.log(GAMMA))               # 1 h 1 min: the offset is in it
    assert b == math.ceil(math.log(3_629_500) / math.log(GAMMA)) and [r[4:6] for r in late] == [(b, 2)]


def test_missing_column_is_msg_207_and_only_that_call_fails(make_sim):
    sim = make_sim(dummy_interval=0)
    commit(sim, [{"op": "insert", "order_id": 1, "created_at": "2026-03-01 00:00:30"}], "2026-03-01 00:01:00")
    sim.call("sim.advance", seconds=10)
    lo, hi = lsn_range(sim, "dbo_orders")
    bad = exec_text(statement("dbo_orders", "no_such_col"), lo, hi)
    with pytest.raises(pymssql.Error) as e:
        sim.execute(bad)
    assert "207" in str(e.value) and "Invalid column name 'no_such_col'." in str(e.value)
    r = Raw(sim.port)
    r.prelogin()
    r.login()
    r.batch(bad + " SELECT CONVERT(int, 42) AS after_it;")
    _, payload = r.message()
    r.close()
    assert errors_in(payload) == [(207, 16, "Invalid column name 'no_such_col'.")]
    assert b"a\x00f\x00t\x00e\x00r\x00_\x00i\x00t\x00" in payload           # the next statement ran
    assert struct.pack("<i", 42) in payload
    # the good statement still works on the same server
    assert run_events(sim, "dbo_orders", "created_at", lo, hi)[-1][5] == 1


# --- the T-SQL pieces on their own ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def grp(sim):
    sim.call("sim.create_table", name="g", columns="[id] int NOT NULL, [a] nvarchar(5), [b] int, [v] int")
    sim.call("sim.commit", table="dbo.g", rows=json.dumps(
        [{"op": "insert", "id": i, "a": a, "b": b, "v": v} for i, (a, b, v) in enumerate(
            [("x", 1, 10), ("x", 2, 20), ("y", 1, 30), ("y", None, 40), (None, 1, 50)], 1)]))
    return sim


def q(sim, sql):
    cur = sim.control().cursor()
    cur.execute(sql)
    return cur.fetchall()


def test_grouping_sets_rollup_cube(grp):
    rows = q(grp, "SELECT a, b, SUM(v) AS s, GROUPING(a) AS ga, GROUPING(b) AS gb FROM dbo.g "
                  "GROUP BY GROUPING SETS ((a, b), (a), ()) ORDER BY ga, gb, a, b")
    assert rows == [(None, 1, 50, 0, 0), ("x", 1, 10, 0, 0), ("x", 2, 20, 0, 0), ("y", None, 40, 0, 0),
                    ("y", 1, 30, 0, 0), (None, None, 50, 0, 1), ("x", None, 30, 0, 1), ("y", None, 70, 0, 1),
                    (None, None, 150, 1, 1)]
    assert q(grp, "SELECT a, b, SUM(v) FROM dbo.g GROUP BY ROLLUP(a, b) ORDER BY 1, 2") == q(
        grp, "SELECT a, b, SUM(v) FROM dbo.g GROUP BY GROUPING SETS ((a, b), (a), ()) ORDER BY 1, 2")
    assert len(q(grp, "SELECT a, b, COUNT(*) FROM dbo.g GROUP BY CUBE(a, b)")) == 5 + 3 + 3 + 1
    assert q(grp, "SELECT a, COUNT(*) AS n FROM dbo.g GROUP BY a WITH ROLLUP ORDER BY GROUPING(a), a") == [
        (None, 1), ("x", 2), ("y", 2), (None, 5)]
    assert q(grp, "SELECT GROUPING_ID(a, b) AS gid, COUNT(*) FROM dbo.g GROUP BY CUBE(a, b) HAVING "
                  "GROUPING_ID(a, b) = 3") == [(3, 5)]
    # the grand total exists over no rows, a plain aggregate over no groups gives none
    assert q(grp, "SELECT COUNT(*), MAX(v) FROM dbo.g WHERE 1 = 0 GROUP BY GROUPING SETS (())") == [(0, None)]
    assert q(grp, "SELECT a, COUNT(*) FROM dbo.g WHERE 1 = 0 GROUP BY GROUPING SETS ((a), ())") == [(None, 0)]
    assert q(grp, "SELECT a, COUNT(*) FROM dbo.g WHERE 1 = 0 GROUP BY a") == []
    # a derived table, a subquery and HAVING over the sets
    assert q(grp, "SELECT s.a, s.n FROM (SELECT a, COUNT(*) AS n FROM dbo.g GROUP BY GROUPING SETS ((a), ()) "
                  "HAVING COUNT(*) > 1) AS s ORDER BY s.n") == [("x", 2), ("y", 2), (None, 5)]


def test_grouping_errors(grp):
    def err(sql):
        with pytest.raises(pymssql.Error) as e:
            q(grp, sql)
        return str(e.value)
    assert "8161" in err("SELECT GROUPING(v) FROM dbo.g GROUP BY GROUPING SETS ((a), ())")
    assert "Argument 1 of the GROUPING function does not match" in err("SELECT GROUPING(a) FROM dbo.g")
    assert "Column 'dbo.g.v' is invalid in the select list" in err(
        "SELECT a, v FROM dbo.g GROUP BY GROUPING SETS ((a), ())")
    assert "Column 't.v' is invalid in the select list" in err("SELECT t.a, t.v FROM dbo.g AS t GROUP BY t.a")
    assert "8120" in err("SELECT v, COUNT(*) FROM dbo.g")
    assert "8121" in err("SELECT a FROM dbo.g GROUP BY a HAVING v > 1")
    assert "164" in err("SELECT COUNT(*) FROM dbo.g GROUP BY 1")
    # grouped expressions are fine, also inside larger ones
    assert q(grp, "SELECT b + 1 AS c, COUNT(*) FROM dbo.g GROUP BY b + 1 ORDER BY c") == [(None, 1), (2, 3), (3, 1)]
    assert q(grp, "SELECT (b + 1) * 2, COUNT(*) FROM dbo.g GROUP BY b + 1 ORDER BY 1") == [(None, 1), (4, 3), (6, 1)]


def test_datediff_big_counts_boundaries_and_division_truncates(grp):
    r = q(grp, "SELECT DATEDIFF_BIG(millisecond, '2026-03-01 00:00:00.9999999', '2026-03-01 00:00:01.0000000'), "
               "DATEDIFF_BIG(second, '2026-03-01 00:00:00.9999999', '2026-03-01 00:00:01'), "
               "DATEDIFF_BIG(millisecond, CONVERT(datetime2(7), '2026-03-01 00:00:01.0009'), "
               "CONVERT(datetime2(7), '2026-03-01 00:00:00.9991')), "
               "CONVERT(bigint, -7) / CONVERT(bigint, 2), CONVERT(bigint, 7) / -2, "
               "CEILING(LOG(CONVERT(float, 1000)) / LOG(1.5e0)), "
               "DATEDIFF_BIG(millisecond, '19000101', CONVERT(datetime2(7), '1899-12-31 23:59:59.9995'))")
    assert r == [(1, 1, -1, -3, -3, math.ceil(math.log(1000) / math.log(1.5)), -1)]
    assert q(grp, "SELECT CASE WHEN CONVERT(datetime2(7), '1899-12-31') < '19000101' THEN 1 ELSE 0 END") == [(1,)]


# === part 2: late rows ==================================================================================

LATE_COLS = "[id] int NOT NULL, [dt2] datetime2(7), [dt] datetime, [sdt] smalldatetime, [d] date, " \
            "[dto] datetimeoffset(7), [dto0] datetimeoffset(0)"


def table_rows(sim, table):
    return q(sim, "SELECT CONVERT(varchar(40), dt2, 121), CONVERT(varchar(40), dt, 121), "
                  "CONVERT(varchar(40), sdt, 121), CONVERT(varchar(40), d, 121), CONVERT(nvarchar(40), dto, 121), "
                  "CONVERT(nvarchar(40), dto0, 121) FROM %s ORDER BY id" % table)


@pytest.mark.parametrize("zone, offset", [("Europe/Berlin", "+01:00"), ("Asia/Kathmandu", "+05:45"),
                                          ("America/New_York", "-05:00")])
def test_late_values_are_local_wall_times(make_sim, zone, offset):
    sim = make_sim(dummy_interval=0, timezone=zone)
    make_table(sim, "lt", LATE_COLS)
    sim.call("sim.commit", table="dbo.lt", inserts=1, lateness="uniform:0", at="2026-03-01 00:10:00")
    h, m = int(offset[1:3]), int(offset[4:6])
    sign = -1 if offset[0] == "-" else 1
    local = dt.datetime(2026, 3, 1, 0, 10) + sign * dt.timedelta(hours=h, minutes=m)
    wall = local.strftime("%Y-%m-%d %H:%M:%S")
    [row] = table_rows(sim, "dbo.lt")
    assert row[0].startswith(wall + ".0000000") and row[1].startswith(wall + ".000")
    assert row[2].startswith(local.strftime("%Y-%m-%d %H:%M")) and row[3].startswith(wall[:10])
    assert row[4].startswith(wall) and row[4].endswith(offset) and row[5].endswith(offset)


def test_lateness_follows_the_distribution(make_sim):
    sim = make_sim(dummy_interval=0, seed=7)
    make_table(sim, "lt", LATE_COLS)
    at = dt.datetime(2026, 3, 1, 0, 10)
    sim.call("sim.commit", table="dbo.lt", inserts=400, lateness="exp:30", at=at)
    sim.call("sim.commit", table="dbo.lt", inserts=400, lateness="pareto:1.5:2", at=at + dt.timedelta(minutes=5))
    sim.call("sim.commit", table="dbo.lt", inserts=400, lateness="uniform:60,neg:0.2",
             at=at + dt.timedelta(minutes=10))
    rows = q(sim, "SELECT id, dt2 FROM dbo.lt ORDER BY id")
    late = {}
    for i, v in rows:
        commit_at = at + dt.timedelta(minutes=5 * ((i - 1) // 400))
        late.setdefault((i - 1) // 400, []).append((commit_at - v).total_seconds())
    exp_, par, uni = (sorted(late[k]) for k in range(3))
    assert 15 < exp_[199] < 27 and 50 < exp_[359] < 90 and min(exp_) >= 0
    assert min(par) >= 2 and 2.7 < par[199] < 3.7 and max(par) > 20
    neg = [x for x in uni if x < 0]
    assert 0.12 < len(neg) / 400 < 0.28 and min(neg) >= -2 and max(uni) <= 60
    # deterministic under --seed
    other = make_sim(dummy_interval=0, seed=7)
    make_table(other, "lt", LATE_COLS)
    other.call("sim.commit", table="dbo.lt", inserts=400, lateness="exp:30", at=at)
    assert q(other, "SELECT dt2 FROM dbo.lt ORDER BY id") == [(v,) for _, v in rows[:400]]


def test_lateness_spec_errors(make_sim):
    sim = make_sim(dummy_interval=0)
    for spec in ("exp:-1", "bogus", "uniform:5,neg:2", "pareto:1", "exp:1,neg:x", "exp:nan"):
        with pytest.raises(pymssql.Error) as e:
            sim.call("sim.commit", inserts=1, lateness=spec)
        assert "Invalid @lateness" in str(e.value), spec
        with pytest.raises(pymssql.Error):
            sim.call("sim.traffic", enabled=0, lateness=spec)
    bad = Simulator(clock="sim", start_time=START, lateness="exp:0")
    with pytest.raises(RuntimeError) as e:
        bad.start()
    assert "invalid lateness" in str(e.value)


def test_default_lateness_is_unchanged(make_sim):
    """Without a spec the generator keeps its values: up to two seconds before the commit, in UTC."""
    sim = make_sim(dummy_interval=0, timezone="Asia/Kathmandu")
    rs = sim.call("sim.commit", inserts=50, at="2026-03-01 00:10:00")
    assert rs[0][0]["commit_time_utc"] == dt.datetime(2026, 3, 1, 0, 10)
    for (v,) in q(sim, "SELECT created_at FROM dbo.orders"):
        assert dt.timedelta(0) <= dt.datetime(2026, 3, 1, 0, 10) - v <= dt.timedelta(seconds=2)


def test_traffic_lateness_option_and_procedure(make_sim):
    sim = make_sim(dummy_interval=0, traffic=True, traffic_rate=5, lateness="uniform:10", seed=3)

    def insert_lateness(after):
        rows = q(sim, "SELECT m.tran_end_time, c.created_at FROM cdc.dbo_orders_CT AS c JOIN cdc.lsn_time_mapping "
                      "AS m ON m.start_lsn = c.[__$start_lsn] WHERE c.[__$operation] = 2 AND c.[__$start_lsn] > 0x%s"
                      % after.hex())
        return sorted((ct - ev).total_seconds() for ct, ev in rows)
    sim.call("sim.advance", seconds=60)
    mid = lsn_range(sim, "dbo_orders")[1]
    late = insert_lateness(bytes(10))
    assert len(late) > 100 and late[0] > -0.005 and 2 < late[-1] < 10.005
    sim.call("sim.traffic", lateness="uniform:100,neg:0.5")
    sim.call("sim.advance", seconds=60)
    late = insert_lateness(mid)
    neg = [x for x in late if x < -0.005]
    assert len(late) > 100 and 0.3 < len(neg) / len(late) < 0.7 and late[0] > -2.005 and 10 < late[-1] < 100.005
    # the ground truth sees the same rows (plus updates and deletes, whose events are older)
    t = sim.call("sim.truth_lateness", table="dbo.orders", column="created_at", after_lsn=mid, quantiles="0")[0]
    assert t[0]["lateness_ms"] < 0 and t[0]["rows"] >= len(late)


# === part 3: ground truth ===============================================================================

def test_truth_event_counts_and_lateness_utc(make_sim):
    sim = make_sim(dummy_interval=0)
    l1 = commit(sim, [{"op": "insert", "order_id": i, "created_at": "2026-03-01 00:00:%02d" % (i * 5)}
                      for i in range(1, 11)], "2026-03-01 00:01:00")
    l2 = commit(sim, [{"op": "update", "order_id": 1, "created_at": "2026-03-01 01:30:00"},
                      {"op": "delete", "order_id": 2}, {"op": "insert", "order_id": 11, "created_at": None}],
                "2026-03-01 02:00:00")
    sim.call("sim.advance", seconds=10)
    got = sim.call("sim.truth_event_counts", table="dbo.orders", column="created_at", granularity_seconds=1800)[0]
    assert got == [{"period_start_utc": dt.datetime(2026, 3, 1, 0, 0), "inserts": 10, "updates": 0, "deletes": 1},
                   {"period_start_utc": dt.datetime(2026, 3, 1, 1, 30), "inserts": 0, "updates": 1, "deletes": 0},
                   {"period_start_utc": None, "inserts": 1, "updates": 0, "deletes": 0}]
    only2 = sim.call("sim.truth_event_counts", table="dbo.orders", column="created_at", granularity_seconds=60,
                     after_lsn=l1)[0]
    assert [(r["period_start_utc"], r["inserts"], r["updates"], r["deletes"]) for r in only2] == [
        (dt.datetime(2026, 3, 1, 0, 0), 0, 0, 1), (dt.datetime(2026, 3, 1, 1, 30), 0, 1, 0), (None, 1, 0, 0)]
    only1 = sim.call("sim.truth_event_counts", table="dbo.orders", column="created_at", granularity_seconds=60,
                     upto_lsn=l1)[0]
    assert [(r["period_start_utc"], r["inserts"]) for r in only1] == [(dt.datetime(2026, 3, 1, 0, 0), 10)]
    # lateness of the first commit: 55, 50, ..., 10 s
    t = sim.call("sim.truth_lateness", table="dbo.orders", column="created_at", upto_lsn=l1,
                 quantiles="0.5,0.9,0.99,0.05,1")[0]
    assert [(r["quantile"], r["lateness_ms"], r["rows"]) for r in t] == [
        (0.5, 30000, 10), (0.9, 50000, 10), (0.99, 55000, 10), (0.05, 10000, 10), (1.0, 55000, 10)]
    # everything: + the update (30 min), the delete (2 h - 10 s after its event)
    t = sim.call("sim.truth_lateness", table="dbo.orders", column="created_at")[0]
    assert [r["rows"] for r in t] == [12] * 4 and t[-1]["lateness_ms"] == 7_190_000
    assert sim.call("sim.truth_lateness", table="dbo.orders", column="created_at", after_lsn=l2)[0][0][
        "lateness_ms"] is None
    assert l1 < l2


def test_truth_dst_fall_back_berlin(make_sim):
    """2026-10-25 01:00 UTC: Berlin goes from 03:00 CEST back to 02:00 CET, so 02:30 local happens twice."""
    sim = make_sim(dummy_interval=0, timezone="Europe/Berlin", start_time="2026-10-25T00:00:00Z")
    make_table(sim, "ev", "[id] int NOT NULL, [t] datetime2(7), [o] datetimeoffset(0), [dt] datetime")
    commit(sim, [{"op": "insert", "id": 1, "t": "2026-10-25 02:30:00", "o": "2026-10-25 02:30:00 +02:00",
                  "dt": "2026-10-25 02:29:59.997"}], "2026-10-25 00:30:00", table="dbo.ev")     # 02:30 CEST
    commit(sim, [{"op": "insert", "id": 2, "t": "2026-10-25 02:30:00", "o": "2026-10-25 02:30:00 +01:00",
                  "dt": "2026-10-25 02:29:00"}], "2026-10-25 01:30:00", table="dbo.ev")        # 02:30 CET
    commit(sim, [{"op": "insert", "id": 3, "t": "2026-10-25 03:10:00", "o": None, "dt": None}],
           "2026-10-25 02:15:00", table="dbo.ev")                                             # 03:15 CET
    sim.call("sim.advance", seconds=10)
    counts = sim.call("sim.truth_event_counts", table="dbo.ev", column="t", granularity_seconds=3600)[0]
    # local 02:30 is read as its earliest instant 00:30 UTC both times; 03:10 CET is 02:10 UTC
    assert [(r["period_start_utc"], r["inserts"]) for r in counts] == [
        (dt.datetime(2026, 10, 25, 0, 0), 2), (dt.datetime(2026, 10, 25, 2, 0), 1)]
    counts = sim.call("sim.truth_event_counts", table="dbo.ev", column="o", granularity_seconds=3600)[0]
    assert [(r["period_start_utc"], r["inserts"]) for r in counts] == [
        (dt.datetime(2026, 10, 25, 0, 0), 1), (dt.datetime(2026, 10, 25, 1, 0), 1), (None, 1)]
    lat = sim.call("sim.truth_lateness", table="dbo.ev", column="t", quantiles="0.33,0.66,1")[0]
    assert [r["lateness_ms"] for r in lat] == [0, 300_000, 3_600_000]
    lat = sim.call("sim.truth_lateness", table="dbo.ev", column="o", quantiles="0.5,1")[0]
    assert [(r["lateness_ms"], r["rows"]) for r in lat] == [(0, 2), (0, 2)]
    # datetime: .997 is tick 299 (0.99667 s), so the lateness is 0.00333.. s -> 0 ms; 02:29 -> 1 h 1 min
    lat = sim.call("sim.truth_lateness", table="dbo.ev", column="dt", quantiles="0.5,1")[0]
    assert [r["lateness_ms"] for r in lat] == [3, 3_660_000]
    # the worker's statement reads both as wall times: zero lateness for the second commit (-1 bucket)
    lo, hi = lsn_range(sim, "dbo_ev")
    got = run_events(sim, "dbo_ev", "t", lo, hi)
    assert (1, 0, None, None, -1, 2, ns100("2026-10-25 02:30:00") // 10 ** 4,
            ns100("2026-10-25 02:30:00") // 10 ** 4) in got


def test_truth_odd_offset_kathmandu(make_sim):
    sim = make_sim(dummy_interval=0, timezone="Asia/Kathmandu")
    commit(sim, [{"op": "insert", "order_id": 1, "created_at": "2026-03-01 06:00:00"},        # 00:15 UTC
                 {"op": "insert", "order_id": 2, "created_at": "2026-03-01 06:14:59.9999999"},
                 {"op": "insert", "order_id": 3, "created_at": "2026-03-01 06:15:00"}],       # 00:30 UTC
           "2026-03-01 00:40:00")
    sim.call("sim.advance", seconds=10)
    counts = sim.call("sim.truth_event_counts", table="dbo.orders", column="created_at", granularity_seconds=1800)[0]
    assert [(r["period_start_utc"], r["inserts"]) for r in counts] == [
        (dt.datetime(2026, 3, 1, 0, 0), 2), (dt.datetime(2026, 3, 1, 0, 30), 1)]
    lat = sim.call("sim.truth_lateness", table="dbo.orders", column="created_at", quantiles="0.1,0.5,1")[0]
    assert [r["lateness_ms"] for r in lat] == [600_000, 600_000, 1_500_000]
    # generated late rows in this zone land in the same periods as their UTC instants
    sim.call("sim.commit", inserts=20, lateness="uniform:0", at="2026-03-01 01:05:00")
    sim.call("sim.advance", seconds=10)
    counts = sim.call("sim.truth_event_counts", table="dbo.orders", column="created_at",
                      granularity_seconds=1800)[0]
    assert (dt.datetime(2026, 3, 1, 1, 0), 20) in [(r["period_start_utc"], r["inserts"]) for r in counts]


def test_truth_errors_and_permissions(make_sim):
    sim = make_sim(dummy_interval=0)
    for kw, text in [(dict(column="nope"), "Invalid column name 'nope'."),
                     (dict(column="created_at", granularity_seconds=0), "@granularity_seconds must be positive"),
                     (dict(column="amount"), "not datetime"),
                     (dict(column="created_at", quantiles="0.5,2"), "@quantiles")]:
        proc = "sim.truth_lateness" if "quantiles" in kw else "sim.truth_event_counts"
        with pytest.raises(pymssql.Error) as e:
            sim.call(proc, table="dbo.orders", **kw)
        assert text in str(e.value), kw
    sim.call("sim.create_table", name="plain", columns="[id] int NOT NULL, [t] datetime2")
    with pytest.raises(pymssql.Error) as e:
        sim.call("sim.truth_event_counts", table="dbo.plain", column="t")
    assert "22985" in str(e.value)
    sim.call("sim.create_login", login="reader", password="Str0ng!pw", db_owner=1)
    conn = sim.connect(login="reader", password="Str0ng!pw")
    for proc in ("sim.truth_event_counts", "sim.truth_lateness"):
        with pytest.raises(pymssql.Error) as e:
            conn.cursor().execute("EXEC %s @table = N'dbo.orders', @column = N'created_at'" % proc)
        assert "229" in str(e.value)
    conn.close()


def test_grouping_set_keys_inside_other_keys(grp):
    """GROUPING SETS ((b), (b + 1)): each select-list expression matches the largest GROUP BY expression, so
    b + 1 reads NULL in the set (b) and keeps its value in the set (b + 1), where b reads NULL."""
    rows = q(grp, "SELECT b, b + 1 AS c, COUNT(*) AS n, GROUPING(b) AS gb FROM dbo.g "
                  "GROUP BY GROUPING SETS ((b), (b + 1)) ORDER BY gb, b, c")
    assert rows == [(None, None, 1, 0), (1, None, 3, 0), (2, None, 1, 0),
                    (None, None, 1, 1), (None, 2, 3, 1), (None, 3, 1, 1)]


def test_smalldatetime_and_date_columns(make_sim):
    sim = make_sim(dummy_interval=0)
    make_table(sim, "sd", "[id] int NOT NULL, [s] smalldatetime, [d] date")
    commit(sim, [{"op": "insert", "id": 1, "s": "2026-03-01 10:15:29.998", "d": "2026-03-01 23:59:59"},
                 {"op": "insert", "id": 2, "s": "2026-03-01 10:15:29.999", "d": None}], "2026-03-01 00:10:00",
           table="dbo.sd")
    assert q(sim, "SELECT s, d FROM dbo.sd ORDER BY id") == [
        (dt.datetime(2026, 3, 1, 10, 15), dt.date(2026, 3, 1)), (dt.datetime(2026, 3, 1, 10, 16), None)]
    assert q(sim, "SELECT COUNT(*) FROM dbo.sd WHERE s = '2026-03-01 10:15:10' AND d = '2026-03-01 08:00'") == [(1,)]
    r = Raw(sim.port)
    r.prelogin()
    r.login()
    r.batch("SELECT s FROM dbo.sd WHERE id = 1")
    _, payload = r.message()
    r.close()
    i = payload.index(b"\x81")
    assert payload[i + 9:i + 11] == b"\x6F\x04"                         # DATETIMN(4): smalldatetime
    assert struct.pack("<HH", (dt.date(2026, 3, 1) - dt.date(1900, 1, 1)).days, 10 * 60 + 15) in payload
    with pytest.raises(pymssql.Error) as e:
        q(sim, "SELECT CONVERT(smalldatetime, '2079-06-07')")
    assert "242" in str(e.value)
    with pytest.raises(pymssql.Error) as e:
        sim.call("sim.commit", table="dbo.sd", rows=json.dumps([{"op": "insert", "id": 3, "s": "1899-12-31"}]))
    assert "242" in str(e.value)
