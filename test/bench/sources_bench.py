#!/usr/bin/python3
"""Many sources on one PostgreSQL, in today's design (one background worker per source): the
baseline that issue 31's pool of source workers is to be measured against, in the same run.

  N foreign servers (--sizes, default 10,50,100) against one SQL Server simulator, one tracked table
  each, finalize.poll_interval --poll (default 5s). For each N, once every source has its worker and
  has caught up: finalize's processes (launcher, scheduler, source workers), their total PSS
  (/proc/<pid>/smaps_rollup) and PSS per source, and the CPU of the source workers per source per
  cycle over --seconds (schedstat). Baseline: the same at N = 1. The largest N is bounded by
  max_worker_processes (set to N + 8 here), by finalize's 128 worker slots (launcher, scheduler and
  alerts worker included: at most 125 sources) and by the machine's memory; the run says where it
  stops.

Run as root after the extension is installed:
    test/bench/sources_bench.py [--sizes 10,50,100] [--poll 5s] [--seconds 30]
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from pgcluster import Cluster  # noqa: E402
from worker_env import Env, sim_clock  # noqa: E402


def cpu_seconds(pid):
    """CPU time of a process so far, in seconds (schedstat: nanoseconds)."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:
        return 0.0


def pss_kb(pid):
    """The proportional set size of a process, in kB (its share of shared pages counted once)."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def finalize_pids(pg):
    rows = pg.sql("SELECT pid, backend_type FROM pg_stat_activity WHERE backend_type LIKE 'finalize%%'")
    return [(pid, kind) for pid, kind in rows]


def measure(n, poll, seconds):
    pg = Cluster(conf={"finalize.poll_interval": poll, "max_worker_processes": str(n + 8)})
    pg.start()
    pg.sql("CREATE EXTENSION finalize")
    sim = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    env = Env(pg)
    try:
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=10)
        for i in range(n):
            env.add_source("src%d" % i, sim)
            env.track("bench.t%d" % i, "src%d" % i)
        pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.status WHERE offset_lsn IS NOT NULL")[0][0] == n,
                    timeout=120 + n, what="every source caught up")
        procs = finalize_pids(pg)
        workers = [pid for pid, kind in procs if kind == "finalize worker"]
        cpu0 = sum(cpu_seconds(p) for p in workers)
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        cpu1 = sum(cpu_seconds(p) for p in workers)
        poll_s = pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (poll,))[0][0]
        # Each worker runs one cycle per poll interval.
        cycles = (elapsed / poll_s) * len(workers)
        pss = sum(pss_kb(p) for p, _ in finalize_pids(pg))
        return {"n": n, "processes": len(procs), "workers": len(workers), "pss_kb": pss,
                "cpu_per_source_cycle_ms": 1000 * (cpu1 - cpu0) / max(cycles or 1, 1),
                "cpu_per_source_s": (cpu1 - cpu0) / elapsed / max(len(workers), 1)}
    finally:
        sim.stop()
        pg.cleanup()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="10,50,100")
    p.add_argument("--poll", default="5s")
    p.add_argument("--seconds", type=float, default=30)
    args = p.parse_args()
    sizes = [1] + [int(x) for x in args.sizes.split(",") if int(x) != 1]
    base = None
    for n in sizes:
        try:
            r = measure(n, args.poll, args.seconds)
        except Exception as e:          # noqa: BLE001 (where today's design stops is a result)
            print("N=%d: stopped: %s: %s" % (n, type(e).__name__, str(e).splitlines()[0][:300]))
            break
        base = base or r
        print("N=%4d: %4d finalize processes (%d source workers), PSS %7.1f MiB in all, %5.2f MiB per source "
              "(x%.2f of N=1); source workers' CPU %.3f ms per source per cycle, %.2f ms/s per source"
              % (n, r["processes"], r["workers"], r["pss_kb"] / 1024, r["pss_kb"] / 1024 / n,
                 (r["pss_kb"] / n) / max(base["pss_kb"], 1), r["cpu_per_source_cycle_ms"],
                 1000 * r["cpu_per_source_s"]), flush=True)


if __name__ == "__main__":
    main()
