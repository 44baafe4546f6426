#!/usr/bin/python3
"""Cost of many databases on one simulator: start time, CPU, memory, files, polling load.

    /usr/bin/python3 test/sim/bench_databases.py [--storage-dir DIR] [--rate CYCLES_PER_S] [N ...]

For each N (default 1 100 1000): starts ``test/mssql-sim --clock sim --extra-databases shard_%04d:N-1``,
prints the wall and CPU time until it listens, its RSS idle, with one pymssql session per database, and after
``sim.advance`` of an hour, and the size of its sqlite files; with ``--rate``, then polls every database from 8
client threads at that many cycles per second (3 batches each: max LSN, min LSN, changes) for 20 s on the real
clock and prints the rate reached, latencies and the simulator's CPU.  The figures in test/sim/README.md come
from it."""
import argparse
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from simproc import Simulator  # noqa: E402

POLL = ["SELECT sys.fn_cdc_get_max_lsn()", "SELECT sys.fn_cdc_get_min_lsn('dbo_orders')",
        "DECLARE @f binary(10) = sys.fn_cdc_get_min_lsn('dbo_orders'), @t binary(10) = sys.fn_cdc_get_max_lsn(); "
        "IF @t IS NOT NULL SELECT COUNT(*) FROM cdc.fn_cdc_get_all_changes_dbo_orders(@f, @t, N'all')"]


def rss_mb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def storage_mb(pid):
    """Size of the sqlite directory the process has files open in."""
    dirs = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if "/mssql-sim-" in target:
            head, rest = target.split("/mssql-sim-", 1)
            dirs.add(head + "/mssql-sim-" + rest.split("/", 1)[0])
    total = 0
    for d in dirs:
        out = subprocess.run(["du", "-sk", d], capture_output=True, text=True).stdout.split()
        total += int(out[0]) if out else 0
    return total / 1024


def options(n, storage, **extra):
    opts = dict(extra)
    if storage:
        opts["storage_dir"] = storage
    if n > 1:
        opts["extra_databases"] = "shard_%04d:" + str(n - 1)
    return opts


def footprint(n, storage):
    t = time.monotonic()
    sim = Simulator(**options(n, storage, clock="sim", start_time="2026-03-01T00:00:00Z")).start(timeout=900)
    try:
        wall, pid = time.monotonic() - t, sim.proc.pid
        cpu, idle = cpu_s(pid), rss_mb(pid)
        conns = []
        for name in sim.databases():
            c = sim.connect(database=name)
            cur = c.cursor()
            cur.execute(POLL[0])
            cur.fetchall()
            conns.append(c)
        sessions = rss_mb(pid)
        sim.call("sim.advance", seconds=3600)
        hour = rss_mb(pid)
        files = storage_mb(pid)
        print("%5d databases: start %5.1f s (cpu %4.1f s), RSS %4.0f MB idle, %4.0f MB with %d sessions, "
              "%4.0f MB after 1 h; files %4.0f MB" % (n, wall, cpu, idle, sessions, len(conns), hour, files),
              flush=True)
        for c in conns:
            c.close()
    finally:
        sim.stop()


def load(n, storage, rate, seconds=20, threads=8):
    sim = Simulator(**options(n, storage, traffic=True, traffic_rate=0.02)).start(timeout=900)
    try:
        names = sim.databases()
        conns = {name: sim.connect(database=name) for name in names}
        lock = threading.Lock()
        lat = []

        def worker(mine):
            step = threads / rate
            nxt = time.monotonic()
            end = nxt + seconds
            i = 0
            while time.monotonic() < end:
                cur = conns[mine[i % len(mine)]].cursor()
                i += 1
                t = time.monotonic()
                for q in POLL:
                    cur.execute(q)
                    if cur.description:
                        cur.fetchall()
                with lock:
                    lat.append(time.monotonic() - t)
                nxt += step
                time.sleep(max(0.0, nxt - time.monotonic()))

        pid = sim.proc.pid
        c0 = cpu_s(pid)
        ts = [threading.Thread(target=worker, args=(names[k::threads],)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        lat.sort()
        print("%5d databases, %d sessions, target %.0f cycles/s: %.0f cycles/s, p50 %.1f ms, p99 %.1f ms, "
              "simulator CPU %.0f%% of a core" % (n, len(conns), rate, len(lat) / seconds, lat[len(lat) // 2] * 1e3,
                                                  lat[int(len(lat) * 0.99)] * 1e3, (cpu_s(pid) - c0) / seconds * 100),
              flush=True)
        for c in conns.values():
            c.close()
    finally:
        sim.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("counts", nargs="*", type=int, default=[1, 100, 1000])
    p.add_argument("--storage-dir", default="")
    p.add_argument("--rate", type=float, default=0.0)
    a = p.parse_args()
    for n in a.counts:
        footprint(n, a.storage_dir)
    if a.rate:
        load(max(a.counts), a.storage_dir, a.rate)


if __name__ == "__main__":
    main()
