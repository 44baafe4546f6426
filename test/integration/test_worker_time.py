"""Time: SQL Server's commit times are local datetimes. Across both DST
transitions the verdict may lag but never lead the truth, and it catches up
once the ambiguous or skipped hour is behind."""

import datetime
import random

import pytest

from worker_env import (Env, as_utc, assert_chain, assert_never_leads, new_cluster, sim_clock, truth_counts,
                        truth_watermark)

UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


@pytest.mark.parametrize("zone,start", [
    ("Europe/Berlin", "2026-10-24T23:10:00Z"),      # fall-back: 03:00 CEST -> 02:00 CET at 01:00 UTC
    ("Europe/Berlin", "2026-03-28T23:10:00Z"),      # spring-forward: 02:00 CET -> 03:00 CEST at 01:00 UTC
    ("America/New_York", "2026-11-01T04:10:00Z"),   # fall-back: 02:00 EDT -> 01:00 EST at 06:00 UTC
])
def test_verdict_never_leads_across_dst(pg, zone, start):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    env = Env(pg)
    try:
        with sim_clock(timezone=zone, start_time=start, dummy_interval=120) as sim:
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim, timezone=zone)
            env.track("dst.hourly", "erp", granularity="1 hour")
            env.track("dst.quarter", "erp", granularity="15 minutes")
            env.wait_caught_up("dst.hourly", sim)
            clock = as_utc(sim.call("sim.state")[0][0]["clock_utc"])
            for _ in range(36):                       # about three hours around the transition
                step = rng.randint(60, 420)
                for _ in range(rng.randint(0, 3)):
                    when = clock + datetime.timedelta(seconds=rng.uniform(0, step))
                    sim.call("sim.commit", at=when, inserts=rng.randint(0, 3), updates=rng.randint(0, 2))
                    clock = when
                sim.call("sim.advance", seconds=step)
                clock = as_utc(sim.call("sim.state")[0][0]["clock_utc"])
                for table in ("dst.hourly", "dst.quarter"):
                    env.wait_caught_up(table, sim)
                    assert_never_leads(env, table, sim)
            # Past the transition, the verdict is live again: at most one
            # period plus the dummy-row cadence behind the truth.
            truth = truth_watermark(sim)
            for table, g in (("dst.hourly", 60), ("dst.quarter", 15)):
                until = env.one("SELECT finalize.finalized_until(%s)", (table,))
                assert truth - datetime.timedelta(minutes=g + 3) <= until <= truth, (table, until, truth)
                assert_chain(env.facts(table))
    finally:
        env.cleanup()


def utc(hour, minute):
    return datetime.datetime(2026, 10, 25, hour, minute, tzinfo=UTC)


