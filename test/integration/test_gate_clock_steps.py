"""The release gate after SQL Server's clock was stepped back (issue 41). Commits stamped into an hour
already final (a step back beyond the source's clock_tolerance) are late data of a commit-time table, as
rows landing in a final event period are of an event-time one: a partition of that hour built before
finalize learned of them is refused (late_data), and so is any while the source is held or its reads
have not passed the commit times read before the step (more may be stamped there); one built after them
is released. The marks that make those hours inexact outlive facts_retention while later facts of the
hours remain. The real worker reads the simulator over FreeTDS; the gate reads a file:// store."""

import datetime
import json
import time

import pytest

from storefiles import write_file
from test_worker_hardening import reconfigure
from worker_env import Env, new_cluster, sim_clock, truth_counts

UTC = datetime.timezone.utc
T = "t.clock"


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


def at_(hh, mm, ss=0):
    return datetime.datetime(2026, 11, 2, hh, mm, ss, tzinfo=UTC)


def gate(env, store, generation, built_at):
    """Releases generation (one file) of partition hour=09, read at built_at: (released, codes, problems)."""
    prefix = f"hour=09/{generation}/"
    write_file(store, prefix + "part-0.parquet", b"rows")
    env.sql("SELECT finalize.register_partition(%s, 'hour=09', %s)", (T, prefix))
    m = {"table": T, "partition": "hour=09", "generation": generation, "store": "file://" + store,
         "prefix": prefix, "period_start": at_(9, 0).isoformat(), "files": {prefix + "part-0.parquet": 4},
         "built_at": built_at.astimezone(UTC).isoformat()}
    (released, _, problems), = env.sql("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),))
    return released, sorted(p["code"] for p in problems), problems


def fast_clock(env, sim):
    """Two inserts at 09:30, then SQL Server's clock runs 5 minutes fast: a commit at 09:57 is stamped
    10:02, and hour 09 is final. The table's baseline is taken before the 09:30 inserts, so that they
    are read in a range (on time: they are no late data when the clock steps back)."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim, clock_tolerance="1 min")
    env.track(T, "erp")
    env.wait_caught_up(T, sim)
    sim.call("sim.advance", to=at_(9, 30))
    sim.call("sim.commit", inserts=2, at=at_(9, 30))
    sim.call("sim.advance", to=at_(9, 56, 50))
    sim.call("sim.step_clock", seconds=300)
    sim.call("sim.commit", inserts=1, at=at_(9, 57))           # stamped 10:02:00
    sim.call("sim.advance", to=at_(9, 57, 10))
    env.wait_caught_up(T, sim)
    assert env.one("SELECT finalize.finalized_until(%s)", (T,)) == at_(10, 0)


def step_back(env, sim):
    """NTP steps the clock back; three inserts are stamped 09:58, in final hour 09, and the worker holds
    the source (commit_time_ahead)."""
    sim.call("sim.step_clock", seconds=-300)
    sim.call("sim.commit", inserts=3, at=at_(9, 58))
    sim.call("sim.advance", to=at_(9, 58, 10))
    env.pg.wait_for(lambda: (env.source_status("erp") or {}).get("condition") == "commit_time_ahead",
                    timeout=30, what=lambda: f"the source held: {env.source_status('erp')}")


def test_a_partition_of_an_hour_the_clock_stepped_back_into_needs_a_generation_built_after(pg, store):
    env = Env(pg)
    try:
        with sim_clock(start_time="2026-11-02T08:50:00Z") as sim:
            fast_clock(env, sim)
            before = env.one("SELECT now()")
            assert gate(env, store, "g1", before)[:2] == (True, [])
            step_back(env, sim)
            # Held: hour 09 stays final (a verdict never moves back), its new commits are unread.
            assert env.one("SELECT finalize.is_final(%s, %s)", (T, at_(9, 0))) is True
            # Nothing was read while held: the 09:30 inserts, read before the step, are not late.
            assert env.sql("SELECT event_period, rows FROM finalize.late_data WHERE table_name = %s", (T,)) == []
            released, codes, problems = gate(env, store, "g2", env.one("SELECT now()"))
            assert (released, codes) == (False, ["late_data"]), problems
            assert "stepped back" in problems[0]["detail"] and "release_source" in problems[0]["detail"]
            env.sql("SELECT finalize.release_source('erp')")
            env.wait_caught_up(T, sim)
            (rows, learned), = env.sql("SELECT rows, last_seen FROM finalize.late_data "
                                       "WHERE table_name = %s AND event_period = %s", (T, at_(9, 0)))
            assert rows == 3
            # The clock (09:58) has not passed 10:02 yet: more commits may still be stamped in hour 09.
            released, codes, problems = gate(env, store, "g3", learned)
            assert (released, codes) == (False, ["late_data"]), problems
            sim.call("sim.advance", to=at_(10, 2, 30))
            sim.call("sim.commit", inserts=1, at=at_(10, 2, 30))
            sim.call("sim.advance", to=at_(10, 2, 40))
            env.wait_caught_up(T, sim)
            released, codes, problems = gate(env, store, "g4", learned - datetime.timedelta(microseconds=1))
            assert (released, codes) == (False, ["late_data"]), problems
            assert problems[0]["detail"].startswith("3 late row(s)"), problems
            assert gate(env, store, "g5", learned) == (True, [], [])
    finally:
        env.cleanup()


def test_purged_facts_never_make_the_hours_of_a_step_exact_again(pg):
    """After the step, a read that holds no change of the table ends at 09:59 (a commit of another
    table); facts_retention then removes the older facts, the step's marks with them: that read is the
    oldest left, hour 10 looked covered, and exact with one insert (the 10:02 commit stamped by the fast
    clock was purged with its range)."""
    env = Env(pg)
    try:
        with sim_clock(start_time="2026-11-02T08:50:00Z") as sim:
            sim.call("sim.create_table", name="payments", columns="[id] int NOT NULL PRIMARY KEY, [v] int")
            sim.call("sim.enable_table", name="payments")
            fast_clock(env, sim)
            step_back(env, sim)
            env.sql("SELECT finalize.release_source('erp')")
            env.wait_caught_up(T, sim)
            sim.call("sim.commit", table="dbo.payments", inserts=1, at=at_(9, 59))
            sim.call("sim.advance", to=at_(9, 59, 10))
            env.wait_caught_up(T, sim)
            sim.call("sim.advance", to=at_(10, 2, 30))
            sim.call("sim.commit", inserts=1, at=at_(10, 2, 30))
            sim.call("sim.advance", to=at_(10, 2, 40))
            env.wait_caught_up(T, sim)
            late, idle = [f["recorded_at"] for f in env.facts(T) if f["end_commit_time"] in (at_(9, 58), at_(9, 59))]
            cutoff = late + (idle - late) / 2
            assert env.one("SELECT finalize.purge_facts(now() - %s::timestamptz)", (cutoff,)) > 0
            got = env.sql("SELECT period_start, inserts, exact FROM finalize.changes_by_period(%s, %s, %s)",
                          (T, at_(9, 0), at_(11, 0)))
            assert truth_counts(sim, "dbo.orders", at_(10, 0), at_(11, 0))[at_(10, 0)][0] == 2
            assert [r[2] for r in got] == [False, False], got
    finally:
        env.cleanup()


def quiet(env):
    """Whether the erp source's worker ran no cycle for a second and a half."""
    cycles = env.source_status("erp")["cycles"]
    time.sleep(1.5)
    return env.source_status("erp")["cycles"] == cycles


def test_a_step_back_found_in_the_next_hour_holds_the_hour_it_stepped_into(pg, store):
    """SQL Server's clock (5 minutes fast, 10:02:10) is stepped back to 09:59:50 while the worker is
    off; a commit is stamped 09:59:51, in final hour 09, and the check that finds the step runs on the
    stepped clock at 10:00:01, in hour 10. The step came after the last good reading and the clock ran
    since: the hold marks hour 09 too, so a partition of it is refused until the commit is read, and
    the commit is late data then. Marked from the check's hour (10) on, hour 09 was released."""
    env = Env(pg)
    try:
        with sim_clock(start_time="2026-11-02T08:50:00Z") as sim:
            fast_clock(env, sim)
            assert gate(env, store, "s1", env.one("SELECT now()"))[:2] == (True, [])
            # The worker (its last reading in memory) sleeps while the clock is stepped and runs on.
            previous = reconfigure(pg, "finalize.poll_interval", "1h")
            pg.wait_for(lambda: quiet(env), what="the worker to sleep")
            sim.call("sim.step_clock", seconds=-140)                   # the clock reads 09:59:50
            sim.call("sim.commit", inserts=1, at=at_(9, 57, 11))        # stamped 09:59:51
            sim.call("sim.advance", to=at_(9, 57, 21))                 # captured; the clock reads 10:00:01
            time.sleep(12)      # SQL Server's clock runs in real time: no faster than the simulator's here
            reconfigure(pg, "finalize.poll_interval", previous)
            env.pg.wait_for(lambda: (env.source_status("erp") or {}).get("held_by") == "commit_time_ahead",
                            timeout=30, what=lambda: f"the source held: {env.source_status('erp')}")
            released, codes, problems = gate(env, store, "s2", env.one("SELECT now()"))
            assert (released, codes) == (False, ["late_data"]), problems
            env.sql("SELECT finalize.release_source('erp')")
            env.wait_caught_up(T, sim)
            assert env.sql("SELECT rows FROM finalize.late_data WHERE table_name = %s AND event_period = %s",
                           (T, at_(9, 0))) == [(1,)]
    finally:
        env.cleanup()


def test_a_release_is_not_undone_by_a_failed_cycle_that_read_the_hold_before_it(pg):
    """The cycle that finds the step holds the source (_clock_went_back); a later failed cycle only reports
    the hold it read when it began. A release_source committed between that read and the cycle's write
    stays released (the write once set the hold again: CI saw a release undone 0.2 s later)."""
    conn = pg.connect(autocommit=False)       # one transaction, rolled back: no worker sees the row
    try:
        with conn.cursor() as cur:
            def held():
                cur.execute("SELECT held_by FROM finalize.source_status WHERE server_name = 'race'")
                return cur.fetchone()[0]
            cur.execute("SELECT finalize_internal.source_failed('race', NULL, 'commit_time_ahead', 'ahead', now())")
            cur.execute("SELECT finalize_internal.clock_went_back('race', now())")
            assert held() == "commit_time_ahead"
            cur.execute("SELECT finalize.release_source('race')")
            assert cur.fetchone()[0] is True and held() is None
            cur.execute("SELECT finalize_internal.source_failed('race', NULL, 'commit_time_ahead', 'held', now())")
            assert held() is None
    finally:
        conn.rollback()
        conn.close()


def test_a_hold_whose_record_failed_still_holds_the_source(pg, store):
    """The cycle that finds SQL Server's clock stepped back forgets the reading that showed it (a hold
    starts afresh), so the hold must reach the catalog: while its record fails (here a session keeps the
    source's status row past finalize.lock_timeout), the worker reads nothing, and records the hold once
    it can. Before, the next cycle could no longer see the step and read the commits stamped in final
    hour 09 as if nothing had happened."""
    env = Env(pg)
    blocker = None
    try:
        with sim_clock(start_time="2026-11-02T08:50:00Z") as sim:
            fast_clock(env, sim)
            inserts = sum(f["inserts"] for f in env.facts(T))
            seen = len(pg.log())
            blocker = pg.connect(autocommit=False)
            with blocker.cursor() as cur:
                cur.execute("SELECT 1 FROM finalize.source_status WHERE server_name = 'erp' FOR UPDATE")
            sim.call("sim.step_clock", seconds=-300)
            sim.call("sim.commit", inserts=3, at=at_(9, 58))
            sim.call("sim.advance", to=at_(9, 58, 10))
            # The worker finds the step; recording it waits for the row and gives up; it cycles on a while.
            pg.wait_for(lambda: "due to lock timeout" in pg.log()[seen:], timeout=60,
                        what="a failed record of the hold")
            time.sleep(3)
            blocker.rollback()
            blocker.close()
            blocker = None
            env.pg.wait_for(lambda: (env.source_status("erp") or {}).get("held_by") == "commit_time_ahead",
                            timeout=30, what=lambda: f"the hold recorded: {env.source_status('erp')}")
            assert sum(f["inserts"] for f in env.facts(T)) == inserts, "commits read past an unrecorded hold"
            env.sql("SELECT finalize.release_source('erp')")
            env.wait_caught_up(T, sim)
            assert sum(f["inserts"] for f in env.facts(T)) == inserts + 3
    finally:
        if blocker is not None:
            blocker.close()
        env.cleanup()
