"""The C sensors beyond one table and one watermark: the multi-table forms of
is_final and finalized_until, losses (read in C over the catalog, as
finalize_internal.loss_blocks and finalize_internal.loss_cap read them for SQL, only while
watermark.loss_blocked is set; no sensor path runs SQL), consumers and
derived tables through the verdict cache, and a catalog from before the
loss_blocked column. The verdict may lag a commit by one call, never run
ahead of what is committed."""

import psycopg2
import pytest

from pgcluster import cluster_with_source

HOURS = ["2026-11-29 09:00+00", "2026-11-29 10:00+00", "2026-11-29 11:00+00", "2026-11-29 12:00+00",
         "2026-11-29 13:00+00"]


@pytest.fixture(scope="module")
def pg3():
    cluster = cluster_with_source({"finalize.enabled": "off"})
    cluster.sql("CREATE ROLE sm_reader LOGIN IN ROLE finalize_reader")
    yield cluster
    cluster.cleanup()


def follow(pg):
    """What the scheduler does within a round of a session's commit: the derived tables follow their
    inputs (a session's transaction moves only the table it writes). Taken at once, not waited for."""
    pg.sql("SELECT finalize_internal.refresh_derived()")


@pytest.fixture
def tables(pg3):
    """m.orders (hourly, final until 14:00), m.lines (hourly, nothing final),
    m.daily (derived daily from m.orders)."""
    pg3.sql("SELECT finalize.track_table('m.orders', 'src', 'dbo.orders')")
    pg3.sql("SELECT finalize.record_range('m.orders', NULL, '0x00000000000000000100', '2026-11-29 14:00+00')")
    pg3.sql("SELECT finalize.track_table('m.lines', 'src', 'dbo.lines')")
    pg3.sql("SELECT finalize.track_derived('m.daily', ARRAY['m.orders'], '1 day')")
    yield
    pg3.sql("DELETE FROM finalize.tracked_table")


def one(conn, query, args=None):
    with conn.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchone()[0]


def lose_hours_10_to_12(pg, table):
    """A data loss of commit times [10:15, 12:20] and a restart, then the
    source moves on to 2026-11-30 01:00 (as test/sql/pipelines.sql does)."""
    pg.sql("SELECT finalize.track_table(%s, 'src', 'dbo.events')", (table,))
    pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-29 08:00:01+00')", (table,))
    pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
           "'2026-11-29 10:15+00', 1, 0, 0, '2026-11-29 09:30+00', '2026-11-29 09:30+00')", (table,))
    pg.sql("SELECT finalize_internal.record_event(finalize_internal.tracked_id(%s), 'data_loss', '0x00000000000000000200', "
           "'0x00000000000000000400', 'dbo_events', '{\"cause\": \"cleanup\"}', 'data_lost', 'purged')", (table,))
    pg.sql("SELECT finalize.resume_table(%s)", (table,))
    pg.sql("SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id(%s), '0x000000000000000003FF', "
           "'2026-11-29 12:20+00', '2026-11-29 12:20+00', 'dbo_events', false, '{}')", (table,))
    pg.sql("SELECT finalize.record_range(%s, '0x000000000000000003FF', '0x00000000000000000500', "
           "'2026-11-30 01:00+00')", (table,))


def hours_final(conn, table):
    with conn.cursor() as cur:
        cur.execute("SELECT finalize.is_final(%s, p::timestamptz) FROM unnest(%s) AS p", (table, HOURS))
        return [r[0] for r in cur.fetchall()]


# --- Several tables at once --------------------------------------------------------

def test_the_least_verdict_and_final_in_every_table(pg3, tables):
    conn = pg3.connect(user="sm_reader")
    assert one(conn, "SELECT finalize.finalized_until(ARRAY['m.orders', 'm.daily'])").isoformat() \
        == "2026-11-29T00:00:00+00:00"
    assert one(conn, "SELECT finalize.finalized_until(ARRAY['m.orders', 'm.lines'])") is None
    # Each table's own granularity: hour 13 is final in m.orders, day 29 is not in m.daily.
    assert one(conn, "SELECT finalize.is_final(ARRAY['m.orders'], '2026-11-29 13:00+00')") is True
    assert one(conn, "SELECT finalize.is_final(ARRAY['m.orders', 'm.daily'], '2026-11-29 13:00+00')") is False
    assert one(conn, "SELECT finalize.is_final(ARRAY['m.orders', 'm.daily'], '2026-11-28 13:00+00')") is True
    assert one(conn, "SELECT finalize.is_final(ARRAY['m.orders', 'm.lines'], '2026-11-28 13:00+00')") is False
    # Duplicates and any lower bound are fine.
    assert one(conn, "SELECT finalize.is_final('[0:1]={m.orders,m.orders}'::text[], '2026-11-29 13:00+00')") is True