def test_a_loss_ending_in_the_fall_back_hour_covers_both_readings(pg):
    """Berlin's clocks go back at 01:00 UTC on 2026-10-25, so local 02:00-03:00 happens twice. Changes
    lost to cleanup in the second 02:xx hour end the lost range at the LATER reading of the first kept
    commit's local time: the quarter they lie in stays not final until acknowledged. (The earlier
    reading, right for every commit time the verdict builds on, would end the loss an hour too soon
    here and call that quarter final.)"""
    env = Env(pg)
    try:
        with sim_clock(timezone="Europe/Berlin", start_time="2026-10-25T00:40:00Z", dummy_interval=120) as sim:
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim, timezone="Europe/Berlin")
            env.track("dst.lossy", "erp", granularity="15 minutes", on_data_loss="resume")
            env.wait_caught_up("dst.lossy", sim)
            pg.sql("ALTER SYSTEM SET finalize.enabled = off")
            pg.reload()
            pg.wait_for(lambda: env.one("SELECT count(*) FROM pg_stat_activity "
                                        "WHERE backend_type = 'finalize worker'") == 0, what="the worker to stop")
            sim.call("sim.commit", at=utc(1, 20), inserts=2)            # 02:20 CET, the second 02:20: lost
            kept = sim.call("sim.commit", at=utc(1, 25), inserts=1)[0][0]["start_lsn"]    # 02:25 CET: kept
            sim.call("sim.advance", to=utc(2, 10))
            sim.call("sim.cleanup", low_lsn=kept)
            pg.sql("ALTER SYSTEM RESET finalize.enabled")
            pg.reload()
            env.wait_caught_up("dst.lossy", sim)
            lost_from, lost_to = pg.sql("SELECT lost_from, lost_to FROM finalize.loss l JOIN finalize.tracked_table t "
                                        "USING (table_id) WHERE t.table_name = 'dst.lossy'")[0]
            assert as_utc(lost_to) == utc(1, 25) and as_utc(lost_from) < utc(1, 20), (lost_from, lost_to)
            # The watermark went on past the loss; finalized_until stops at the
            # quarter the loss starts in until it is acknowledged.
            assert env.one("SELECT w.finalized_until FROM finalize.watermark w JOIN finalize.tracked_table t "
                           "USING (table_id) WHERE t.table_name = 'dst.lossy'") >= utc(1, 45)
            assert env.one("SELECT finalize.finalized_until('dst.lossy')") <= lost_from
            final = {q: env.one("SELECT finalize.is_final('dst.lossy', %s)", (utc(1, q),)) for q in (15, 30)}
            assert final == {15: False, 30: True}, final
            assert_never_leads(env, "dst.lossy", sim)
    finally:
        pg.sql("ALTER SYSTEM RESET finalize.enabled")
        pg.reload()
        env.cleanup()


def test_commits_of_the_repeated_fall_back_hour_never_make_an_hour_exact_with_wrong_counts(pg):
    """New York's clocks go back at 06:00 UTC on 2026-11-01, so local 01:00-02:00 happens twice, and a
    commit stamped 01:20 is read as its earliest instant (05:20 UTC: no verdict leads). After inserts at
    01:00 and 01:30 EDT, two at 01:20 EST were counted in hour 05 (4, the truth 2) and hour 06 read as
    exact with none (the truth 2): a release could confirm an empty hour 06 or reconcile hour 05's count
    against the wrong rows. The periods such commits may lie in are inexact; no incident opens."""
    env = Env(pg)
    try:
        with sim_clock(timezone="America/New_York", start_time="2026-11-01T05:00:00Z") as sim:
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim, timezone="America/New_York")
            env.track("dst.counts", "erp")
            env.wait_caught_up("dst.counts", sim)
            for at, n in (("2026-11-01T05:30:00Z", 1), ("2026-11-01T06:20:00Z", 2)):
                sim.call("sim.advance", to=at)
                sim.call("sim.commit", at=at, inserts=n)
                sim.call("sim.advance", seconds=10)
                env.wait_caught_up("dst.counts", sim)
            sim.call("sim.advance", to="2026-11-01T07:10:00Z")
            env.wait_caught_up("dst.counts", sim)
            start, end = datetime.datetime(2026, 11, 1, 5, tzinfo=UTC), datetime.datetime(2026, 11, 1, 7, tzinfo=UTC)
            assert env.one("SELECT finalize.finalized_until('dst.counts')") == end
            truth = truth_counts(sim, "dbo.orders", start, end)
            assert truth[start][0] == 2 and truth[end - datetime.timedelta(hours=1)][0] == 2, truth
            rows = env.sql("SELECT period_start, inserts, exact FROM finalize.changes_by_period('dst.counts', %s, %s)",
                           (start, end))
            for period, inserts, exact in rows:
                assert not exact or inserts == truth[as_utc(period)][0], (period, inserts, truth)
            assert env.one("SELECT count(*) FROM finalize.alert WHERE kind = 'clock_stepped_back'") == 0
    finally:
        env.cleanup()


# --- SQL Server's clock stepped back (issue 41) ----------------------------------------------------
#
# NTP or a virtual machine's host corrects SQL Server's clock: it was fast, and is stepped back. SQL
# Server stamps commits with its wall clock and LSNs keep increasing, so after the step a later commit
# carries an earlier time (sim.step_clock). Every verdict holds back by the source's clock_tolerance
# (default 60 s): a step back up to it never lets a commit land in a final period; a larger one holds
# the source (commit_time_ahead) while the worker can see it, and a commit stamped in a final period
# makes the periods inexact and opens a clock_stepped_back incident.

