"""finalize.wait_final: is_final that waits for a commit to move the verdict.
A waiter in one session returns true once another session commits the range
that makes its period final (for plain, derived, event-time and loss-held
periods, and several tables at once), false at its timeout; statement_timeout
and pg_cancel_backend end it; while it sleeps it holds no lock; REPEATABLE
READ and SERIALIZABLE are refused. No timing is asserted: each test waits for
the waiter to be asleep (its wait event) before it commits, and then only
for the waiter's answer."""

import os
import socket
import threading

import psycopg2
import pytest

from pgcluster import cluster_with_source

# Every wait_final call of these tests: long enough never to end a test by
# itself, so that a true answer can only come from the commit.
LONG = "10 minutes"


@pytest.fixture(scope="module")
def pgw():
    cluster = cluster_with_source({"finalize.enabled": "off"})
    cluster.sql("CREATE ROLE wf_reader LOGIN IN ROLE finalize_reader")
    yield cluster
    cluster.cleanup()


@pytest.fixture
def orders(pgw):
    """w.orders, hourly, final until 13:00 (its range reached 13:20)."""
    pgw.sql("SELECT finalize.track_table('w.orders', 'src', 'dbo.orders')")
    pgw.sql("SELECT finalize.record_range('w.orders', NULL, '0x00000000000000000100', '2026-11-29 13:20+00')")
    yield "w.orders"
    pgw.sql("DELETE FROM finalize.tracked_table")


def one(conn, query, args=None):
    with conn.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchone()[0]


def advance(pg, table, start, end, commit_time):
    pg.sql("SELECT finalize.record_range(%s, %s, %s, %s)", (table, start, end, commit_time))


class Waiter:
    """One wait_final call in a connection of its own, on a thread: its
    answer, or the error it raised."""

    def __init__(self, pg, query, args=None, user="wf_reader", setup=None):
        self.pg = pg
        self.conn = pg.connect(user=user)
        self.pid = one(self.conn, "SELECT pg_backend_pid()")
        if setup:
            with self.conn.cursor() as cur:
                cur.execute(setup)
        self.answer = self.error = None
        self.thread = threading.Thread(target=self._run, args=(query, args), daemon=True)
        self.thread.start()

    def _run(self, query, args):
        try:
            self.answer = one(self.conn, query, args)
        except psycopg2.Error as e:
            self.error = e

    def asleep(self):
        """Whether it sleeps in wait_final (the wait event its condition variable reports)."""
        return self.pg.sql("SELECT wait_event_type = 'Extension' AND wait_event = %s "
                           "FROM pg_stat_activity WHERE pid = %s",
                           (self.pg.wait_event_of("FinalizeWaitFinal"), self.pid))[0][0]

    def wait_asleep(self):
        self.pg.wait_for(self.asleep, timeout=60, what="the waiter to sleep")

    def result(self):
        self.thread.join(120)
        assert not self.thread.is_alive(), "wait_final did not return"
        self.conn.close()
        if self.error is not None:
            raise self.error
        return self.answer


def test_a_final_period_answers_at_once_and_a_timeout_answers_false(pgw, orders):
    conn = pgw.connect(user="wf_reader")
    with conn.cursor() as cur:
        # Not a timing check: a call that waited for its hour would fail here.
        cur.execute("SET statement_timeout = '60s'")
    assert one(conn, "SELECT finalize.wait_final('w.orders', '2026-11-29 12:00+00')") is True
    assert one(conn, "SELECT finalize.wait_final(ARRAY['w.orders'], '2026-11-29 12:30+00')") is True
    # Not final: false once the timeout has passed; '0' is one check.
    assert one(conn, "SELECT finalize.wait_final('w.orders', '2026-11-29 13:00+00', '200 ms')") is False
    assert one(conn, "SELECT finalize.wait_final('w.orders', '2026-11-29 13:00+00', '0')") is False
    assert one(conn, "SELECT finalize.wait_final('w.orders', '2026-11-29 12:00+00', '0')") is True
    # The same errors as is_final.
    with pytest.raises(psycopg2.errors.UndefinedObject, match='table "w.nosuch" is not tracked by finalize'):
        one(conn, "SELECT finalize.wait_final('w.nosuch', '2026-11-29 12:00+00', '0')")
    conn.close()


@pytest.mark.every_major
def test_a_waiter_returns_true_when_another_session_commits_the_range(pgw, orders):
    w = Waiter(pgw, "SELECT finalize.wait_final('w.orders', '2026-11-29 13:00+00', %s)", (LONG,))
    w.wait_asleep()
    # A range that moves nothing for this period (same hour) wakes no one
    # for good: the waiter checks and sleeps on.
    advance(pgw, "w.orders", "0x00000000000000000100", "0x00000000000000000180", "2026-11-29 13:40+00")
    assert w.thread.is_alive()
    w.wait_asleep()
    advance(pgw, "w.orders", "0x00000000000000000180", "0x00000000000000000200", "2026-11-29 14:00:01+00")
    assert w.result() is True


