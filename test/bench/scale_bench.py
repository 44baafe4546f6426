#!/usr/bin/python3
"""Scale of one source: a worker cycle over many tracked tables (real
PostgreSQL, real FreeTDS, the SQL Server simulator), each figure printed with
a baseline measured in the same run:

  cycle    one cycle in which every table has new rows, at 1, 1,000 and
           10,000 tables (--sizes), each its own source table with its own
           capture instance: the cycle's time (source_status.cycle_time, from
           reading the tracked tables to the commit), CPU of the worker process
           (finalize's own work: planning, the TDS client, recording in
           PostgreSQL) and CPU of the simulator (SQL Server's share, measured
           apart because the simulator is Python and not what is measured);
           baseline: the 1-table cycle. Targets: finalize's CPU per table
           <= 0.1 ms at 10,000 tables, and the cycle minus the simulator's
           time <= 5x the 1-table cycle.
  idle     CPU of the worker per second at the largest size with a 1 s poll
           and no changes on SQL Server (most cycles of a real source);
           baseline: the same at 1 table
  status   SELECT * FROM finalize.status at the largest size (median of 20,
           psql with its output discarded, the worker polling); baseline:
           SELECT * FROM finalize.watermark (the same rows, no view).
           Target: < 50 ms. The plan's cost is printed against
           jit_above_cost: a plan costed past it spends most of a second
           compiling (what made status take 1.1 s before issue 16's fix).

Run as root after the extension is installed (test/bench/scale.sh does both):
    test/bench/scale_bench.py [--sizes 1,1000,10000] [--trials 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from pgcluster import PG_BIN, Cluster  # noqa: E402
from simproc import Simulator  # noqa: E402
from worker_env import Env, lsn_text  # noqa: E402


def cpu_seconds(pid):
    """CPU time of a process so far, all its threads (schedstat: nanoseconds,
    where /proc/<pid>/stat counts 10 ms ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def cpu_between(samples, k, start, end):
    """CPU (column k of (time, sim CPU, worker CPU) samples) spent between
    two instants, interpolating between the samples around them."""
    def at(t):
        before = [x for x in samples if x[0] <= t]
        after = [x for x in samples if x[0] >= t]
        if not before:
            return samples[0][k]
        if not after:
            return samples[-1][k]
        a, b = before[-1], after[0]
        if b[0] == a[0]:
            return a[k]
        return a[k] + (b[k] - a[k]) * (t - a[0]) / (b[0] - a[0])
    return max(at(end) - at(start), 0.0)


def sim_max(sim):
    return lsn_text(sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])


def caught_up(pg, n, target):
    return pg.sql("SELECT count(*) FROM finalize.watermark WHERE offset_lsn = %s", (target,))[0][0] == n


def commit_all(sim, n, **counts):
    """One transaction in each of the n tables."""
    for i in range(n):
        sim.call("sim.commit", table=f"dbo.t{i}", **(counts or {"inserts": 1}))


def worker_pid(pg):
    return pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize worker'")[0][0]


def timed(pg, query, runs):
    """Median and max milliseconds of a query, over one psql session (a C
    client, output formatted and discarded: Python's conversion of 10,000
    rows of timestamps would be most of what a psycopg2 client measures)."""
    args = ["-c", "\\timing on", "-c", "\\o /dev/null"]
    for _ in range(runs):
        args += ["-c", query]
    out = subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "psql"), "-X", "-q",
                          "-h", pg.dir, "-p", str(pg.port), "-U", "postgres"] + args,
                         capture_output=True, text=True, check=True).stdout
    ms = [float(line.split()[1]) for line in out.splitlines() if line.startswith("Time:")]
    assert len(ms) == runs, out
    return statistics.median(ms), max(ms)