def at_(hh, mm, ss=0):
    return datetime.datetime(2026, 11, 2, hh, mm, ss, tzinfo=UTC)


def wall_clock(sim):
    return as_utc(sim.query("SELECT SYSUTCDATETIME() AS t")[0]["t"])


def clock_incidents(env, table):
    return env.sql("SELECT severity, subject, state, message FROM finalize.alert "
                   "WHERE kind = 'clock_stepped_back' AND table_name = %s ORDER BY alert_id", (table,))


def hours(env, table, start, end):
    return {as_utc(r[0]): (r[1], r[2]) for r in env.sql(
        "SELECT period_start, inserts, exact FROM finalize.changes_by_period(%s, %s, %s)", (table, start, end))}


def test_a_clock_60_s_fast_then_stepped_back_never_makes_hour_09_final_early(pg):
    """The issue's case: SQL Server's clock is 60 s fast, so at 09:59:00 it stamps commits 10:00:00; then
    it is stepped back and two more inserts are stamped 09:59:20. Hour 09 must not be final before them
    (it was: finalized_until 10:00 with the truth at 09:59:20), and once they arrive hour 09 and 10 are no
    longer exact (their commits went back across 10:00) and an incident says so; no verdict ran ahead."""
    env = Env(pg)
    try:
        with sim_clock(start_time="2026-11-02T08:50:00Z") as sim:
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim, clock_tolerance=None)   # the server's default: 60 s
            env.track("t.clock", "erp")
            env.wait_caught_up("t.clock", sim)
            sim.call("sim.advance", to=at_(9, 58, 50))
            env.wait_caught_up("t.clock", sim)
            sim.call("sim.step_clock", seconds=60)          # the clock runs 60 s fast
            fast = sim.call("sim.commit", inserts=2, at=at_(9, 59))[0][0]
            assert str(fast["commit_time_local"]).startswith("2026-11-02 10:00:00")
            sim.call("sim.advance", to=at_(9, 59, 6))
            env.wait_caught_up("t.clock", sim)
            # 10:00:00 less the tolerance is 09:59:00: hour 09 waits.
            assert env.one("SELECT finalize.finalized_until('t.clock')") == at_(9, 0)
            assert env.one("SELECT finalize.is_final('t.clock', %s)", (at_(9, 0),)) is False
            assert "clock_tolerance" in env.one("SELECT reason FROM finalize.explain_verdict('t.clock', %s)",
                                                (at_(9, 0),))

            sim.call("sim.step_clock", seconds=-60)         # NTP steps it back
            back = sim.call("sim.commit", inserts=2, at=at_(9, 59, 20))[0][0]
            assert str(back["commit_time_local"]).startswith("2026-11-02 09:59:20")
            sim.call("sim.advance", to=at_(9, 59, 30))
            env.wait_caught_up("t.clock", sim)
            truth = truth_watermark(sim)
            assert truth <= at_(9, 59, 30)
            until = env.one("SELECT finalize.finalized_until('t.clock')")
            assert until == at_(9, 0) and until <= truth, (until, truth)
            assert env.source_status("erp")["condition"] == "ok", "a step back within the tolerance is absorbed"
            # The inserts stamped 09:59:20 came after ones stamped 10:00:00: both hours are inexact.
            assert [(r[0], r[2]) for r in clock_incidents(env, "t.clock")] == [("warning", "open")]
            sim.call("sim.advance", to=at_(10, 6))
            env.wait_caught_up("t.clock", sim)
            assert env.one("SELECT finalize.finalized_until('t.clock')") == at_(10, 0)
            got = hours(env, "t.clock", at_(9, 0), at_(11, 0))
            assert got == {at_(9, 0): (2, False), at_(10, 0): (2, False)}, got
            counts = truth_counts(sim, "dbo.orders", at_(9, 0), at_(11, 0))
            assert counts[at_(9, 0)][0] == 2 and counts[at_(10, 0)][0] == 2, counts
            assert_never_leads(env, "t.clock", sim)
    finally:
        env.cleanup()


