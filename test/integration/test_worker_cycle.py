"""The worker's cycle against the SQL Server simulator over real FreeTDS:
baseline, ranges, facts that match the simulator's ground truth, idle
databases, traffic on other tables, data loss, and the conditions that stop a
table without ever moving its verdict ahead."""

import datetime
import json
import select
import time

import pytest

from worker_env import at, as_utc, assert_chain, assert_never_leads, lsn_text, new_cluster, truth_counts

UTC = datetime.timezone.utc
T0 = datetime.datetime(2026, 11, 2, 8, 59, tzinfo=UTC)


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


def start_tracking(env, sim, table="sales.orders", **kw):
    """A first commit and capture (so max LSN exists), then track and wait for the baseline."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim)
    env.track(table, "erp", **kw)
    env.wait_caught_up(table, sim)


def test_baseline_then_ranges_match_the_truth(env, sim):
    start_tracking(env, sim)
    base = env.facts("sales.orders")
    assert len(base) == 1 and base[0]["event"] == "tracking_started" and base[0]["start_lsn"] is None
    assert env.status("sales.orders")["finalized_until"] == at(8, 0)
    assert env.status("sales.orders")["capture_instance"] == "dbo_orders"

    # Commits across hours 9 and 10, captured step by step while the worker
    # polls; the two around 10:00 land in one capture cycle, so one range
    # spans the boundary: SQL Server aggregates it per period, and it is
    # recorded as two facts, one in each hour.
    steps = [[(at(9, 5), dict(inserts=3))], [(at(9, 30), dict(updates=2))], [(at(9, 45), dict(deletes=1))],
             [(at(9, 59, 59.99), dict(inserts=1)), (at(10, 0, 0.5), dict(inserts=2))],
             [(at(10, 20), dict(inserts=1, updates=1))], [(at(10, 40), dict(deletes=1))]]
    for step in steps:
        # The capture job stops while a step commits: a capture cycle (and a worker's poll after it)
        # between the two commits around 10:00 would split the range on the worker's side instead.
        sim.call("sim.capture_stop")
        for when, ops in step:
            sim.call("sim.commit", at=when, **ops)
        sim.call("sim.capture_start")
        sim.call("sim.advance", seconds=6)
        env.wait_caught_up("sales.orders", sim)
        assert_never_leads(env, "sales.orders", sim)
    sim.call("sim.advance", to=at(11, 0, 30))
    env.wait_caught_up("sales.orders", sim)
    until, truth = assert_never_leads(env, "sales.orders", sim)
    assert until == at(11, 0), "idle dummy rows carry the verdict to the last full hour"

    facts = env.facts("sales.orders")
    assert_chain(facts)
    truth = truth_counts(sim, "dbo.orders", at(9, 0), at(11, 0))
    assert sum(sum(v) for v in truth.values()) == sum(f["inserts"] + f["updates"] + f["deletes"] for f in facts)
    straddle = [f for f in facts if f["first_commit_time"] and f["first_commit_time"] < at(10, 0) <= f["last_commit_time"]]
    assert straddle == [], "no fact spans 10:00: %s" % straddle
    pieces = [f for f in facts if f["first_commit_time"] and at(9, 59) <= f["first_commit_time"] < at(10, 1)]
    assert [(f["inserts"], f["last_commit_time"] < at(10, 0)) for f in pieces] == [(1, True), (2, False)], pieces
    assert pieces[0]["end_lsn"] == pieces[1]["start_lsn"] and pieces[0]["end_commit_time"] < at(10, 0)
    rows = env.sql("SELECT period_start, inserts, updates, deletes, exact, is_final "
                   "FROM finalize.changes_by_period('sales.orders', %s, %s)", (at(9, 0), at(11, 0)))
    assert [(r[4], r[5]) for r in rows] == [(True, True), (True, True)], "every final period is exact"
    for start, ins, upd, dele, exact, _ in rows:
        assert (ins, upd, dele) == tuple(truth[start]), (start, ins, upd, dele, truth[start])


def test_empty_ranges_coalesce_while_idle(env, sim):
    start_tracking(env, sim)
    for _ in range(6):
        sim.call("sim.advance", seconds=300)      # a dummy row each time
        env.wait_caught_up("sales.orders", sim)
    facts = env.facts("sales.orders")
    assert len(facts) == 2, facts                  # the baseline and ONE coalesced empty range
    assert facts[1]["ranges"] >= 6 and facts[1]["inserts"] == 0
    assert env.status("sales.orders")["finalized_until"] == at(9, 0)


def test_idle_database_advances_through_dummy_rows(env, sim):
    start_tracking(env, sim)
    sim.call("sim.advance", to=at(10, 5))
    env.wait_caught_up("sales.orders", sim)
    assert env.status("sales.orders")["finalized_until"] == at(10, 0)
    dummy = sim.query("SELECT COUNT(*) AS n FROM cdc.lsn_time_mapping WHERE tran_id = 0x00")[0]["n"]
    assert dummy >= 10


def test_traffic_on_other_tables_advances_every_table(env, sim):
    sim.call("sim.create_table", name="payments", columns="[id] int NOT NULL, [v] int")
    sim.call("sim.enable_table", name="payments")
    sim.call("sim.set_job", dummy_interval=0)      # no dummy rows: only commits move max LSN
    start_tracking(env, sim)
    for minute in range(10, 61, 10):
        sim.call("sim.commit", table="dbo.payments", inserts=1, at=at(9, 0) + datetime.timedelta(minutes=minute))
        sim.call("sim.advance", seconds=6)
        env.wait_caught_up("sales.orders", sim)
    st = env.status("sales.orders")
    assert st["finalized_until"] == at(10, 0)
    assert sum(f["inserts"] for f in env.facts("sales.orders")) == 0
    assert_never_leads(env, "sales.orders", sim)


def test_tracking_can_start_at_the_capture_instance(env, sim):
    sim.call("sim.commit", inserts=2)
    sim.call("sim.advance", seconds=10)
    sim.call("sim.commit", inserts=5)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim)
    env.track("sales.orders", "erp", start_from="capture_start")
    env.wait_caught_up("sales.orders", sim)
    facts = env.facts("sales.orders")
    # Like every table's, its facts begin with a start-less marker (just
    # before the instance's first LSN), then the ranges chain from it.
    assert facts[0]["event"] == "tracking_started" and facts[0]["start_lsn"] is None
    assert facts[0]["inserts"] + facts[0]["updates"] + facts[0]["deletes"] == 0
    assert facts[1]["start_lsn"] == facts[0]["end_lsn"]
    assert_chain(facts)
    assert sum(f["inserts"] for f in facts) == 2 + 5, "every change since the instance started"


@pytest.mark.every_major
def test_status_and_notify_from_the_worker(env, sim, pg):
    listener = pg.connect()
    listener.cursor().execute("LISTEN finalize")
    start_tracking(env, sim)
    sim.call("sim.commit", inserts=1, at=at(9, 59))
    sim.call("sim.advance", to=at(10, 5))          # a dummy row after 10:00 carries the verdict
    env.wait_caught_up("sales.orders", sim)
    notes = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(json.loads(n.payload)["new"] == "2026-11-02T10:00:00Z"
                                                  for n in notes):
        if select.select([listener], [], [], 0.2)[0]:
            listener.poll()
            notes.extend(listener.notifies)
            listener.notifies.clear()
    payloads = [json.loads(n.payload) for n in notes]
    # A worker cycle may run while sim.advance is still moving the clock (on a loaded machine): then
    # the verdict moves in more than one step, each notified, each starting where the one before ended.
    assert {"table": "sales.orders", "new": "2026-11-02T10:00:00Z",
            "commit_time": "2026-11-02T10:04:00Z"}.items() <= payloads[-1].items()
    moves = [p for p in payloads if p["old"] is not None]          # after the baseline's
    assert moves[0]["old"] == "2026-11-02T08:00:00Z", payloads
    assert all(b["old"] == a["new"] for a, b in zip(moves, moves[1:])), payloads
    assert payloads[-1]["lsn"] == env.status("sales.orders")["offset_lsn"]

    st = env.status("sales.orders")
    assert st["source_condition"] == "ok" and st["last_error"] is None
    assert st["worker_pid"] == env.one("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize worker'")
    assert st["last_poll"] is not None and st["last_success"] is not None
    # The simulator's clock stands in 2026-11-02: the skew says how far it is from ours.
    expected = truth_clock(sim) - datetime.datetime.now(UTC)
    assert abs((st["clock_skew"] - expected).total_seconds()) < 30
    assert st["source_max_lsn"] == st["offset_lsn"]


def truth_clock(sim):
    return as_utc(sim.call("sim.state")[0][0]["clock_utc"])


def test_data_loss_when_cleanup_passes_the_offset(env, sim, pg):
    start_tracking(env, sim)
    offset = env.status("sales.orders")["offset_lsn"]
    pg.sql("ALTER SYSTEM SET finalize.enabled = off")
    pg.reload()
    env.pg.wait_for(lambda: env.one("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'finalize worker'") == 0,
                    what="the worker to stop")
    sim.call("sim.commit", inserts=4, at=at(9, 10))
    sim.call("sim.advance", to=at(9, 20))
    sim.call("sim.cleanup", low_lsn=sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])
    before = env.status("sales.orders")["finalized_until"]
    pg.sql("ALTER SYSTEM RESET finalize.enabled")
    pg.reload()
    st = env.wait_status("sales.orders", lambda s: s.get("state") == "data_lost", what="data loss")
    assert st["finalized_until"] == before and st["offset_lsn"] == offset
    assert "CDC cleanup" in st["state_detail"] and "dbo_orders" in st["state_detail"]
    event = env.facts("sales.orders", kind="event")[-1]
    assert event["event"] == "data_loss" and event["start_lsn"] == offset
    assert event["detail"]["capture_instance"] == "dbo_orders"
    # The verdict stays frozen however far capture moves on.
    sim.call("sim.advance", to=at(12, 0))
    time.sleep(1.5)
    assert env.status("sales.orders")["finalized_until"] == before
    assert_never_leads(env, "sales.orders", sim)


def test_purge_during_the_read_is_data_loss(env, sim):
    start_tracking(env, sim)
    offset = env.status("sales.orders")["offset_lsn"]
    sim.call("sim.commit", inserts=3, at=at(9, 10))
    # Armed before the capture makes the commit visible: a worker fast enough
    # to read it between the two calls would see no purge at all.
    sim.call("sim.fault_purge", capture_instance="dbo_orders")
    sim.call("sim.advance", to=at(9, 20))
    st = env.wait_status("sales.orders", lambda s: s.get("state") == "data_lost", what="data loss")
    assert st["offset_lsn"] == offset, "nothing from the purged read was recorded"
    assert sum(f["inserts"] for f in env.facts("sales.orders")) == 0


def test_login_without_access_sets_a_condition(env, sim):
    # Even SELECT on the whole cdc schema (more than finalize needs) does not
    # make a capture instance readable without SELECT on its source table.
    sim.call("sim.create_login", login="reader", password="R3ader!pw", cdc_select=1)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim, login="reader", password="R3ader!pw")
    # track_table refuses it (test_source_check.py); tracked without the check, the worker says why.
    env.track("sales.orders", "erp", check_source=False)
    st = env.wait_status("sales.orders", lambda s: s.get("condition") == "no_capture_instance",
                         what="no capture instance")
    assert 'Login "reader" may not read SQL Server table [dbo].[orders].' in st["condition_detail"], st
    assert st["finalized_until"] is None
    # Granting access lets it start.
    sim.call("sim.grant", login="reader", object="dbo.orders")
    env.wait_caught_up("sales.orders", sim)
    assert env.status("sales.orders")["condition"] is None


def test_cdc_disabled_is_a_clear_status(env, sim):
    start_tracking(env, sim)
    before = env.status("sales.orders")["finalized_until"]
    sim.call("sim.cdc_disable")
    st = env.wait_status("sales.orders", lambda s: s.get("source_condition") == "no_max_lsn", what="no max LSN")
    assert "returned NULL" in st["last_error"] and st["finalized_until"] == before


def test_a_wrong_timezone_option_stops_the_source(env, sim):
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim, timezone="Asia/Tokyo")       # the simulator's clock is UTC
    env.track("sales.orders", "erp")
    st = env.wait_status("sales.orders", lambda s: s.get("source_condition") == "timezone_mismatch",
                         what="timezone mismatch")
    assert "Asia/Tokyo" in st["last_error"] and "UTC+00:00" in st["last_error"]
    assert st["finalized_until"] is None and st["offset_lsn"] is None
    env.sql("ALTER SERVER erp OPTIONS (SET timezone 'UTC')")
    env.wait_caught_up("sales.orders", sim)


def test_sql_server_errors_reach_the_status(env, sim):
    start_tracking(env, sim)
    sim.call("sim.fault_error", number=4242, message="The simulated disk is on fire.", pattern="fn_cdc_get_max_lsn",
             count=-1)
    st = env.wait_status("sales.orders", lambda s: s.get("source_condition") == "sql_error", what="sql error")
    assert "SQL Server error 4242" in st["last_error"] and "The simulated disk is on fire." in st["last_error"]
    sim.call("sim.fault_clear")
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.wait_caught_up("sales.orders", sim)
    assert env.source_status("erp")["condition"] == "ok"


def test_a_dropped_connection_is_reopened(env, sim):
    start_tracking(env, sim)
    sim.call("sim.fault_drop", pattern="COUNT_BIG", after_rows=0)
    sim.call("sim.commit", inserts=2)
    sim.call("sim.advance", seconds=10)
    env.wait_caught_up("sales.orders", sim)
    assert sum(f["inserts"] for f in env.facts("sales.orders")) == 2
    assert_chain(env.facts("sales.orders"))


def test_a_cycle_over_many_tables_records_them_at_once_and_odd_ones_one_by_one(env, sim, pg):
    """40 tables of one source: the plain ranges go through the set-based
    write (_record_ranges); a table whose verdict row another session holds
    and a table with a condition to clear are handed back and recorded one
    by one. Every table ends with the simulator's truth, and the batch never
    fell back to one by one as a whole (the log would say so)."""
    names = [f"dbo.m{i}" for i in range(40)]
    for n in names:
        sim.call("sim.create_table", name=n[4:], columns="[id] int NOT NULL, [v] int")
        sim.call("sim.enable_table", name=n[4:])
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim)
    for n in names:
        env.track("many." + n[4:], "erp", source_table=n)
    for n in names:
        env.wait_caught_up("many." + n[4:], sim)
    log_before = open(pg.logfile).read()
    # How many facts each INSERT statement stores: the batch stores many at once.
    pg.sql("CREATE TABLE public.fact_inserts (n bigint)")
    pg.sql("CREATE FUNCTION public.count_fact_inserts() RETURNS trigger LANGUAGE plpgsql AS "
           "$$BEGIN INSERT INTO public.fact_inserts SELECT count(*) FROM new_rows; RETURN NULL; END$$")
    pg.sql("CREATE TRIGGER count_inserts AFTER INSERT ON finalize.fact REFERENCING NEW TABLE AS new_rows "
           "FOR EACH STATEMENT EXECUTE FUNCTION public.count_fact_inserts()")
    # m0: a condition to clear (the one-by-one way clears it);
    # m1: its verdict row held by another session until after a cycle.
    env.sql("SELECT finalize_internal.set_condition(finalize_internal.tracked_id('many.m0'), 'read_failed', 'left by the test')")
    holder = pg.connect(autocommit=False)
    try:
        holder.cursor().execute("SELECT finalize.resume_table('many.m1')")
        for n in names:
            sim.call("sim.commit", table=n, inserts=2, updates=1)
        sim.call("sim.advance", seconds=6)
        for n in names[2:]:
            env.wait_caught_up("many." + n[4:], sim)
        env.wait_caught_up("many.m0", sim)
        env.wait_status("many.m1", lambda s: s["condition"] == "lock_timeout", what="m1's lock_timeout")
        assert env.status("many.m0")["condition"] is None
    finally:
        holder.commit()
        holder.close()
        pg.sql("DROP TRIGGER count_inserts ON finalize.fact")
    assert pg.sql("SELECT max(n) FROM public.fact_inserts")[0][0] >= 38, "the plain ranges were stored at once"
    pg.sql("DROP TABLE public.fact_inserts")
    pg.sql("DROP FUNCTION public.count_fact_inserts()")
    env.wait_caught_up("many.m1", sim)
    env.wait_status("many.m1", lambda s: s["condition"] is None, what="m1's condition cleared")
    for n in names:
        facts = env.facts("many." + n[4:])
        assert_chain(facts)
        assert sum(f["inserts"] for f in facts) == 2 and sum(f["updates"] for f in facts) == 1, (n, facts)
    cycle = env.sql("SELECT cycle_time FROM finalize.source_status WHERE server_name = 'erp'")[0][0]
    assert cycle is not None and cycle > datetime.timedelta(0)
    assert "one by one this cycle" not in open(pg.logfile).read()[len(log_before):]


def test_an_idle_source_asks_only_for_max_lsn_until_the_full_check(env, sim, pg):
    """Once a full check found every table at max LSN, a cycle asks SQL
    Server only for max LSN until it moves or finalize.full_check_interval
    passes. The proof is a fault armed on the instance list: idle cycles
    never send it, a full check does (and fails on it), and a move of max
    LSN brings the full check back at once, before anything is recorded."""
    pg.sql("ALTER SYSTEM SET finalize.full_check_interval = '1h'")
    pg.reload()
    try:
        start_tracking(env, sim)
        sim.call("sim.commit", table="dbo.orders", inserts=1)
        sim.call("sim.advance", seconds=10)
        env.wait_caught_up("sales.orders", sim)
        # The cycle after the one that recorded the range checks fully and
        # finds nothing to do: the source is settled from then on.
        recorded = env.source_status("erp")["last_success"]
        env.pg.wait_for(lambda: env.source_status("erp")["last_success"] > recorded + datetime.timedelta(seconds=1),
                        what="a settled source")
        sim.call("sim.fault_error", number=50001, message="The instance list was asked for.",
                 pattern="sp_cdc_help_change_data_capture", count=1)
        st0 = env.source_status("erp")
        # Many idle cycles (poll 200 ms): none sends the instance list.
        env.pg.wait_for(lambda: env.source_status("erp")["last_success"] > st0["last_success"] +
                        datetime.timedelta(seconds=2), what="idle cycles")
        st = env.source_status("erp")
        assert st["condition"] == "ok" and st["last_error_at"] == st0["last_error_at"], st

        # SQL Server moves: the next cycle is a full one (the fault fires), and
        # the range is recorded only by a full cycle after it.
        offset = env.status("sales.orders")["offset_lsn"]
        sim.call("sim.commit", table="dbo.orders", inserts=2)
        sim.call("sim.advance", seconds=10)
        st = env.wait_status("sales.orders", lambda s: "The instance list was asked for." in (s.get("last_error") or ""),
                             what="the full check")
        assert st["offset_lsn"] == offset, "nothing is recorded by the cycle that failed"
        env.wait_caught_up("sales.orders", sim)
        assert sum(f["inserts"] for f in env.facts("sales.orders")) == 3
        assert_chain(env.facts("sales.orders"))

        # Settled again; a capture instance dropped without a move of max LSN
        # shows once the interval passes (1 s here), and nothing moves meanwhile.
        before = env.status("sales.orders")["finalized_until"]
        pg.sql("ALTER SYSTEM SET finalize.full_check_interval = '1s'")
        pg.reload()
        max_before = sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"]
        sim.call("sim.disable_table", name="orders", capture_instance="dbo_orders")
        assert sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"] == max_before, \
            "the simulator's disable must not move max LSN, or this checks nothing"
        st = env.wait_status("sales.orders", lambda s: s.get("condition") == "no_capture_instance",
                             what="the dropped instance to show")
        assert st["finalized_until"] == before
    finally:
        pg.sql("ALTER SYSTEM RESET finalize.full_check_interval")
        pg.reload()


def test_the_workers_writes_reach_the_statistics_autovacuum_reads(env, sim):
    """A background worker has no main loop that reports its table
    statistics: without its own report, autovacuum never learns of the facts
    and verdict updates it writes, and never vacuums or analyzes them."""
    start_tracking(env, sim)

    def counts():
        return env.sql("SELECT relname, n_tup_ins, n_tup_upd FROM pg_stat_user_tables "
                       "WHERE schemaname = 'finalize' AND relname IN ('fact', 'watermark') ORDER BY relname")
    before = {r[0]: r[1:] for r in counts()}
    sim.call("sim.commit", table="dbo.orders", inserts=2)
    sim.call("sim.advance", seconds=10)
    env.wait_caught_up("sales.orders", sim)
    # Only the worker wrote facts and verdicts since; its report comes at a
    # commit at least a second after its previous one.
    env.pg.wait_for(lambda: (lambda now: now["fact"][0] > before["fact"][0] and
                             now["watermark"][1] > before["watermark"][1])({r[0]: r[1:] for r in counts()}),
                    what="the worker's writes in pg_stat_user_tables")


def test_one_by_one_writes_commit_every_30_tables(env, sim):
    """A first cycle over many tables records every baseline one by one; a
    committed subtransaction keeps its memory until the transaction ends,
    so those writes commit every 30 tables instead of all at once. A fact's
    recorded_at is its transaction's start, so the groups show the commits."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim)
    env.sql("SELECT finalize.track_table('chunk' || i, 'erp', 'dbo.orders') FROM generate_series(1, 100) i")
    target = sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"]
    env.pg.wait_for(lambda: env.one("SELECT count(*) FROM finalize.watermark w JOIN finalize.tracked_table t "
                                    "USING (table_id) WHERE t.table_name LIKE 'chunk%%' AND w.offset_lsn = %s",
                                    (lsn_text(target),)) == 100, what="100 baselines")
    groups = [r[0] for r in env.sql("SELECT count(*) FROM finalize.fact f JOIN finalize.tracked_table t USING (table_id) "
                                    "WHERE t.table_name LIKE 'chunk%%' AND f.event = 'tracking_started' "
                                    "GROUP BY f.recorded_at")]
    assert sum(groups) == 100 and len(groups) >= 4 and max(groups) <= 30, groups


