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


@pytest.fixture
def lossy(pg2, table):
    """c.orders (final until 13:00) lost commit times [10:15, 11:20]: its
    hours 10 and 11 are held, finalized_until stops at 10:00; c.hourly is
    built from it. Written directly, as a superuser may: the loss flag is
    set once, and what follows changes only the losses behind it."""
    pg2.sql("SELECT finalize.track_derived('c.hourly', ARRAY['c.orders'])")
    pg2.sql("SELECT finalize_internal.refresh_derived()")
    add_loss(pg2, "2026-11-29 10:15+00", "2026-11-29 11:20+00")
    pg2.sql("SELECT finalize_internal.refresh_loss_blocked(finalize_internal.tracked_id('c.orders'))")
    yield ["c.orders", "c.hourly"]


def add_loss(target, lost_from, lost_to):
    """Inserts a loss of c.orders (target: a cluster, or a connection whose
    transaction the caller ends)."""
    query = ("INSERT INTO finalize.loss (table_id, lost_from, lost_to) "
             "VALUES (finalize_internal.tracked_id('c.orders'), %s, %s)")
    if hasattr(target, "sql"):
        target.sql(query, (lost_from, lost_to))
    else:
        target.cursor().execute(query, (lost_from, lost_to))


def loss_view(conn, tables):
    """What the sensors say of hours 8, 10 and 12 and finalized_until, per table."""
    return {t: (one(conn, "SELECT finalize.is_final(%s, '2026-11-29 08:00+00')", (t,)),
                one(conn, "SELECT finalize.is_final(%s, '2026-11-29 10:00+00')", (t,)),
                one(conn, "SELECT finalize.is_final(%s, '2026-11-29 12:00+00')", (t,)),
                one(conn, "SELECT finalize.finalized_until(%s)", (t,)).isoformat())
            for t in tables}


HELD_10_11 = (True, False, True, "2026-11-29T10:00:00+00:00")


def test_a_loss_committed_elsewhere_is_seen_by_the_next_call(pg2, lossy):
    """The verdict cache keeps what the loss rule read with a held verdict:
    a new loss committed by another session (no write of watermark, the
    flag being set already) must reach every session's next call."""
    reader = pg2.connect()
    for _ in range(2):
        assert loss_view(reader, lossy) == dict.fromkeys(lossy, HELD_10_11)
    add_loss(pg2, "2026-11-29 08:10+00", "2026-11-29 08:20+00")
    assert loss_view(reader, lossy) == dict.fromkeys(lossy, (False, False, True, "2026-11-29T08:00:00+00:00"))
    # And the array forms, which read several entries at once.
    assert one(reader, "SELECT finalize.is_final(ARRAY['c.hourly', 'c.orders'], '2026-11-29 08:00+00')") is False
    assert str(one(reader, "SELECT finalize.finalized_until(ARRAY['c.orders', 'c.hourly'])")) == \
        "2026-11-29 08:00:00+00:00"


def test_an_acknowledgement_withdrawn_elsewhere_is_seen_by_the_next_call(pg2, lossy):
    """Hour 10 acknowledged releases it; the acknowledgement deleted (by a
    superuser, no write of watermark) holds it again at the next call."""
    pg2.sql("SELECT finalize.acknowledge_loss('c.orders', '2026-11-29 10:00+00', '2026-11-29 11:00+00', 'redone')")
    reader = pg2.connect()
    released = (True, True, True, "2026-11-29T11:00:00+00:00")
    for _ in range(2):
        assert loss_view(reader, ["c.orders"]) == {"c.orders": released}
    pg2.sql("DELETE FROM finalize.loss_ack")
    assert loss_view(reader, ["c.orders"]) == {"c.orders": HELD_10_11}


def test_a_transactions_own_loss_is_seen_in_it_and_gone_after_rollback(pg2, lossy):
    """A session that inserts a loss sees it at once in its transaction,
    others never do, and after its rollback nobody does, the session
    itself included (nothing uncommitted was kept)."""
    writer = pg2.connect(autocommit=False)
    other = pg2.connect()
    try:
        for _ in range(2):
            assert loss_view(writer, lossy) == dict.fromkeys(lossy, HELD_10_11)
            assert loss_view(other, lossy) == dict.fromkeys(lossy, HELD_10_11)
        add_loss(writer, "2026-11-29 08:10+00", "2026-11-29 08:20+00")
        assert loss_view(writer, lossy) == dict.fromkeys(lossy, (False, False, True, "2026-11-29T08:00:00+00:00"))
        assert loss_view(other, lossy) == dict.fromkeys(lossy, HELD_10_11)
    finally:
        # Its uncommitted loss would hold the fixture's clean-up.
        writer.rollback()
    for _ in range(2):
        assert loss_view(writer, lossy) == dict.fromkeys(lossy, HELD_10_11)
        assert loss_view(other, lossy) == dict.fromkeys(lossy, HELD_10_11)


def test_every_table_a_cached_verdict_is_read_from_bumps_the_epoch(pg2):
    """The cache keeps a held verdict's loss reads (losses.c) as long as the
    epoch stands: every table the verdict and the loss rule read must carry
    verdict_changed for every kind of change (test_upgrade.py proves an
    updated catalog has the same triggers as this fresh one)."""
    rows = pg2.sql("""
SELECT c.relname, t.tgtype, t.tgenabled
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE t.tgname = 'verdict_changed' AND c.relnamespace = 'finalize'::regnamespace
 ORDER BY 1""")
    # tgtype 60: FOR EACH STATEMENT, AFTER, INSERT | DELETE | UPDATE | TRUNCATE.
    assert [tuple(r) for r in rows] == [(name, 60, "O") for name in
                                        ["consumer", "derived_input", "loss", "loss_ack", "tracked_table",
                                         "watermark"]]


def test_a_parallel_query_may_filter_with_the_sensors(pg2, lossy):
    """The sensors take a fresh snapshot, which PostgreSQL refuses in a
    parallel worker: they are PARALLEL RESTRICTED, so a query that filters a
    table with them still runs (in parallel where it can) and answers as a
    plain call does."""
    conn = pg2.connect()
    try:
        with conn.cursor() as cur:
            # PostgreSQL 15 names it force_parallel_mode.
            cur.execute("SET %s = on" % ("debug_parallel_query" if pg2.server_version_num() >= 160000
                                          else "force_parallel_mode"))
            cur.execute("SELECT finalize.is_final(t, '2026-11-29 08:00+00'), finalize.finalized_until(t), "
                        "finalize.is_final(ARRAY[t], '2026-11-29 12:00+00'), finalize.finalized_until(ARRAY[t]) "
                        "FROM unnest(%s::text[]) AS t ORDER BY t", (sorted(lossy),))
            rows = cur.fetchall()
    finally:
        conn.close()
    assert rows == [tuple(pg2.sql("SELECT finalize.is_final(%s, '2026-11-29 08:00+00'), finalize.finalized_until(%s), "
                                  "finalize.is_final(ARRAY[%s], '2026-11-29 12:00+00'), "
                                  "finalize.finalized_until(ARRAY[%s])", (t, t, t, t))[0]) for t in sorted(lossy)]
