"""The worker's processes: preload, idling, one worker per source, settings,
crash restarts, and never hanging on SIGTERM, cancel, terminate or DROP
DATABASE, even while SQL Server stalls."""

import os
import signal
import subprocess
import time

import psycopg2
import pytest

from pgcluster import PG_BIN, Cluster, _as_postgres, free_port, kill
from worker_env import Env, assert_chain, new_cluster, sim_clock


def backends(pg, kind, dbname="postgres"):
    """PIDs of finalize's processes of one kind ('launcher', 'scheduler', 'worker')."""
    return [r[0] for r in pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = %s ORDER BY pid",
                                 ("finalize " + kind,), dbname=dbname)]


def ready_source(env, sim, name="erp", table="sales.orders"):
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source(name, sim)
    env.track(table, name)
    env.wait_caught_up(table, sim)


@pytest.mark.every_major
def test_refuses_to_load_without_preload():
    with Cluster(conf={"shared_preload_libraries": "''"}) as pg:
        with pytest.raises(psycopg2.Error) as exc:
            pg.sql("CREATE EXTENSION finalize")
        assert "finalize must be loaded via shared_preload_libraries" in str(exc.value)
        assert exc.value.diag.message_hint.startswith("Add finalize to shared_preload_libraries")


@pytest.mark.every_major
def test_idles_until_installed_then_serves_sources():
    with Cluster(conf={"finalize.poll_interval": "200ms"}) as pg, sim_clock() as sim:
        pg.wait_for(lambda: backends(pg, "scheduler"), what="the scheduler")
        assert len(backends(pg, "launcher")) == 1 and backends(pg, "worker") == []
        time.sleep(1.5)
        assert "ERROR" not in pg.log() and "FATAL" not in pg.log()
        pg.sql("CREATE EXTENSION finalize")
        env = Env(pg)
        ready_source(env, sim)
        assert len(backends(pg, "worker")) == 1


def test_one_worker_per_source_following_the_catalog():
    with new_cluster() as pg, sim_clock() as a, sim_clock() as b:
        env = Env(pg)
        ready_source(env, a, "src_a", "a.orders")
        ready_source(env, b, "src_b", "b.orders")
        names = {r[0] for r in pg.sql("SELECT backend_type FROM pg_stat_activity "
                                      "WHERE backend_type = 'finalize worker'")}
        assert names == {"finalize worker"} and len(backends(pg, "worker")) == 2
        # No tracked table left: its worker stops, and the source leaves finalize.source_status (with
        # the pid of a worker that is gone). A dropped server: its worker stops too.
        pg.sql("SELECT finalize.untrack_table('b.orders')")
        pg.wait_for(lambda: len(backends(pg, "worker")) == 1, what="src_b's worker to stop")
        pg.wait_for(lambda: env.source_status("src_b") is None,
                    what=lambda: f"src_b to leave source_status: {env.source_status('src_b')}")
        pg.sql("DROP SERVER src_a CASCADE")
        pg.wait_for(lambda: len(backends(pg, "worker")) == 0, what="src_a's worker to stop")
        # Its table is still tracked, so it stays, as server_dropped, without a pid; untracked, it goes.
        pg.wait_for(lambda: (env.source_status("src_a") or {}).get("condition") == "server_dropped",
                    what=lambda: f"src_a to show server_dropped: {env.source_status('src_a')}")
        assert env.source_status("src_a")["worker_pid"] is None
        pg.sql("SELECT finalize.untrack_table('a.orders')")
        pg.wait_for(lambda: env.source_status("src_a") is None,
                    what=lambda: f"src_a to leave source_status: {env.source_status('src_a')}")