@pytest.mark.parametrize("call", [
    "finalize.is_final(%s, '2026-11-29 13:00+00')",
    "finalize.finalized_until(%s)",
])
def test_bad_name_lists_are_errors_naming_what_is_wrong(pg3, tables, call):
    conn = pg3.connect(user="sm_reader")
    cases = [
        ("NULL::text[]", psycopg2.errors.NullValueNotAllowed, "argument table_names must not be NULL"),
        ("'{}'::text[]", psycopg2.errors.InvalidParameterValue, "argument table_names must not be empty"),
        ("ARRAY['m.orders', NULL]", psycopg2.errors.NullValueNotAllowed,
         "element 2 of argument table_names must not be NULL"),
        ("'[0:1]={m.orders,NULL}'::text[]", psycopg2.errors.NullValueNotAllowed,
         "element 1 of argument table_names must not be NULL"),
        ("ARRAY[ARRAY['m.orders'], ARRAY['m.lines']]", psycopg2.errors.InvalidParameterValue,
         "argument table_names must be a one-dimensional array"),
        # The first untracked name, whatever the verdicts of the others (m.lines has none).
        ("ARRAY['m.lines', 'm.nosuch', 'm.other']", psycopg2.errors.UndefinedObject,
         'table "m.nosuch" is not tracked by finalize'),
    ]
    for arg, error, message in cases:
        with pytest.raises(error, match=message) as e:
            one(conn, "SELECT " + call % arg)
        assert e.value.diag.message_hint, arg
    if call.startswith("finalize.is_final"):
        with pytest.raises(psycopg2.errors.NullValueNotAllowed, match="argument period_start must not be NULL"):
            one(conn, "SELECT finalize.is_final(ARRAY['m.orders'], NULL)")


# --- Losses ------------------------------------------------------------------------

def test_a_loss_holds_its_periods_for_a_reader_without_execute_on_internals(pg3, tables):
    lose_hours_10_to_12(pg3, "m.events")
    # The sensors read losses themselves, in C: EXECUTE on the sensor
    # function is all a reader needs, whatever their grants.
    fns = ["finalize_internal.loss_blocks(bigint, timestamptz, timestamptz)", "finalize_internal.loss_cap(bigint)"]
    granted = [fn for fn in fns
               if pg3.sql("SELECT has_function_privilege('finalize_reader', %s, 'EXECUTE')", (fn,))[0][0]]
    for fn in fns:
        pg3.sql(f"REVOKE EXECUTE ON FUNCTION {fn} FROM finalize_reader")
    try:
        reader = pg3.connect(user="sm_reader")
        for fn in fns:
            assert one(reader, "SELECT has_function_privilege(%s, 'EXECUTE')", (fn,)) is False
        # Look-alikes in the reader's path are never called (schema-qualified).
        with reader.cursor() as cur:
            cur.execute("CREATE FUNCTION pg_temp._loss_blocks(bigint, timestamptz, timestamptz) RETURNS boolean "
                        "LANGUAGE sql AS 'SELECT false'")
            cur.execute("CREATE FUNCTION pg_temp._loss_cap(bigint) RETURNS timestamptz "
                        "LANGUAGE sql AS 'SELECT ''infinity''::timestamptz'")
            cur.execute("SET search_path = pg_temp, finalize, pg_catalog")
        expected = [True, False, False, False, True]
        assert hours_final(reader, "m.events") == expected
        assert hours_final(reader, "m.events") == expected  # cached verdicts, losses asked afresh
        assert one(reader, "SELECT finalize.is_final(ARRAY['m.orders', 'm.events'], '2026-11-29 11:00+00')") is False
        assert one(reader, "SELECT finalize.is_final(ARRAY['m.orders', 'm.events'], '2026-11-29 13:00+00')") is True
        # The watermark is at 2026-11-30 01:00, but every period ending at or
        # before finalized_until must be complete: it stops at hour 10, the
        # first one the loss holds (hour 13 is final all the same).
        assert one(reader, "SELECT finalize.finalized_until('m.events')").isoformat() == "2026-11-29T10:00:00+00:00"
        assert one(reader, "SELECT finalize.finalized_until('m.events')").isoformat() == "2026-11-29T10:00:00+00:00"
        assert one(reader, "SELECT finalize.finalized_until(ARRAY['m.orders', 'm.events'])").isoformat() \
            == "2026-11-29T10:00:00+00:00"
        # An acknowledgement committed by another session is seen by the next call.
        pg3.sql("SELECT finalize.acknowledge_loss('m.events', '2026-11-29 10:00+00', '2026-11-29 12:00+00', 'ok')")
        assert hours_final(reader, "m.events") == [True, True, True, False, True]
        assert one(reader, "SELECT finalize.finalized_until('m.events')").isoformat() == "2026-11-29T12:00:00+00:00"
        pg3.sql("SELECT finalize.acknowledge_loss('m.events', '2026-11-29 12:00+00', '2026-11-29 13:00+00', 'ok')")
        assert hours_final(reader, "m.events") == [True] * 5
        assert one(reader, "SELECT finalize.is_final(ARRAY['m.orders', 'm.events'], '2026-11-29 11:00+00')") is True
        assert one(reader, "SELECT finalize.finalized_until('m.events')").isoformat() == "2026-11-30T01:00:00+00:00"
        assert one(reader, "SELECT finalize.finalized_until(ARRAY['m.orders', 'm.events'])").isoformat() \
            == "2026-11-29T14:00:00+00:00"
    finally:
        for fn in granted:
            pg3.sql(f"GRANT EXECUTE ON FUNCTION {fn} TO finalize_reader")


