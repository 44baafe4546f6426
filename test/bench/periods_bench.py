#!/usr/bin/python3
"""Benchmark of finalize.changes_by_period over many periods (the release gate asks it for a
partition's periods; a user may ask it for years of hours), printed with a baseline measured in the
same run, on the same cluster and data:

  finalize_internal.final() as shipped (no SET clause: the planner inlines it into the query of
  changes_by_period) against the same function with `SET search_path = pg_catalog, pg_temp` (how
  0.3.0 declared it: each call saves and restores the setting, and it cannot be inlined).

  Printed: per count of periods (--periods, default 1,000, 10,000 and 100,000), the median of --trials
  calls of each and the ratio pinned / shipped.

Run after the extension is built and installed into the PostgreSQL of PG_BIN (make && make install;
as root, the cluster runs as postgres), like test/bench/sources_bench.py:
    PG_BIN=... test/bench/periods_bench.py [--periods 1000,10000,100000] [--trials 3]
"""
import argparse
import datetime
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from pgcluster import Cluster  # noqa: E402

FINAL = "finalize_internal.final(finalize.tracked_table, finalize.watermark, timestamptz)"
END = datetime.datetime(2026, 11, 29, 16, tzinfo=datetime.timezone.utc)


def timed(cur, periods, trials):
    """Median seconds of `trials` calls of changes_by_period over `periods` hours ending at END."""
    start = END - datetime.timedelta(hours=periods)
    times = []
    for _ in range(trials):
        t = time.monotonic()
        cur.execute("SELECT count(*) FROM finalize.changes_by_period('b.orders', %s, %s)", (start, END))
        assert cur.fetchone()[0] == periods
        times.append(time.monotonic() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--periods", default="1000,10000,100000")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    pg = Cluster(conf={"finalize.enabled": "off"})
    pg.start()
    try:
        pg.sql("CREATE EXTENSION finalize")
        conn = pg.connect(autocommit=True)
        cur = conn.cursor()
        cur.execute("SHOW server_version")
        print("PostgreSQL %s" % cur.fetchone()[0])
        cur.execute("CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo')")
        cur.execute("SELECT finalize.track_table('b.orders', 'erp', 'dbo.orders')")
        cur.execute("SELECT finalize.record_range('b.orders', NULL, '0x00000000000000000100', '2026-11-29 11:58+00')")
        cur.execute("SELECT finalize.record_range('b.orders', '0x00000000000000000100', '0x00000000000000000200', "
                    "'2026-11-29 12:40+00', 5, 3, 1, '2026-11-29 12:01+00', '2026-11-29 12:40+00')")
        print("%10s %12s %12s %8s" % ("periods", "shipped s", "pinned s", "ratio"))
        for n in [int(x) for x in args.periods.split(",")]:
            cur.execute("ALTER FUNCTION %s RESET search_path" % FINAL)
            shipped = timed(cur, n, args.trials)
            cur.execute("ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp" % FINAL)
            pinned = timed(cur, n, args.trials)
            cur.execute("ALTER FUNCTION %s RESET search_path" % FINAL)
            print("%10d %12.3f %12.3f %8.1f" % (n, shipped, pinned, pinned / shipped))
        conn.close()
    finally:
        pg.cleanup()


if __name__ == "__main__":
    main()
