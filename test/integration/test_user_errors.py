"""Errors a user causes carry no stack of finalize's internals: every
user-facing function, called with bad input, fails with its message and
hint and no CONTEXT line of finalize's own functions (psql shows CONTEXT
with its default settings); a caller's own code keeps its context lines;
an internal failure keeps the whole stack, which a bug report needs."""

import os
import subprocess
import sys

import psycopg2
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from pgcluster import PG_BIN, cluster_with_source  # noqa: E402

TABLE = "ue.orders"
NOT_TRACKED = "ue.nosuch"

# One bad call of every user-facing function (by name; several calls where
# errors come from different depths: the C entry point, the owner's SQL body,
# a PL/pgSQL helper under it, a C check called from PL/pgSQL).
BAD_CALLS = [
    ("track_table", "SELECT finalize.track_table('ue.other', 'nosuch', 'dbo.orders')"),
    ("track_table", "SELECT finalize.track_table('ue.other', 'src', 'dbo.orders', period_zone => 'Nowhere/Zone')"),
    ("track_table", "SELECT finalize.track_table('ue.other', 'src', 'dbo.orders', granularity => '1 month 1 day')"),
    ("track_table", f"SELECT finalize.track_table('{TABLE}', 'src', 'dbo.orders')"),
    ("untrack_table", f"SELECT finalize.untrack_table('{NOT_TRACKED}')"),
    ("alter_tracked_table", f"SELECT finalize.alter_tracked_table('{TABLE}', period_zone => 'Nowhere/Zone')"),
    ("alter_tracked_table", f"SELECT finalize.alter_tracked_table('{NOT_TRACKED}', max_lag => '1 hour')"),
    ("resume_table", f"SELECT finalize.resume_table('{NOT_TRACKED}')"),
    ("release_source", "SELECT finalize.release_source('nosuch')"),
    ("changes_by_event_period", f"SELECT * FROM finalize.changes_by_event_period('{NOT_TRACKED}', now(), now())"),
    ("lateness", f"SELECT * FROM finalize.lateness('{NOT_TRACKED}', 0.5)"),
    ("record_range", f"SELECT finalize.record_range('{TABLE}', NULL, 'not an LSN', now())"),
    ("record_range", f"SELECT finalize.record_range('{NOT_TRACKED}', NULL, '0x00000000000000000100', now())"),
    ("purge_facts", "SELECT finalize.purge_facts('-1 day')"),
    ("add_consumer", f"SELECT finalize.add_consumer('{NOT_TRACKED}', 'spark')"),
    ("add_consumer", f"SELECT finalize.add_consumer('{TABLE}', 'lake', 'iceberg', 'nosuch', 'ns', 'orders', true)"),
    ("alter_consumer", f"SELECT finalize.alter_consumer('{TABLE}', 'nosuch', required => false)"),
    ("drop_consumer", f"SELECT finalize.drop_consumer('{NOT_TRACKED}', 'spark')"),
    ("report_progress", f"SELECT finalize.report_progress('{TABLE}', 'nosuch', '0x00000000000000000100')"),
    ("report_progress", f"SELECT finalize.report_progress('{TABLE}', 'spark', 'not an LSN')"),
    ("report_processed", f"SELECT finalize.report_processed('{TABLE}', 'nosuch', now())"),
    ("track_derived", f"SELECT finalize.track_derived('ue.daily', ARRAY['{NOT_TRACKED}'])"),
    ("acknowledge_loss", f"SELECT finalize.acknowledge_loss('{TABLE}', now(), now() - interval '1 hour', 'x')"),
    ("track_sharded", "SELECT finalize.track_sharded('ue.sharded', period_zone => 'Nowhere/Zone')"),
    ("add_shard", f"SELECT finalize.add_shard('{NOT_TRACKED}', 's1', 'src', 'dbo.orders')"),
    ("drop_shard", f"SELECT finalize.drop_shard('{NOT_TRACKED}', 's1')"),
    ("acknowledge_alert", "SELECT finalize.acknowledge_alert(-1, 'seen')"),
    ("add_publication", f"SELECT finalize.add_publication('{NOT_TRACKED}', 'p', NULL)"),
    ("add_publication", f"SELECT finalize.add_publication('{TABLE}', 'p', 'no_such_server')"),
    ("add_publication", f"SELECT finalize.add_publication('{TABLE}', 'bad name', NULL)"),
    ("drop_publication", f"SELECT finalize.drop_publication('{TABLE}', 'no_such_publication')"),
    ("retry_publication", f"SELECT finalize.retry_publication('{NOT_TRACKED}', 'p')"),
    ("finalized_until", f"SELECT finalize.finalized_until('{NOT_TRACKED}')"),
    ("finalized_until", f"SELECT finalize.finalized_until(ARRAY['{TABLE}', '{NOT_TRACKED}'])"),
    ("is_final", f"SELECT finalize.is_final('{NOT_TRACKED}', now())"),
    ("is_final", f"SELECT finalize.is_final(ARRAY['{NOT_TRACKED}'], now())"),
    ("wait_final", f"SELECT finalize.wait_final('{NOT_TRACKED}', now(), '1 second')"),
    ("wait_final", f"SELECT finalize.wait_final(ARRAY['{NOT_TRACKED}'], now(), '1 second')"),
    ("explain_verdict", f"SELECT * FROM finalize.explain_verdict('{NOT_TRACKED}')"),
    ("changes_by_period", f"SELECT * FROM finalize.changes_by_period('{NOT_TRACKED}', now(), now())"),
    ("changes_by_period", f"SELECT * FROM finalize.changes_by_period('{TABLE}', now(), now() - interval '1 day')"),
    ("register_partition", f"SELECT finalize.register_partition('{NOT_TRACKED}', 'dt=2026-11-27', 'p/')"),
    ("register_partition", f"SELECT finalize.register_partition('{TABLE}', 'dt=2026-11-27', 'p/', "
                           "'2026-11-27 00:30+00')"),
    ("set_projection", f"SELECT finalize.set_projection('{NOT_TRACKED}', 'p/{{date}}/', now(), now())"),
    ("render_location", "SELECT finalize.render_location('p/{date}/', now(), 'Nowhere/Zone')"),
    ("release_gate", "SELECT * FROM finalize.release_gate('{}')"),
    ("release_gate", f"SELECT * FROM finalize.release_gate('{{\"table\": \"{NOT_TRACKED}\", \"partition\": \"p\", "
                     "\"generation\": \"g\", \"store\": \"file:///tmp\", \"files\": {}}')"),
    ("compare_inventories", "SELECT finalize.compare_inventories('{\"a\": \"x\"}', '{}', 'x')"),
    ("release_iceberg", "SELECT * FROM finalize.release_iceberg('{}')"),
    ("period_start", "SELECT finalize.period_start(now(), '1 hour', 'Nowhere/Zone')"),
    ("period_start", "SELECT finalize.period_start(now(), '-1 hour')"),
    ("period_end", "SELECT finalize.period_end(now(), '1 hour', 'Nowhere/Zone')"),
    ("mssql_local_to_instant", "SELECT finalize.mssql_local_to_instant('2026-11-27 10:00', 'Nowhere/Zone')"),
]

