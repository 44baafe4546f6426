#!/usr/bin/python3
"""Benchmarks of the worker against the SQL Server simulator (real FreeTDS,
real PostgreSQL), each printed with a baseline measured in the same run:

  lag      time from the simulator's capture crossing a period boundary to
           finalized_until moving and to a LISTENer receiving the NOTIFY, at
           poll intervals 1 s and 5 s; baseline: the poll interval (a worker
           that wakes at random times lags half of it on average)
  tables   one cycle of 1,000 tracked tables on one source, as time per cycle
           and per table; baseline: the same cycle with one table
  tls      one cycle over a kept connection and with a fresh login, with TLS
           (full and login-only) and without; baseline: plaintext
  range    recording the facts of a range of 1,000,000 change rows; baseline:
           a plain FreeTDS (DB-Library) client fetching the same rows

Run as root after the extension is installed (test/bench/worker.sh does both):
    test/bench/worker_bench.py [lag] [tables] [tls] [range] [--rows N] [--tables N] [--trials N]
"""
import argparse
import datetime
import os
import random
import select
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

from pgcluster import Cluster  # noqa: E402
from sim_stream import build_client, run_client  # noqa: E402
from simproc import Simulator  # noqa: E402
from worker_env import Env, lsn_text  # noqa: E402

UTC = datetime.timezone.utc


def cluster(poll):
    pg = Cluster(conf={"finalize.poll_interval": poll, "max_connections": "200"})
    pg.start()
    pg.sql("CREATE EXTENSION finalize")
    return pg


def sim_max(sim):
    return lsn_text(sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])


def bench_lag(trials):
    """Lag from capture crossing a boundary to the verdict and to the NOTIFY."""
    print("== lag: capture crosses a period boundary -> finalized_until moves / NOTIFY arrives")
    for poll_s in (1, 5):
        pg = cluster(f"{poll_s}s")
        try:
            with Simulator(clock="sim", start_time="2026-11-02T08:59:00Z", dummy_interval=0, cleanup_time="") as sim:
                env = Env(pg)
                sim.call("sim.commit", inserts=1)
                sim.call("sim.advance", seconds=10)
                env.add_source("erp", sim)
                env.track("lag.orders", "erp", granularity="1 minute")
                env.wait_caught_up("lag.orders", sim, timeout=60)
                listener = pg.connect()
                listener.cursor().execute("LISTEN finalize")
                watcher = pg.connect()
                verdict_lags, notify_lags = [], []
                for _ in range(trials):
                    # Cross the boundary at a random point of the worker's interval.
                    time.sleep(random.uniform(0, poll_s))
                    before = env.one("SELECT finalize.finalized_until('lag.orders')")
                    clock = sim.call("sim.state")[0][0]["clock_utc"].replace(tzinfo=UTC)
                    boundary = clock.replace(second=0, microsecond=0) + datetime.timedelta(minutes=1)
                    sim.call("sim.commit", inserts=1, at=boundary + datetime.timedelta(seconds=1))
                    sim.call("sim.advance", to=boundary + datetime.timedelta(seconds=5))
                    t0 = time.monotonic()        # capture has crossed the boundary now
                    got_verdict = got_notify = None
                    cur = watcher.cursor()
                    while got_verdict is None or got_notify is None:
                        if got_verdict is None:
                            cur.execute("SELECT finalize.finalized_until('lag.orders')")
                            if cur.fetchone()[0] != before:
                                got_verdict = time.monotonic() - t0
                        if got_notify is None and select.select([listener], [], [], 0.005)[0]:
                            listener.poll()
                            if listener.notifies:
                                got_notify = time.monotonic() - t0
                                listener.notifies.clear()
                        if time.monotonic() - t0 > 4 * poll_s + 10:
                            raise RuntimeError("the verdict did not move")
                    verdict_lags.append(got_verdict)
                    notify_lags.append(got_notify)
                for name, lags in (("finalized_until", verdict_lags), ("NOTIFY", notify_lags)):
                    mean = statistics.mean(lags)
                    print(f"  poll {poll_s} s  {name:16} mean {mean:6.3f} s  median {statistics.median(lags):6.3f} s  "
                          f"max {max(lags):6.3f} s  ({trials} trials)  ratio to poll interval {mean / poll_s:.2f}")
        finally:
            pg.cleanup()


def bench_tables(ntables, trials):
    """One cycle with many tracked tables on one source."""
    print(f"== tables: one cycle with {ntables} tracked tables on one source")
    results = {}
    for n in (1, ntables):
        pg = cluster("100ms")
        try:
            with Simulator(clock="sim", start_time="2026-11-02T08:59:00Z", dummy_interval=0, cleanup_time="") as sim:
                env = Env(pg)
                sim.call("sim.commit", inserts=1)
                sim.call("sim.advance", seconds=10)
                env.add_source("erp", sim)
                pg.sql("SELECT finalize.track_table('t' || i, 'erp', 'dbo.orders') FROM generate_series(1, %s) i", (n,))
                target = sim_max(sim)
                pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.watermark WHERE offset_lsn = %s",
                                           (target,))[0][0] == n, timeout=300, what="baselines")
                times = []
                for _ in range(trials):
                    sim.call("sim.commit", inserts=3, updates=1)
                    sim.call("sim.advance", seconds=6)
                    target = sim_max(sim)
                    t0 = time.monotonic()
                    pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.watermark WHERE offset_lsn = %s",
                                               (target,))[0][0] == n, timeout=300, interval=0.01, what="a cycle")
                    times.append(time.monotonic() - t0)
                    ok = pg.sql("SELECT count(*) FROM finalize.facts WHERE inserts = 3 AND end_lsn = %s", (target,))
                    assert ok[0][0] == n
                results[n] = statistics.median(times)
        finally:
            pg.cleanup()
    one, many = results[1], results[ntables]
    print(f"  1 table:      {one:7.3f} s per cycle")
    print(f"  {ntables} tables: {many:7.3f} s per cycle, {1000 * many / ntables:6.2f} ms per table "
          f"(median of {trials}; includes up to one 100 ms poll interval)")
    print(f"  ratio per table ({ntables} tables / 1 table): {(many / ntables) / one:.3f}")