def test_derived_tables_inherit_a_loss_through_the_cache(pg3, tables):
    reader = pg3.connect(user="sm_reader")
    lose_hours_10_to_12(pg3, "m.events")
    pg3.sql("SELECT finalize.track_derived('m.events_daily', ARRAY['m.events', 'm.orders'], '1 day')")
    assert one(reader, "SELECT finalize.finalized_until('m.events_daily')").isoformat() == "2026-11-29T00:00:00+00:00"
    assert one(reader, "SELECT finalize.is_final('m.events_daily', '2026-11-28 00:00+00')") is True
    # Day 29 is not final yet (m.orders); once it is, the loss still holds it.
    assert one(reader, "SELECT finalize.is_final('m.events_daily', '2026-11-29 00:00+00')") is False
    pg3.sql("SELECT finalize.record_range('m.orders', '0x00000000000000000100', '0x00000000000000000200', "
            "'2026-11-30 00:00+00')")
    follow(pg3)
    # Its watermark moves to 2026-11-30, but the loss holds day 29: finalized_until stays.
    assert one(reader, "SELECT finalize.finalized_until('m.events_daily')").isoformat() == "2026-11-29T00:00:00+00:00"
    assert one(reader, "SELECT finalize.is_final('m.events_daily', '2026-11-29 00:00+00')") is False
    assert one(reader, "SELECT finalize.is_final(ARRAY['m.daily', 'm.events_daily'], '2026-11-29 00:00+00')") is False
    pg3.sql("SELECT finalize.acknowledge_loss('m.events', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'ok')")
    follow(pg3)
    assert one(reader, "SELECT finalize.is_final('m.events_daily', '2026-11-29 00:00+00')") is True
    assert one(reader, "SELECT finalize.is_final(ARRAY['m.daily', 'm.events_daily'], '2026-11-29 00:00+00')") is True
    assert one(reader, "SELECT finalize.finalized_until('m.events_daily')").isoformat() == "2026-11-30T00:00:00+00:00"


def test_a_derived_table_whose_job_built_lost_periods_waits_for_its_own_acknowledgement(pg3, tables):
    """Acknowledging the loss on the input releases a derived table without
    a required consumer, not one whose job may have built the lost periods
    from incomplete data: that one waits until the loss is acknowledged on
    it too (once the job rebuilt them). Seen by another session's sensors."""
    reader = pg3.connect(user="sm_reader")
    lose_hours_10_to_12(pg3, "m.events")
    pg3.sql("SELECT finalize.track_derived('m.events_job', ARRAY['m.events'])")
    pg3.sql("SELECT finalize.add_consumer('m.events_job', 'job')")
    pg3.sql("SELECT finalize.report_processed('m.events_job', 'job', '2026-11-30 01:00+00')")
    pg3.sql("SELECT finalize.track_derived('m.events_view', ARRAY['m.events'])")
    held = [True, False, False, False, True]
    assert hours_final(reader, "m.events_job") == hours_final(reader, "m.events_view") == held
    pg3.sql("SELECT finalize.acknowledge_loss('m.events', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'ok')")
    follow(pg3)
    assert hours_final(reader, "m.events") == hours_final(reader, "m.events_view") == [True] * 5
    assert hours_final(reader, "m.events_job") == held
    assert one(reader, "SELECT finalize.finalized_until('m.events_job')").isoformat() == "2026-11-29T10:00:00+00:00"
    assert one(reader, "SELECT finalize.is_final(ARRAY['m.events', 'm.events_job'], '2026-11-29 11:00+00')") is False
    pg3.sql("SELECT finalize.acknowledge_loss('m.events_job', '2026-11-29 10:00+00', '2026-11-29 13:00+00', "
            "'job rebuilt hours 10 to 12')")
    assert hours_final(reader, "m.events_job") == [True] * 5
    assert one(reader, "SELECT finalize.finalized_until('m.events_job')").isoformat() == "2026-11-30T01:00:00+00:00"
    assert one(reader, "SELECT finalize.is_final(ARRAY['m.events', 'm.events_job'], '2026-11-29 11:00+00')") is True


def test_a_loss_in_the_readers_own_transaction_is_seen(pg3, tables):
    lose_hours_10_to_12(pg3, "m.events")
    conn = pg3.connect(autocommit=False)
    assert hours_final(conn, "m.events") == [True, False, False, False, True]
    one(conn, "SELECT finalize.acknowledge_loss('m.events', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'ok')")
    assert hours_final(conn, "m.events") == [True] * 5
    conn.rollback()
    assert hours_final(conn, "m.events") == [True, False, False, False, True]


# --- Consumers through the cache ---------------------------------------------------

def test_a_consumer_resolution_is_seen_by_the_next_call(pg3, tables):
    reader = pg3.connect(user="sm_reader")
    pg3.sql("SELECT finalize.add_consumer('m.orders', 'spark')")
    pg3.sql("SELECT finalize.record_range('m.orders', '0x00000000000000000100', '0x00000000000000000200', "
            "'2026-11-29 16:00+00')")
    # The consumer has not reported: the verdict stays at 14:00 (never moves back).
    assert one(reader, "SELECT finalize.is_final('m.orders', '2026-11-29 14:00+00')") is False
    assert one(reader, "SELECT finalize.is_final(ARRAY['m.orders'], '2026-11-29 14:00+00')") is False
    pg3.sql("SELECT finalize.report_progress('m.orders', 'spark', '0x00000000000000000200')")
    assert one(reader, "SELECT finalize.is_final('m.orders', '2026-11-29 14:00+00')") is False
    pg3.sql("SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('m.orders'), 'spark', "
            "'0x00000000000000000200', '0x00000000000000000180', '2026-11-29 15:10+00')")
    assert one(reader, "SELECT finalize.is_final('m.orders', '2026-11-29 14:00+00')") is True
    assert one(reader, "SELECT finalize.is_final('m.orders', '2026-11-29 15:00+00')") is False
    assert one(reader, "SELECT finalize.finalized_until(ARRAY['m.orders', 'm.daily'])").isoformat() \
        == "2026-11-29T00:00:00+00:00"


