"""Chaos: a randomized, seeded run of many cycles mixing traffic, idle
periods, DDL, capture-instance switches, cleanup (also in the middle of a
read), faults, worker kills, PostgreSQL restarts and paused workers. After
every step, against the simulator's ground truth: no verdict ever led the
truth, and every recorded range holds exactly the changes committed in it
(nothing lost, nothing counted twice).

FINALIZE_CHAOS_STEPS (default 40) and FINALIZE_CHAOS_SEED make longer or
repeatable runs; the seed and the count of every event are printed.

At the end, with every table active again, the worker's memory must stay
flat over a few hundred more cycles of traffic (bytes per cycle printed)."""

import collections
import os
import random
import signal
import time

from pgcluster import kill
from test_worker_hardening import memory_per_cycle, reconfigure
from worker_env import Env, lsn_text, new_cluster, sim_clock, sim_max_lsn, truth_watermark

TABLES = {  # lake table -> (source table, track_table options)
    "c.orders": ("dbo.orders", dict(granularity="1 hour", ddl_policy="warn", on_data_loss="resume")),
    "c.orders_strict": ("dbo.orders", dict(granularity="15 minutes", ddl_policy="block", on_data_loss="stop")),
    "c.payments": ("dbo.payments", dict(granularity="5 minutes")),
}


def worker_pid(pg):
    rows = pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize worker'")
    return rows[0][0] if rows else None


def instances(sim, table):
    schema, name = table.split(".")
    return [r for r in sim.call("sim.state")[1] if r["source_table"].lower() == f"{schema}.{name}".lower()]


def settled(env, sim):
    """Every table either caught up with max LSN or stopped (lost, blocked)."""
    target = sim_max_lsn(sim)
    for t in TABLES:
        st = env.status(t)
        if st["state"] in ("data_lost", "schema_blocked"):
            continue
        if st["state"] != "active" or st["offset_lsn"] != target:
            return False
    return True


def check_invariants(env, sim, counters):
    truth = truth_watermark(sim)
    commits = {}
    for t, (src, _) in TABLES.items():
        until = env.one("SELECT finalize.finalized_until(%s)", (t,))
        assert until is None or until <= truth, f"{t}: verdict {until} leads the truth {truth}"
        if src not in commits:
            commits[src] = [(lsn_text(c["commit_lsn"]), c["inserts"], c["updates"], c["deletes"])
                            for c in sim.call("sim.truth_commits", table=src)[0]]
        facts = env.facts(t)
        events = env.facts(t, kind="event")
        # A data loss restarts the chain at a later LSN; several losses in a
        # row leave a chain of "resumed" events.
        jumps = {e["start_lsn"]: e["end_lsn"] for e in events
                 if e["event"] == "resumed" and e["detail"].get("after") == "data_loss"}
        ranges = [f for f in facts if f["start_lsn"] is not None]
        ends = [f["end_lsn"] for f in facts]
        assert len(ends) == len(set(ends)), f"{t}: a range recorded twice"
        for prev, cur in zip(facts, facts[1:]):
            at = prev["end_lsn"]
            while at != cur["start_lsn"] and at in jumps:
                at = jumps[at]
            assert at == cur["start_lsn"], \
                f"{t}: gap or overlap between {prev['end_lsn']} and {cur['start_lsn']} without a recorded loss"
        for f in ranges:
            got = [0, 0, 0]
            for lsn, i, u, d in commits[src]:
                if f["start_lsn"] < lsn <= f["end_lsn"]:
                    got[0] += i
                    got[1] += u
                    got[2] += d
            assert got == [f["inserts"], f["updates"], f["deletes"]], f"{t}: range {f} vs truth {got}"
        counters["events:" + t] = len(events)


def memory_after_chaos(env, sim, pg):
    """Every table active again and no fault armed; then, polling every 100 ms with traffic,
    the growth of the worker's memory per cycle after a warm-up (memory_per_cycle)."""
    sim.call("sim.fault_clear")
    deadline = time.monotonic() + 60
    while True:
        stopped = [t for t in TABLES if env.status(t)["state"] in ("data_lost", "schema_blocked")]
        for t in stopped:              # a table blocked by several DDL statements needs several
            env.one("SELECT finalize.resume_table(%s)", (t,))
        if not stopped and settled(env, sim) and all(env.status(t)["state"] == "active" for t in TABLES):
            break
        assert time.monotonic() < deadline, f"tables not active again: {[(t, env.status(t)['state']) for t in TABLES]}"
        sim.call("sim.advance", seconds=6)
        time.sleep(0.5)
    reconfigure(pg, "finalize.poll_interval", "100ms")
    per_cycle = memory_per_cycle(env, sim, "erp", warmup=50, measured=300)[0]
    pg.wait_for(lambda: settled(env, sim), timeout=60, what="the tables to catch up after the traffic")
    return per_cycle


