#!/usr/bin/python3
"""Benchmark of publications (issue 44): N tables of one source read by the
real worker from the simulator (real FreeTDS), each with two publications
(a signed webhook to a loopback receiver and a second target: a file://
_SUCCESS marker when this build has the marker target, else a second
webhook), and every table's verdict moved an hour at a time. Printed, with
baselines measured in the same run:

  latency  from the start of the transaction that made an hour final and
           recorded its event (never after its commit) to the receiver's
           request (webhook) or the marker's record (file://), p50 and p99
           over every event of every round;
           the goal is p99 <= one poll interval + 1 s. Baseline: the poll
           interval.
  cpu      CPU of the delivery worker ("finalize alerts") per event
           delivered. Baseline: its CPU per alert webhook delivered, for the
           same number of incidents raised at once to the same receiver.
  sensor   is_final() as a ratio of SELECT 1 (pgbench, 4 clients, each
           measured right after the other) while the events of a round are
           delivered, against the same ratio with nothing to deliver.

Run as root after the extension is installed (test/bench/publish.sh does both):
    test/bench/publish_bench.py [--tables 1000] [--rounds 3] [--poll 1s]
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from pgcluster import PG_BIN, Cluster  # noqa: E402
from simproc import Simulator  # noqa: E402
from webhook_receiver import WebhookReceiver  # noqa: E402
from worker_env import Env, lsn_text  # noqa: E402
from scale_bench import cpu_seconds  # noqa: E402


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def sim_max(sim):
    return lsn_text(sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])


def alerts_pid(pg):
    rows = pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize alerts'")
    return rows[0][0] if rows else None


def delivered(pg):
    return pg.sql("SELECT count(*) FROM finalize.publication_event WHERE state = 'delivered'")[0][0]


def pgbench_tps(pg, sql, seconds):
    """Transactions per second of one statement from pgbench, 4 clients on 2 threads, prepared."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(sql + "\n")
    os.chmod(f.name, 0o644)
    out = subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "pgbench"), "-n", "-M", "prepared",
                          "-c", "4", "-j", "2", "-T", str(seconds), "-f", f.name, "-h", pg.dir, "-p", str(pg.port),
                          "-U", "postgres", "postgres"], capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    return float([line for line in out.splitlines() if line.startswith("tps")][0].split()[2])


