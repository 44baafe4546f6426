"""Event-time partitions through the worker, against the SQL Server
simulator over real FreeTDS: rows per event period equal the simulator's
truth exactly (inserts, updates, deletes by the old row's event time), late
rows are counted exactly with an alert, the lateness sketch is within its
1% of the true quantiles on exponential and heavy-tailed lateness, the
quantile policy never declares final a period with more than (1 - q) of its
rows still to come, and DST and odd-offset zones attribute rows like the
truth. An event column that is not captured, or that DDL touches, stops the
table rather than guess."""

import datetime
import json
import random
import select
import time

import pytest

from worker_env import as_utc, new_cluster, sim_clock

UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def pg():
    """A cluster whose worker polls every 200 ms (the session's polls every 5 s)."""
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


def utc(y, mo, d, h, mi=0, s=0.0):
    return datetime.datetime(y, mo, d, h, mi, tzinfo=UTC) + datetime.timedelta(seconds=s)


def track_event(env, sim, table="ev.orders", tz=None, **options):
    """Tracks dbo.orders by event time (created_at unless given) and waits for the baseline."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim, timezone=tz)
    options.setdefault("event_time_column", "created_at")
    source_table = options.pop("source_table", "dbo.orders")
    names = ", ".join("%s => %%s" % k for k in options)
    env.sql("SELECT finalize.track_table(%%s, 'erp', %%s, %s)" % names,
            (table, source_table) + tuple(options.values()))
    env.wait_caught_up(table, sim)
    return env.status(table)["offset_lsn"]


def step(env, sim, table, seconds=6):
    sim.call("sim.advance", seconds=seconds)
    env.wait_caught_up(table, sim)


def recorded_by_period(env, table):
    """What finalize recorded per event period: (inserts, updates, deletes)."""
    rows = env.sql("SELECT e.event_period, sum(e.inserts), sum(e.updates), sum(e.deletes) "
                   "FROM finalize.event_fact e JOIN finalize.tracked_table t USING (table_id) "
                   "WHERE t.table_name = %s GROUP BY e.event_period", (table,))
    return {p: (int(i), int(u), int(d)) for p, i, u, d in rows}


def truth_by_period(sim, column, granularity_seconds, after_lsn, table="dbo.orders"):
    rows = sim.call("sim.truth_event_counts", table=table, column=column, granularity_seconds=granularity_seconds,
                    after_lsn=bytes.fromhex(after_lsn[2:]))[0]
    return {as_utc(r["period_start_utc"]) if r["period_start_utc"] else None:
            (r["inserts"], r["updates"], r["deletes"]) for r in rows}


def drain(conn, timeout=2.0):
    deadline = time.monotonic() + timeout
    got = []
    while time.monotonic() < deadline:
        if select.select([conn], [], [], 0.1)[0]:
            conn.poll()
        while conn.notifies:
            got.append(conn.notifies.pop(0))
        if got and not select.select([conn], [], [], 0.2)[0]:
            break
    return got


def rows_json(*rows):
    return json.dumps(list(rows))


def late_rows(env, table):
    return dict(env.sql("SELECT event_period, rows FROM finalize.late_data WHERE table_name = %s", (table,)))


def test_counts_per_event_period_equal_the_truth_and_late_rows_are_exact(env, sim):
    base = track_event(env, sim, allowed_lateness="10 minutes")
    env.sql("ALTER SYSTEM SET finalize.late_data_alert_interval = '1s'")
    env.sql("SELECT pg_reload_conf()")
    try:
        check_counts_and_late_rows(env, sim, base)
    finally:
        env.sql("ALTER SYSTEM RESET finalize.late_data_alert_interval")
        env.sql("SELECT pg_reload_conf()")


def check_counts_and_late_rows(env, sim, base):
    # Generated rows over 3 hours of commits, within the allowance (at most
    # 5 minutes late): inserts, updates (the after-image's event time) and
    # deletes (the deleted row's own event time, which may be hours old: a
    # delete of an old row is late data for its period).
    rnd = random.Random(14)
    for _ in range(12):
        sim.call("sim.commit", inserts=rnd.randint(3, 9), updates=rnd.randint(0, 2), deletes=rnd.randint(0, 1),
                 lateness="uniform:300", transactions=3)
        step(env, sim, "ev.orders", seconds=900)
    recorded = recorded_by_period(env, "ev.orders")
    truth = truth_by_period(sim, "created_at", 3600, base)
    assert recorded == truth and sum(map(sum, truth.values())) > 100

    # The verdict: the commit-time verdict minus 10 minutes, in whole hours.
    st = env.sql("SELECT w.finalized_until, w.commit_until, w.event_allowance FROM finalize.watermark w "
                 "JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.orders'")[0]
    assert st[2] == datetime.timedelta(minutes=10)
    assert st[0] == env.one("SELECT finalize_internal.event_bound(%s, '10 minutes', '1 hour', 'UTC')", (st[1],))
    final_until = st[0]
    assert env.one("SELECT finalize.finalized_until('ev.orders')") == final_until
    # Only deletes were late: every late row of a period is a delete of it.
    before = late_rows(env, "ev.orders")
    assert all(truth[p][2] >= n for p, n in before.items())

    # Rows whose event lies in a final period are late, exactly: 4 in the
    # last final hour, 1 in the one before; 2 in a period not final are not.
    listener = env.pg.connect()
    try:
        listener.cursor().execute("LISTEN finalize_alert")
        p1 = final_until - datetime.timedelta(hours=1)
        p2 = final_until - datetime.timedelta(hours=2)
        fmt = "%Y-%m-%d %H:%M:%S"
        late = [{"op": "insert", "created_at": (p1 + datetime.timedelta(minutes=m)).strftime(fmt)} for m in (1, 20, 40, 59)]
        late += [{"op": "insert", "created_at": (p2 + datetime.timedelta(minutes=30)).strftime(fmt)}]
        late += [{"op": "insert", "created_at": (final_until + datetime.timedelta(minutes=5)).strftime(fmt)}] * 2
        time.sleep(1.2)                        # past finalize.late_data_alert_interval since the last alert
        sim.call("sim.commit", rows=rows_json(*late))
        step(env, sim, "ev.orders")
        alerts = [json.loads(n.payload) for n in drain(listener)]
    finally:
        listener.close()
    after = late_rows(env, "ev.orders")
    assert after == {**before, p1: before.get(p1, 0) + 4, p2: before.get(p2, 0) + 1}
    late_alerts = [a for a in alerts if a["alert"] == "late_data"]
    assert len(late_alerts) == 1, alerts
    alert = late_alerts[0]
    assert alert["table"] == "ev.orders" and alert["rows"] == 5
    assert {p["period"]: p["rows"] for p in alert["periods"]} == {
        p1.strftime("%Y-%m-%dT%H:%M:%SZ"): 4, p2.strftime("%Y-%m-%dT%H:%M:%SZ"): 1}
    by_period = {r[0]: r[1:] for r in env.sql(
        "SELECT period_start, inserts, late_rows FROM finalize.changes_by_event_period('ev.orders', %s, %s)",
        (p2, final_until + datetime.timedelta(hours=1)))}
    assert by_period[p1][1] == after[p1] and by_period[p2][1] == after[p2] and by_period[final_until][1] == 0
    # Counts still equal the truth, late rows included.
    assert recorded_by_period(env, "ev.orders") == truth_by_period(sim, "created_at", 3600, base)
    # The verdict explains itself in the table's partitioning time.
    reason = env.one("SELECT reason FROM finalize.explain_verdict('ev.orders', %s)", (final_until,))
    assert "partitioned by event time" in reason and "allowed_lateness 00:10:00" in reason


@pytest.mark.parametrize("spec", ["exp:900", "pareto:1.5:60"])
def test_sketch_quantiles_are_within_one_percent_of_the_truth(env, sim, spec):
    base = track_event(env, sim, lateness_policy="quantile", lateness_quantile=0.99)
    rnd = random.Random(7)
    for _ in range(40):
        sim.call("sim.commit", inserts=rnd.randint(40, 60), lateness=spec, transactions=2)
        step(env, sim, "ev.orders", seconds=120)
    truth = sim.call("sim.truth_lateness", table="dbo.orders", column="created_at",
                     after_lsn=bytes.fromhex(base[2:]), quantiles="0.5,0.9,0.99,0.999")[0]
    n = truth[0]["rows"]
    assert n > 3000
    for r in truth:
        got = env.sql("SELECT extract(epoch FROM l.lateness) * 1000, l.rows FROM finalize.lateness('ev.orders', %s, "
                      "'30 days') AS l", (r["quantile"],))[0]
        assert got[1] == n
        assert abs(float(got[0]) - r["lateness_ms"]) <= 0.01 * r["lateness_ms"] + 1, (spec, r, got)
    # The allowance is drawn from the 0.99 quantile's upper bound: never below the truth.
    allowance = env.one("SELECT extract(epoch FROM w.event_allowance) * 1000 FROM finalize.watermark w "
                        "JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.orders'")
    true99 = [r["lateness_ms"] for r in truth if r["quantile"] == 0.99][0]
    assert true99 <= float(allowance) <= true99 * 1.03 + 1
    # A range's stored facts stay small.
    biggest = env.one("SELECT max(octet_length(f.sketch)) FROM finalize.fact f JOIN finalize.tracked_table t "
                      "USING (table_id) WHERE t.table_name = 'ev.orders'")
    assert biggest < 1024


def test_quantile_policy_never_leaves_more_than_one_minus_q_to_come(env, sim):
    """A long randomized run: whenever a period becomes final, the rows the
    truth later shows for it are at most (1 - q) more than it had then."""
    q = 0.99
    base = track_event(env, sim, granularity="15 minutes", lateness_policy="quantile", lateness_quantile=q,
                       lateness_window="1 day")
    seed = int(time.time()) % 100000
    rnd = random.Random(seed)
    first_final = {}                                   # period -> rows recorded when it became final
    for _ in range(90):
        for _ in range(rnd.randint(1, 4)):
            sim.call("sim.commit", inserts=rnd.randint(20, 60),
                     lateness=rnd.choice(["exp:60", "exp:180", "pareto:2:30"]))
        step(env, sim, "ev.orders", seconds=rnd.choice([30, 120, 300]))
        until = env.one("SELECT finalized_until FROM finalize.status WHERE table_name = 'ev.orders'")
        if until is None:
            continue
        for p, (i, u, d) in recorded_by_period(env, "ev.orders").items():
            if p is not None and p + datetime.timedelta(minutes=15) <= until and p not in first_final:
                first_final[p] = i + u + d
    # Rows committed before tracking began are not the table's facts (nor
    # the truth's after base); the last hour's tails may still be on their
    # way. The promise is about a quantile: a period needs rows enough for
    # 1 - q of them to be one row at least (periods hold hundreds here), and
    # the first half hour, while the window holds its first observations, is
    # the warm-up.
    truth = truth_by_period(sim, "created_at", 900, base)
    latest = max(p for p in first_final) if first_final else None
    earliest = min(p for p in first_final) if first_final else None
    checked = 0
    for p, had in first_final.items():
        if p + datetime.timedelta(hours=1) > latest or p < earliest + datetime.timedelta(minutes=30):
            continue
        total = sum(truth.get(p, (0, 0, 0)))
        assert total - had <= (1 - q) * total, f"seed {seed}: period {p} final with {had} of {total} rows"
        checked += 1
    assert checked >= 3, f"seed {seed}: only {checked} periods checked of {sorted(first_final)}"


def test_dst_fall_back_and_odd_offset_zones_count_like_the_truth(env):
    """Europe/Berlin's 2026 fall-back (the hour 02:00-03:00 local happens
    twice) and Asia/Kathmandu's +05:45: rows per UTC event period equal the
    truth, which reads an ambiguous local time as its earliest instant too."""
    for zone, start in (("Europe/Berlin", "2026-10-25T00:10:00Z"), ("Asia/Kathmandu", "2026-11-02T09:00:00Z")):
        s = sim_clock(timezone=zone, start_time=start).start()
        try:
            base = track_event(env, s, table="ev.zoned", tz=zone, granularity="1 hour")
            for _ in range(30):
                s.call("sim.commit", inserts=3, lateness="uniform:3600")
                step(env, s, "ev.zoned", seconds=240)
            recorded = recorded_by_period(env, "ev.zoned")
            truth = truth_by_period(s, "created_at", 3600, base)
            assert recorded == truth, zone
            assert len(truth) >= 2
            # Lateness measured on wall times across the fall-back is raised,
            # never lowered: every quantile bound is at or above the truth.
            for r in s.call("sim.truth_lateness", table="dbo.orders", column="created_at",
                            after_lsn=bytes.fromhex(base[2:]), quantiles="0.5,0.9,0.99,1")[0]:
                bound = env.one("SELECT finalize_internal.sketch_quantile_bound_ms(finalize_internal.sketch_union(h.sketch), %s) "
                                "FROM finalize.lateness_hour h JOIN finalize.tracked_table t USING (table_id) "
                                "WHERE t.table_name = 'ev.zoned'", (r["quantile"],))
                assert bound >= r["lateness_ms"], (zone, r, bound)
        finally:
            env.cleanup()
            s.stop()


def test_a_hand_recorded_range_must_count_its_rows_as_its_sketch_does(env, sim):
    """The worker's facts pass the write path's check (its rows per event period and its sketch count the
    range's rows); the same sketch with a range of one row more, or rows per period that add up to other
    counts, is refused by record_range, whoever records it (before, both were accepted and told the verdict
    and the late-data counts another story than the range)."""
    track_event(env, sim)
    sim.call("sim.commit", inserts=4, lateness="uniform:60")
    step(env, sim, "ev.orders")
    inserts, sketch, first, last = env.sql(
        "SELECT f.inserts, f.sketch, f.first_event_time, f.last_event_time FROM finalize.fact f "
        "JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.orders' AND f.sketch IS NOT NULL")[0]
    assert inserts == 4 and env.one("SELECT finalize_internal.sketch_rows(%s)", (sketch,)) == 4
    env.sql("CREATE SERVER hand FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', port '1', "
            "database 'demo')")
    try:
        env.sql("SELECT finalize.track_table('ev.hand', 'hand', 'dbo.orders', event_time_column => 'created_at')")
        env.sql("SELECT finalize.record_range('ev.hand', NULL, '0x00000000000000000100', '2026-11-02 09:00+00')")
        period = json.dumps([{"period": "2026-11-02T09:00:00Z", "inserts": 5}])
        with pytest.raises(Exception, match="the lateness sketch of range .* does not count its rows"):
            env.sql("SELECT finalize.record_range('ev.hand', '0x00000000000000000100', '0x00000000000000000200', "
                    "'2026-11-02 09:30+00', 5, 0, 0, %s, %s, event_periods => %s, lateness_sketch => %s, "
                    "first_event_time => %s, last_event_time => %s)", (first, last, period, sketch, first, last))
        with pytest.raises(Exception, match="event-time facts of range .* do not count its rows"):
            env.sql("SELECT finalize.record_range('ev.hand', '0x00000000000000000100', '0x00000000000000000200', "
                    "'2026-11-02 09:30+00', 4, 0, 0, %s, %s, lateness_sketch => %s, "
                    "first_event_time => %s, last_event_time => %s)", (first, last, sketch, first, last))
        # Counted alike, the same facts are taken.
        period = json.dumps([{"period": "2026-11-02T09:00:00Z", "inserts": 4}])
        env.sql("SELECT finalize.record_range('ev.hand', '0x00000000000000000100', '0x00000000000000000200', "
                "'2026-11-02 09:30+00', 4, 0, 0, %s, %s, event_periods => %s, lateness_sketch => %s, "
                "first_event_time => %s, last_event_time => %s)", (first, last, period, sketch, first, last))
        assert env.one("SELECT count(*) FROM finalize.event_fact e JOIN finalize.tracked_table t USING (table_id) "
                       "WHERE t.table_name = 'ev.hand'") == 1
    finally:
        env.sql("DELETE FROM finalize.tracked_table WHERE table_name = 'ev.hand'")
        env.sql("DROP SERVER hand CASCADE")


def test_local_days_of_a_datetime2_column(env):
    """The common SQL Server case: created_at is a datetime2 of the server's local wall time, and the lake is
    cut in local days of that zone (period_zone). Across New York's 25-hour day (2026-11-01), inserts per local
    event day equal the truth (its 15-minute UTC periods summed by the reference's local days), none is late
    within the allowance, and no day is final before the truth has passed its end plus the allowance. (The
    event-time verdict is drawn from the commit-time verdict, itself in whole local days: a day is final
    once the truth has passed the end of the next one, less the allowance.)"""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
    from periods_ref import period as ref_period
    from worker_env import truth_watermark
    zone = "America/New_York"
    s = sim_clock(timezone=zone, start_time="2026-10-31T12:00:00Z", dummy_interval=600).start()
    try:
        base = track_event(env, s, table="ev.local_days", tz=zone, granularity="1 day", period_zone=zone,
                           allowed_lateness="10 minutes")
        rnd = random.Random(26)
        seen_final = set()
        for _ in range(36):
            s.call("sim.commit", inserts=rnd.randint(2, 6), lateness="uniform:300",
                   transactions=2)
            step(env, s, "ev.local_days", seconds=rnd.randint(3600, 5400))
            truth = truth_watermark(s)
            for day in ("2026-10-31", "2026-11-01", "2026-11-02"):
                start, end = ref_period(datetime.datetime.fromisoformat(day + "T12:00:00-04:00"), "1 day", zone)
                final = env.one("SELECT finalize.is_final('ev.local_days', %s)", (start,))
                assert not final or end + datetime.timedelta(minutes=10) <= truth, (day, truth)
                if final:
                    seen_final.add(day)
        recorded = recorded_by_period(env, "ev.local_days")
        by_day = {}
        for p, counts in truth_by_period(s, "created_at", 900, base).items():
            day = ref_period(p, "1 day", zone)[0]
            by_day[day] = tuple(a + b for a, b in zip(by_day.get(day, (0, 0, 0)), counts))
        assert recorded == by_day and len(by_day) >= 2, (recorded, by_day)
        assert datetime.datetime(2026, 11, 1, 4, tzinfo=UTC) in recorded      # the 25-hour day
        assert late_rows(env, "ev.local_days") == {}
        assert "2026-10-31" in seen_final, seen_final
    finally:
        env.cleanup()
        s.stop()


def test_a_datetimeoffset_column_reads_in_utc(env, sim):
    sim.call("sim.create_table", name="events", columns="[id] int NOT NULL, [happened_at] datetimeoffset(3)")
    sim.call("sim.enable_table", name="events")
    base = track_event(env, sim, table="ev.events", source_table="dbo.events", event_time_column="happened_at")
    rows = [{"op": "insert", "id": i, "happened_at": v} for i, v in enumerate(
        ["2026-11-02 10:50:00.000 +01:00", "2026-11-02 09:59:59.999 +00:00", "2026-11-02 15:30:00.000 +05:30",
         "2026-11-02 04:10:00.000 -05:00"])]
    sim.call("sim.commit", table="dbo.events", rows=rows_json(*rows))
    step(env, sim, "ev.events")
    assert recorded_by_period(env, "ev.events") == truth_by_period(sim, "happened_at", 3600, base,
                                                                   table="dbo.events")
    assert recorded_by_period(env, "ev.events") == {utc(2026, 11, 2, 9): (3, 0, 0), utc(2026, 11, 2, 10): (1, 0, 0)}


def test_a_datetimeoffset_column_on_a_server_east_of_utc_measures_true_lateness(env):
    """Events carry their offset, commits are Berlin wall times: lateness is
    measured at the server's offset, not an hour long."""
    s = sim_clock(timezone="Europe/Berlin", start_time="2026-11-02T09:00:00Z").start()
    try:
        s.call("sim.create_table", name="events", columns="[id] int NOT NULL, [happened_at] datetimeoffset(3)")
        s.call("sim.enable_table", name="events")
        base = track_event(env, s, table="ev.dto", tz="Europe/Berlin", source_table="dbo.events",
                           event_time_column="happened_at",
                           lateness_policy="quantile", lateness_quantile=0.9)
        for _ in range(10):
            s.call("sim.commit", table="dbo.events", inserts=30, lateness="uniform:120")
            step(env, s, "ev.dto", seconds=60)
        for r in s.call("sim.truth_lateness", table="dbo.events", column="happened_at",
                        after_lsn=bytes.fromhex(base[2:]), quantiles="0.5,0.9")[0]:
            got = env.one("SELECT extract(epoch FROM l.lateness) * 1000 FROM finalize.lateness('ev.dto', %s) AS l",
                          (r["quantile"],))
            assert abs(float(got) - r["lateness_ms"]) <= 0.03 * r["lateness_ms"] + 5, (r, got)
        assert recorded_by_period(env, "ev.dto") == truth_by_period(s, "happened_at", 3600, base, table="dbo.events")
    finally:
        env.cleanup()
        s.stop()


def test_an_event_column_that_is_not_captured_or_not_a_time_stops_the_table(env, sim):
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim)
    env.sql("SELECT finalize.track_table('ev.typo', 'erp', 'dbo.orders', event_time_column => 'created')")
    # Shown at once, before any range: nothing is recorded for the table.
    st = env.wait_status("ev.typo", lambda s: s.get("condition") == "event_column_invalid")
    assert st["offset_lsn"] is None
    sim.call("sim.commit", inserts=2)
    sim.call("sim.advance", seconds=6)
    st = env.wait_status("ev.typo", lambda s: s.get("condition") == "event_column_invalid")
    assert "\"created\"" in st["condition_detail"] and "created_at (datetime2)" in st["condition_detail"]
    assert env.one("SELECT count(*) FROM finalize.fact f JOIN finalize.tracked_table t USING (table_id) "
                   "WHERE t.table_name = 'ev.typo' AND f.kind = 'range' AND f.start_lsn IS NOT NULL") == 0
    env.sql("SELECT finalize.untrack_table('ev.typo', false)")
    env.sql("SELECT finalize.track_table('ev.words', 'erp', 'dbo.orders', event_time_column => 'customer')")
    st = env.wait_status("ev.words", lambda s: s.get("condition") == "event_column_invalid")
    assert "type nvarchar" in st["condition_detail"]


def test_ddl_that_names_the_event_column_blocks_whatever_the_policy(env, sim):
    track_event(env, sim, ddl_policy="warn")
    sim.call("sim.commit", inserts=2)
    step(env, sim, "ev.orders")
    sim.call("sim.ddl", table="dbo.orders", command="ALTER TABLE dbo.orders ALTER COLUMN created_at date")
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=6)
    st = env.wait_status("ev.orders", lambda s: s.get("state") == "schema_blocked")
    assert "event column \"created_at\"" in st["state_detail"]
    # Other DDL under ddl_policy warn goes on as before.
    env.sql("SELECT finalize.resume_table('ev.orders')")
    sim.call("sim.ddl", table="dbo.orders", command="ALTER TABLE dbo.orders ADD note nvarchar(10) NULL")
    sim.call("sim.commit", inserts=1)
    step(env, sim, "ev.orders")
    assert env.status("ev.orders")["state"] == "active"