# --- A catalog from before loss_blocked --------------------------------------------

def test_a_catalog_before_the_update_and_the_update_in_one_session(pg3):
    pg3.sql('DROP DATABASE IF EXISTS sm_old')
    pg3.sql('CREATE DATABASE sm_old')
    try:
        pg3.sql("CREATE EXTENSION finalize VERSION '0.1.0'", dbname="sm_old")
        sql = lambda q, a=None: pg3.sql(q, a, dbname="sm_old")  # noqa: E731
        sql("CREATE SERVER src FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo')")
        assert sql("SELECT count(*) FROM pg_attribute WHERE attrelid = 'finalize.watermark'::regclass "
                   "AND attname = 'loss_blocked'") == [(0,)]
        conn = pg3.connect(dbname="sm_old")
        sql("SELECT finalize.track_table('m.events', 'src', 'dbo.events')")
        sql("SELECT finalize.record_range('m.events', NULL, '0x00000000000000000100', '2026-11-29 14:00+00')")
        assert hours_final(conn, "m.events") == [True] * 5
        assert one(conn, "SELECT finalize.finalized_until('m.events')").isoformat() == "2026-11-29T14:00:00+00:00"
        sql("ALTER EXTENSION finalize UPDATE")
        # The same backend finds the new column (the update invalidated its
        # cached column numbers) and answers as before.
        assert hours_final(conn, "m.events") == [True] * 5
        sql("UPDATE finalize.watermark SET loss_blocked = true")
        assert hours_final(conn, "m.events") == [True] * 5  # asked _loss_blocks: no loss
        assert one(conn, "SELECT finalize.is_final(ARRAY['m.events'], '2026-11-29 13:00+00')") is True
        conn.close()
    finally:
        pg3.sql('DROP DATABASE IF EXISTS sm_old WITH (FORCE)')


def test_a_loss_recorded_while_the_scheduler_releases_a_derived_table_still_holds_it(pg3, tables):
    """m.both is derived from m.ev1 and m.ev2. m.ev1's loss is acknowledged, so the scheduler may
    clear m.both's loss flag; meanwhile a transaction records a loss of m.ev2 (and moves m.ev2 on)
    and has not committed. The scheduler's snapshot cannot see that loss, and the transaction never
    touches m.both's row. Before the fix the scheduler cleared m.both's flag, and once the loss
    committed and the scheduler moved m.both's verdict past it, m.both read the lost hours of
    m.ev2 as final. Now the flag of m.ev2, set by that transaction, holds m.both at once (the
    sensors read the flags of the tables a table is built from)."""
    reader = pg3.connect(user="sm_reader")
    lose_hours_10_to_12(pg3, "m.ev1")
    pg3.sql("SELECT finalize.track_table('m.ev2', 'src', 'dbo.ev2')")
    pg3.sql("SELECT finalize.record_range('m.ev2', NULL, '0x00000000000000000100', '2026-11-29 08:00:01+00')")
    pg3.sql("SELECT finalize.record_range('m.ev2', '0x00000000000000000100', '0x00000000000000000200', "
            "'2026-11-29 10:15+00', 1, 0, 0, '2026-11-29 09:30+00', '2026-11-29 09:30+00')")
    pg3.sql("SELECT finalize.track_derived('m.both', ARRAY['m.ev1', 'm.ev2'])")
    # A probe: a derived table that only the scheduler's round moves.
    pg3.sql("SELECT finalize.track_derived('m.probe', ARRAY['m.orders'])")

    def scheduler_round(until):
        probe = pg3.sql("SELECT finalize.finalized_until('m.probe')")[0][0]
        offset = pg3.sql("SELECT offset_lsn FROM finalize.status WHERE table_name = 'm.orders'")[0][0]
        pg3.sql("SELECT finalize.record_range('m.orders', %s, %s, %s)",
                (offset, "0x%020X" % (int(offset, 16) + 0x100), until))
        pg3.wait_for(lambda: pg3.sql("SELECT finalize.finalized_until('m.probe')")[0][0] != probe,
                     what="a round of the scheduler")

    loss = pg3.connect(autocommit=False)
    try:
        with loss.cursor() as cur:       # the loss of m.ev2, as the worker records it, not committed yet
            cur.execute("SELECT finalize_internal.record_event(finalize_internal.tracked_id('m.ev2'), 'data_loss', "
                        "'0x00000000000000000200', '0x00000000000000000400', 'dbo_ev2', '{\"cause\": \"cleanup\"}', "
                        "'data_lost', 'purged')")
            cur.execute("SELECT finalize.resume_table('m.ev2')")
            cur.execute("SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('m.ev2'), '0x000000000000000003FF', "
                        "'2026-11-29 12:20+00', '2026-11-29 12:20+00', 'dbo_ev2', false, '{}')")
            cur.execute("SELECT finalize.record_range('m.ev2', '0x000000000000000003FF', '0x00000000000000000500', "
                        "'2026-11-30 01:00+00')")
        pg3.sql("SELECT finalize.acknowledge_loss('m.ev1', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'ok')")
        scheduler_round('2026-11-29 18:00+00')     # one that began after the acknowledgement
    finally:
        loss.commit()
        loss.close()
    # At once, and after the scheduler moved m.both on: hours 10 to 12 of m.ev2 were lost.
    assert hours_final(reader, "m.both")[1:4] == [False, False, False], hours_final(reader, "m.both")
    scheduler_round('2026-11-29 20:00+00')
    assert one(reader, "SELECT finalize.finalized_until(ARRAY['m.ev1', 'm.ev2'])") is not None
    assert pg3.sql("SELECT source_until FROM finalize.status WHERE table_name = 'm.both'")[0][0].isoformat() \
        == "2026-11-30T01:00:00+00:00"
    assert hours_final(reader, "m.both")[1:4] == [False, False, False], hours_final(reader, "m.both")
    assert pg3.sql("SELECT loss_blocked FROM finalize.status WHERE table_name = 'm.both'")[0][0] is True
    assert one(reader, "SELECT finalize.finalized_until('m.both')").isoformat() == "2026-11-29T10:00:00+00:00"


