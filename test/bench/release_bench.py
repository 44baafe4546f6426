#!/usr/bin/python3
"""Benchmark of finalize.release_iceberg against Apache Iceberg's real REST catalog (test/peers/iceberg/),
printed with a baseline measured in the same run:

  For partitions of --sizes data files (default 10,000 and 100,000), referenced by an audit branch in
  manifests of 10,000 entries each (pyiceberg fast appends of placeholder files): the time of one
  release_iceberg call (loadTable, manifest list and manifests read with libavro from the file store,
  the listing of the partition's directory compared with them, the CDC facts, the catalog commit:
  a new tag each trial), and the backend's peak memory (VmHWM of a fresh connection). Baseline:
  pyiceberg planning the same snapshot's files for the same partition (table.scan(...).plan_files(),
  which reads the same manifest list and manifests), in its own process on the same machine.

  Printed: per size, the median of --trials trials of each, the ratio pyiceberg / finalize, the
  time per file, and the per-file ratio between the largest and the smallest size (linear: about 1).

Run as root after the extension is installed (test/bench/release.sh does both):
    test/bench/release_bench.py [--sizes 10000,100000] [--trials 3]
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "peers", "iceberg"))

import catalog as catalog_lib  # noqa: E402
import writer_client  # noqa: E402
from worker_env import Env, at, new_cluster, sim_clock  # noqa: E402

UTC = datetime.timezone.utc
HOUR = datetime.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def backend_peak_kb(pg, pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def release_once(pg, request):
    """One release_iceberg call on a fresh connection: (seconds, peak kB of its backend, result row)."""
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
            t0 = time.perf_counter()
            cur.execute("SELECT released, problems FROM finalize.release_iceberg(%s::jsonb)", (json.dumps(request),))
            row = cur.fetchone()
            elapsed = time.perf_counter() - t0
            peak = backend_peak_kb(pg, pid)
        conn.commit()
        return elapsed, peak, row
    finally:
        conn.close()


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    work = tempfile.mkdtemp(prefix="finalize-release-bench-")
    os.chmod(work, 0o755)
    cat = catalog_lib.start_catalog(work)
    writer = writer_client.Writer(writer_client.venv_python(), cat.uri, cat.warehouse)
    pg = new_cluster()
    sim = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    env = Env(pg)
    try:
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=70)
        env.add_source("db", sim)
        env.track("orders", "db", granularity="1 hour")
        env.wait_caught_up("orders", sim)
        sim.call("sim.advance", to=at(10, 5))
        env.wait_caught_up("orders", sim)
        env.sql("CREATE SERVER lake_catalog FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri %s, timeout '60s')",
                (cat.uri,))
        writer.call("create_namespace", ns="bench")
        hour_value = int(HOUR.timestamp()) // 3600
        results = {}
        for n in sizes:
            name = "bench.t%d" % n
            writer.call("create_table", name=name, partition=[["commit_time", "hour", "commit_time_hour"]])
            t0 = time.perf_counter()
            snap = writer.call("bench_files", table=name, count=n, partition=[hour_value], timeout=3600)
            print("# %d files written and committed in %.1f s (snapshot %d)" % (n, time.perf_counter() - t0,
                                                                               snap["snapshot_id"]), flush=True)
            ours, peaks, theirs = [], [], []
            for trial in range(args.trials):
                request = {"table": "orders", "catalog": "lake_catalog", "iceberg_table": name,
                           "store": "file://" + cat.warehouse_path, "partition": {"commit_time_hour": "2026-11-02-09"},
                           "snapshot_id": snap["snapshot_id"], "tag": "bench-%d" % trial, "row_count": "none"}
                elapsed, peak, row = release_once(pg, request)
                if not row[0]:
                    raise SystemExit("release refused: %s" % row[1])
                ours.append(elapsed)
                peaks.append(peak)
                planned = writer.call("plan_files", table=name, snapshot_id=snap["snapshot_id"],
                                      filter="commit_time >= '2026-11-02T09:00:00+00:00' and "
                                             "commit_time < '2026-11-02T10:00:00+00:00'", timeout=3600)
                if planned["files"] != n:
                    raise SystemExit("pyiceberg planned %d files, not %d" % (planned["files"], n))
                theirs.append(planned["seconds"])
            results[n] = (statistics.median(ours), statistics.median(theirs), max(peaks))
            o, t, p = results[n]
            print("%7d files: release_iceberg %7.3f s (%6.2f us/file, backend peak %d MB)   pyiceberg plan_files "
                  "%7.3f s   ratio pyiceberg/finalize %5.1fx" % (n, o, o / n * 1e6, p // 1024, t, t / o), flush=True)
        lo, hi = min(sizes), max(sizes)
        if lo != hi:
            print("per-file time %d -> %d files: ratio %.2f (1.00 is linear)"
                  % (lo, hi, (results[hi][0] / hi) / (results[lo][0] / lo)))
    finally:
        sim.stop()
        pg.cleanup()
        writer.close()
        cat.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