def bench_tls(trials):
    """One cycle's latency over a kept connection and with a fresh login, without and with TLS."""
    from certs import make_test_pki
    print("== tls: one cycle (1 table, poll 100 ms), plaintext vs TLS 1.2 (full) vs login-only TLS")
    tmp = tempfile.mkdtemp(prefix="worker-bench-tls-")
    os.chmod(tmp, 0o755)
    pki = make_test_pki(tmp)
    results = {}
    modes = [("plaintext", {"encrypt": "off"}), ("TLS (full)", {"encrypt": "require", "ca_file": pki.ca}),
             ("TLS (login only)", {"encrypt": "request", "ca_file": pki.ca})]
    try:
        for name, options in modes:
            pg = cluster("100ms")
            try:
                with Simulator(clock="sim", start_time="2026-11-02T08:59:00Z", dummy_interval=0, cleanup_time="",
                               tls_cert=pki.good.cert, tls_key=pki.good.key) as sim:
                    env = Env(pg)
                    sim.call("sim.commit", inserts=1)
                    sim.call("sim.advance", seconds=10)
                    env.add_source("erp", sim, **options)
                    env.track("t1", "erp")
                    env.wait_caught_up("t1", sim, timeout=60)
                    kept, fresh = [], []
                    for i in range(2 * trials):
                        if i % 2:
                            sim.call("sim.kill_sessions")     # the next cycle logs in again
                        sim.call("sim.commit", inserts=3, updates=1)
                        sim.call("sim.advance", seconds=6)
                        target = sim_max(sim)
                        t0 = time.monotonic()
                        pg.wait_for(lambda: env.status("t1")["offset_lsn"] == target, timeout=60, interval=0.005,
                                    what="a cycle")
                        (fresh if i % 2 else kept).append(time.monotonic() - t0)
                    assert pg.sql("SELECT condition FROM finalize.source_status")[0][0] == "ok"
                    results[name] = (statistics.median(kept), statistics.median(fresh))
            finally:
                pg.cleanup()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base_kept, base_fresh = results["plaintext"]
    for name, (kept, fresh) in results.items():
        print(f"  {name:17s} kept connection {1000 * kept:7.1f} ms (ratio {kept / base_kept:.2f})   "
              f"fresh login {1000 * fresh:7.1f} ms (ratio {fresh / base_fresh:.2f})   median of {trials}")
    print("  (times include up to one 100 ms poll interval; the ratios are against plaintext in this run)")


def bench_range(rows):
    """Recording a range of many change rows vs fetching those rows."""
    print(f"== range: a range of {rows} change rows")
    tmp = tempfile.mkdtemp(prefix="worker-bench-")
    pg = cluster("100ms")
    try:
        exe = build_client(tmp)
        with Simulator(clock="sim", start_time="2026-11-02T08:59:00Z", dummy_interval=0, cleanup_time="",
                       maxtrans=100000) as sim:
            env = Env(pg)
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim)
            env.track("big.orders", "erp")
            env.wait_caught_up("big.orders", sim, timeout=60)
            start = env.status("big.orders")["offset_lsn"]
            pg.sql("ALTER SYSTEM SET finalize.enabled = off")
            pg.reload()
            pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker'"),
                        what="the worker to stop")
            t = time.monotonic()
            left = rows
            while left > 0:
                sim.call("sim.commit", inserts=min(50_000, left))
                left -= 50_000
            sim.call("sim.advance", seconds=10)
            end = sim_max(sim)
            print(f"  loaded in {time.monotonic() - t:.1f} s")
            pg.sql("ALTER SYSTEM RESET finalize.enabled")
            t0 = time.monotonic()
            pg.reload()
            env.wait_caught_up("big.orders", sim, timeout=600)
            record = time.monotonic() - t0
            facts = env.facts("big.orders")
            assert sum(f["inserts"] for f in facts) == rows
            fetched, fetch = run_client(exe, sim, "SELECT * FROM [cdc].[dbo_orders_CT] WHERE [__$start_lsn] > %s "
                                                  "AND [__$start_lsn] <= %s" % (start, end))
            assert fetched == rows, fetched
            print(f"  finalize records the range's facts: {record:7.3f} s (includes starting a worker and one poll)")
            print(f"  a FreeTDS client fetches its rows:  {fetch:7.3f} s ({rows / fetch:.0f} rows/s)")
            print(f"  ratio fetch / record: {fetch / record:.1f}")
    finally:
        pg.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", default=["lag", "tables", "range"])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    if "tls" in args.parts:
        bench_tls(args.trials)
    if "lag" in args.parts:
        bench_lag(args.trials)
    if "tables" in args.parts:
        bench_tables(args.tables, max(3, args.trials // 3))
    if "range" in args.parts:
        bench_range(args.rows)


if __name__ == "__main__":
    main()