def test_a_step_back_beyond_the_tolerance_holds_the_source_and_flags_the_final_hour(pg):
    """Five minutes fast, then stepped back: hour 09 became final on commits stamped 10:02 (that the
    tolerance cannot prevent), so the worker, seeing SQL Server's clock behind a commit time it read by
    more than the tolerance, holds the source (commit_time_ahead) instead of recording commits stamped
    into hour 09 silently, and marks the hours from its clock on inexact at once (they stayed exact
    while held: hour 09 with none of its three commits); once released, the late commit opens a
    critical clock_stepped_back incident."""
    env = Env(pg)
    try:
        with sim_clock(start_time="2026-11-02T08:50:00Z") as sim:
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim, clock_tolerance="1 min")
            env.track("t.clock", "erp")
            env.wait_caught_up("t.clock", sim)
            sim.call("sim.advance", to=at_(9, 56, 50))
            sim.call("sim.step_clock", seconds=300)
            sim.call("sim.commit", inserts=1, at=at_(9, 57))           # stamped 10:02:00
            sim.call("sim.advance", to=at_(9, 57, 10))
            env.wait_caught_up("t.clock", sim)
            assert env.one("SELECT finalize.finalized_until('t.clock')") == at_(10, 0)
            sim.call("sim.step_clock", seconds=-300)
            sim.call("sim.commit", inserts=3, at=at_(9, 58))           # stamped 09:58:00, in hour 09
            sim.call("sim.advance", to=at_(9, 58, 10))
            st = env.pg.wait_for(lambda: (lambda s: s if s and s["condition"] == "commit_time_ahead" else None)(
                env.source_status("erp")), timeout=30, what=lambda: f"the source held: {env.source_status('erp')}")
            assert "stepped back" in st["last_error"] and st["held_by"] == "commit_time_ahead", st
            assert sum(f["inserts"] for f in env.facts("t.clock")) == 1, "nothing recorded while held"
            # Hour 09 holds three commits nothing recorded yet: while held, it must not read as exact
            # with none (a release would confirm an empty partition).
            assert hours(env, "t.clock", at_(9, 0), at_(10, 0)) == {at_(9, 0): (0, False)}
            env.sql("SELECT finalize.release_source('erp')")
            env.wait_caught_up("t.clock", sim)
            assert sum(f["inserts"] for f in env.facts("t.clock")) == 4
            incidents = clock_incidents(env, "t.clock")
            assert [(r[0], r[1], r[2]) for r in incidents] == [("critical", "2026-11-02T09:00:00Z", "open")], incidents
            assert "already final" in incidents[0][3]
            got = hours(env, "t.clock", at_(9, 0), at_(11, 0))
            assert got == {at_(9, 0): (3, False), at_(10, 0): (1, False)}, got
            events = env.facts("t.clock", kind="event")
            assert [e["event"] for e in events] == ["clock_stepped_back"] * 2, events
            assert [(e["detail"]["ran_ahead"], e["detail"]["incident"]) for e in events] == [(True, False), (True, True)]
    finally:
        env.cleanup()