def test_a_waiter_on_several_tables_waits_for_each_of_them(pgw, orders):
    pgw.sql("SELECT finalize.track_table('w.lines', 'src', 'dbo.lines')")
    pgw.sql("SELECT finalize.record_range('w.lines', NULL, '0x00000000000000000100', '2026-11-29 12:10+00')")
    pgw.sql("SELECT finalize.track_table('w.items', 'src', 'dbo.items')")
    pgw.sql("SELECT finalize.record_range('w.items', NULL, '0x00000000000000000100', '2026-11-29 11:10+00')")
    w = Waiter(pgw, "SELECT finalize.wait_final(ARRAY['w.orders', 'w.lines', 'w.items'], "
                    "'2026-11-29 12:00+00', %s)", (LONG,))
    w.wait_asleep()
    # w.lines and w.items hold hour 12 back: one moving is not enough.
    advance(pgw, "w.lines", "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 13:00+00")
    w.wait_asleep()
    assert w.thread.is_alive()
    advance(pgw, "w.items", "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 13:30+00")
    assert w.result() is True


def test_a_derived_table_and_an_event_time_table_are_waited_for_as_is_final_answers(pgw, orders):
    pgw.sql("SELECT finalize.track_derived('w.daily', ARRAY['w.orders'], '1 day')")
    pgw.sql("SELECT finalize.track_table('w.events', 'src', 'dbo.events', event_time_column => 'created_at', "
            "allowed_lateness => '10 minutes')")
    pgw.sql("SELECT finalize.record_range('w.events', NULL, '0x00000000000000000100', '2026-11-29 09:00+00')")
    daily = Waiter(pgw, "SELECT finalize.wait_final('w.daily', '2026-11-29 00:00+00', %s)", (LONG,))
    events = Waiter(pgw, "SELECT finalize.wait_final('w.events', '2026-11-29 10:00+00', %s)", (LONG,))
    daily.wait_asleep()
    events.wait_asleep()
    # The input reaches the next day: the derived verdict moves with it.
    advance(pgw, "w.orders", "0x00000000000000000100", "0x00000000000000000200", "2026-11-30 00:30+00")
    assert daily.result() is True
    # Commits up to 12:05: the commit-time verdict is 12:00, minus 10 minutes
    # of lateness 11:50, so event hour 10 is final (hour 11 is not).
    advance(pgw, "w.events", "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 12:05+00")
    assert events.result() is True
    conn = pgw.connect(user="wf_reader")
    assert one(conn, "SELECT finalize.is_final('w.events', '2026-11-29 11:00+00')") is False
    assert one(conn, "SELECT finalize.wait_final('w.events', '2026-11-29 11:00+00', '0')") is False
    conn.close()


def test_a_period_a_loss_holds_is_waited_for_until_the_loss_is_acknowledged(pgw, orders):
    # As test_sensor_multi.py's lose_hours_10_to_12: commit times [10:15,
    # 12:20] lost, the source then at 2026-11-30 01:00.
    t = "w.lossy"
    pgw.sql("SELECT finalize.track_table(%s, 'src', 'dbo.lossy')", (t,))
    pgw.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-29 08:00:01+00')", (t,))
    pgw.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
            "'2026-11-29 10:15+00', 1, 0, 0, '2026-11-29 09:30+00', '2026-11-29 09:30+00')", (t,))
    pgw.sql("SELECT finalize_internal.record_event(finalize_internal.tracked_id(%s), 'data_loss', '0x00000000000000000200', "
            "'0x00000000000000000400', 'dbo_lossy', '{}', 'data_lost', 'purged')", (t,))
    pgw.sql("SELECT finalize.resume_table(%s)", (t,))
    pgw.sql("SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id(%s), '0x000000000000000003FF', "
            "'2026-11-29 12:20+00', '2026-11-29 12:20+00', 'dbo_lossy', false, '{}')", (t,))
    pgw.sql("SELECT finalize.record_range(%s, '0x000000000000000003FF', '0x00000000000000000500', "
            "'2026-11-30 01:00+00')", (t,))
    w = Waiter(pgw, "SELECT finalize.wait_final(%s, '2026-11-29 11:00+00', %s)", (t, LONG))
    w.wait_asleep()
    # While it sleeps on a period only the loss path (SPI, as the owner)
    # can answer for, it holds no lock: the check's subtransaction released
    # whatever that path took.
    assert pgw.sql("SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'relation'", (w.pid,))[0][0] == 0
    pgw.sql("SELECT finalize.acknowledge_loss(%s, '2026-11-29 10:00+00', '2026-11-29 13:00+00', 're-snapshotted')",
            (t,))
    assert w.result() is True