def test_enabled_switch_and_reload():
    with new_cluster() as pg, sim_clock() as sim:
        env = Env(pg)
        ready_source(env, sim)
        pg.sql("ALTER SYSTEM SET finalize.enabled = off")
        pg.reload()
        pg.wait_for(lambda: not backends(pg, "worker"), what="workers to stop")
        sim.call("sim.commit", inserts=3)
        sim.call("sim.advance", seconds=10)
        time.sleep(1)
        assert sum(f["inserts"] for f in env.facts("sales.orders")) == 0, "nothing polled while disabled"
        # A longer poll interval is applied on reload.
        pg.sql("ALTER SYSTEM SET finalize.poll_interval = '3s'")
        pg.sql("ALTER SYSTEM RESET finalize.enabled")
        pg.reload()
        env.wait_caught_up("sales.orders", sim)
        polls = []
        for _ in range(8):
            polls.append(env.source_status("erp")["last_poll"])
            time.sleep(1)
        distinct = sorted(set(polls))
        gaps = [(b - a).total_seconds() for a, b in zip(distinct, distinct[1:])]
        assert gaps and min(gaps) > 2, f"polls {gaps} closer than the 3 s interval"


@pytest.mark.every_major
def test_a_killed_worker_restarts_and_resumes_exactly():
    with new_cluster() as pg, sim_clock() as sim:
        env = Env(pg)
        ready_source(env, sim)
        for round_ in range(3):
            pid = pg.wait_for(lambda: (backends(pg, "worker") or [None])[0], timeout=60, what="a worker")
            sim.call("sim.commit", inserts=2)
            kill(pid, signal.SIGKILL)      # the postmaster reinitializes everything
            sim.call("sim.advance", seconds=10)
            # One query per poll: two in a row could see the worker, then none (the crash
            # restart is still under way), which once failed a loaded run with an IndexError.
            pg.wait_for(lambda: any(p != pid for p in backends(pg, "worker")),
                        timeout=60, what="a new worker")
            env.wait_caught_up("sales.orders", sim, timeout=60)
        facts = env.facts("sales.orders")
        assert_chain(facts)
        assert sum(f["inserts"] for f in facts) == 6


def test_cancel_terminate_and_shutdown_while_sql_server_stalls():
    with new_cluster(**{"finalize.query_timeout": "600s"}) as pg, sim_clock() as sim:
        env = Env(pg)
        ready_source(env, sim)
        sim.call("sim.fault_stall", seconds=600, pattern="fn_cdc_get_max_lsn", count=-1)

        def stalled():
            rows = pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize worker' "
                          "AND query LIKE '%max LSN%' AND state = 'active'")
            return rows[0][0] if rows else None

        pid = pg.wait_for(stalled, what="the worker to wait on SQL Server")
        time.sleep(1.5)
        # pg_cancel_backend: the cycle is abandoned, the worker lives on.
        pg.sql("SELECT pg_cancel_backend(%s)", (pid,))
        st = env.wait_status("sales.orders", lambda s: s.get("source_condition") == "cancelled",
                             timeout=15, what="the cancelled cycle")
        assert "canceling statement due to user request" in st["last_error"]
        assert backends(pg, "worker") == [pid]
        # pg_terminate_backend: gone within seconds although SQL Server never answers.
        pid = pg.wait_for(stalled, what="the worker to wait again")
        pg.sql("SELECT pg_terminate_backend(%s)", (pid,))
        pg.wait_for(lambda: pid not in backends(pg, "worker"), timeout=15, what="the terminated worker to exit")
        # A fast shutdown does not wait for SQL Server either.
        pg.wait_for(stalled, what="a new worker waiting on SQL Server")
        started = time.monotonic()
        pg.stop("fast")
        assert time.monotonic() - started < 30, "shutdown waited for the stalled SQL Server"