def test_a_derived_table_tracked_while_its_input_gains_a_loss_to_wait_for_is_held(pg3, tables):
    """track_derived computes the new table's loss flag from its snapshot; an admin makes a
    consumer of its input required meanwhile (the input then has a loss to acknowledge). Before the
    fix the new table's flag stayed clear and its sensors read the lost hours as final; now the
    input's flag holds it."""
    reader = pg3.connect(user="sm_reader")
    lose_hours_10_to_12(pg3, "m.ev1")
    pg3.sql("SELECT finalize.track_derived('m.job', ARRAY['m.ev1'])")
    pg3.sql("SELECT finalize.add_consumer('m.job', 'job', required => false)")
    pg3.sql("SELECT finalize.acknowledge_loss('m.ev1', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'ok')")
    follow(pg3)
    pg3.sql("SELECT finalize.report_processed('m.job', 'job', '2026-11-30 01:00+00')")
    assert hours_final(reader, "m.job")[1:4] == [True, True, True], "released: its consumer is not required"
    tracker = pg3.connect(autocommit=False)
    try:
        with tracker.cursor() as cur:
            cur.execute("SELECT finalize.track_derived('m.job_copy', ARRAY['m.job'])")
        # Declared before the acknowledgement, the consumer now counts: m.job has a loss to acknowledge.
        pg3.sql("SELECT finalize.alter_consumer('m.job', 'job', required => true)")
    finally:
        tracker.commit()
        tracker.close()
    follow(pg3)
    assert one(reader, "SELECT finalize.finalized_until('m.job_copy')") is not None
    assert hours_final(reader, "m.job")[1:4] == [False, False, False], "m.job must acknowledge the loss itself"
    assert hours_final(reader, "m.job_copy")[1:4] == [False, False, False], hours_final(reader, "m.job_copy")


def test_two_acknowledgements_that_each_rely_on_the_others_flag_keep_the_hold(pg3, tables):
    """m.job is derived from m.ev1 and its consumer is required, so it must acknowledge m.ev1's
    losses itself. Its admin acknowledges the first loss in a transaction left open; meanwhile a
    second loss of m.ev1 is recorded and acknowledged on m.ev1. Before the fix, that acknowledgement
    cleared m.ev1's flag because m.job's (committed) flag was still set, and m.job's commit then
    cleared that one: neither flag was left, and the sensors read m.job's hours of the second loss
    as final although it was never acknowledged on m.job (a write skew found by the review of
    issue 27). Now a flag stays while any table built from it has a loss to wait for."""
    reader = pg3.connect(user="sm_reader")
    lose_hours_10_to_12(pg3, "m.ev1")
    pg3.sql("SELECT finalize.track_derived('m.job', ARRAY['m.ev1'])")
    pg3.sql("SELECT finalize.add_consumer('m.job', 'job', required => true)")
    pg3.sql("SELECT finalize.acknowledge_loss('m.ev1', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'ok')")
    follow(pg3)
    admin = pg3.connect(autocommit=False)
    try:
        with admin.cursor() as cur:     # m.job's admin: the first loss, acknowledged, not committed yet
            cur.execute("SELECT finalize.acknowledge_loss('m.job', '2026-11-29 10:00+00', "
                        "'2026-11-29 13:00+00', 'rebuilt')")
        # A second loss of m.ev1, commit times [2026-11-30 01:00, 03:20], and the source moves on.
        pg3.sql("SELECT finalize_internal.record_event(finalize_internal.tracked_id('m.ev1'), 'data_loss', "
                "'0x00000000000000000500', '0x00000000000000000700', 'dbo_events', '{\"cause\": \"cleanup\"}', "
                "'data_lost', 'purged')")
        pg3.sql("SELECT finalize.resume_table('m.ev1')")
        pg3.sql("SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('m.ev1'), '0x000000000000000006FF', "
                "'2026-11-30 03:20+00', '2026-11-30 03:20+00', 'dbo_events', false, '{}')")
        pg3.sql("SELECT finalize.record_range('m.ev1', '0x000000000000000006FF', '0x00000000000000000800', "
                "'2026-11-30 06:00+00')")
        pg3.sql("SELECT finalize.acknowledge_loss('m.ev1', '2026-11-30 01:00+00', '2026-11-30 04:00+00', 'ok')")
    finally:
        admin.commit()
        admin.close()
    pg3.sql("SELECT finalize.report_processed('m.job', 'job', '2026-11-30 06:00+00')")
    follow(pg3)
    follow(pg3)
    later = ["2026-11-30 %02d:00+00" % h for h in (0, 1, 2, 3, 4)]
    with reader.cursor() as cur:
        cur.execute("SELECT finalize.is_final('m.job', p::timestamptz) FROM unnest(%s::text[]) AS p", (later,))
        finals = [r[0] for r in cur.fetchall()]
    assert finals == [True, False, False, False, True], finals
    assert hours_final(reader, "m.job")[1:4] == [True, True, True], "the first loss is acknowledged on m.job"
    assert one(reader, "SELECT finalize.finalized_until('m.job')").isoformat() == "2026-11-30T01:00:00+00:00"
    assert pg3.sql("SELECT loss_blocked FROM finalize.status WHERE table_name = 'm.job'")[0][0] is True