def measure(n, trials, want_idle, want_status):
    """One size: cycles with changes, then idle CPU and status timings."""
    pg = Cluster(conf={"finalize.poll_interval": "100ms", "max_connections": "50"})
    pg.start()
    pg.sql("CREATE EXTENSION finalize")
    res = {}
    try:
        with Simulator(clock="sim", start_time="2026-11-02T08:59:00Z", dummy_interval=0, cleanup_time="",
                       maxtrans=10 * n + 1000) as sim:
            env = Env(pg)
            # n source tables, each with its own capture instance
            for i in range(n):
                sim.call("sim.create_table", name=f"t{i}", columns="[id] int NOT NULL, [v] nvarchar(20)")
                sim.call("sim.enable_table", name=f"t{i}")
            commit_all(sim, n)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim)
            pg.sql("SELECT finalize.track_table('t' || i, 'erp', 'dbo.t' || i) FROM generate_series(0, %s - 1) i",
                   (n,))
            target = sim_max(sim)
            pg.wait_for(lambda: caught_up(pg, n, target), timeout=1800, what="baselines")
            wpid, spid = worker_pid(pg), sim.proc.pid
            walls, cycles, wcpu, scpu = [], [], [], []
            for _ in range(trials):
                commit_all(sim, n, inserts=3, updates=1)
                samples = [(time.time(), cpu_seconds(spid), cpu_seconds(wpid))]
                sim.call("sim.advance", seconds=6)
                target = sim_max(sim)
                t0 = time.monotonic()

                def recorded():
                    samples.append((time.time(), cpu_seconds(spid), cpu_seconds(wpid)))
                    return caught_up(pg, n, target)
                pg.wait_for(recorded, timeout=1800, interval=0.01, what="a cycle")
                walls.append(time.monotonic() - t0)
                # the cycle that recorded the range: its start and commit
                end, took = pg.sql("SELECT extract(epoch FROM s.last_success), extract(epoch FROM s.cycle_time) "
                                   "FROM finalize.source_status s "
                                   "WHERE s.last_success = (SELECT max(w.recorded_at) FROM finalize.watermark w)")[0]
                end, took = float(end), float(took)
                samples.append((time.time(), cpu_seconds(spid), cpu_seconds(wpid)))
                cycles.append(took)
                scpu.append(cpu_between(samples, 1, end - took, end))
                wcpu.append(cpu_between(samples, 2, end - took, end + 0.05))
                rows = pg.sql("SELECT count(*) FROM finalize.facts WHERE inserts = 3 AND end_lsn = %s", (target,))
                assert rows[0][0] == n, f"{rows[0][0]} of {n} tables recorded the range"
            res["wall"], res["cycle"], res["worker"], res["sim"] = map(statistics.median, (walls, cycles, wcpu, scpu))
            if want_idle:
                pg.sql("ALTER SYSTEM SET finalize.poll_interval = '1s'")
                pg.sql("SELECT pg_reload_conf()")
                time.sleep(3)
                w0, t0 = cpu_seconds(wpid), time.monotonic()
                time.sleep(10)
                res["idle"] = (cpu_seconds(wpid) - w0) / (time.monotonic() - t0)
            if want_status:
                res["status"] = timed(pg, "SELECT * FROM finalize.status", 20)
                res["watermark"] = timed(pg, "SELECT * FROM finalize.watermark", 20)
                plan = pg.sql("EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM finalize.status")[0][0][0]
                res["plan"] = (plan["Plan"]["Total Cost"], plan["Execution Time"],
                               plan.get("JIT", {}).get("Functions", 0),
                               float(pg.sql("SELECT setting FROM pg_settings WHERE name = 'jit_above_cost'")[0][0]))
    finally:
        pg.cleanup()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,1000,10000")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    big = max(sizes)
    print(f"== cycle: every table has new rows; sizes {sizes}, median of {args.trials} cycles each")
    results = {}
    for n in sizes:
        results[n] = r = measure(n, args.trials, n in (1, big), n == big)
        print(f"  {n:6} tables: cycle {r['cycle']:7.3f} s (source_status.cycle_time; {r['wall']:.3f} s from the "
              f"change to the verdict)   worker CPU {r['worker']:7.3f} s ({1000 * r['worker'] / n:6.3f} ms per table)   "
              f"simulator CPU in the cycle {r['sim']:7.3f} s", flush=True)
    one = results[min(sizes)]
    for n in sizes:
        if n == min(sizes):
            continue
        r = results[n]
        own = max(r["cycle"] - r["sim"], 0)
        print(f"  {n:6} tables: cycle minus the simulator's time {own:6.3f} s = {own / one['cycle']:5.2f}x the 1-table "
              f"cycle ({one['cycle']:.3f} s; target <= 5x)   worker CPU per table {1000 * r['worker'] / n:.3f} ms "
              f"(target <= 0.1 ms)")
    print("== idle: no changes on SQL Server, poll 1 s")
    print(f"  1 table: worker CPU {1000 * one['idle']:6.1f} ms per second   {big} tables: "
          f"{1000 * results[big]['idle']:6.1f} ms per second ({1000 * results[big]['idle'] / big:.4f} ms per table "
          f"per cycle; ratio to 1 table {results[big]['idle'] / max(one['idle'], 1e-6):.1f})")
    st, wm = results[big]["status"], results[big]["watermark"]
    print(f"== status at {big} tables (median / max of 20)")
    print(f"  SELECT * FROM finalize.status     {st[0]:7.1f} ms / {st[1]:7.1f} ms   (target < 50 ms)")
    print(f"  SELECT * FROM finalize.watermark  {wm[0]:7.1f} ms / {wm[1]:7.1f} ms   ratio status/watermark "
          f"{st[0] / wm[0]:.1f}")
    cost, ms, jitted, jit_above = results[big]["plan"]
    print(f"  status plan: cost {cost:.0f} (jit_above_cost {jit_above:.0f}), {jitted} functions JIT-compiled, "
          f"executor {ms:.1f} ms")


if __name__ == "__main__":
    main()
