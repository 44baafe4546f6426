"""Benchmark of Delta Lake consumers (docs/delta.md) on the S3 test server, written by delta-rs through
docs/delta.md's recipe, printed with baselines measured in the same run, and the Iceberg consumers'
figures (lake_bench.py, against Iceberg's real REST catalog) measured in the same run too:

  lag     a delta-rs append carrying finalize.lsn committed -> the NOTIFY on channel "finalize" that
          the table's verdict moved, over --trials trials. Baseline: finalize.poll_interval plus one
          read of the log from Python (a listing of _delta_log/ and a GET of the newest commit)
  scale   --consumers Delta consumers on one store (over --tables Delta tables and 10 tracked
          tables), idle, polled every --poll: the lake worker's CPU per consumer per poll (from /proc),
          the store's requests per poll (its own request log), and the rows of lake_consumer updated
  iceberg the same two figures for Iceberg consumers (lake_bench.py's lag and scale)

Run with the lake virtual environment's interpreter after the extension is installed (test/bench/delta.sh
does both):
    test/bench/delta_bench.py [lag] [scale] [iceberg] [--trials 20] [--consumers 1000] [--poll 10s]
"""
import argparse
import datetime
import os
import select
import statistics
import sys
import time

import pyarrow as pa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
sys.path.insert(0, HERE)

from lake_bench import lake_pid, ms, proc_cpu  # noqa: E402
from peerlib import recipe  # noqa: E402
from s3proc import S3Server  # noqa: E402
from worker_env import Env, lsn_text, new_cluster, sim_clock  # noqa: E402

UTC = datetime.timezone.utc
START = datetime.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
RECIPE = {}
exec(compile(recipe("delta-rs-commit", "python"), "docs/delta.md:delta-rs-commit", "exec"), RECIPE)
commit_batch = RECIPE["commit_batch"]


def batch(row_id, lsn):
    """A one-row batch as a pipeline commits it."""
    return pa.Table.from_pylist([{"id": row_id, "lsn": lsn}],
                                schema=pa.schema([("id", pa.int64()), ("lsn", pa.string())]))


def storage(s3):
    return {"AWS_ENDPOINT_URL": s3.endpoint, "AWS_ACCESS_KEY_ID": s3.access_key,
            "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_REGION": s3.region, "AWS_ALLOW_HTTP": "true",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def setup(env, sim, s3):
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=70)
    env.add_source("erp", sim)
    env.sql("CREATE SERVER lake_s3 FOREIGN DATA WRAPPER finalize_s3 OPTIONS (endpoint %s, region %s, bucket 'lake')",
            (s3.endpoint, s3.region))
    env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER lake_s3 OPTIONS (access_key_id %s, secret_access_key %s)",
            (s3.access_key, s3.secret_key))