# --- No sensor path runs SQL -----------------------------------------------------

def lossy_lineage(pg):
    """n.events lost hours 10 to 12; n.hourly is built from it by a job (a
    required consumer that processed everything), n.view without one; the
    sharded table n.sharded has a shard s1 final until 14:00 and a shard s2
    that lost what n.events lost."""
    lose_hours_10_to_12(pg, "n.events")
    pg.sql("SELECT finalize.track_derived('n.hourly', ARRAY['n.events'])")
    pg.sql("SELECT finalize.add_consumer('n.hourly', 'job')")
    pg.sql("SELECT finalize.report_processed('n.hourly', 'job', '2026-11-30 01:00+00')")
    pg.sql("SELECT finalize.track_derived('n.view', ARRAY['n.events'])")
    pg.sql("SELECT finalize.track_derived('n.seoul', ARRAY['n.hourly'], '1 day', 'Asia/Seoul')")
    pg.sql("SELECT finalize.track_sharded('n.sharded', '1 hour')")
    pg.sql("SELECT finalize.add_shard('n.sharded', 's1', 'src', 'dbo.sharded1')")
    pg.sql("SELECT finalize.record_range('n.sharded/s1', NULL, '0x00000000000000000100', '2026-11-29 14:00+00')")
    pg.sql("SELECT finalize.add_shard('n.sharded', 's2', 'src', 'dbo.sharded2')")
    shard = "n.sharded/s2"
    pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-29 08:00:01+00')", (shard,))
    pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
           "'2026-11-29 10:15+00', 1, 0, 0, '2026-11-29 09:30+00', '2026-11-29 09:30+00')", (shard,))
    pg.sql("SELECT finalize_internal.record_event(finalize_internal.tracked_id(%s), 'data_loss', '0x00000000000000000200', "
           "'0x00000000000000000400', 'dbo_sharded2', '{}', 'data_lost', 'purged')", (shard,))
    pg.sql("SELECT finalize.resume_table(%s)", (shard,))
    pg.sql("SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id(%s), '0x000000000000000003FF', "
           "'2026-11-29 12:20+00', '2026-11-29 12:20+00', 'dbo_sharded2', false, '{}')", (shard,))
    pg.sql("SELECT finalize.record_range(%s, '0x000000000000000003FF', '0x00000000000000000500', "
           "'2026-11-29 14:00+00')", (shard,))
    follow(pg)


def test_no_sensor_path_calls_a_sql_or_plpgsql_function(pg3, tables):
    """Every sensor function on a table a loss holds (its own, an input's, a
    shard's), on a derived table with a consumer, on a sharded table and on
    one shard answers from C alone: with track_functions = 'all', the
    transaction counts calls of the sensor functions and of nothing else
    (before issue 43 they ran _loss_blocks and _loss_cap, SQL and PL/pgSQL,
    through SPI)."""
    lossy_lineage(pg3)
    conn = pg3.connect(autocommit=False)
    with conn.cursor() as cur:
        cur.execute("SET LOCAL track_functions = 'all'")
        answers = {}
        for table in ["n.events", "n.hourly", "n.view", "n.sharded", "n.sharded/s1", "n.sharded/s2"]:
            cur.execute("SELECT finalize.is_final(%s, '2026-11-29 09:00+00'), "
                        "finalize.is_final(%s, '2026-11-29 11:00+00'), finalize.finalized_until(%s), "
                        "finalize.wait_final(%s, '2026-11-29 09:00+00', '0'), "
                        "finalize.is_final(ARRAY[%s, 'm.orders'], '2026-11-29 09:00+00'), "
                        "finalize.finalized_until(ARRAY[%s, 'm.orders'])", (table,) * 6)
            answers[table] = [v.isoformat() if hasattr(v, "isoformat") else v for v in cur.fetchone()]
        cur.execute("SELECT finalize.is_final('n.seoul', '2026-11-28 12:00+09'), "
                    "finalize.is_final('n.seoul', '2026-11-29 12:00+09'), finalize.finalized_until('n.seoul')")
        answers["n.seoul"] = [v.isoformat() if hasattr(v, "isoformat") else v for v in cur.fetchone()]
        cur.execute("SELECT funcname, sum(calls) FROM pg_stat_xact_user_functions GROUP BY funcname "
                    "ORDER BY funcname")
        called = {name: int(calls) for name, calls in cur.fetchall()}
    conn.rollback()
    held = [True, False, "2026-11-29T10:00:00+00:00", True, True, "2026-11-29T10:00:00+00:00"]
    assert answers == {
        "n.events": held, "n.hourly": held, "n.view": held, "n.sharded": held, "n.sharded/s2": held,
        "n.sharded/s1": [True, True, "2026-11-29T14:00:00+00:00", True, True, "2026-11-29T14:00:00+00:00"],
        # Seoul's day 28 ends at 2026-11-28 15:00 UTC, before the loss; day 29 holds it.
        "n.seoul": [True, False, "2026-11-28T15:00:00+00:00"]}
    assert called == {"finalized_until": 13, "is_final": 20, "wait_final": 6}


