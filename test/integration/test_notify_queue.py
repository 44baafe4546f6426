"""The NOTIFY queue is one per cluster and any login can fill it: a role
with no privileges keeps a session LISTENing in an open transaction (which
holds the queue's tail) and fills the queue from another. Facts and
verdicts must commit whatever the queue does: finalize's notifications are
best effort (src/core/notify.c), counted when dropped, and said in the
log; nothing of finalize waits for one.

Filling the queue is the only way to show what a full queue does. From
PostgreSQL 17 its size is a setting (max_notify_queue_pages): the test makes
it the least, 64 pages, and fills 512 kB; 15 and 16 have no such setting and
write their 8 GB (about 40 s and as many seconds of CPU)."""

import json
import os
import re
import select
import subprocess
import time

import psycopg2

from pgcluster import PG_BIN
from worker_env import Env, new_cluster, sim_clock


def small_queue():
    """The least NOTIFY queue the server allows: 64 pages from PostgreSQL 17 on, none before."""
    version = subprocess.run([os.path.join(PG_BIN, "postgres"), "--version"], capture_output=True, text=True,
                             check=True).stdout
    major = int(re.search(r"\(PostgreSQL\) (\d+)", version).group(1))
    return {"max_notify_queue_pages": "64"} if major >= 17 else {}


def drain(conn, timeout=2.0):
    """The notifications a listening connection receives within timeout."""
    deadline = time.monotonic() + timeout
    got = []
    while time.monotonic() < deadline:
        if select.select([conn], [], [], 0.1)[0]:
            conn.poll()
        while conn.notifies:
            got.append(conn.notifies.pop(0))
        if got and not select.select([conn], [], [], 0.2)[0]:
            break
    return got


def fill_queue(pg, user, per_statement):
    """Fills the NOTIFY queue as `user` while another of its sessions holds the tail (LISTEN in an open
    transaction), with statements of per_statement 8 kB notifications; returns that session (close it
    to let the queue drain). Statements that commit signal the other listeners, which then read on:
    once the holder goes, the tail moves up to them (notifications of a statement that failed signal
    nobody)."""
    holder = pg.connect(user=user, autocommit=False)
    with holder.cursor() as cur:
        cur.execute("LISTEN x")
    holder.commit()
    with holder.cursor() as cur:
        cur.execute("SELECT 1")          # idle in transaction from here on
    filler = pg.connect(user=user, autocommit=True)
    try:
        for _ in range(100):
            try:
                with filler.cursor() as cur:
                    cur.execute("SELECT pg_notify('spam', repeat(md5(g::text), 249) || g) "
                                "FROM generate_series(1, %s) g", (per_statement,))
            except psycopg2.Error as e:
                assert "too many notifications in the NOTIFY queue" in str(e), e
                return holder
        raise AssertionError("the NOTIFY queue never filled")
    finally:
        filler.close()


def test_a_full_notify_queue_stops_no_write_and_no_verdict():
    queue = small_queue()
    pg = new_cluster(**queue)
    env = Env(pg)
    sim = sim_clock().start()
    holder = None
    try:
        pg.sql("CREATE ROLE spammer LOGIN")            # no privilege in finalize at all
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=10)
        env.add_source("erp", sim)
        env.track("q.orders", "erp")
        env.wait_caught_up("q.orders", sim)
        pg.sql("CREATE SERVER hand FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', port '1', "
               "database 'demo')")
        pg.sql("SELECT finalize.track_table('q.hand', 'hand', 'dbo.orders')")
        pg.sql("SELECT finalize.record_range('q.hand', NULL, '0x00000000000000000100', '2026-11-02 09:00+00')")
        listener = pg.connect(autocommit=True)
        listener.cursor().execute("LISTEN finalize")
        assert pg.sql("SELECT finalize.dropped_notifications()") == [(0,)]

        holder = fill_queue(pg, "spammer", 4 if queue else 20000)
        assert pg.sql("SELECT pg_notification_queue_usage() > 0.99")[0][0]
        # The worker's cycles record and advance as before (before: internal_error, "too many
        # notifications in the NOTIFY queue", every cycle of every source, nothing recorded).
        before = env.status("q.orders")["finalized_until"]
        sim.call("sim.commit", inserts=3)
        sim.call("sim.advance", seconds=3 * 3600)
        env.wait_caught_up("q.orders", sim)
        st = env.status("q.orders")
        assert st["finalized_until"] > before and st["source_condition"] == "ok", st
        # A session's write (an admin's record_range, a pipeline's report) commits too.
        assert pg.sql("SELECT finalize.record_range('q.hand', '0x00000000000000000100', '0x00000000000000000200', "
                      "'2026-11-02 12:00:01+00')")[0][0] is not None
        dropped = pg.sql("SELECT finalize.dropped_notifications()")[0][0]
        assert dropped >= 2, dropped
        assert "notification(s) were not sent since the server started: the NOTIFY queue is" in pg.log()
        assert drain(listener, 1.0) == []

        # The tail let go, the queue drains, and notifications arrive again.
        holder.close()
        holder = None
        pg.wait_for(lambda: pg.sql("SELECT pg_notification_queue_usage() < 0.5")[0][0], timeout=120,
                    what="the NOTIFY queue to drain")
        pg.sql("SELECT finalize.record_range('q.hand', '0x00000000000000000200', '0x00000000000000000300', "
               "'2026-11-02 13:00:01+00')")
        notes = [json.loads(n.payload) for n in drain(listener, 5.0) if n.channel == "finalize"]
        assert any(n["table"] == "q.hand" and n["new"] == "2026-11-02T13:00:00Z" for n in notes), notes
        listener.close()
    finally:
        if holder is not None:
            holder.close()
        env.cleanup()
        sim.stop()
        pg.cleanup()


def test_a_rolled_back_savepoint_takes_its_notification_along():
    """Notifications are kept with the transaction: a savepoint rolled back drops its own, a commit sends
    the rest, an abort none (as pg_notify does)."""
    from pgcluster import cluster_with_source
    pg = cluster_with_source({"finalize.enabled": "off"})
    try:
        listener = pg.connect(autocommit=True)
        listener.cursor().execute("LISTEN finalize")
        conn = pg.connect(autocommit=False)
        with conn.cursor() as cur:
            cur.execute("SELECT finalize_internal.notify('finalize', 'kept')")
            cur.execute("SAVEPOINT s")
            cur.execute("SELECT finalize_internal.notify('finalize', 'dropped with the savepoint')")
            cur.execute("ROLLBACK TO SAVEPOINT s")
            cur.execute("SAVEPOINT t")
            cur.execute("SELECT finalize_internal.notify('finalize', 'kept by a released savepoint')")
            cur.execute("RELEASE SAVEPOINT t")
        conn.commit()
        with conn.cursor() as cur:
            cur.execute("SELECT finalize_internal.notify('finalize', 'rolled back')")
        conn.rollback()
        assert [n.payload for n in drain(listener)] == ["kept", "kept by a released savepoint"]
        with conn.cursor() as cur:
            try:
                cur.execute("SELECT finalize_internal.notify('finalize', repeat('x', 8000))")
                raise AssertionError("a payload pg_notify refuses was taken")
            except psycopg2.Error as e:
                assert "payload string too long" in str(e)
        conn.rollback()
        conn.close()
        listener.close()
    finally:
        pg.cleanup()