def log_read_latency(s3, table, n=40):
    """One read of a log from Python: a listing of _delta_log/ and a GET of its newest commit."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        keys = s3.list_keys("lake", table + "/_delta_log/")
        newest = max(k for k, _, _ in keys if k.endswith(".json"))
        status, _, _ = s3.signed_request("GET", "/lake/" + newest)
        assert status == 200, status
        out.append(time.perf_counter() - t0)
    return out


def wait_notify(conn, table, timeout=30):
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        select.select([conn], [], [], 0.05)
        conn.poll()
        got = any('"%s"' % table in n.payload for n in conn.notifies)
        conn.notifies.clear()
        if got:
            return True
    return False


def bench_lag(args, s3):
    pg = new_cluster(**{"finalize.poll_interval": args.lag_poll})
    sim = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    env = Env(pg)
    uri = "s3://lake/lag"
    try:
        setup(env, sim, s3)
        env.track("bench.orders", "erp", granularity="1 minute")
        env.wait_caught_up("bench.orders", sim)
        env.sql("SELECT finalize.add_consumer('bench.orders', 'lake', delta_table => %s, store => 'lake_s3')",
                (uri,))
        for i in range(30):                      # some history, as a table in use has
            commit_batch(uri, batch(-i, ""), "0x00000000000000000001", storage(s3))
        conn = pg.connect()
        conn.autocommit = True
        conn.cursor().execute("LISTEN finalize")
        lags = []
        for trial in range(args.trials):
            t = START + datetime.timedelta(minutes=trial + 1, seconds=5)
            c = lsn_text(sim.call("sim.commit", at=t.isoformat(), inserts=1)[0][0]["start_lsn"])
            sim.call("sim.advance", to=(t + datetime.timedelta(seconds=60)).isoformat())
            env.wait_caught_up("bench.orders", sim)
            time.sleep(0.3 + (trial % 5) * 0.2)       # commits fall anywhere in the poll interval
            conn.poll()
            conn.notifies.clear()
            commit_batch(uri, batch(trial, c), c, storage(s3))
            t0 = time.perf_counter()
            assert wait_notify(conn, "bench.orders"), "no NOTIFY for trial %d" % trial
            lags.append(time.perf_counter() - t0)
        latency = log_read_latency(s3, "lag")
        poll_s = pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (args.lag_poll,))[0][0]
        base = poll_s + statistics.median(latency)
        print("Delta lag (commit -> NOTIFY), %d trials, finalize.poll_interval %s:" % (args.trials, args.lag_poll))
        print("  finalize                 %s" % ms(lags))
        print("  one log read from Python %s  (listing + newest commit, %d commits)" % (ms(latency), 30 + args.trials))
        print("  baseline poll + log read = %.1f ms; ratio median %.2f, max %.2f"
              % (base * 1000, statistics.median(lags) / base, max(lags) / base))
    finally:
        sim.stop()
        pg.cleanup()


def bench_scale(args, s3):
    pg = new_cluster(**{"finalize.poll_interval": args.poll, "max_worker_processes": "16"})
    sim = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    env = Env(pg)
    try:
        setup(env, sim, s3)
        tables = ["s3://lake/scale_%d" % i for i in range(args.tables)]
        for t in tables:
            for j in range(5):
                commit_batch(t, batch(j, ""), "0x0000000000000000000%d" % (j + 1), storage(s3))
        for k in range(10):
            env.track("bench.t%d" % k, "erp", granularity="1 minute")
        env.sql("SELECT finalize.add_consumer('bench.t' || (i %% 10), 'c' || i, "
                "delta_table => (%s::text[])[1 + i %% %s], store => 'lake_s3') FROM generate_series(0, %s) AS i",
                (tables, len(tables), args.consumers - 1))
        pid = pg.wait_for(lambda: lake_pid(pg), timeout=30, what="the lake worker")
        poll_s = pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (args.poll,))[0][0]
        pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.lake_consumer WHERE seen_lsn IS NOT NULL")[0][0]
                    == args.consumers, timeout=300, what="every consumer read once")
        time.sleep(poll_s)
        writes0 = pg.sql("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'lake_consumer'")[0][0]
        s3.clear("requests")
        cpu0, w0 = proc_cpu(pid), time.perf_counter()
        time.sleep(poll_s * args.polls)
        cpu1, w1 = proc_cpu(pid), time.perf_counter()
        requests = len(s3.requests())
        writes1 = pg.sql("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'lake_consumer'")[0][0]
        npolls = (w1 - w0) / poll_s
        per = (cpu1 - cpu0) / (args.consumers * npolls)
        print("Delta scale: %d idle consumers on %d Delta tables, one store" % (args.consumers, len(tables)))
        print("  over %.1f polls of %s: lake worker CPU %.2f s = %.1f us per consumer per poll (%.1f%% of a core)"
              % (npolls, args.poll, cpu1 - cpu0, per * 1e6, 100 * (cpu1 - cpu0) / (w1 - w0)))
        print("  store requests per poll: %.0f (one listing per consumer)" % (requests / npolls))
        print("  lake_consumer rows updated over those polls: %d" % (writes1 - writes0))
    finally:
        sim.stop()
        pg.cleanup()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", nargs="*", default=["lag", "scale", "iceberg"])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--lag-poll", default="1s")
    p.add_argument("--consumers", type=int, default=1000)
    p.add_argument("--tables", type=int, default=20)
    p.add_argument("--poll", default="10s")
    p.add_argument("--polls", type=int, default=3)
    args = p.parse_args()
    with S3Server() as s3:
        s3.create_bucket("lake")
        if "lag" in args.what:
            bench_lag(args, s3)
        if "scale" in args.what:
            bench_scale(args, s3)
    if "iceberg" in args.what:
        import lake_bench
        sys.argv = [sys.argv[0], "lag", "scale", "--trials", str(args.trials), "--lag-poll", args.lag_poll,
                    "--consumers", str(args.consumers), "--tables", str(args.tables), "--poll", args.poll,
                    "--polls", str(args.polls)]
        print("Iceberg consumers, the same run (lake_bench.py):")
        lake_bench.main()


if __name__ == "__main__":
    main()