def test_a_sleeping_waiter_holds_no_lock_and_no_transaction_id(pgw, orders):
    w = Waiter(pgw, "SELECT finalize.wait_final(ARRAY['w.orders', 'w.orders'], '2026-11-29 15:00+00', %s)", (LONG,))
    w.wait_asleep()
    locks = pgw.sql("SELECT l.locktype, l.relation::regclass::text, l.mode FROM pg_locks l "
                    "WHERE l.pid = %s AND l.locktype <> 'virtualxid'", (w.pid,))
    assert locks == []
    # Above all none on finalize's relations (the statement above says no
    # relation at all): DDL of the extension and vacuum's truncation are
    # never blocked by a sensor that waits.
    assert pgw.sql("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                   "JOIN pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE l.pid = %s AND n.nspname = 'finalize'", (w.pid,))[0][0] == 0
    # The statement's own snapshot remains (docs/orchestrators.md says so): an xmin,
    # but no transaction id.
    xid, xmin = pgw.sql("SELECT backend_xid, backend_xmin FROM pg_stat_activity WHERE pid = %s", (w.pid,))[0]
    assert xid is None and xmin is not None
    # An exclusive lock on the watermark is granted at once.
    ddl = pgw.connect(autocommit=False)
    with ddl.cursor() as cur:
        cur.execute("SET lock_timeout = '60s'")
        cur.execute("LOCK TABLE finalize.watermark IN ACCESS EXCLUSIVE MODE")
    ddl.rollback()
    ddl.close()
    advance(pgw, "w.orders", "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 16:00+00")
    assert w.result() is True


@pytest.mark.every_major
def test_statement_timeout_and_cancel_end_a_wait(pgw, orders):
    w = Waiter(pgw, "SELECT finalize.wait_final('w.orders', '2026-11-29 15:00+00', %s)", (LONG,),
               setup="SET statement_timeout = '300ms'")
    with pytest.raises(psycopg2.errors.QueryCanceled, match="canceling statement due to statement timeout"):
        w.result()
    w = Waiter(pgw, "SELECT finalize.wait_final(ARRAY['w.orders'], '2026-11-29 15:00+00', %s)", (LONG,))
    w.wait_asleep()
    assert pgw.sql("SELECT pg_cancel_backend(%s)", (w.pid,))[0][0] is True
    with pytest.raises(psycopg2.errors.QueryCanceled, match="canceling statement due to user request"):
        w.result()
    # Inside a savepoint's exception block too: the wait is rolled back with
    # it and the session goes on.
    conn = pgw.connect(user="wf_reader")
    with conn.cursor() as cur:
        cur.execute("SET statement_timeout = '300ms'")
        cur.execute("""DO $$ BEGIN
                           PERFORM finalize.wait_final('w.orders', '2026-11-29 15:00+00', '10 minutes');
                       EXCEPTION WHEN query_canceled THEN RAISE NOTICE 'cancelled';
                       END $$""")
        assert any("cancelled" in n for n in conn.notices)
        cur.execute("RESET statement_timeout")
    assert one(conn, "SELECT finalize.wait_final('w.orders', '2026-11-29 12:00+00', '0')") is True
    conn.close()


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_transactions_with_one_snapshot_are_refused(pgw, orders, isolation):
    conn = pgw.connect(user="wf_reader", autocommit=False)
    with conn.cursor() as cur:
        cur.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        with pytest.raises(psycopg2.errors.InvalidTransactionState,
                           match=f"finalize.wait_final cannot wait in a {isolation} transaction") as e:
            cur.execute("SELECT finalize.wait_final('w.orders', '2026-11-29 12:00+00', '0')")
    assert "hold back vacuum" in e.value.diag.message_detail
    assert "READ COMMITTED" in e.value.diag.message_hint
    conn.rollback()
    # READ COMMITTED in a transaction block is fine.
    with conn.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.execute("SELECT finalize.wait_final('w.orders', '2026-11-29 12:00+00', '0')")
        assert cur.fetchone()[0] is True
    conn.rollback()
    conn.close()


def test_a_transaction_that_has_written_is_refused(pgw, orders):
    """Its row locks could be the ones the worker needs to move the verdict:
    the wait could only time out, so it is refused at once."""
    conn = pgw.connect(autocommit=False)
    with conn.cursor() as cur:
        cur.execute("CREATE TEMP TABLE wrote (x int)")
        cur.execute("INSERT INTO wrote VALUES (1)")
        with pytest.raises(psycopg2.errors.InvalidTransactionState,
                           match="finalize.wait_final cannot wait in a transaction that has a transaction id") as e:
            cur.execute("SELECT finalize.wait_final('w.orders', '2026-11-29 12:00+00', '1 minute')")
    assert "Commit the writes first" in e.value.diag.message_hint
    conn.rollback()
    conn.close()


def test_a_client_gone_is_noticed_with_client_connection_check_interval(pgw, orders):
    w = Waiter(pgw, "SELECT finalize.wait_final('w.orders', '2026-11-29 15:00+00', %s)", (LONG,),
               setup="SET client_connection_check_interval = '100ms'")
    w.wait_asleep()
    # The client vanishes without a word: its connection is shut down under
    # the driver (which then fails in the waiter's thread).
    gone = socket.socket(fileno=os.dup(w.conn.fileno()))
    gone.shutdown(socket.SHUT_RDWR)
    gone.close()
    pgw.wait_for(lambda: pgw.sql("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (w.pid,))[0][0],
                 timeout=60, what="the backend of the vanished client to exit")
    assert "connection to client lost" in pgw.log()