def test_a_step_back_beyond_the_tolerance_while_the_worker_is_down_is_still_flagged(pg):
    """The clock read before a step back is the worker's memory only: a worker started after the step
    (a restart, another worker of the pool) does not hold the source, but each table's stored offset
    and verdict still catch the commits stamped in final hour 09: inexact, a critical incident."""
    env = Env(pg)
    try:
        with sim_clock(start_time="2026-11-02T08:50:00Z") as sim:
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim, clock_tolerance="1 min")
            env.track("t.clock", "erp")
            sim.call("sim.advance", to=at_(9, 56, 50))
            sim.call("sim.step_clock", seconds=300)
            sim.call("sim.commit", inserts=1, at=at_(9, 57))           # stamped 10:02:00
            sim.call("sim.advance", to=at_(9, 57, 10))
            env.wait_caught_up("t.clock", sim)
            assert env.one("SELECT finalize.finalized_until('t.clock')") == at_(10, 0)
            pg.sql("ALTER SYSTEM SET finalize.enabled = off")
            pg.reload()
            pg.wait_for(lambda: env.one("SELECT count(*) FROM pg_stat_activity "
                                        "WHERE backend_type = 'finalize worker'") == 0, what="the worker to stop")
            sim.call("sim.step_clock", seconds=-300)
            sim.call("sim.commit", inserts=3, at=at_(9, 58))           # stamped 09:58:00, in hour 09
            sim.call("sim.advance", to=at_(9, 58, 10))
            pg.sql("ALTER SYSTEM RESET finalize.enabled")
            pg.reload()
            env.wait_caught_up("t.clock", sim)
            assert [(r[0], r[1]) for r in clock_incidents(env, "t.clock")] == [("critical", "2026-11-02T09:00:00Z")]
            assert hours(env, "t.clock", at_(9, 0), at_(10, 0)) == {at_(9, 0): (3, False)}
    finally:
        pg.sql("ALTER SYSTEM RESET finalize.enabled")
        pg.reload()
        env.cleanup()


def test_a_step_back_inside_one_read_never_leaves_a_commit_in_the_wrong_exact_hour(pg):
    """Three commits captured together, read as one range with no period boundary between the
    previous max LSN commit time and this one's (so the read is not split): 09:59:30, then 10:00:31
    (the clock 60 s fast), then 09:59:45 (stepped back). The range's span was that of its first and
    last LSN, 09:59:30-09:59:45, all inside hour 09: hour 09 read as exact with three inserts, the
    truth being two, and hour 10 as exact with none. It is the least and greatest commit time of its
    rows: the fact straddles 10:00, neither hour claims exact counts (changes_by_period finds a range
    by its end, the max LSN's 09:59:45: a recorded clock step marks hour 10), and an incident says so."""
    env = Env(pg)
    try:
        with sim_clock(start_time="2026-11-02T08:50:00Z") as sim:
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim)
            env.track("t.clock", "erp")
            sim.call("sim.advance", to=at_(9, 59))
            env.wait_caught_up("t.clock", sim)
            sim.call("sim.capture_stop")
            sim.call("sim.commit", inserts=1, at=at_(9, 59, 30))
            sim.call("sim.step_clock", seconds=60)
            sim.call("sim.commit", inserts=1, at=at_(9, 59, 31))
            sim.call("sim.step_clock", seconds=-60)
            sim.call("sim.commit", inserts=1, at=at_(9, 59, 45))
            sim.call("sim.capture_start")
            sim.call("sim.advance", to=at_(9, 59, 50))
            env.wait_caught_up("t.clock", sim)
            facts = [f for f in env.facts("t.clock") if f["inserts"]]
            assert [f["inserts"] for f in facts] == [3], facts
            sim.call("sim.advance", to=at_(10, 6))
            env.wait_caught_up("t.clock", sim)
            assert env.one("SELECT finalize.finalized_until('t.clock')") == at_(10, 0)
            truth = truth_counts(sim, "dbo.orders", at_(9, 0), at_(11, 0))
            assert truth[at_(9, 0)][0] == 2 and truth[at_(10, 0)][0] == 1, truth
            rows = env.sql("SELECT period_start, inserts, exact FROM finalize.changes_by_period('t.clock', %s, %s)",
                           (at_(9, 0), at_(11, 0)))
            for start, inserts, exact in rows:
                assert not exact or inserts == truth[as_utc(start)][0], (start, inserts, truth)
            assert [r[2] for r in rows] == [False, False], rows
            # The 10:00:31 commit lies in a later hour than its read's max LSN (09:59:45): the clock went back.
            assert [(r[0], r[2]) for r in clock_incidents(env, "t.clock")] == [("warning", "open")]
    finally:
        env.cleanup()
