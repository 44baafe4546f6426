"""Time: SQL Server's commit times are local datetimes. Across both DST
transitions the verdict may lag but never lead the truth, and it catches up
once the ambiguous or skipped hour is behind."""

import datetime
import random

import pytest

from worker_env import Env, as_utc, assert_chain, assert_never_leads, new_cluster, sim_clock, truth_watermark

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
