"""The sensors' per-backend verdict cache: every committed change is seen by
the next call of every other backend, a transaction sees its own changes,
and nothing uncommitted is ever shown.

The isolation tests (make installcheck) show it step by step: a committed
advance seen by the next call of another session, a transaction's own
advance seen inside it and gone after its rollback
(specs/verdict_visibility.spec), a rolled-back advance never seen
(specs/verdict_rollback.spec). What they cannot do stays here: changes of
tracked_table, prepared transactions, many readers and writers at once,
invalidations during a read, DROP EXTENSION."""

import threading
import time

import psycopg2
import pytest

from pgcluster import cluster_with_source


@pytest.fixture(scope="module")
def pg2():
    cluster = cluster_with_source({"max_prepared_transactions": "2"})
    yield cluster
    cluster.cleanup()


@pytest.fixture
def table(pg2):
    pg2.sql("SELECT finalize.track_table('c.orders', 'src', 'dbo.orders')")
    pg2.sql("SELECT finalize.record_range('c.orders', NULL, '0x00000000000000000100', '2026-11-29 13:20+00')")
    yield "c.orders"
    pg2.sql("DELETE FROM finalize.tracked_table")


def one(conn, query, args=None):
    with conn.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchone()[0]


def test_untrack_and_granularity_changes_are_seen(pg2, table):
    reader = pg2.connect()
    assert one(reader, "SELECT finalize.is_final('c.orders', '2026-11-29 12:00+00')") is True
    # A direct change by a superuser goes through the same trigger.
    pg2.sql("UPDATE finalize.tracked_table SET granularity = '1 day' WHERE table_name = 'c.orders'")
    assert one(reader, "SELECT finalize.is_final('c.orders', '2026-11-29 12:00+00')") is False
    pg2.sql("SELECT finalize.untrack_table('c.orders')")
    with pytest.raises(psycopg2.errors.UndefinedObject, match='table "c.orders" is not tracked'):
        one(reader, "SELECT finalize.is_final('c.orders', '2026-11-29 12:00+00')")


def test_prepared_transactions_cannot_change_verdicts(pg2, table):
    conn = pg2.connect(autocommit=False)
    one(conn, "SELECT finalize.record_range('c.orders', '0x00000000000000000100', "
              "'0x00000000000000000200', '2026-11-29 14:00+00')")
    with pytest.raises(psycopg2.errors.FeatureNotSupported, match="cannot prepare a transaction"):
        conn.cursor().execute("PREPARE TRANSACTION 'x'")
    conn.rollback()
    assert str(one(conn, "SELECT finalize.finalized_until('c.orders')")) == "2026-11-29 13:00:00+00:00"


def test_readers_never_go_backwards_and_end_on_the_last_commit(pg2, table):
    """A writer advances the verdict 200 times while readers poll: every
    reader sees a non-decreasing sequence and, after the writer is done,
    exactly the last committed verdict."""
    done = threading.Event()
    failures = []
    last_seen = []

    def read_loop():
        conn = pg2.connect()
        last = None
        while not done.is_set():
            v = one(conn, "SELECT finalize.finalized_until('c.orders')")
            if last is not None and v < last:
                failures.append((last, v))
            last = v
        # The same backend, with its cache, once the writer is done.
        last_seen.append(one(conn, "SELECT finalize.finalized_until('c.orders')"))
        conn.close()

    writer = pg2.connect()
    # Minutes, so 200 advances stay in the past (commit times far ahead of
    # the clock are refused).
    one(writer, "SELECT finalize.alter_tracked_table('c.orders', granularity => '1 minute')")
    readers = [threading.Thread(target=read_loop) for _ in range(3)]
    for t in readers:
        t.start()
    lsn = 0x100
    for i in range(1, 201):
        nxt = lsn + 0x100
        one(writer, "SELECT finalize.record_range('c.orders', %s, %s, "
                    "'2026-11-29 13:20+00'::timestamptz + %s * interval '1 minute')",
            (f"0x{lsn:020X}", f"0x{nxt:020X}", i))
        lsn = nxt
    done.set()
    for t in readers:
        t.join()
    assert failures == []
    final = one(writer, "SELECT finalize.finalized_until('c.orders')")
    assert last_seen == [final] * 3
    assert str(final) == "2026-11-29 16:40:00+00:00"


def test_invalidations_during_a_read_are_safe(pg2, table):
    """ANALYZE (what autovacuum does) sends relcache invalidations, which a
    sensor may process in the middle of its read: hammer both at once and
    check that every answer stays right and no backend crashes."""
    done = threading.Event()

    def analyze_loop():
        conn = pg2.connect()
        while not done.is_set():
            conn.cursor().execute("ANALYZE finalize.tracked_table; ANALYZE finalize.watermark")
        conn.close()

    answers = []

    def read_loop():
        conn = pg2.connect()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            answers.append((one(conn, "SELECT finalize.is_final('c.orders', '2026-11-29 12:00+00')"),
                            one(conn, "SELECT finalize.is_final('c.orders', '2026-11-29 13:00+00')")))
        conn.close()

    analyzers = [threading.Thread(target=analyze_loop) for _ in range(2)]
    readers = [threading.Thread(target=read_loop) for _ in range(2)]
    for t in analyzers + readers:
        t.start()
    for t in readers:
        t.join()
    done.set()
    for t in analyzers:
        t.join()
    assert len(answers) > 100
    assert set(answers) == {(True, False)}
    assert "terminated by signal" not in pg2.log()


def test_drop_extension_forgets_cached_verdicts(pg2, table):
    reader = pg2.connect()
    assert one(reader, "SELECT finalize.is_final('c.orders', '2026-11-29 12:00+00')") is True
    pg2.sql("DROP EXTENSION finalize CASCADE")
    try:
        with pytest.raises(psycopg2.Error):
            one(reader, "SELECT finalize.is_final('c.orders', '2026-11-29 12:00+00')")
        pg2.sql("CREATE EXTENSION finalize")
        pg2.sql("CREATE SERVER src FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo')")
        pg2.sql("SELECT finalize.track_table('c.orders', 'src', 'dbo.orders')")
        assert one(reader, "SELECT finalize.finalized_until('c.orders')") is None
        assert one(reader, "SELECT finalize.is_final('c.orders', '2026-11-29 12:00+00')") is False
    finally:
        pg2.sql("CREATE EXTENSION IF NOT EXISTS finalize")
        pg2.sql("CREATE SERVER IF NOT EXISTS src FOREIGN DATA WRAPPER finalize_mssql "
                "OPTIONS (host '127.0.0.1', database 'demo')")
