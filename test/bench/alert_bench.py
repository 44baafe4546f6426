#!/usr/bin/python3
"""Benchmark of alert delivery: the time from a condition to its webhook's
receipt on a loopback receiver (test/lib/webhook_receiver.py), printed with
baselines measured in the same run:

  condition  SQL Server starts refusing the worker's logins (the simulator's
             fault, finalize.alert_after = 0) -> the "open" webhook arrives;
             logins work again -> the "resolve" webhook arrives. Baseline: the
             poll interval, the soonest a condition can be seen (a condition
             that starts at a random time waits half of it on average)
  delivery   an incident committed (finalize_internal.raise_alert) -> its webhook
             arrives: the alerts worker's own share (woken at commit).
             Baseline: an HTTP POST of the same body from this process to
             the same receiver (libcurl-free, urllib)

Run as root after the extension is installed (test/bench/alert.sh does both):
    test/bench/alert_bench.py [condition] [delivery] [--trials N] [--poll 1s]
"""
import argparse
import os
import random
import statistics
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from pgcluster import Cluster  # noqa: E402
from webhook_receiver import WebhookReceiver  # noqa: E402
from worker_env import Env, sim_clock  # noqa: E402


def ms(values):
    return "median %7.1f ms  max %7.1f ms" % (statistics.median(values) * 1000, max(values) * 1000)


def cluster(poll):
    pg = Cluster(conf={"finalize.poll_interval": poll, "finalize.max_retry_interval": poll,
                       "finalize.alert_after": "0"})
    pg.start()
    pg.sql("CREATE EXTENSION finalize")
    return pg


def interval_seconds(pg, text):
    return pg.sql("SELECT extract(epoch FROM %s::interval)::float8", (text,))[0][0]


def bench_condition(trials, poll):
    """Refused logins -> open webhook; logins back -> resolve webhook."""
    print("== condition -> webhook receipt (poll interval %s)" % poll)
    pg = cluster(poll)
    try:
        with sim_clock() as sim, WebhookReceiver() as rx:
            env = Env(pg)
            pg.sql("CREATE SERVER ops FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url %s, min_severity 'info')",
                   (rx.url_for("/hook"),))
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim)
            env.sql("SELECT finalize.track_table('b.orders', 'erp', 'dbo.orders')")
            env.wait_caught_up("b.orders", sim)
            opens, resolves = [], []
            base = interval_seconds(pg, poll)
            for i in range(trials):
                rx.clear()
                # a condition starts at any moment of the worker's poll interval
                time.sleep(random.uniform(0, base))
                t0 = time.monotonic()
                sim.call("sim.kill_sessions")
                sim.call("sim.fault_refuse_logins", count=-1, message="Login failed for user 'sa'.")
                got, = rx.wait_for(lambda r: r.json and r.json["event"] == "open", timeout=60)
                opens.append(got.monotonic - t0)
                t1 = time.monotonic()
                sim.call("sim.fault_clear")
                got, = rx.wait_for(lambda r: r.json and r.json["event"] == "resolve", timeout=60)
                resolves.append(got.monotonic - t1)
                pg.wait_for(lambda: not pg.sql("SELECT 1 FROM finalize.alert_delivery WHERE state = 'pending'"),
                            what="deliveries settled")
            print("  open:    %s  (%d trials)" % (ms(opens), trials))
            print("  resolve: %s" % ms(resolves))
            print("  baseline poll interval %.0f ms: open median / poll = %.2f, max / poll = %.2f;"
                  " resolve median / poll = %.2f"
                  % (base * 1000, statistics.median(opens) / base, max(opens) / base,
                     statistics.median(resolves) / base))
            env.cleanup()
    finally:
        pg.cleanup()


def bench_delivery(trials):
    """An incident committed -> its webhook; baseline: a direct POST."""
    print("== incident committed -> webhook receipt (the alerts worker's share)")
    pg = cluster("1s")
    try:
        with WebhookReceiver() as rx:
            pg.sql("CREATE SERVER ops FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url %s, min_severity 'info')",
                   (rx.url_for("/hook"),))
            # the alerts worker starts with the first target: warm it up
            pg.sql("SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, 'warm', '', 'warm-up')")
            rx.wait_for(lambda r: True, timeout=30)
            lat, direct = [], []
            body = None
            conn = pg.connect()
            cur = conn.cursor()
            for i in range(trials):
                rx.clear()
                t0 = time.monotonic()
                cur.execute("SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, %s, '', 'bench')",
                            ("src%d" % i,))
                got, = rx.wait_for(lambda r: True, timeout=30)
                lat.append(got.monotonic - t0)
                body = got.body
            conn.close()
            for i in range(trials):
                rx.clear()
                t0 = time.monotonic()
                req = urllib.request.Request(rx.url_for("/direct"), data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
                urllib.request.urlopen(req).read()
                got, = rx.wait_for(lambda r: True, timeout=30)
                direct.append(got.monotonic - t0)
            print("  via finalize:  %s  (%d trials, commit -> receipt)" % (ms(lat), trials))
            print("  direct POST:   %s" % ms(direct))
            print("  ratio median %.1f, max %.1f" % (statistics.median(lat) / statistics.median(direct),
                                                     max(lat) / max(direct)))
    finally:
        pg.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", default=["condition", "delivery"])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--poll", default="1s")
    args = ap.parse_args()
    if "condition" in args.parts:
        bench_condition(args.trials, args.poll)
    if "delivery" in args.parts:
        bench_delivery(args.trials * 5)


if __name__ == "__main__":
    main()
