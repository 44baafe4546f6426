#!/usr/bin/python3
"""Many sources on one PostgreSQL: the pool of source workers (finalize.max_source_workers = 4)
against one process per source (finalize.max_source_workers = 0, the design before the pool), in
the same run, against one SQL Server simulator.

  memory   N foreign servers (one tracked table each, finalize.poll_interval --poll, spread over
           --databases databases of one simulator instance) in each design:
           once every source caught up, finalize's processes, their total PSS
           (/proc/<pid>/smaps_rollup), PSS per source, and the source workers' CPU per source per
           cycle (schedstat over --seconds, cycles counted in finalize.source_status). One process
           per source runs at --dedicated sizes until it stops (max_worker_processes, finalize's
           128 process slots); the pool at --pool sizes.
  lag      --lag-sources sources through the pool (poll --lag-poll), --hung percent of them against
           a TCP listener that never answers a login, the healthy ones spread over --databases
           databases of one simulator instance (one clock, an LSN space each, as SQL Server): a
           commit captured in every database, then the wall time until each healthy source's
           table shows it (its offset reaches its database's new max LSN); median, p99 and max
           against the poll interval, over --trials boundaries.
  sensor   with those sources present: pgbench is_final() against SELECT 1 (ratio).

Ratios are printed, not asserted. Run as root after the extension is installed:
    test/bench/sources_bench.py [--dedicated 1,50,100,125] [--pool 100,500,1000] [--poll 5s]
                                [--lag-sources 1000] [--lag-poll 30s] [--databases 100] [--hung 5]
                                [--trials 5] [--seconds 30] [--traffic]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from pgcluster import Cluster  # noqa: E402
from worker_env import Env, SilentServer, lsn_text, sim_clock  # noqa: E402


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
    return pg.sql("SELECT pid, backend_type FROM pg_stat_activity WHERE backend_type LIKE 'finalize%%'")


def cluster(workers, n, poll):
    # max_files_per_process 2000: each kept connection holds two descriptors (a socket, FreeTDS's
    # eventfd), and a third of a process's descriptors may be external: about 330 connections per
    # worker, so that four workers keep 1,000 sources' connections (docs/worker.md: the budget).
    pg = Cluster(conf={"finalize.poll_interval": poll, "finalize.max_source_workers": str(workers),
                       "max_worker_processes": str(n + 8 if workers == 0 else 16),
                       "max_connections": "50", "max_files_per_process": "2000"})
    pg.start()
    pg.sql("CREATE EXTENSION finalize")
    return pg


def database_of(i, hung, databases):
    """The simulator database of healthy source i (round robin over `databases`; 0: demo)."""
    return "demo" if databases == 0 else "shard_%03d" % ((i - hung) % databases)


def add_sources(pg, env, sim, n, silent=None, hung=0, databases=0):
    """n sources (the first `hung` against the silent listener), one table each, in one transaction;
    the healthy ones spread over `databases` databases of the simulator (0: all on demo)."""
    stmts = []
    for i in range(n):
        port = silent.port if i < hung else sim.port
        stmts.append("CREATE SERVER src%d FOREIGN DATA WRAPPER finalize_mssql OPTIONS "
                     "(host '127.0.0.1', port '%d', database '%s', encrypt 'off');"
                     % (i, port, database_of(i, hung, databases)))
        stmts.append("CREATE USER MAPPING FOR CURRENT_USER SERVER src%d OPTIONS (username 'sa', password "
                     "'Passw0rd!');" % i)
        stmts.append("SELECT finalize.track_table('bench.t%d', 'src%d', 'dbo.orders');" % (i, i))
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write("BEGIN;\n" + "\n".join(stmts) + "\nCOMMIT;\n")
    os.chmod(f.name, 0o644)
    subprocess.run(["/usr/lib/postgresql/15/bin/psql", "-X", "-q", "-h", pg.dir, "-p", str(pg.port),
                    "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-f", f.name], check=True,
                   stdout=subprocess.DEVNULL)
    os.unlink(f.name)


def sim_of(databases):
    """A simulator instance with `databases` databases shard_000... besides demo (0: demo alone)."""
    extra = {"extra_databases": "shard_%%03d:0-%d" % (databases - 1)} if databases else {}
    return sim_clock(start_time="2026-11-02T08:59:00Z", **extra).start()


def measure(workers, n, poll, seconds, databases, traffic=False):
    """Memory and CPU of n sources in one design; with traffic, a commit captured in every database
    once per poll interval while the CPU is measured (most cycles then record a range of changes),
    else none (every cycle finds max LSN where it was: idle)."""
    pg = cluster(workers, n, poll)
    sim = sim_of(databases)
    env = Env(pg)
    try:
        commit_everywhere(sim, databases)
        add_sources(pg, env, sim, n, databases=databases)
        pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.status WHERE offset_lsn IS NOT NULL")[0][0] == n,
                    timeout=300 + n, interval=1, what="every source caught up")
        time.sleep(2)
        procs = finalize_pids(pg)
        wpids = [pid for pid, kind in procs if kind == "finalize worker"]
        cpu0 = sum(cpu_seconds(p) for p in wpids)
        cycles0 = int(pg.sql("SELECT sum(cycles) FROM finalize.source_status")[0][0])
        facts0 = int(pg.sql("SELECT count(*) FROM finalize.fact")[0][0])
        t0 = time.monotonic()
        if traffic:
            poll_s = pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (poll,))[0][0]
            while time.monotonic() - t0 < seconds:
                commit_everywhere(sim, databases)
                time.sleep(max(0.0, poll_s - (time.monotonic() - t0) % poll_s))
        else:
            time.sleep(seconds)
        elapsed = time.monotonic() - t0
        cpu1 = sum(cpu_seconds(p) for p in wpids)
        cycles1 = int(pg.sql("SELECT sum(cycles) FROM finalize.source_status")[0][0])
        pss = sum(pss_kb(p) for p, _ in finalize_pids(pg))
        facts1 = int(pg.sql("SELECT count(*) FROM finalize.fact")[0][0])
        return {"n": n, "processes": len(procs), "workers": len(wpids), "pss_kb": pss, "facts": facts1 - facts0,
                "cycles": cycles1 - cycles0, "cycles_per_s": (cycles1 - cycles0) / elapsed,
                "cpu_per_cycle_ms": 1000 * (cpu1 - cpu0) / max(cycles1 - cycles0, 1)}
    finally:
        sim.stop()
        pg.cleanup()


def report(design, r, base):
    print("%-9s N=%4d: %4d finalize processes (%3d source workers), PSS %7.1f MiB in all, %5.2f MiB per "
          "source; %6.1f cycles/s (%d facts), source workers' CPU %.3f ms per source per cycle (x%.2f of %s)"
          % (design, r["n"], r["processes"], r["workers"], r["pss_kb"] / 1024, r["pss_kb"] / 1024 / r["n"],
             r["cycles_per_s"], r["facts"], r["cpu_per_cycle_ms"], r["cpu_per_cycle_ms"] / max(base["cpu_per_cycle_ms"], 1e-9),
             "one process per source at N=%d" % base["n"]), flush=True)


def pgbench_tps(pg, script, seconds):
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script + "\n")
    os.chmod(f.name, 0o644)
    out = subprocess.run(["/usr/lib/postgresql/15/bin/pgbench", "-n", "-M", "prepared", "-c", "4", "-j", "4",
                          "-T", str(int(seconds)), "-h", pg.dir, "-p", str(pg.port), "-U", "postgres", "-f", f.name,
                          "postgres"], check=True, capture_output=True, text=True).stdout
    os.unlink(f.name)
    return float(next(line.split("=")[1].split()[0] for line in out.splitlines() if line.startswith("tps")))


def commit_everywhere(sim, databases):
    """One captured commit in every database the sources read; -> {database: its new max LSN}."""
    names = ["demo"] if databases == 0 else ["shard_%03d" % d for d in range(databases)]
    for name in names:
        sim.call("sim.commit", database=name, inserts=1)
    sim.call("sim.advance", seconds=10)     # one instance, one clock: every database captures
    return {name: lsn_text(sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m", database=name)[0]["m"])
            for name in names}


def lag(n, hung_pct, poll, trials, seconds, databases):
    """Lag of the healthy sources from a capture boundary to their verdict, with hung_pct % hanging;
    then the sensor against SELECT 1 with those sources present."""
    hung = n * hung_pct // 100
    pg = cluster(4, n, poll)
    sim = sim_of(databases)
    silent = SilentServer()
    env = Env(pg)
    poll_s = pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (poll,))[0][0]
    try:
        commit_everywhere(sim, databases)
        add_sources(pg, env, sim, n, silent=silent, hung=hung, databases=databases)
        healthy = n - hung
        pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.status WHERE offset_lsn IS NOT NULL")[0][0]
                    == healthy, timeout=300 + n, interval=1, what="every healthy source caught up")
        pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.source_status WHERE condition = 'timeout'")[0][0]
                    == hung, timeout=300, interval=1, what="every hung source to have timed out once")
        lags = []
        for _ in range(trials):
            time.sleep(poll_s * 0.37)       # a boundary anywhere in the poll cycle
            targets = commit_everywhere(sim, databases)
            t0 = time.monotonic()
            want = {"bench.t%d" % i: targets[database_of(i, hung, databases)]
                    for i in range(hung, n)}
            seen = {}
            while len(seen) < healthy and time.monotonic() - t0 < 10 * poll_s:
                for name, offset in pg.sql("SELECT table_name, offset_lsn::text FROM finalize.status"):
                    if name in want and name not in seen and offset is not None and offset >= want[name]:
                        seen[name] = time.monotonic() - t0
                time.sleep(0.2)
            assert len(seen) == healthy, "%d of %d healthy sources saw the boundary" % (len(seen), healthy)
            lags.extend(seen.values())
        lags.sort()
        p99 = lags[int(0.99 * (len(lags) - 1))]
        print("lag      N=%4d over %d databases, %d hung (%d%%), %d trials: healthy sources' lag from a capture boundary to the "
              "verdict: median %.2f s, p99 %.2f s, max %.2f s = x%.2f / x%.2f / x%.2f of the poll interval (%.1f s)"
              % (n, max(databases, 1), hung, hung_pct, trials, statistics.median(lags), p99, lags[-1], statistics.median(lags) / poll_s,
                 p99 / poll_s, lags[-1] / poll_s, poll_s), flush=True)
        print("workers  " + "; ".join("worker %s: %d cycles, %d connections kept" % (w, c, k) for w, c, k in
                                     pg.sql("SELECT worker, cycles, connections FROM finalize.source_workers ORDER BY worker")))
        # Alternating rounds, each ratio against its own round's SELECT 1 (the machine is busy
        # with the sources' cycles and the simulator all along): the median of the rounds.
        ratios, finals, ones = [], [], []
        for _ in range(5):
            one = pgbench_tps(pg, "SELECT 1;", seconds)
            final = pgbench_tps(pg, "SELECT finalize.is_final('bench.t%d', '2026-11-02 06:00+00');" % (n - 1),
                                seconds)
            ones.append(one)
            finals.append(final)
            ratios.append(final / one)
        print("sensor   with %d sources: is_final %.0f tps, SELECT 1 %.0f tps (means of 5 rounds, pgbench -c 4): "
              "ratio %.2f (median of rounds: %s)" % (n, statistics.mean(finals), statistics.mean(ones),
                                                     statistics.median(ratios), " ".join("%.2f" % r for r in ratios)),
              flush=True)
    finally:
        silent.close()
        sim.stop()
        pg.cleanup()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dedicated", default="1,50,100,125")
    p.add_argument("--pool", default="100,500,1000")
    p.add_argument("--poll", default="5s")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--traffic", action="store_true",
                   help="a commit in every database each poll interval while CPU is measured (else idle cycles)")
    p.add_argument("--lag-sources", type=int, default=1000)
    p.add_argument("--hung", type=int, default=5)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--lag-poll", default="30s", help="poll interval of the lag phase")
    p.add_argument("--databases", type=int, default=100,
                   help="databases of the simulator instance the sources spread over (0: all on demo)")
    args = p.parse_args()
    base = None
    dedicated = {}
    for n in [int(x) for x in args.dedicated.split(",") if x]:
        try:
            r = measure(0, n, args.poll, args.seconds, args.databases, args.traffic)
        except Exception as e:          # noqa: BLE001 (where one process per source stops is a result)
            print("dedicated N=%4d: stopped: %s: %s" % (n, type(e).__name__, str(e).splitlines()[0][:300]))
            break
        base = base or r
        dedicated[n] = r
        report("dedicated", r, base)
    for n in [int(x) for x in args.pool.split(",") if x]:
        r = measure(4, n, args.poll, args.seconds, args.databases, args.traffic)
        base = base or r        # without --dedicated, the first pool size is the baseline
        report("pool(4)", r, base)
        if n in dedicated:
            print("pool(4)  N=%4d: PSS x%.3f of one process per source at the same N"
                  % (n, r["pss_kb"] / dedicated[n]["pss_kb"]), flush=True)
    if args.lag_sources:
        lag(args.lag_sources, args.hung, args.lag_poll, args.trials, min(args.seconds, 10), args.databases)


if __name__ == "__main__":
    main()
