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
  event    recording a range of 1,000,000 change rows of a table partitioned
           by event time (late rows, exponential lateness), and the bytes of
           facts stored for it; baseline: the same range of the table
           partitioned by commit time

Run as root after the extension is installed (test/bench/worker.sh does both):
    test/bench/worker_bench.py [lag] [tables] [tls] [range] [event] [--rows N] [--tables N] [--trials N]
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


def set_worker(pg, on):
    """Starts or stops the source workers (finalize.enabled) and waits for it."""
    if on:
        pg.sql("ALTER SYSTEM RESET finalize.enabled")
    else:
        pg.sql("ALTER SYSTEM SET finalize.enabled = off")
    pg.reload()
    if not on:
        pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker'"),
                    what="the worker to stop")


# The statements the worker sends for a range (src/mssql/tsql.c: the range
# aggregate and tsql_append_range_events), timed from a plain client to
# tell SQL Server's (here: the simulator's) share of a recording from
# finalize's own.
RANGE_SQL = ("SELECT COUNT_BIG(CASE WHEN r.op = 2 THEN 1 END) AS ins, "
             "COUNT_BIG(CASE WHEN r.op = 4 THEN 1 END) AS upd, "
             "COUNT_BIG(CASE WHEN r.op = 1 THEN 1 END) AS del, "
             "MIN(t.ct) AS first_time, MAX(t.ct) AS last_time "
             "FROM (SELECT a.[__$start_lsn] AS l, a.[__$operation] AS op "
             "FROM [cdc].[fn_cdc_get_all_changes_dbo_orders](@from, @to, N'all') AS a) AS r "
             "JOIN (SELECT d.l, sys.fn_cdc_map_lsn_to_time(d.l) AS ct "
             "FROM (SELECT DISTINCT f.[__$start_lsn] AS l "
             "FROM [cdc].[fn_cdc_get_all_changes_dbo_orders](@from, @to, N'all') AS f) AS d) AS t ON t.l = r.l")
EVENTS_SQL = """SELECT GROUPING(x.k) AS gk, GROUPING(x.b) AS gb, x.k, x.op, x.b, COUNT_BIG(*) AS n,
       DATEDIFF_BIG(millisecond, '19000101', MIN(x.ev)) AS min_ms,
       DATEDIFF_BIG(millisecond, '19000101', MAX(x.ev)) AS max_ms
  FROM (SELECT r.op, r.ev,
               CASE WHEN r.ev IS NULL THEN NULL WHEN r.ev < '19000101' THEN CONVERT(bigint, -1)
                    ELSE DATEDIFF_BIG(second, '19000101', r.ev) / @slot END AS k,
               CASE WHEN r.ev IS NULL THEN NULL
                    WHEN DATEDIFF_BIG(millisecond, r.ev, t.ct) > 0
                    THEN CONVERT(bigint, CEILING(LOG(CONVERT(float, DATEDIFF_BIG(millisecond, r.ev, t.ct))) / LOG(@gamma)))
                    WHEN DATEDIFF_BIG(millisecond, r.ev, t.ct) = 0 THEN CONVERT(bigint, -1)
                    ELSE CONVERT(bigint, -2) END AS b
          FROM (SELECT a.[__$start_lsn] AS l, a.[__$operation] AS op, CONVERT(datetime2(7), a.[created_at]) AS ev
                  FROM [cdc].[fn_cdc_get_all_changes_dbo_orders](@from, @to, N'all') AS a) AS r
          JOIN (SELECT d.l, sys.fn_cdc_map_lsn_to_time(d.l) AS ct
                  FROM (SELECT DISTINCT f.[__$start_lsn] AS l
                          FROM [cdc].[fn_cdc_get_all_changes_dbo_orders](@from, @to, N'all') AS f) AS d) AS t ON t.l = r.l) AS x
 GROUP BY GROUPING SETS ((x.k, x.op), (x.b), ())"""


def time_statement(sim, stmt):
    """Seconds one statement of the worker takes on the simulator for the whole capture instance."""
    q = ("DECLARE @lo binary(10) = sys.fn_cdc_get_min_lsn(N'dbo_orders'), @hi binary(10) = sys.fn_cdc_get_max_lsn(); "
         "EXEC sys.sp_executesql N'" + stmt.replace("'", "''") + "', N'@from binary(10), @to binary(10), @slot bigint, "
         "@gamma float', @from = @lo, @to = @hi, @slot = 900, @gamma = 1.0202020202020201")
    t = time.monotonic()
    sim.query(q)
    return time.monotonic() - t