def test_drop_database_with_a_stalled_worker():
    pg = new_cluster(**{"finalize.database": "fin", "finalize.query_timeout": "600s"})
    try:
        with sim_clock() as sim:
            pg.sql("CREATE DATABASE fin")
            fin = lambda q, a=None: pg.sql(q, a, dbname="fin")  # noqa: E731
            fin("CREATE EXTENSION finalize")
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            fin(f"CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', port '{sim.port}', database 'demo', encrypt 'off')")
            fin("CREATE USER MAPPING FOR CURRENT_USER SERVER erp OPTIONS (username 'sa', password 'Passw0rd!')")
            fin("SELECT finalize.track_table('sales.orders', 'erp', 'dbo.orders')")
            pg.wait_for(lambda: fin("SELECT offset_lsn FROM finalize.status")[0][0], what="the baseline")
            sim.call("sim.fault_stall", seconds=600, pattern="fn_cdc_get_max_lsn", count=-1)
            pg.wait_for(lambda: pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker' "
                                       "AND query LIKE '%max LSN%'"), what="the stalled worker")
            conn = pg.connect()
            conn.cursor().execute("SET statement_timeout = '30s'")
            conn.cursor().execute("DROP DATABASE fin")
            assert pg.sql("SELECT count(*) FROM pg_database WHERE datname = 'fin'")[0][0] == 0
            # Re-created later, it is served again without a restart.
            sim.call("sim.fault_clear")
            pg.sql("CREATE DATABASE fin")
            pg.wait_for(lambda: backends(pg, "scheduler", dbname="postgres"), timeout=30,
                        what="a scheduler in the new database")
    finally:
        pg.cleanup()


def test_a_standby_idles_until_promoted():
    primary = new_cluster(wal_level="replica")
    standby_dir = os.path.join(primary.dir, "standby")
    standby = None
    try:
        with sim_clock() as sim:
            env = Env(primary)
            ready_source(env, sim)
            port = free_port()
            _as_postgres([f"{PG_BIN}/pg_basebackup", "-h", primary.dir, "-p", str(primary.port), "-U", "postgres",
                          "-D", standby_dir, "-R", "-X", "stream"])
            with open(os.path.join(standby_dir, "postgresql.auto.conf"), "a") as f:
                f.write(f"port = {port}\nunix_socket_directories = '{primary.dir}'\n")
            standby = port
            _as_postgres([f"{PG_BIN}/pg_ctl", "-D", standby_dir, "-l", os.path.join(primary.dir, "standby.log"),
                          "-w", "start"])
            conn = psycopg2.connect(host=primary.dir, port=port, dbname="postgres", user="postgres")
            conn.autocommit = True
            cur = conn.cursor()
            time.sleep(2)
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'finalize%'")
            assert cur.fetchone()[0] == 0, "nothing of finalize runs on a standby"
            # Sensors answer on the standby from the replicated verdict.
            cur.execute("SELECT finalize.finalized_until('sales.orders')")
            assert cur.fetchone()[0] == env.one("SELECT finalize.finalized_until('sales.orders')")
            # Promoted, it starts polling (the old primary stops first).
            primary.stop("fast")
            _as_postgres([f"{PG_BIN}/pg_ctl", "-D", standby_dir, "promote", "-w"])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'finalize worker'")
                if cur.fetchone()[0] == 1:
                    break
                time.sleep(0.2)
            else:
                pytest.fail("no worker after promotion")
            conn.close()
    finally:
        if standby:
            try:
                _as_postgres([f"{PG_BIN}/pg_ctl", "-D", standby_dir, "-m", "immediate", "stop"])
            except subprocess.CalledProcessError:
                pass
        primary.cleanup()


def test_isolation_a_stalled_source_does_not_delay_another():
    with new_cluster(**{"finalize.query_timeout": "600s"}) as pg, sim_clock() as slow, sim_clock() as fast:
        env = Env(pg)
        ready_source(env, slow, "slow", "slow.orders")
        ready_source(env, fast, "fast", "fast.orders")
        slow.call("sim.fault_stall", seconds=600, count=-1)
        for i in range(5):
            fast.call("sim.commit", inserts=1)
            fast.call("sim.advance", seconds=10)
            env.wait_caught_up("fast.orders", fast, timeout=10)
        assert sum(f["inserts"] for f in env.facts("fast.orders")) == 5
        assert env.source_status("fast")["condition"] == "ok"