# User-facing functions no input makes fail (they answer NULL or nothing for
# what they do not know).
NO_BAD_INPUT = {"dropped_notifications", "quote_mssql_ident", "release_report", "released_generation",
                "retired_generations"}


@pytest.fixture(scope="module")
def pg():
    cluster = cluster_with_source(conf={"finalize.enabled": "off"})
    cluster.sql("CREATE USER MAPPING FOR PUBLIC SERVER src OPTIONS (username 'cdc', password 'not-contacted')")
    cluster.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (TABLE,))
    cluster.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-27 06:00+00')", (TABLE,))
    cluster.sql("SELECT finalize.add_consumer(%s, 'spark')", (TABLE,))
    yield cluster
    cluster.cleanup()


def error_of(pg, sql):
    """The error a statement raises (it must raise one)."""
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            with pytest.raises(psycopg2.Error) as e:
                cur.execute(sql)
        return e.value
    finally:
        conn.close()


def test_every_user_facing_function_is_called_with_bad_input(pg):
    names = {n for (n,) in pg.sql("SELECT DISTINCT p.proname FROM pg_proc p JOIN pg_namespace n "
                                  "ON n.oid = p.pronamespace WHERE n.nspname = 'finalize' "
                                  "AND p.proname !~ '^_' AND p.prorettype <> 'trigger'::regtype "
                                  "AND p.proname NOT LIKE '%%validator'")}
    assert names == {name for name, _ in BAD_CALLS} | NO_BAD_INPUT