def test_a_clock_that_went_back_across_a_boundary_leaves_both_periods_inexact(env, sim):
    """Commits stamped 09:58, 10:02 and then (the server's clock stepped back five minutes) 09:59, read in
    one range: SQL Server's aggregate per period cannot cut them by LSN, so the read is one fact spanning
    the least and greatest commit time of its rows (09:58 to 10:02), and neither hour reads as exact --
    never a 10:00 hour that lost its row to 09:00."""
    start_tracking(env, sim)
    # The worker's reads fail meanwhile, so that all three commits come in one range.
    sim.call("sim.fault_error", number=50000, message="held for the test", pattern="fn_cdc_get_all_changes",
             count=1000000)
    sim.call("sim.commit", at=at(9, 58), inserts=1)
    sim.call("sim.commit", at=at(10, 2), inserts=1)
    sim.call("sim.advance", to=at(10, 3, 30))
    sim.call("sim.set_clock_quirk", commit_time_offset_minutes=-5)
    try:
        sim.call("sim.commit", at=at(10, 4), inserts=1)
        sim.call("sim.advance", to=at(10, 5, 30))
    finally:
        sim.call("sim.set_clock_quirk", commit_time_offset_minutes=0)
    stamps = [r["tran_end_time"] for r in sim.query("SELECT tran_end_time FROM cdc.lsn_time_mapping "
                                                     "WHERE tran_id <> 0x00 ORDER BY start_lsn")][-3:]
    assert [t.strftime("%H:%M") for t in stamps] == ["09:58", "10:02", "09:59"], stamps
    sim.call("sim.fault_clear")
    # The range read first ends at the last commit, stamped 09:59: the 10:02 commit lies past the
    # range's end time (CI's load once ordered it so, and changes_by_period missed the range in 10:00).
    env.wait_caught_up("sales.orders", sim)
    sim.call("sim.advance", to=at(11, 0, 30))
    env.wait_caught_up("sales.orders", sim)
    facts = [f for f in env.facts("sales.orders") if f["inserts"]]
    assert len(facts) == 1 and facts[0]["inserts"] == 3, facts
    assert facts[0]["first_commit_time"] == at(9, 58) and facts[0]["last_commit_time"] == at(10, 2), facts
    rows = env.sql("SELECT period_start, exact, straddling_ranges FROM finalize.changes_by_period("
                   "'sales.orders', %s, %s)", (at(9, 0), at(11, 0)))
    assert [(r[1], r[2]) for r in rows] == [(False, 1), (False, 1)], rows