def test_chaos():
    steps = int(os.environ.get("FINALIZE_CHAOS_STEPS", "40"))
    seed = int(os.environ.get("FINALIZE_CHAOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    n = collections.Counter()
    pg = new_cluster(**{"finalize.query_timeout": "2s", "finalize.max_retry_interval": "800ms"})
    env = Env(pg)
    sim = sim_clock(start_time="2026-11-02T08:00:00Z", dummy_interval=120, retention=240).start()
    print(f"chaos seed {seed}, {steps} steps")
    try:
        if True:
            sim.call("sim.create_table", name="payments", columns="[id] int NOT NULL, [amount] int")
            sim.call("sim.enable_table", name="payments")
            sim.call("sim.create_table", name="audit", columns="[id] int NOT NULL")     # no CDC
            for table in ("dbo.orders", "dbo.payments", "dbo.audit"):
                sim.call("sim.commit", table=table, inserts=20)     # rows for updates and deletes
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim)
            for t, (src, opts) in TABLES.items():
                env.track(t, "erp", source_table=src, **opts)
            pg.wait_for(lambda: settled(env, sim), timeout=60, what="baselines")
            ddl_no = version = 0
            for step in range(steps):
                if sim.proc.poll() is not None:
                    raise AssertionError("the simulator died:\n" + sim.output()[-3000:])
                action = rng.choices(
                    ["traffic", "idle", "ddl", "switch", "cleanup", "purge", "fault", "kill", "restart",
                     "pause", "resume"],
                    weights=[30, 10, 4, 4, 4, 3, 8, 5, 3, 3, 6])[0]
                n[action] += 1
                if action == "traffic":
                    for _ in range(rng.randint(1, 4)):
                        table = rng.choice(["dbo.orders", "dbo.orders", "dbo.payments", "dbo.audit"])
                        sim.call("sim.commit", table=table, inserts=rng.randint(0, 5),
                                 updates=rng.randint(0, 3), deletes=rng.randint(0, 1))
                        n["commits"] += 1
                elif action == "idle":
                    sim.call("sim.advance", seconds=rng.randint(60, 900))
                elif action == "ddl":
                    ddl_no += 1
                    sim.call("sim.ddl", table="dbo.orders", command=f"ALTER TABLE dbo.orders ADD c{ddl_no} int")
                elif action == "switch":
                    cis = instances(sim, "dbo.orders")
                    if len(cis) == 1:
                        version += 1
                        sim.call("sim.enable_table", name="orders", capture_instance=f"dbo_orders_v{version}")
                        n["instance_created"] += 1
                    else:
                        oldest = min(cis, key=lambda r: r["create_lsn"])
                        sim.call("sim.disable_table", name="orders", capture_instance=oldest["capture_instance"])
                        n["instance_dropped"] += 1
                elif action == "cleanup":
                    sim.call("sim.cleanup", retention_minutes=rng.choice([30, 120, 240]))
                elif action == "purge":
                    ci = rng.choice([r["capture_instance"] for r in instances(sim, "dbo.orders")])
                    sim.call("sim.commit", inserts=2)
                    sim.call("sim.fault_purge", capture_instance=ci)
                elif action == "fault":
                    kind = rng.choice(["drop", "error", "stall", "refuse"])
                    n["fault:" + kind] += 1
                    if kind == "drop":
                        sim.call("sim.fault_drop", pattern=rng.choice(["COUNT_BIG", "sp_cdc", "max_lsn"]), count=1)
                    elif kind == "error":
                        sim.call("sim.fault_error", number=8645, message="A timeout occurred while waiting for memory.",
                                 pattern=rng.choice(["COUNT_BIG", "get_min_lsn", "ddl_history"]), count=1)
                    elif kind == "stall":
                        sim.call("sim.fault_stall", seconds=3, pattern="COUNT_BIG", count=1)
                    else:
                        sim.call("sim.kill_sessions")
                        sim.call("sim.fault_refuse_logins", count=2)
                    sim.call("sim.commit", inserts=1)
                elif action == "kill":
                    pid = worker_pid(pg)
                    if pid:
                        time.sleep(rng.uniform(0, 0.3))
                        kill(pid, signal.SIGKILL)
                        pg.wait_for(lambda: worker_pid(pg) not in (None, pid), timeout=60, what="a new worker")
                elif action == "restart":
                    pg.stop("immediate")
                    pg.start()
                elif action == "pause":
                    pg.sql("ALTER SYSTEM SET finalize.enabled = off")
                    pg.reload()
                    pg.wait_for(lambda: worker_pid(pg) is None, what="the worker to stop")
                    sim.call("sim.commit", inserts=3)
                    sim.call("sim.advance", seconds=rng.randint(600, 7200))
                    if rng.random() < 0.7:
                        sim.call("sim.cleanup", retention_minutes=30)
                    pg.sql("ALTER SYSTEM RESET finalize.enabled")
                    pg.reload()
                elif action == "resume":
                    for t in TABLES:
                        if env.status(t)["state"] in ("data_lost", "schema_blocked"):
                            env.one("SELECT finalize.resume_table(%s)", (t,))
                            n["resumed"] += 1
                sim.call("sim.advance", seconds=rng.randint(6, 120))
                pg.wait_for(lambda: settled(env, sim), timeout=60,
                            what=lambda: f"step {step} ({action}, seed {seed}) to settle: "
                                         f"{[(t, env.status(t)['state'], env.status(t)['condition']) for t in TABLES]}")
                check_invariants(env, sim, n)
            per_cycle = memory_after_chaos(env, sim, pg)
            check_invariants(env, sim, n)
            assert per_cycle < 64, f"the worker's memory grew by {per_cycle:.0f} bytes per cycle after the chaos"
            events = collections.Counter(r[0] for r in pg.sql("SELECT event FROM finalize.fact WHERE event IS NOT NULL"))
            print(f"chaos seed {seed}: {steps} steps; actions {dict(sorted((k, v) for k, v in n.items() if ':' not in k or k.startswith('fault')))}; "
                  f"events recorded {dict(events)}; truth watermark {truth_watermark(sim)}; "
                  f"worker memory {per_cycle:.1f} bytes per cycle")
    except Exception:
        print("--- simulator output ---\n" + sim.output()[-4000:])
        print("--- server log (crashes) ---\n" + "\n".join(
            l for l in pg.log().splitlines() if "signal" in l or "PANIC" in l or "TRAP" in l)[-4000:])
        raise
    finally:
        sim.stop()
        pg.cleanup()