@pytest.mark.parametrize("name,sql", BAD_CALLS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD_CALLS)])
def test_a_user_error_carries_no_internal_stack(pg, name, sql):
    e = error_of(pg, sql)
    assert e.pgcode[:2] not in ("XX", "53", "58"), (name, e.pgcode, str(e))
    assert e.diag.context is None, f"{name}: {e.pgcode} {e.diag.message_primary}\nCONTEXT: {e.diag.context}"
    assert e.diag.internal_query is None, (name, e.diag.internal_query)
    # The message itself still says what is wrong.
    assert e.diag.message_primary


def test_psql_shows_no_context_line(pg):
    """As a user sees it: psql with its default VERBOSITY and SHOW_CONTEXT."""
    script = "\n".join(sql + ";" for _, sql in BAD_CALLS)
    out = subprocess.run([f"{PG_BIN}/psql", "-X", "-h", pg.dir, "-p", str(pg.port), "-U", "postgres",
                          "-d", "postgres", "-v", "VERBOSITY=default"],
                         input=script, capture_output=True, text=True)
    assert out.stderr.count("ERROR:") == len(BAD_CALLS), out.stderr
    assert "CONTEXT:" not in out.stderr, out.stderr
    assert "finalize_internal." not in out.stderr, out.stderr


def test_the_callers_own_context_stays(pg):
    """A DO block or a function of the user's keeps its lines; finalize's go."""
    e = error_of(pg, f"DO $$ BEGIN PERFORM finalize.untrack_table('{NOT_TRACKED}'); END $$")
    assert "inline_code_block" in e.diag.context and "finalize_internal." not in e.diag.context, e.diag.context
    pg.sql("CREATE FUNCTION public.ue_setup() RETURNS void LANGUAGE plpgsql AS "
           f"$$ BEGIN PERFORM finalize.track_table('ue.other', 'nosuch', 'dbo.orders'); END $$")
    try:
        e = error_of(pg, "SELECT public.ue_setup()")
        assert e.diag.message_primary == 'server "nosuch" does not exist'
        assert "ue_setup()" in e.diag.context and "finalize_internal." not in e.diag.context, e.diag.context
    finally:
        pg.sql("DROP FUNCTION public.ue_setup()")
    # A handler of the caller's catches it as it was raised.
    conn = pg.connect()
    try:
        conn.cursor().execute(f"""DO $$ BEGIN PERFORM finalize.explain_verdict('{NOT_TRACKED}');
                                  EXCEPTION WHEN undefined_object THEN RAISE NOTICE 'caught %', SQLERRM; END $$""")
        assert any(f'caught table "{NOT_TRACKED}" is not tracked by finalize' in n for n in conn.notices), conn.notices
    finally:
        conn.close()


def test_an_internal_failure_keeps_its_stack(pg):
    """A bug (SQLSTATE class XX) keeps finalize's lines, for the report."""
    conn = pg.connect(autocommit=False)
    try:
        with conn.cursor() as cur:
            # Stands in for a bug deep inside: the helper that says a table is not tracked fails.
            cur.execute("CREATE OR REPLACE FUNCTION finalize_internal.not_tracked(table_name text) RETURNS void "
                        "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'cache lookup failed' "
                        "USING ERRCODE = 'internal_error'; END $$")
            for sql in (f"SELECT * FROM finalize.explain_verdict('{NOT_TRACKED}')",
                        f"SELECT finalize.add_consumer('{NOT_TRACKED}', 'spark')"):
                cur.execute("SAVEPOINT s")
                with pytest.raises(psycopg2.Error) as e:
                    cur.execute(sql)
                cur.execute("ROLLBACK TO SAVEPOINT s")
                assert e.value.pgcode == "XX000"
                assert "finalize_internal.not_tracked" in e.value.diag.context, (sql, e.value.diag.context)
    finally:
        conn.rollback()
        conn.close()