# The loss rule as SQL wrote it before issue 43 made it C alone
# (src/sensor/losses.c, loss_rule.c, served to SQL by loss_sql.c): an
# independent oracle, kept here only, that the C is compared against.
SQL_LOSS_RULE = [r"""
CREATE FUNCTION pg_temp.sql_ack_reach(table_id bigint, s timestamptz, e timestamptz, since timestamptz)
RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_variable
DECLARE
    reach timestamptz := s;
    further timestamptz;
BEGIN
    WHILE reach < e LOOP
        SELECT max(a.period_to) INTO further FROM finalize.loss_ack a
         WHERE a.table_id = table_id AND a.acknowledged_at > since
           AND a.period_from <= reach AND a.period_to > reach;
        IF further IS NULL THEN
            RETURN reach;
        END IF;
        reach := further;
    END LOOP;
    RETURN reach;
END
$$""", r"""
CREATE FUNCTION pg_temp.sql_loss_ackers(table_id bigint)
RETURNS TABLE (loss_id bigint, acker_id bigint, acker_granularity interval, acker_zone text,
               span_from timestamptz, span_to timestamptz)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH RECURSIVE up(id, path) AS (
        SELECT sql_loss_ackers.table_id, '{}'::bigint[]
        UNION
        SELECT d.input_id, up.path || up.id
          FROM finalize.derived_input d JOIN up ON d.table_id = up.id),
    held AS (
        SELECT l.loss_id AS id, l.table_id AS lost_id, l.lost_from, l.lost_to, l.created_at, t.granularity AS g,
               t.period_zone AS z,
               CASE WHEN isfinite(l.lost_from) THEN finalize.period_start(l.lost_from, t.granularity, t.period_zone)
                    ELSE l.lost_from END AS lost_span_from,
               CASE WHEN isfinite(l.lost_to) THEN finalize.period_end(l.lost_to, t.granularity, t.period_zone)
                    ELSE l.lost_to END AS lost_span_to
          FROM finalize.tracked_table t
          JOIN finalize.loss l ON l.table_id = t.table_id
         WHERE t.table_id IN (SELECT up.id FROM up)),
    ackers AS (
        SELECT h.id, h.lost_id AS acker, h.g, h.z, h.lost_from, h.lost_to FROM held h
        UNION ALL
        SELECT DISTINCT h.id, k.table_id, k.granularity, k.period_zone, h.lost_from, h.lost_to
          FROM held h
          JOIN up p ON p.id = h.lost_id
         CROSS JOIN LATERAL unnest(p.path) AS on_path(id)
          JOIN finalize.tracked_table k ON k.table_id = on_path.id
         WHERE EXISTS (SELECT FROM finalize.consumer c
                        WHERE c.table_id = k.table_id AND c.required
                          AND c.created_at < coalesce(
                                  (SELECT max(a.acknowledged_at) FROM finalize.loss_ack a
                                    WHERE a.table_id = h.lost_id AND a.acknowledged_at > h.created_at
                                      AND a.period_from < h.lost_span_to AND a.period_to > h.lost_span_from),
                                  'infinity')))
    SELECT x.id, x.acker, x.g, x.z,
           CASE WHEN isfinite(x.lost_from) THEN finalize.period_start(x.lost_from, x.g, x.z) ELSE x.lost_from END,
           CASE WHEN isfinite(x.lost_to) THEN finalize.period_end(x.lost_to, x.g, x.z) ELSE x.lost_to END
      FROM ackers x;
END
$$""", r"""
CREATE FUNCTION pg_temp.sql_open_loss_ackers(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS TABLE (loss_id bigint, acker_id bigint) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT a.loss_id, a.acker_id
      FROM pg_temp.sql_loss_ackers(sql_open_loss_ackers.table_id) AS a
      JOIN finalize.loss l ON l.loss_id = a.loss_id
     WHERE l.lost_from < sql_open_loss_ackers.period_end AND l.lost_to >= sql_open_loss_ackers.period_start
       AND pg_temp.sql_ack_reach(a.acker_id,
               finalize.period_start(GREATEST(sql_open_loss_ackers.period_start, l.lost_from), a.acker_granularity,
                                     a.acker_zone),
               finalize.period_end(LEAST(sql_open_loss_ackers.period_end - interval '1 microsecond', l.lost_to),
                                   a.acker_granularity, a.acker_zone),
               l.created_at)
           < finalize.period_end(LEAST(sql_open_loss_ackers.period_end - interval '1 microsecond', l.lost_to),
                                 a.acker_granularity, a.acker_zone);
END
$$""", r"""
CREATE FUNCTION pg_temp.sql_loss_cap(table_id bigint) RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    cap timestamptz;
BEGIN
    SELECT min(CASE WHEN isfinite(h.held_from) THEN finalize.period_start(h.held_from, t.granularity, t.period_zone)
                    ELSE h.held_from END) INTO cap
      FROM finalize.tracked_table t
     CROSS JOIN LATERAL (
           SELECT GREATEST(CASE WHEN isfinite(r.reach)
                                THEN finalize.period_start(r.reach, a.acker_granularity, a.acker_zone)
                                ELSE r.reach END,
                           l.lost_from) AS held_from
             FROM pg_temp.sql_loss_ackers(t.table_id) AS a
             JOIN finalize.loss l ON l.loss_id = a.loss_id
            CROSS JOIN LATERAL (SELECT pg_temp.sql_ack_reach(a.acker_id, a.span_from, a.span_to,
                                                             l.created_at) AS reach) AS r
            WHERE r.reach < a.span_to) AS h
     WHERE t.table_id = sql_loss_cap.table_id;
    RETURN coalesce(cap, 'infinity');
END
$$"""]