def sensor_rate(pg, seconds):
    """is_final() as a ratio of SELECT 1 measured right after it, under the same load: a machine
    whose load changes (a round's deliveries) changes both alike."""
    sensor = pgbench_tps(pg, "SELECT finalize.is_final('t0', '2026-11-02 09:00+00');", seconds)
    return sensor / pgbench_tps(pg, "SELECT 1;", seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--poll", default="1s")
    a = ap.parse_args()
    n = a.tables
    pg = Cluster(conf={"finalize.poll_interval": a.poll, "max_connections": "50"})
    pg.start()
    pg.sql("CREATE EXTENSION finalize")
    marker_root = tempfile.mkdtemp(prefix="finalize-markers.")
    os.chmod(marker_root, 0o777)
    try:
        with Simulator(clock="sim", start_time="2026-11-02T08:59:00Z", dummy_interval=0, cleanup_time="",
                       maxtrans=10 * n + 1000) as sim, WebhookReceiver() as rx:
            env = Env(pg)
            for i in range(n):
                sim.call("sim.create_table", name=f"t{i}", columns="[id] int NOT NULL, [v] nvarchar(20)")
                sim.call("sim.enable_table", name=f"t{i}")
                sim.call("sim.commit", table=f"dbo.t{i}", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim)
            pg.sql("SELECT finalize.track_table('t' || i, 'erp', 'dbo.t' || i) FROM generate_series(0, %s - 1) i",
                   (n,))
            target = sim_max(sim)
            pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.watermark WHERE offset_lsn = %s",
                                       (target,))[0][0] == n, timeout=1800, what="baselines")
            pg.sql("CREATE SERVER hook FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url %s, min_severity 'info')",
                   (rx.url_for("/hook"),))
            pg.sql("CREATE USER MAPPING FOR postgres SERVER hook OPTIONS (hmac_key 'bench-key')")
            pg.sql("SELECT finalize.add_publication('t' || i, 'hook', 'hook') FROM generate_series(0, %s - 1) i", (n,))
            second = "webhook"
            try:
                pg.sql("SELECT finalize.add_publication('t' || i, 'marker', NULL, jsonb_build_object("
                       "'location', %s || '/dt={date}/hour={hour}/t' || i || '/')) FROM generate_series(0, %s - 1) i",
                       ("file://" + marker_root, n))
                second = "file:// marker"
            except Exception:
                pg.sql("SELECT finalize.add_publication('t' || i, 'hook2', 'hook') FROM generate_series(0, %s - 1) i",
                       (n,))
            print(f"{n} tables x 2 publications (webhook + {second}), poll {a.poll}, "
                  f"PostgreSQL {pg.sql('SHOW server_version')[0][0]}")
            time.sleep(5)                           # the setup's cycles and deliveries settle
            idle_rate = sensor_rate(pg, 3)          # the same load, nothing to deliver
            lat, lat_hook, lat_marker, cpu_per_event, busy_rates = [], [], [], [], []
            for r in range(a.rounds):
                before = delivered(pg)
                seq0 = pg.sql("SELECT coalesce(max(event_seq), 0) FROM finalize.publication_event")[0][0]
                for i in range(n):
                    sim.call("sim.commit", table=f"dbo.t{i}", inserts=1)
                sim.call("sim.advance", seconds=3600)
                for i in range(n):
                    sim.call("sim.commit", table=f"dbo.t{i}", inserts=1)
                sim.call("sim.advance", seconds=10)
                target = sim_max(sim)
                rx.clear()
                pid = alerts_pid(pg)
                c0 = cpu_seconds(pid) if pid else 0.0
                while pg.sql("SELECT count(*) FROM finalize.watermark WHERE offset_lsn = %s",
                             (target,))[0][0] < n:
                    time.sleep(0.01)
                committed = time.time()
                rate = []
                t = threading.Thread(target=lambda: rate.append(sensor_rate(pg, 2)))
                t.start()
                pg.wait_for(lambda: delivered(pg) >= before + 2 * n, timeout=600, interval=0.05,
                            what="every event of the round delivered")
                t.join()
                busy_rates += rate
                pid = pid or alerts_pid(pg)
                cpu_per_event.append((cpu_seconds(pid) - c0) / (2 * n))
                # Each event from the start of the transaction that recorded it (its
                # created_at, now() there: at most that transaction's length before its
                # commit, so a latency is never understated) to its arrival.
                created = dict(pg.sql("SELECT event_id::text, extract(epoch FROM created_at)::float8 "
                                      "FROM finalize.publication_event WHERE state = 'delivered' "
                                      "AND event_seq > %s", (seq0,)))
                got = [q.time - created[q.json["event_id"]] for q in rx.requests("/hook")
                       if (q.json or {}).get("schema") == "finalize.publication/1" and q.json["event_id"] in created]
                lat_hook += got
                if second == "file:// marker":
                    marks = [float(d) for (d,) in pg.sql(
                        "SELECT extract(epoch FROM e.delivered_at - e.created_at)::float8 "
                        "FROM finalize.publication_event e JOIN finalize.publication p USING (publication_id) "
                        "WHERE p.name = 'marker' AND e.event_seq > %s", (seq0,))]
                    lat_marker += marks
                    got += marks
                lat += got
                print(f"  round {r + 1}: {len(got)} events, p50 {statistics.median(got):.3f} s, "
                      f"max {max(got):.3f} s after the transaction that recorded them")
            poll = pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (a.poll,))[0][0]
            # baseline: alert webhooks, the same number of incidents at once
            rx.clear()
            pid = alerts_pid(pg)
            c0 = cpu_seconds(pid)
            pg.sql("SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, 'bench' || i, '', 'x') "
                   "FROM generate_series(1, %s) i", (2 * n,))
            pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.alert_delivery WHERE state = 'delivered'")[0][0]
                        >= 2 * n, timeout=600, interval=0.05, what="the alert webhooks delivered")
            alert_cpu = (cpu_seconds(pid) - c0) / (2 * n)
            print(f"latency (recording transaction -> receiver): p50 {pct(lat, 50):.3f} s  p99 {pct(lat, 99):.3f} s  "
                  f"(goal p99 <= poll + 1 s = {poll + 1:.1f} s; ratio p99/goal {pct(lat, 99) / (poll + 1):.2f})")
            print(f"  webhook events: p50 {pct(lat_hook, 50):.3f} s p99 {pct(lat_hook, 99):.3f} s" +
                  (f"; markers: p50 {pct(lat_marker, 50):.3f} s p99 {pct(lat_marker, 99):.3f} s" if lat_marker else ""))
            ev = statistics.median(cpu_per_event)
            print(f"cpu per event: {ev * 1000:.3f} ms   alert webhook: {alert_cpu * 1000:.3f} ms   "
                  f"ratio {ev / alert_cpu:.2f}")
            busy = statistics.median(busy_rates)
            print(f"sensor is_final / SELECT 1: idle {idle_rate:.2f}  while delivering {busy:.2f}  "
                  f"ratio {busy / idle_rate:.2f}")
    finally:
        pg.cleanup()
        subprocess.run(["rm", "-rf", marker_root])


if __name__ == "__main__":
    main()
