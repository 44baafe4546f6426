#!/usr/bin/python3
"""Benchmark of Iceberg consumers against Apache Iceberg's real REST catalog (test/peers/iceberg/),
printed with baselines measured in the same run:

  lag     a pyiceberg append carrying finalize.lsn committed -> the NOTIFY on channel "finalize"
          that the table's verdict moved, over --trials trials. Baseline: the lake worker's poll
          interval plus the catalog's own loadTable latency (measured here from Python, same table)
  scale   --consumers Iceberg consumers on one catalog (spread over --tables Iceberg tables and 10
          tracked tables), polled every --poll: the lake worker's CPU per consumer per poll (from
          /proc), the catalog's loadTable requests per poll (its own log lines), the time a poll
          takes against its interval, and the verdict's CPU share of one core. Baseline: the CPU of
          the catalog's loadTable answered to this process (Python's urllib), per request

Run as root after the extension is installed (test/bench/lake.sh does both):
    test/bench/lake_bench.py [lag] [scale] [--trials 20] [--consumers 1000] [--tables 20] [--poll 10s]
"""
import argparse
import datetime
import os
import select
import statistics
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "peers", "iceberg"))

import catalog as catalog_lib  # noqa: E402
import writer_client  # noqa: E402
from worker_env import Env, lsn_text, new_cluster, sim_clock  # noqa: E402

UTC = datetime.timezone.utc
START = datetime.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def ms(values):
    return "median %7.1f ms  max %7.1f ms" % (statistics.median(values) * 1000, max(values) * 1000)