def test_the_c_loss_rule_answers_as_the_sql_rule_did(pg3, tables):
    """The loss rule in C, as the sensors read it and as SQL calls it
    (finalize_internal.loss_blocks, loss_cap, loss_ackers, open_loss_ackers,
    has_open_loss, ack_reach, acked), against the SQL rule it replaced
    (SQL_LOSS_RULE) for every hour and table of a lineage, as
    acknowledgements cover the loss bit by bit."""
    lossy_lineage(pg3)
    conn = pg3.connect()
    with conn.cursor() as cur:
        for statement in SQL_LOSS_RULE:
            cur.execute(statement)
    compare = """
SELECT t.table_name, p,
       finalize_internal.loss_blocks(t.table_id, p, finalize.period_end(p, t.granularity, t.period_zone)),
       EXISTS (SELECT FROM pg_temp.sql_open_loss_ackers(t.table_id, p, finalize.period_end(p, t.granularity, t.period_zone))),
       ARRAY(SELECT row(o.*)::text FROM finalize_internal.open_loss_ackers(t.table_id, p,
                 finalize.period_end(p, t.granularity, t.period_zone)) AS o ORDER BY 1),
       ARRAY(SELECT row(o.*)::text FROM pg_temp.sql_open_loss_ackers(t.table_id, p,
                 finalize.period_end(p, t.granularity, t.period_zone)) AS o ORDER BY 1),
       finalize_internal.loss_cap(t.table_id), pg_temp.sql_loss_cap(t.table_id),
       finalize_internal.has_open_loss(t.table_id),
       EXISTS (SELECT FROM pg_temp.sql_loss_ackers(t.table_id) AS a JOIN finalize.loss l ON l.loss_id = a.loss_id
                WHERE pg_temp.sql_ack_reach(a.acker_id, a.span_from, a.span_to, l.created_at) < a.span_to),
       ARRAY(SELECT row(a.*)::text FROM finalize_internal.loss_ackers(t.table_id) AS a ORDER BY 1),
       ARRAY(SELECT row(a.*)::text FROM pg_temp.sql_loss_ackers(t.table_id) AS a ORDER BY 1),
       ARRAY(SELECT row(finalize_internal.ack_reach(a.acker_id, a.span_from, a.span_to, l.created_at),
                        finalize_internal.acked(a.acker_id, a.span_from, a.span_to, l.created_at))::text
               FROM pg_temp.sql_loss_ackers(t.table_id) AS a JOIN finalize.loss l ON l.loss_id = a.loss_id
              ORDER BY a.loss_id, a.acker_id),
       ARRAY(SELECT row(r.reach, r.reach >= a.span_to)::text
               FROM pg_temp.sql_loss_ackers(t.table_id) AS a JOIN finalize.loss l ON l.loss_id = a.loss_id
              CROSS JOIN LATERAL (SELECT pg_temp.sql_ack_reach(a.acker_id, a.span_from, a.span_to,
                                                               l.created_at) AS reach) AS r
              ORDER BY a.loss_id, a.acker_id)
  FROM finalize.tracked_table t
 CROSS JOIN LATERAL generate_series(finalize.period_start('2026-11-29 06:00+00', t.granularity, t.period_zone),
                                    '2026-11-29 16:00+00', t.granularity) AS p
 WHERE t.table_name LIKE 'n.%' AND t.untracked_at IS NULL"""
    acks = [("n.events", "2026-11-29 12:00+00", "2026-11-29 13:00+00"),
            ("n.events", "2026-11-29 10:00+00", "2026-11-29 11:00+00"),
            ("n.hourly", "2026-11-29 10:00+00", "2026-11-29 12:00+00"),
            ("n.sharded/s2", "2026-11-29 10:00+00", "2026-11-29 13:00+00"),
            ("n.events", "2026-11-29 11:00+00", "2026-11-29 12:00+00"),
            ("n.hourly", "2026-11-29 12:00+00", "2026-11-29 13:00+00")]
    seen = set()
    ackers_seen = set()
    for step in range(len(acks) + 1):
        rows = one_all(conn, compare)
        assert len(rows) > 50
        for (name, p, c_blocks, sql_blocks, c_open, sql_open, c_cap, sql_cap, c_has, sql_has,
             c_ackers, sql_ackers, c_reach, sql_reach) in rows:
            assert (name, p, c_blocks, c_open, c_cap, c_has, c_ackers, c_reach) == \
                (name, p, sql_blocks, sql_open, sql_cap, sql_has, sql_ackers, sql_reach)
            seen.add((c_blocks, c_cap.isoformat() if c_cap.year < 9999 else "infinity", c_has))
            ackers_seen.add(len(c_ackers))
        if step < len(acks):
            pg3.sql("SELECT finalize.acknowledge_loss(%s, %s, %s, 'repaired')", acks[step])
            follow(pg3)
    # Both answers of loss_blocks and has_open_loss, caps held and released,
    # and tables with one acker and with two (n.hourly's consumer) were compared.
    assert {b for b, _, _ in seen} == {True, False}
    assert {h for _, _, h in seen} == {True, False}
    assert {c for _, c, _ in seen} >= {"2026-11-29T10:00:00+00:00", "2026-11-29T12:00:00+00:00", "infinity"}
    assert {1, 2} <= ackers_seen


def one_all(conn, query, args=None):
    with conn.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchall()
