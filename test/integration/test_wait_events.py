"""Wait events: pg_stat_activity names what a finalize process waits for.
From PostgreSQL 17 on each wait is a custom wait event of its own
(WaitEventExtensionNew, src/core/wait_events.c): wait_final, a SQL Server
login and read, a webhook delivery, and each background process's wait
between rounds; on 15 and 16 every one of them is the generic "Extension".
Which name to expect comes from the server's version (Cluster.wait_event_of);
each test waits for the process to be in that wait, and no timing is
asserted."""

import os
import shutil
import subprocess
import threading

import psycopg2
import pytest

from webhook_receiver import Stall, WebhookReceiver
from worker_env import Env, SilentServer, new_cluster


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster(**{"finalize.alert_after": "1s"})
    yield cluster
    cluster.cleanup()


def waits(pg, backend_type):
    """(wait_event_type, wait_event) of every process of a type."""
    return pg.sql("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE backend_type = %s",
                  (backend_type,))


def wait_in(pg, backend_type, name):
    """Waits until a process of the type is in finalize's wait of that name."""
    want = ("Extension", pg.wait_event_of(name))
    pg.wait_for(lambda: want in waits(pg, backend_type), timeout=60,
                what=lambda: f"a {backend_type} in {want}: {waits(pg, backend_type)}")


def started(env, sim, table, source="erp"):
    """A source on the simulator, a table of it tracked, and its first cycle done."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source(source, sim)
    env.track(table, source)
    env.wait_caught_up(table, sim)


@pytest.mark.every_major
def test_the_background_processes_name_their_wait_between_rounds(pg, env, sim):
    started(env, sim, "we.idle")
    wait_in(pg, "finalize launcher", "FinalizeLauncherMain")
    wait_in(pg, "finalize scheduler", "FinalizeSchedulerMain")
    wait_in(pg, "finalize worker", "FinalizeWorkerMain")


@pytest.mark.every_major
def test_a_source_worker_names_a_sql_server_read_and_login(pg, env, sim):
    started(env, sim, "we.read")
    # SQL Server holds every answer to the cycle's first statement.
    sim.call("sim.fault_stall", seconds=60, pattern="fn_cdc_get_max_lsn", count=-1)
    sim.call("sim.advance", seconds=10)
    wait_in(pg, "finalize worker", "FinalizeSqlServerRead")
    sim.call("sim.fault_clear")
    silent = SilentServer()
    try:
        env.sql("CREATE SERVER silent FOREIGN DATA WRAPPER finalize_mssql "
                "OPTIONS (host '127.0.0.1', port '%d', database 'demo', encrypt 'off')" % silent.port)
        env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER silent OPTIONS (username 'sa', password 'x')")
        env.sources["silent"] = None
        env.track("we.silent", "silent", check_source=False)
        # A login to a server that never answers.
        wait_in(pg, "finalize worker", "FinalizeSqlServerLogin")
    finally:
        silent.close()


@pytest.mark.every_major
def test_the_alerts_worker_names_a_webhook_delivery(pg):
    rx = WebhookReceiver().start()
    try:
        rx.set_default(Stall(60), path="/stall")
        pg.sql("CREATE SERVER stalled FOREIGN DATA WRAPPER finalize_webhook "
               "OPTIONS (url %s, format 'json', min_severity 'info', timeout '60 seconds')", (rx.url_for("/stall"),))
        # A server name of its own: the session's cluster is shared, and an incident of another
        # test still open under the same key would only be counted again, not delivered.
        pg.sql("SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, 'wait_events_erp', '', "
               "'held by a stalled receiver')")
        rx.wait_for(lambda r: r.path == "/stall", timeout=30)
        wait_in(pg, "finalize alerts", "FinalizeWebhookDelivery")
    finally:
        rx.stop()
        pg.sql("DROP SERVER stalled CASCADE")
        pg.sql("DELETE FROM finalize.alert")
        pg.sql("DELETE FROM finalize.alert_target_state")


@pytest.mark.every_major
def test_wait_final_names_its_wait(pg, env, sim):
    started(env, sim, "we.final")
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    errors = []

    def run():
        try:
            with conn.cursor() as cur:
                # The simulator's clock stands still: only the cancel below ends the wait.
                cur.execute("SELECT finalize.wait_final('we.final', '2026-11-02 12:00+00', '10 minutes')")
        except psycopg2.Error as e:
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    want = ("Extension", pg.wait_event_of("FinalizeWaitFinal"))
    pg.wait_for(lambda: pg.sql("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                               (pid,)) == [want], timeout=60, what=f"the waiter in {want}")
    assert pg.sql("SELECT pg_cancel_backend(%s)", (pid,))[0][0] is True
    thread.join(60)
    assert isinstance(errors[0], psycopg2.errors.QueryCanceled), errors
    conn.close()


def other_extensions(pg):
    """The stand-in for other extensions (test/lib/other_extension), built with the PostgreSQL under
    test into a directory of pg's, and its function in database postgres."""
    build = os.path.join(pg.dir, "other_extension")
    shutil.copytree(os.path.join(os.path.dirname(__file__), "..", "lib", "other_extension"), build)
    done = subprocess.run(["make", "-s", "-C", build, f"PG_CONFIG={pg.bin}/pg_config"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    pg.sql("CREATE FUNCTION take_all_wait_events() RETURNS void AS %s LANGUAGE C",
           (os.path.join(build, "other_wait_events.so"),))


def test_when_other_extensions_took_every_custom_wait_event_finalize_waits_as_extension(sim):
    """PostgreSQL 17 and 18 keep at most 128 custom wait events per cluster: when other extensions
    took them all before a finalize process names one of its waits, that wait is the generic
    "Extension" (the server log says why, once per process); the process goes on. Before, the
    lookup's error ended the process at its first wait (a restart loop) or failed the call."""
    pg = new_cluster(**{"finalize.alert_after": "1s"})
    try:
        if pg.server_version_num() < 170000:
            pytest.skip("custom wait events are PostgreSQL 17's")
        other_extensions(pg)
        with pytest.raises(psycopg2.errors.ProgramLimitExceeded):
            pg.sql("SELECT take_all_wait_events()")
        env = Env(pg)
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=10)
        env.add_source("erp", sim)
        # track_table's check of the source table logs in to SQL Server and reads in this session.
        env.track("we.full", "erp")
        env.wait_caught_up("we.full", sim)
        wait_in(pg, "finalize worker", "Extension")
        # A period still open: wait_final waits (for a second) and answers.
        assert pg.sql("SELECT finalize.wait_final('we.full', '2026-11-02 09:00+00', '1 second')")[0][0] is False
        assert "FinalizeWorkerMain" not in {r[0] for r in pg.sql("SELECT name FROM pg_wait_events")}
        assert "finalize shows its wait \"FinalizeWorkerMain\" as \"Extension\"" in pg.log()
        assert "exited with exit code" not in pg.log()
    finally:
        pg.cleanup()