def bench_event(rows, trials):
    """Recording one range of many rows with and without an event column."""
    print(f"== event: a range of {rows} change rows, partitioned by event time vs by commit time")
    pg = cluster("100ms")
    try:
        with Simulator(clock="sim", start_time="2026-11-02T08:59:00Z", dummy_interval=0, cleanup_time="",
                       maxtrans=100000) as sim:
            env = Env(pg)
            env.add_source("erp", sim)
            set_worker(pg, False)
            t = time.monotonic()
            left = rows
            while left > 0:
                sim.call("sim.commit", inserts=min(50_000, left), lateness="exp:300")
                left -= 50_000
                sim.call("sim.advance", seconds=60)
            print(f"  loaded in {time.monotonic() - t:.1f} s")
            times = {"commit time": [], "event time": []}
            stored = None
            for trial in range(trials):
                for kind in ("commit time", "event time"):
                    name = "bench_%s_%d" % (kind.split()[0], trial)
                    extra = ", event_time_column => 'created_at', lateness_policy => 'quantile', " \
                            "lateness_quantile => 0.999" if kind == "event time" else ""
                    env.sql("SELECT finalize.track_table(%%s, 'erp', 'dbo.orders', start_from => 'capture_start'%s)"
                            % extra, (name,))
                    t0 = time.monotonic()
                    set_worker(pg, True)
                    env.wait_caught_up(name, sim, timeout=900)
                    times[kind].append(time.monotonic() - t0)
                    set_worker(pg, False)
                    n = env.one("SELECT sum(inserts + updates + deletes) FROM finalize.fact f "
                                "JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = %s", (name,))
                    assert n == rows + 0, (name, n)
                    if kind == "event time":
                        stored = env.sql(
                            "SELECT count(*), max(octet_length(f.sketch)), "
                            "       max(octet_length(f.sketch)) + coalesce(max(e.bytes), 0), max(e.periods) "
                            "  FROM finalize.fact f JOIN finalize.tracked_table t USING (table_id) "
                            "  LEFT JOIN LATERAL (SELECT sum(pg_column_size(x.*)) AS bytes, count(*) AS periods "
                            "                       FROM finalize.event_fact x WHERE x.fact_id = f.fact_id) e ON true "
                            " WHERE t.table_name = %s AND f.kind = 'range' AND f.sketch IS NOT NULL", (name,))[0]
                    env.sql("SELECT finalize.untrack_table(%s, false)", (name,))
            base = statistics.median(times["commit time"])
            ev = statistics.median(times["event time"])
            print(f"  commit time (baseline): median {base:7.3f} s of {trials} ({', '.join('%.2f' % x for x in times['commit time'])})")
            print(f"  event time:             median {ev:7.3f} s of {trials} ({', '.join('%.2f' % x for x in times['event time'])})")
            print(f"  ratio event / commit time: {ev / base:.2f} (target <= 2)")
            ranges, sketch, row_bytes, periods = stored
            print(f"  event-time facts of the range: {ranges} range(s), sketch {sketch} B, sketch + rows per "
                  f"event period {row_bytes} B ({periods} event periods) (target < 1 KB)")
            plain = statistics.median(time_statement(sim, RANGE_SQL) for _ in range(trials))
            events = statistics.median(time_statement(sim, EVENTS_SQL) for _ in range(trials))
            print(f"  the simulator's share, timed from a plain client: range aggregate {plain:.3f} s, "
                  f"event statement {events:.3f} s ({events / plain:.1f}x: per-row Python in sqlite)")
            own_base = max(base - plain, 1e-3)
            own_ev = max(ev - plain - events, 1e-3)
            print(f"  finalize's own share (recording minus the statements): commit time {own_base:.3f} s, "
                  f"event time {own_ev:.3f} s, ratio {own_ev / own_base:.2f}")
    finally:
        pg.cleanup()


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
    if "event" in args.parts:
        bench_event(args.rows, max(2, args.trials // 5))


if __name__ == "__main__":
    main()
