"""Crash safety: SIGKILL of the worker at random moments and immediate
shutdowns of PostgreSQL over many cycles lose nothing and duplicate nothing,
and the verdict is never ahead of the simulator's ground truth.

FINALIZE_CRASH_STEPS and FINALIZE_CRASH_SEED make longer or repeatable runs."""

import os
import random
import signal
import time

from pgcluster import kill
from worker_env import Env, assert_chain, assert_never_leads, new_cluster, sim_clock


def worker_pid(pg):
    rows = pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize worker'")
    return rows[0][0] if rows else None


def recorded_counts(env, table):
    facts = env.facts(table)
    return sum(f["inserts"] for f in facts), sum(f["updates"] for f in facts), sum(f["deletes"] for f in facts)


def true_counts(sim, after_lsn, upto_lsn):
    """What was committed to dbo.orders in (after_lsn, upto_lsn], by the simulator's log."""
    commits = sim.call("sim.truth_commits", table="dbo.orders")[0]
    ins = upd = dele = 0
    for c in commits:
        lsn = "0x" + bytes(c["commit_lsn"]).hex().upper()
        if after_lsn < lsn <= upto_lsn:
            ins, upd, dele = ins + c["inserts"], upd + c["updates"], dele + c["deletes"]
    return ins, upd, dele


def test_random_kills_lose_and_duplicate_nothing():
    steps = int(os.environ.get("FINALIZE_CRASH_STEPS", "24"))
    seed = int(os.environ.get("FINALIZE_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    kills = shutdowns = commits = 0
    pg = new_cluster()
    env = Env(pg)
    try:
        with sim_clock(dummy_interval=60) as sim:
            # Enough rows that the random updates and deletes below always find
            # one (commits add two rows on average and delete at most one).
            sim.call("sim.commit", inserts=20)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim)
            env.track("c.orders", "erp", granularity="5 minutes")
            env.wait_caught_up("c.orders", sim)
            baseline = env.status("c.orders")["offset_lsn"]
            for step in range(steps):
                n = rng.randint(0, 3)
                for _ in range(n):
                    sim.call("sim.commit", inserts=rng.randint(0, 4), updates=rng.randint(0, 3),
                             deletes=rng.randint(0, 1))
                commits += n
                sim.call("sim.advance", seconds=rng.randint(3, 90))
                action = rng.random()
                if action < 0.35:
                    # Kill the worker somewhere inside its next cycles.
                    time.sleep(rng.uniform(0, 0.4))
                    pid = worker_pid(pg)
                    if pid:
                        kill(pid, signal.SIGKILL)
                        kills += 1
                        # The postmaster restarts everything; wait for a new worker.
                        pg.wait_for(lambda: worker_pid(pg) not in (None, pid), timeout=60,
                                    what="a worker after the crash")
                elif action < 0.5:
                    time.sleep(rng.uniform(0, 0.4))
                    pg.stop("immediate")
                    pg.start()
                    shutdowns += 1
                env.wait_caught_up("c.orders", sim, timeout=60)
                assert_never_leads(env, "c.orders", sim)
                facts = env.facts("c.orders")
                assert_chain(facts)
                offset = env.status("c.orders")["offset_lsn"]
                assert recorded_counts(env, "c.orders") == true_counts(sim, baseline, offset), f"seed {seed} step {step}"
            print(f"seed {seed}: {steps} steps, {commits} commits, {kills} worker kills, "
                  f"{shutdowns} immediate shutdowns, {len(env.facts('c.orders'))} facts")
            assert kills + shutdowns > 0
    finally:
        pg.cleanup()