def proc_cpu(pid):
    """User + system CPU seconds of a process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid):
    """The resident set of a process, in kB."""
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def lake_pid(pg):
    rows = pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize lake worker'")
    return rows[0][0] if rows else None


def load_latency(cat, table, n=40):
    url = cat.uri + "/v1/namespaces/%s/tables/%s" % tuple(table.split("."))
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
        out.append(time.perf_counter() - t0)
    return out


def setup(env, sim, cat_uri, poll):
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=70)
    env.add_source("erp", sim)
    env.sql("CREATE SERVER lake FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri '%s', poll_interval '%s')"
            % (cat_uri, poll))


def bench_lag(args, cat, writer):
    pg = new_cluster(**{"finalize.poll_interval": "200ms"})
    sim = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    env = Env(pg)
    try:
        setup(env, sim, cat.uri, args.lag_poll)
        env.track("bench.orders", "erp", granularity="1 minute")
        env.wait_caught_up("bench.orders", sim)
        writer.call("create_table", name="ns.lag")
        env.sql("SELECT finalize.add_consumer('bench.orders', 'lake', iceberg_server => 'lake', "
                "iceberg_table => 'ns.lag')")
        # Some history, as a table in use has.
        for i in range(30):
            writer.call("append", table="ns.lag", rows=[{"id": -i}], properties={})
        conn = pg.connect()
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("LISTEN finalize")
        lags = []
        for trial in range(args.trials):
            t = START + datetime.timedelta(minutes=trial + 1, seconds=5)
            c = lsn_text(sim.call("sim.commit", at=t.isoformat(), inserts=1)[0][0]["start_lsn"])
            sim.call("sim.advance", to=(t + datetime.timedelta(seconds=60)).isoformat())
            env.wait_caught_up("bench.orders", sim)
            time.sleep(0.3 + (trial % 5) * 0.2)       # commits fall anywhere in the poll interval
            while conn.notifies:
                conn.notifies.pop()
            conn.poll()
            conn.notifies.clear()
            writer.call("append", table="ns.lag", rows=[{"id": trial, "lsn": c}], properties={"finalize.lsn": c})
            t0 = time.perf_counter()
            deadline = t0 + 30
            got = False
            while not got and time.perf_counter() < deadline:
                select.select([conn], [], [], 0.05)
                conn.poll()
                for n in conn.notifies:
                    if '"bench.orders"' in n.payload:
                        got = True
                conn.notifies.clear()
            assert got, "no NOTIFY for trial %d" % trial
            lags.append(time.perf_counter() - t0)
        latency = load_latency(cat, "ns.lag")
        poll_s = pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (args.lag_poll,))[0][0]
        base = poll_s + statistics.median(latency)
        print("lag (commit -> NOTIFY), %d trials, poll_interval %s:" % (args.trials, args.lag_poll))
        print("  finalize                 %s" % ms(lags))
        print("  catalog loadTable        %s  (from Python, the same table, %d snapshots)"
              % (ms(latency), len(writer.call("snapshots", table="ns.lag"))))
        print("  baseline poll + loadTable = %.1f ms; ratio median %.2f, max %.2f"
              % (base * 1000, statistics.median(lags) / base, max(lags) / base))
    finally:
        sim.stop()
        pg.cleanup()


def bench_scale(args, cat, writer):
    pg = new_cluster(**{"finalize.poll_interval": "1s", "max_worker_processes": "16"})
    sim = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    env = Env(pg)
    try:
        setup(env, sim, cat.uri, args.poll)
        tables = ["ns.scale_%d" % i for i in range(args.tables)]
        for t in tables:
            writer.call("create_table", name=t)
            for j in range(5):
                writer.call("append", table=t, rows=[{"id": j}], properties={})
        for k in range(10):
            env.track("bench.t%d" % k, "erp", granularity="1 minute")
        t0 = time.perf_counter()
        env.sql("SELECT finalize.add_consumer('bench.t' || (i %% 10), 'c' || i, iceberg_server => 'lake', "
                "iceberg_table => (%s::text[])[1 + i %% %s]) FROM generate_series(0, %s) AS i",
                (tables, len(tables), args.consumers - 1))
        print("scale: %d consumers on %d Iceberg tables added in %.1f s" % (args.consumers, len(tables),
                                                                          time.perf_counter() - t0))
        pid = pg.wait_for(lambda: lake_pid(pg), timeout=30, what="the lake worker")
        poll_s = pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (args.poll,))[0][0]
        # The first poll writes every consumer's row; measure the steady polls after it.
        pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.lake_consumer WHERE polled_at IS NOT NULL")[0][0]
                    == args.consumers, timeout=120, what="every consumer polled once")
        time.sleep(1)
        log_lines = lambda: sum(1 for line in open(cat.log_path) if "Table loaded by catalog" in line)  # noqa: E731
        from worker_env import memory_total
        mem0, rss0 = memory_total(pg, pid), rss_kb(pid)
        cpu0, loads0, w0 = proc_cpu(pid), log_lines(), time.perf_counter()
        polls = args.polls
        time.sleep(poll_s * polls)
        cpu1, loads1, w1 = proc_cpu(pid), log_lines(), time.perf_counter()
        mem1, rss1 = memory_total(pg, pid), rss_kb(pid)
        npolls = (w1 - w0) / poll_s
        per = (cpu1 - cpu0) / (args.consumers * npolls)
        latency = load_latency(cat, tables[0], n=200)
        py_cpu0 = time.process_time()
        load_latency(cat, tables[0], n=200)
        py_per = (time.process_time() - py_cpu0) / 200
        print("  over %.1f polls of %s: lake worker CPU %.2f s = %.1f us per consumer per poll (%.1f%% of a core)"
              % (npolls, args.poll, cpu1 - cpu0, per * 1e6, 100 * (cpu1 - cpu0) / (w1 - w0)))
        print("  catalog loadTable requests per poll: %.0f (%d consumers; no ETag from this catalog, so every"
              " poll loads every table)" % ((loads1 - loads0) / npolls, args.consumers))
        print("  a poll takes about %.1f s of its %s (catalog loadTable %s)" % (
            args.consumers * statistics.median(latency), args.poll, ms(latency)))
        print("  baseline: Python's own CPU per loadTable %.1f us; ratio finalize/baseline %.2f"
              % (py_per * 1e6, per / py_per))
        print("  lake worker memory: contexts %d -> %d bytes, RSS %d -> %d kB over those polls"
              % (mem0, mem1, rss0, rss1))
        writes = pg.sql("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'lake_consumer'")[0][0]
        print("  lake_consumer rows updated so far: %d (first poll: %d; then at most once a minute each)"
              % (writes, args.consumers))
    finally:
        sim.stop()
        pg.cleanup()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", nargs="*", default=["lag", "scale"])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--lag-poll", default="1s")
    p.add_argument("--consumers", type=int, default=1000)
    p.add_argument("--tables", type=int, default=20)
    p.add_argument("--poll", default="10s")
    p.add_argument("--polls", type=int, default=3)
    args = p.parse_args()
    cat = catalog_lib.start_catalog(tempfile.mkdtemp(prefix="finalize-lake-bench."))
    writer = writer_client.Writer(writer_client.venv_python(), cat.uri, cat.warehouse)
    try:
        writer.call("create_namespace", ns="ns")
        if "lag" in args.what:
            bench_lag(args, cat, writer)
        if "scale" in args.what:
            bench_scale(args, cat, writer)
    finally:
        writer.close()
        cat.stop()


if __name__ == "__main__":
    main()
