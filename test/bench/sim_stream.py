#!/usr/bin/python3
"""Streaming benchmark of the SQL Server CDC simulator (test/mssql-sim).

Loads a narrow change table (default 1,000,000 rows), then streams it to one
FreeTDS client: a tiny DB-Library C program compiled on the fly
(gcc -DMSDBLIB -lsybdb), which shows the server's speed better than a Python
client.  Baselines measured in the same run:

* constant stream: the same client reading EXEC sim.stream_constant (identical
  pre-built rows: protocol + client cost, no SQL engine work);
* sqlite: the same rows read straight from the simulator's sqlite file in Python.

Prints rows/s and ratios; the target is >= 200,000 rows/s.  Also times the
worker's per-range aggregate over the whole table.

    test/bench/sim_stream.py [--rows 1000000] [--pymssql]
"""
import argparse
import glob
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from simproc import Simulator  # noqa: E402

C_CLIENT = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sybfront.h>
#include <sybdb.h>

static int err_handler(DBPROCESS *p, int sev, int dberr, int oserr, char *dberrstr, char *oserrstr)
{ fprintf(stderr, "db-lib error %d: %s\n", dberr, dberrstr); return INT_CANCEL; }
static int msg_handler(DBPROCESS *p, DBINT no, int st, int sev, char *text, char *srv, char *proc, int line)
{ if (sev > 10) fprintf(stderr, "server error %d: %s\n", (int) no, text); return 0; }

int main(int argc, char **argv)
{
    /* argv: server user password query */
    struct timespec a, b;
    long long rows = 0, bytes = 0;
    if (argc != 5) { fprintf(stderr, "usage: server user password query\n"); return 2; }
    dbinit();
    dberrhandle(err_handler);
    dbmsghandle(msg_handler);
    LOGINREC *login = dblogin();
    DBSETLUSER(login, argv[2]);
    DBSETLPWD(login, argv[3]);
    DBSETLVERSION(login, DBVERSION_74);
    DBPROCESS *p = dbopen(login, argv[1]);
    if (!p || dbuse(p, "demo") == FAIL) return 1;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (dbcmd(p, argv[4]) == FAIL || dbsqlexec(p) == FAIL) return 1;
    while (dbresults(p) != NO_MORE_RESULTS) {
        int n = dbnumcols(p);
        while (dbnextrow(p) != NO_MORE_ROWS) {
            rows++;
            for (int i = 1; i <= n; i++) bytes += dbdatlen(p, i);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%lld %.6f %lld\n", rows, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9, bytes);
    dbclose(p);
    dbexit();
    return 0;
}
"""


def build_client(tmp):
    src = os.path.join(tmp, "stream_client.c")
    exe = os.path.join(tmp, "stream_client")
    with open(src, "w") as f:
        f.write(C_CLIENT)
    subprocess.run(["gcc", "-O2", "-o", exe, src, "-DMSDBLIB", "-lsybdb"], check=True)
    return exe


def run_client(exe, sim, query):
    out = subprocess.run([exe, sim.server, "sa", "Passw0rd!", query], capture_output=True, text=True, check=True,
                         timeout=600)
    rows, secs, _ = out.stdout.split()
    return int(rows), float(secs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--pymssql", action="store_true", help="also measure pymssql as the client")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sim-bench-")
    try:
        run(args, build_client(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, exe):
    """Load the table, stream it, print the figures."""
    with Simulator(clock="sim", dummy_interval=0, cleanup_time="", maxtrans=100000) as sim:
        t0 = time.monotonic()
        sim.call("sim.create_table", name="narrow", columns="id int NOT NULL")
        sim.call("sim.enable_table", name="narrow")
        sim.call("sim.advance", seconds=5)
        per = 50_000
        left = args.rows
        while left > 0:
            sim.call("sim.commit", table="dbo.narrow", inserts=min(per, left))
            left -= per
        sim.call("sim.advance", seconds=5)
        n = sim.query("SELECT COUNT_BIG(*) AS n FROM cdc.dbo_narrow_CT")[0]["n"]
        print("loaded %d change rows in %.1f s" % (n, time.monotonic() - t0))
        query = "SELECT [__$start_lsn], [__$seqval], [__$operation], [id] FROM [cdc].[dbo_narrow_CT]"

        rows, secs = run_client(exe, sim, query)
        base_rows, base_secs = run_client(exe, sim, "EXEC sim.stream_constant @rows = %d" % args.rows)
        assert rows == n and base_rows == args.rows, (rows, base_rows, n)
        rate, base_rate = rows / secs, base_rows / base_secs

        # The change table's sqlite name is ct_<object_id> (capture instance names may differ only in case).
        phys = "ct_%d" % sim.query("SELECT OBJECT_ID(N'cdc.dbo_narrow_CT') AS o")[0]["o"]
        db = glob.glob("/tmp/mssql-sim-*/cdc.db")
        sqlite_rate = None
        for path in db:
            try:
                c = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
                t = time.monotonic()
                cur = c.execute('SELECT "__$start_lsn", "__$seqval", "__$operation", "id" FROM "%s"' % phys)
                k = 0
                while True:
                    chunk = cur.fetchmany(20000)
                    if not chunk:
                        break
                    k += len(chunk)
                if k == n:
                    sqlite_rate = k / (time.monotonic() - t)
                c.close()
            except sqlite3.Error:
                continue

        t = time.monotonic()
        agg = sim.query("SELECT COUNT_BIG(CASE WHEN c.[__$operation] = 2 THEN 1 END) AS ins, MIN(c.[__$start_lsn]) "
                        "AS first_lsn, MAX(c.[__$start_lsn]) AS last_lsn FROM [cdc].[dbo_narrow_CT] AS c WHERE "
                        "c.[__$start_lsn] > 0x00000000000000000000 AND c.[__$start_lsn] <= 0xFFFFFFFFFFFFFFFFFFFF")
        agg_secs = time.monotonic() - t
        assert agg[0]["ins"] == n

        print("change table -> DB-Library client: %d rows in %.2f s = %.0f rows/s (target >= 200000: %s)"
              % (rows, secs, rate, "met" if rate >= 200_000 else "NOT met"))
        print("baseline constant stream (same client, no SQL engine): %.0f rows/s; ratio %.2f" % (base_rate,
                                                                                                   rate / base_rate))
        if sqlite_rate:
            print("baseline sqlite read in Python (same rows): %.0f rows/s; ratio %.2f" % (sqlite_rate,
                                                                                             rate / sqlite_rate))
        print("worker-style range aggregate over %d rows: %.3f s" % (n, agg_secs))
        if args.pymssql:
            c = sim.connect()
            cur = c.cursor()
            t = time.monotonic()
            cur.execute(query)
            k = sum(1 for _ in cur)
            print("pymssql client: %.0f rows/s" % (k / (time.monotonic() - t)))
            c.close()


if __name__ == "__main__":
    main()
