"""Every privilege rule in one place: each of finalize's roles (and a role
outside them) tries what it must not do, and hostile roles plant look-alike
types, domains, operators and functions in pg_temp and in schemas of their
own ahead of pg_catalog, then call everything they may call. None of their
objects may ever run as another role, and the functions must still work.

The look-alikes call a trap that logs who ran it and tries ALTER ROLE ...
SUPERUSER: run by the role that planted it, both are harmless (the ALTER
fails); run as the extension's owner, the log shows it and the ALTER makes
the attacker a superuser.

The tenants part (at the end) has two teams sharing a source try, with open
transactions, long statements, floods and crafted input, to stall, slow or
change what the other team sees: none may."""

import json
import os
import sys
import time

import psycopg2
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from storefiles import write_file  # noqa: E402
from pgcluster import cluster_with_source  # noqa: E402

TABLE = "sec.orders"
PASSWORD_SECRET = "do-not-leak-0451"

# What each role may execute in schema finalize (the role table of docs/reference.md, Roles).
READER = {
    "finalized_until(text)", "is_final(text,timestamp with time zone)",
    "explain_verdict(text,timestamp with time zone)",
    "period_start(timestamp with time zone,interval)", "period_end(timestamp with time zone,interval)",
    "period_start(timestamp with time zone,interval,text)", "period_end(timestamp with time zone,interval,text)",
    "mssql_local_to_instant(timestamp without time zone,text)", "dropped_notifications()",
    "_loss_holds(bigint)",  # internal, asked by finalize.status
    "_sensor_until(bigint,text,timestamp with time zone,interval,text,boolean)",  # internal, finalize.status's verdict
    "_tracked_since(bigint)", "_local_time(timestamp with time zone,text)",  # internal, finalize.status
    "released_generation(text,text)", "render_location(text,timestamp with time zone)",
    "render_location(text,timestamp with time zone,text)",
    "render_location(text,timestamp with time zone,text,text)",
    "finalized_until(text[])", "is_final(text[],timestamp with time zone)",
    "lateness(text,double precision,interval)",
    "wait_final(text,timestamp with time zone,interval)", "wait_final(text[],timestamp with time zone,interval)",
}
PIPELINE = READER | {"report_progress(text,text,text)", "report_processed(text,text,timestamp with time zone)"}
PUBLISHER = READER | {
    "changes_by_period(text,timestamp with time zone,timestamp with time zone)",
    "changes_by_event_period(text,timestamp with time zone,timestamp with time zone)",
    "release_gate(jsonb)", "release_iceberg(jsonb)", "compare_inventories(jsonb,jsonb,text)", "register_partition(text,text,text,timestamp with time zone,timestamp with time zone)",
    "retired_generations(text,interval)",
}
ADMIN = PUBLISHER | PIPELINE | {
    "track_table(text,text,text,interval,text,text,text,text,text,text,interval,double precision,interval,text)",
    "untrack_table(text,boolean,boolean)",
    "add_consumer(text,text,boolean,regrole)", "add_consumer(text,text,text,text,text,text,boolean)",
    "add_consumer(text,text,finalize.delta_location,text,text,boolean)",
    "alter_consumer(text,text,boolean,regrole,boolean)",
    "drop_consumer(text,text)", "track_derived(text,text[],interval,text)",
    "acknowledge_loss(text,timestamp with time zone,timestamp with time zone,text)",
    "alter_tracked_table(text,interval,text,text,text,text,text,interval,double precision,interval,interval,text)",
    "resume_table(text)", "release_source(text)",
    "record_range(text,text,text,timestamp with time zone,bigint,bigint,bigint,timestamp with time zone,"
    "timestamp with time zone,text,text,jsonb,jsonb,bytea,timestamp with time zone,timestamp with time zone)",
    "purge_facts(interval)", "quote_mssql_ident(text)", "acknowledge_alert(bigint,text)",
    "set_projection(text,text,timestamp with time zone,timestamp with time zone)",
    "release_report(bigint)",
    "track_sharded(text,interval,text,text,text,text,text,interval,double precision,interval,text)",
    "add_shard(text,text,text,text,text)", "drop_shard(text,text,boolean)",
    "add_publication(text,text,text,jsonb,timestamp with time zone)", "drop_publication(text,text)",
    "retry_publication(text,text)",
    "_source_workers()",    # behind the finalize.source_workers view, which runs it as the caller
}
MAY_EXECUTE = {"sec_reader": READER, "sec_pipeline": PIPELINE, "sec_publisher": PUBLISHER, "sec_admin": ADMIN,
               "sec_nobody": set()}
MAY_SELECT = {
    "sec_reader": {"status", "consumers", "late_data", "alerts", "alert_deliveries"},
    "sec_pipeline": {"status", "consumers", "late_data", "alerts", "alert_deliveries"},
    "sec_publisher": {"status", "consumers", "facts", "releases", "late_data", "alerts", "alert_deliveries"},
    "sec_admin": {"status", "consumers", "facts", "releases", "tracked_table", "watermark", "fact", "source_status",
                  "table_condition", "consumer", "consumer_hold", "derived_input", "loss", "loss_ack", "lake_consumer",
                  "shard_consumer", "source_workers",
                  "partition_registration", "projection", "release", "published", "late_data",
                  "event_fact", "lateness_hour", "late_period", "alerts", "alert",
                  "alert_deliveries", "alert_delivery", "alert_target_state",
                  "publications", "publication", "publication_event"},
    "sec_nobody": set(),
}


@pytest.fixture(scope="module")
def pg():
    cluster = cluster_with_source()
    cluster.sql("CREATE USER MAPPING FOR PUBLIC SERVER src OPTIONS (username 'cdc', password %s)",
                (PASSWORD_SECRET,))
    cluster.sql("CREATE ROLE sec_reader LOGIN IN ROLE finalize_reader")
    cluster.sql("CREATE ROLE sec_pipeline LOGIN IN ROLE finalize_pipeline")
    cluster.sql("CREATE ROLE sec_publisher LOGIN IN ROLE finalize_publisher, pg_read_server_files")
    cluster.sql("CREATE ROLE sec_admin LOGIN IN ROLE finalize_admin")
    cluster.sql("CREATE ROLE sec_nobody LOGIN")
    for role in MAY_EXECUTE:
        # Hostile roles get schemas of their own (and pg_temp, which every role has).
        cluster.sql(f"GRANT CREATE ON DATABASE postgres TO {role}")
    cluster.sql("GRANT USAGE ON FOREIGN SERVER src TO sec_admin")
    cluster.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (TABLE,))
    cluster.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-27 06:00+00')", (TABLE,))
    cluster.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
                "'2026-11-27 09:30+00', 2, 0, 0, '2026-11-27 08:10+00', '2026-11-27 08:20+00')", (TABLE,))
    yield cluster
    cluster.cleanup()


def connect(pg, role):
    return pg.connect(user=role)


def run(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall() if cur.description else None


def denied(conn, sql, args=None):
    """The statement fails for lack of a privilege (and changes nothing)."""
    with pytest.raises(psycopg2.Error) as e:
        run(conn, sql, args)
    assert e.value.pgcode == "42501", f"{sql}: {e.value.pgcode} {e.value}"
    return str(e.value)


# --- Look-alikes -------------------------------------------------------------

# Operators a query may use, as (name, left, right, result).
OPERATORS = [
    ("=", "text", "text", "boolean"), ("=", "bigint", "bigint", "boolean"), ("=", "name", "name", "boolean"),
    ("<>", "text", "text", "boolean"), ("<", "text", "text", "boolean"),
    ("<", "timestamptz", "timestamptz", "boolean"), ("<=", "timestamptz", "timestamptz", "boolean"),
    (">", "timestamptz", "timestamptz", "boolean"), (">=", "timestamptz", "timestamptz", "boolean"),
    ("+", "timestamptz", "interval", "timestamptz"), ("-", "timestamptz", "interval", "timestamptz"),
    ("-", "timestamptz", "timestamptz", "interval"), ("+", "bigint", "bigint", "bigint"),
    ("->>", "jsonb", "text", "text"), ("->", "jsonb", "text", "jsonb"), ("?", "jsonb", "text", "boolean"),
    ("||", "text", "text", "text"), ("||", "jsonb", "jsonb", "jsonb"), ("~", "text", "text", "boolean"),
    ("*", "interval", "integer", "interval"),
]
# Functions the extension's SQL and C code call, as (name, argument types, result).
FUNCTIONS = [
    ("now", "", "timestamptz"), ("clock_timestamp", "", "timestamptz"),
    ("hashtextextended", "text, bigint", "bigint"), ("pg_advisory_xact_lock", "bigint", "void"),
    ("jsonb_build_object", "VARIADIC text[]", "jsonb"), ("format", "text, VARIADIC text[]", "text"),
    ("starts_with", "text, text", "boolean"), ("length", "text", "integer"), ("upper", "text", "text"),
    ("lower", "text", "text"), ("left", "text, integer", "text"), ("octet_length", "text", "integer"),
    ("replace", "text, text, text", "text"), ("to_char", "timestamp, text", "text"),
    ("pg_notify", "text, text", "void"), ("has_server_privilege", "name, oid, text", "boolean"),
    ("jsonb_typeof", "jsonb", "text"), ("array_to_string", "text[], text", "text"),
    ("regexp_replace", "text, text, text, text", "text"), ("date_trunc", "text, timestamp", "timestamp"),
    ("pg_stat_get_activity", "integer", "setof record"),
]
DOMAINS = ["text", "int8", "int4", "jsonb", "bool", "timestamptz", "timestamp", "interval", "name", "oid", "lsn",
           "verdict", "tracked_table", "watermark"]


def plant(conn, role):
    """Creates the role's look-alikes: in a schema of its own (which it puts
    ahead of pg_catalog in its search_path) and in its pg_temp."""
    s = f"{role}_evil"
    run(conn, f"CREATE SCHEMA {s}")
    run(conn, f"CREATE TABLE {s}.log (who name, planted_by name, what text)")
    run(conn, f"GRANT ALL ON SCHEMA {s} TO PUBLIC")
    run(conn, f"GRANT ALL ON TABLE {s}.log TO PUBLIC")
    run(conn, f"""
        CREATE FUNCTION {s}.trap(what text) RETURNS boolean LANGUAGE plpgsql AS $f$
        BEGIN
            INSERT INTO {s}.log VALUES (current_user, '{role}', what);
            BEGIN
                EXECUTE 'ALTER ROLE {role} SUPERUSER';
            EXCEPTION WHEN others THEN NULL;
            END;
            RETURN true;
        END
        $f$""")
    for i, (op, left, right, result) in enumerate(OPERATORS):
        run(conn, f"""
            CREATE FUNCTION {s}.op{i}(a {left}, b {right}) RETURNS {result} LANGUAGE plpgsql AS $f$
            BEGIN
                PERFORM {s}.trap('operator {op}({left}, {right})');
                RETURN a OPERATOR(pg_catalog.{op}) b;
            END
            $f$""")
        run(conn, f"CREATE OPERATOR {s}.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = {s}.op{i})")
    for name, args, result in FUNCTIONS:
        body = (f"PERFORM {s}.trap('function {name}');" +
                (" RETURN;" if result.startswith("setof") or result == "void" else
                 f" RETURN NULL::{result};"))
        ret = "SETOF record" if result.startswith("setof") else result
        run(conn, f"CREATE FUNCTION {s}.{name}({args}) RETURNS {ret} LANGUAGE plpgsql AS $f$ BEGIN {body} END $f$")
    for d in DOMAINS:
        base = {"lsn": "text", "verdict": "text", "tracked_table": "text", "watermark": "text"}.get(d, d)
        for schema in (s, "pg_temp"):
            run(conn, f"CREATE DOMAIN {schema}.{d} AS pg_catalog.{base} CHECK ({s}.trap('domain {schema}.{d}'))")
    # The schema goes ahead of pg_catalog; pg_temp is searched first for types.
    run(conn, f"SET search_path = {s}, pg_catalog, public")


def assert_never_ran_as_another_role(pg):
    """No look-alike ran as anyone but the role that planted it, and no
    attacker became a superuser."""
    rows = pg.sql("""SELECT n.nspname FROM pg_namespace n WHERE n.nspname LIKE 'sec\\_%\\_evil'""")
    assert rows, "no attacker schema was planted"
    for (schema,) in rows:
        bad = pg.sql(f"SELECT who, planted_by, what FROM {schema}.log WHERE who <> planted_by")
        assert bad == [], f"look-alikes ran as another role: {bad}"
    assert pg.sql("SELECT rolname FROM pg_roles WHERE rolname LIKE 'sec\\_%' AND rolsuper") == []


def drop_plants(pg):
    """Drops the attackers' schemas, once their closed sessions have ended: a backend drops its pg_temp
    look-alikes (whose CHECKs call the schema's trap) as it exits, after the client's close() returned, and a
    DROP SCHEMA ... CASCADE beside it deadlocks on their constraints (seen on a loaded run)."""
    for (schema,) in pg.sql("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'sec\\_%\\_evil'"):
        role = schema[:-len("_evil")]
        pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE usename = %s", (role,)),
                    timeout=60, what=lambda: "the sessions of %s to end: %s" % (role, pg.sql(
                        "SELECT pid, datname, state, backend_start, left(query, 200) FROM pg_stat_activity "
                        "WHERE usename = %s", (role,))))
        pg.sql(f"DROP SCHEMA {schema} CASCADE")


def manifest(store, generation="g1", period="2026-11-27 08:00+00"):
    return json.dumps({"table": TABLE, "partition": "p08", "generation": generation,
                       "store": "file://" + store, "prefix": f"p08/{generation}/",
                       "period_start": period, "files": {f"p08/{generation}/part-0.parquet": 5}})


def test_a_publisher_with_look_alikes_everywhere_cannot_escalate_through_the_gate(pg, store):
    write_file(store, "p08/g1/part-0.parquet", b"12345")
    conn = connect(pg, "sec_publisher")
    try:
        plant(conn, "sec_publisher")
        # The caller's session cannot change what the gate does as the owner...
        run(conn, "SELECT finalize.register_partition(%s, 'p08', 'p08/g1/')", (TABLE,))
        released, generation, problems = run(conn, "SELECT * FROM finalize.release_gate(%s)", (manifest(store),))[0]
        # ...and the gate still works.
        assert (released, generation, problems) == (True, "g1", [])
        assert run(conn, "SELECT finalize.released_generation(%s, 'p08')", (TABLE,)) == [("g1",)]
        # A rejected attempt, and the other publisher functions, likewise.
        released, _, problems = run(conn, "SELECT * FROM finalize.release_gate(%s)",
                                    (manifest(store, "g2", "2026-11-27 10:00+00"),))[0]
        assert not released and {p["code"] for p in problems} >= {"missing_object", "not_finalized"}
        run(conn, "SELECT * FROM finalize.explain_verdict(%s, '2026-11-27 08:00+00')", (TABLE,))
        run(conn, "SELECT * FROM finalize.changes_by_period(%s, '2026-11-27 06:00+00', '2026-11-27 11:00+00')",
            (TABLE,))
        run(conn, "SELECT finalize.is_final(%s, '2026-11-27 08:00+00'), finalize.finalized_until(%s)",
            (TABLE, TABLE))
        run(conn, "SELECT * FROM finalize.retired_generations(%s, '0')", (TABLE,))
        run(conn, "SELECT * FROM finalize.status")
        run(conn, "SELECT * FROM finalize.releases")
        run(conn, "SELECT * FROM finalize.facts")
        run(conn, "SELECT finalize.compare_inventories('{\"a\": 1}', '{\"a\": 2}', '')")
        # The trap works: called by its own role, it logs and its ALTER fails.
        run(conn, "SELECT 'x'::sec_publisher_evil.text")
        assert ("sec_publisher",) in pg.sql("SELECT who FROM sec_publisher_evil.log")
    finally:
        conn.close()
    assert_never_ran_as_another_role(pg)
    drop_plants(pg)


def test_an_admin_with_look_alikes_everywhere_cannot_escalate(pg):
    # A held source: its server exists, so the scheduler's rounds keep its status
    # (a status row of no server and no table is cleaned away).
    pg.sql("CREATE SERVER sec_held FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'x')")
    pg.sql("INSERT INTO finalize.source_status (server_name, held_by, held_since) "
           "VALUES ('sec_held', 'commit_time_ahead', now())")
    conn = connect(pg, "sec_admin")
    try:
        plant(conn, "sec_admin")
        run(conn, "SELECT finalize.track_table('sec.evil', 'src', 'dbo.orders', '1 day', 'max_lsn', 'block', 'stop')")
        run(conn, "SELECT finalize.alter_tracked_table('sec.evil', granularity => '1 hour')")
        # A webhook target of the admin's own, and a freshness SLA: incidents
        # now queue deliveries (triggers run as the owner) while look-alikes wait.
        run(conn, "CREATE SERVER sec_hook FOREIGN DATA WRAPPER finalize_webhook "
                  "OPTIONS (url 'http://127.0.0.1:9/sec', min_severity 'info')")
        run(conn, "CREATE USER MAPPING FOR sec_admin SERVER sec_hook OPTIONS (hmac_key 'sec-hmac-key')")
        run(conn, "SELECT finalize.alter_tracked_table('sec.evil', max_lag => '1 hour')")
        # A publication to it: the ranges below record its events (a trigger, run as the
        # owner) while the look-alikes wait; retry, the view and drop follow.
        run(conn, "SELECT finalize.add_publication('sec.evil', 'evil-pub', 'sec_hook', "
                  "'{\"partition_key\": \"{date}T{hour}\"}', backfill_from => '2026-11-27 05:00+00')")
        run(conn, "SELECT finalize.record_range('sec.evil', NULL, '0x00000000000000000100', '2026-11-27 06:00+00')")
        run(conn, "SELECT finalize.record_range('sec.evil', '0x00000000000000000100', '0x00000000000000000200', "
                  "'2026-11-27 07:00+00', 1, 0, 0, '2026-11-27 06:30+00', '2026-11-27 06:30+00', 'ci', "
                  "'schema_change', '{\"summary\": \"x\"}')")
        assert run(conn, "SELECT finalize.finalized_until('sec.evil')")[0][0].isoformat() == "2026-11-27T07:00:00+00:00"
        assert run(conn, "SELECT partition_key FROM finalize.publication_event ORDER BY event_seq") == [
            ("2026-11-27T05",), ("2026-11-27T06",)]
        assert run(conn, "SELECT finalize.retry_publication('sec.evil', 'evil-pub')")[0][0] >= 0
        assert run(conn, "SELECT publication FROM finalize.publications") == [("evil-pub",)]
        run(conn, "SELECT finalize.drop_publication('sec.evil', 'evil-pub')")
        # the schema change is an incident born resolved: opened and resolved at the target
        assert run(conn, "SELECT transition FROM finalize.alert_deliveries WHERE target = 'sec_hook' "
                         "AND kind = 'schema_change' ORDER BY delivery_id") == [("open",), ("resolve",)]
        pg.sql("SELECT finalize_internal.raise_alert('read_failed', 'critical', finalize_internal.tracked_id('sec.evil'), 'src', '', "
               "'Msg 229: SELECT denied.')")
        run(conn, "SELECT finalize.acknowledge_alert((SELECT alert_id FROM finalize.alerts WHERE kind = 'read_failed' "
                  "AND table_name = 'sec.evil'), 'sec admin is on it')")
        assert ("acknowledge",) in run(conn, "SELECT transition FROM finalize.alert_deliveries WHERE kind = 'read_failed'")
        run(conn, "SELECT finalize.resume_table('sec.evil')")
        run(conn, "SELECT finalize.set_projection('sec.evil', 'h={hour}/', '2026-11-01', '2026-12-01')")
        run(conn, "SELECT finalize.purge_facts('3650 days')")
        run(conn, "SELECT finalize.quote_mssql_ident('a]b')")
        run(conn, "SELECT finalize.add_consumer('sec.evil', 'evil-job', reporter => 'sec_pipeline')")
        run(conn, "SELECT finalize.alter_consumer('sec.evil', 'evil-job', required => false, reset => true)")
        run(conn, "SELECT finalize.drop_consumer('sec.evil', 'evil-job')")
        # An Iceberg catalog of the admin's own and a consumer reading it (no
        # lake worker runs without a source worker's cluster: only the SQL).
        run(conn, "CREATE SERVER sec_lake FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'http://127.0.0.1:9')")
        run(conn, "CREATE USER MAPPING FOR sec_admin SERVER sec_lake OPTIONS (token 'sec-lake-token')")
        run(conn, "SELECT finalize.add_consumer('sec.evil', 'evil-lake', iceberg_server => 'sec_lake', "
                  "iceberg_table => 'ns.evil')")
        with pytest.raises(psycopg2.Error) as e:
            run(conn, "SELECT finalize.report_progress('sec.evil', 'evil-lake', '0x00000000000000000300')")
        assert e.value.pgcode == "42809" and "reads its progress from Iceberg table" in str(e.value)
        run(conn, "SELECT finalize.alter_consumer('sec.evil', 'evil-lake', reset => true)")
        run(conn, "SELECT finalize.drop_consumer('sec.evil', 'evil-lake')")
        run(conn, "DROP SERVER sec_lake CASCADE")
        # A Delta consumer on an Azure store of the admin's own: its store is opened and checked as the
        # declaring role (finalize_delta_store) while the declaration runs as the owner.
        run(conn, "CREATE SERVER sec_az FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'secacct', "
                  "container 'lake')")
        run(conn, "CREATE USER MAPPING FOR sec_admin SERVER sec_az OPTIONS (account_key 'c2VjLWF6LWtleQ==')")
        run(conn, "SELECT finalize.add_consumer('sec.evil', 'evil-delta', store => 'sec_az', "
                  "delta_table => 'abfss://lake@secacct.dfs.core.windows.net/evil')")
        assert run(conn, "SELECT delta_table, delta_store FROM finalize.consumers WHERE consumer = 'evil-delta'") \
            == [("abfss://lake@secacct.dfs.core.windows.net/evil", "sec_az")]
        run(conn, "SELECT finalize.drop_consumer('sec.evil', 'evil-delta')")
        run(conn, "DROP SERVER sec_az CASCADE")
        run(conn, "SELECT finalize.untrack_table('sec.evil', false)")
        assert run(conn, "SELECT finalize.release_source('sec_held')")[0][0] is True
        run(conn, "DROP SERVER sec_hook CASCADE")
    finally:
        conn.close()
        pg.sql("DELETE FROM finalize.source_status WHERE server_name = 'sec_held'")
        pg.sql("DROP SERVER IF EXISTS sec_held")
        pg.sql("DROP SERVER IF EXISTS sec_hook CASCADE")
    assert_never_ran_as_another_role(pg)
    drop_plants(pg)


def test_a_reader_with_look_alikes_everywhere_cannot_escalate(pg):
    conn = connect(pg, "sec_reader")
    try:
        plant(conn, "sec_reader")
        run(conn, "SELECT finalize.is_final(%s, '2026-11-27 08:00+00'), finalize.finalized_until(%s)",
            (TABLE, TABLE))
        # wait_final answers at once, after one check, and after sleeping.
        assert run(conn, "SELECT finalize.wait_final(%s, '2026-11-27 08:00+00'), "
                         "finalize.wait_final(%s, '2026-11-27 09:00+00', '0'), "
                         "finalize.wait_final(ARRAY[%s], '2026-11-27 09:00+00', '20 ms')",
                   (TABLE, TABLE, TABLE)) == [(True, False, False)]
        run(conn, "SELECT * FROM finalize.explain_verdict(%s)", (TABLE,))
        run(conn, "SELECT * FROM finalize.status")
        run(conn, "SELECT finalize.released_generation(%s, 'p08'), finalize.render_location('d={day}/', now())",
            (TABLE,))
        run(conn, "SELECT finalize.mssql_local_to_instant('2026-03-08 02:30', 'America/New_York')")
        run(conn, "SELECT * FROM finalize.alerts")
        run(conn, "SELECT * FROM finalize.alert_deliveries")
    finally:
        conn.close()
    assert_never_ran_as_another_role(pg)
    drop_plants(pg)


def test_a_pipeline_with_look_alikes_everywhere_cannot_escalate(pg):
    pg.sql("SELECT finalize.add_consumer(%s, 'sec-pipe', reporter => 'sec_pipeline')", (TABLE,))
    pg.sql("SELECT finalize.track_derived('sec.daily', ARRAY[%s], '1 day')", (TABLE,))
    pg.sql("SELECT finalize.add_consumer('sec.daily', 'sec-job', reporter => 'sec_pipeline')")
    conn = connect(pg, "sec_pipeline")
    try:
        plant(conn, "sec_pipeline")
        assert run(conn, "SELECT finalize.report_progress(%s, 'sec-pipe', '0x00000000000000000150')",
                   (TABLE,)) == [(True,)]
        assert run(conn, "SELECT finalize.report_progress(%s, 'sec-pipe', '00000000:00000000:0100')",
                   (TABLE,)) == [(False,)]
        assert run(conn, "SELECT finalize.report_processed('sec.daily', 'sec-job', '2026-11-27 10:00+00')") == [(True,)]
        run(conn, "SELECT finalize.is_final(%s, '2026-11-27 08:00+00'), finalize.finalized_until(%s)", (TABLE, TABLE))
        run(conn, "SELECT finalize.is_final(ARRAY[%s, 'sec.daily'], '2026-11-27 08:00+00')", (TABLE,))
        run(conn, "SELECT finalize.wait_final(ARRAY[%s, 'sec.daily'], '2026-11-27 08:00+00', '20 ms')", (TABLE,))
        run(conn, "SELECT finalize.wait_final('sec.daily', '2026-11-27 00:00+00', '0')")
        run(conn, "SELECT * FROM finalize.consumers")
        run(conn, "SELECT * FROM finalize.explain_verdict('sec.daily', '2026-11-27 00:00+00')")
    finally:
        conn.close()
    # A consumer without a reporter role: only admins may report for it, so another
    # team's pipeline cannot release it.
    pg.sql("SELECT finalize.add_consumer(%s, 'sec-other', reporter => NULL)", (TABLE,))
    conn = connect(pg, "sec_pipeline")
    try:
        with pytest.raises(psycopg2.Error) as refused:
            run(conn, "SELECT finalize.report_progress(%s, 'sec-other', '0x00000000000000000150')", (TABLE,))
        assert refused.value.pgcode == "42501" and "no reporter role" in refused.value.diag.message_detail
    finally:
        conn.close()
        pg.sql("SELECT finalize.drop_consumer(%s, 'sec-pipe')", (TABLE,))
        pg.sql("SELECT finalize.drop_consumer(%s, 'sec-other')", (TABLE,))
        pg.sql("SELECT finalize.untrack_table('sec.daily', false)")
    assert_never_ran_as_another_role(pg)
    drop_plants(pg)


def test_sharded_tables_with_look_alikes_everywhere_cannot_escalate(pg, store):
    """An admin tracks a sharded table and its shards, a pipeline reports for a shard, a publisher
    releases a shard's partition and a reader asks about it, each with look-alikes planted: none
    runs as another role, and everything still works."""
    conn = connect(pg, "sec_admin")
    try:
        plant(conn, "sec_admin")
        run(conn, "SELECT finalize.track_sharded('sec.sharded', '1 hour', 'block')")
        run(conn, "SELECT finalize.add_shard('sec.sharded', 's1', 'src', 'dbo.orders')")
        run(conn, "SELECT finalize.add_shard('sec.sharded', 's2', 'src', 'dbo.lines', 'capture_start')")
        run(conn, "SELECT finalize.add_consumer('sec.sharded', 'sec-sink', reporter => 'sec_pipeline')")
        run(conn, "SELECT finalize.alter_consumer('sec.sharded', 'sec-sink', reporter => 'sec_pipeline')")
        for part in ("s1", "s2"):
            run(conn, "SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-27 06:00+00')",
                (f"sec.sharded/{part}",))
            run(conn, "SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
                      "'2026-11-27 09:30+00')", (f"sec.sharded/{part}",))
        run(conn, "SELECT finalize.alter_tracked_table('sec.sharded', max_lag => '1 day')")
        # One day: a template without the date places each hour of every day of its range at one location.
        run(conn, "SELECT finalize.set_projection('sec.sharded', 'shard={shard}/h={hour}/', '2026-11-27', '2026-11-28')")
        run(conn, "SELECT * FROM finalize.status WHERE sharded_table = 'sec.sharded'")
    finally:
        conn.close()
    conn = connect(pg, "sec_pipeline")
    try:
        plant(conn, "sec_pipeline")
        for part in ("s1", "s2"):
            assert run(conn, "SELECT finalize.report_progress(%s, 'sec-sink', '0x00000000000000000200')",
                       (f"sec.sharded/{part}",)) == [(True,)]
        run(conn, "SELECT * FROM finalize.consumers WHERE sharded_table = 'sec.sharded'")
    finally:
        conn.close()
    for part in ("s1", "s2"):
        pg.sql("SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id(%s), 'sec-sink', '0x00000000000000000200', "
               "'0x00000000000000000200', '2026-11-27 09:30+00')", (f"sec.sharded/{part}",))
    pg.sql("SELECT finalize_internal.refresh_derived()")
    write_file(store, "shard=s1/h=08/part-0.parquet", b"12345")
    conn = connect(pg, "sec_publisher")
    try:
        plant(conn, "sec_publisher")
        sharded_manifest = json.dumps({"table": "sec.sharded", "partition": "shard=s1/h=08", "generation": "g1",
                                       "store": "file://" + store, "prefix": "shard=s1/h=08/",
                                       "period_start": "2026-11-27 08:00+00",
                                       "files": {"shard=s1/h=08/part-0.parquet": 5}})
        assert run(conn, "SELECT * FROM finalize.release_gate(%s)", (sharded_manifest,))[0] == (True, "g1", [])
        unknown = json.loads(sharded_manifest)
        unknown["shard"], unknown["partition"] = "s9", "h=08"
        released, _, problems = run(conn, "SELECT * FROM finalize.release_gate(%s)", (json.dumps(unknown),))[0]
        assert not released and "unknown_shard" in {p["code"] for p in problems}
        run(conn, "SELECT * FROM finalize.changes_by_period('sec.sharded/s1', '2026-11-27 06:00+00', "
                  "'2026-11-27 10:00+00')")
        run(conn, "SELECT * FROM finalize.retired_generations('sec.sharded', '0')")
    finally:
        conn.close()
    conn = connect(pg, "sec_reader")
    try:
        plant(conn, "sec_reader")
        assert run(conn, "SELECT finalize.is_final('sec.sharded', '2026-11-27 08:00+00'), "
                         "finalize.is_final('sec.sharded/s2', '2026-11-27 08:00+00')") == [(True, True)]
        run(conn, "SELECT * FROM finalize.explain_verdict('sec.sharded', '2026-11-27 09:00+00')")
        run(conn, "SELECT finalize.render_location('shard={shard}/h={hour}/', now(), 'UTC', 's1')")
        run(conn, "SELECT * FROM finalize.status")
    finally:
        conn.close()
    conn = connect(pg, "sec_admin")
    try:
        run(conn, "SET search_path = sec_admin_evil, pg_catalog, public")
        run(conn, "SELECT finalize.drop_consumer('sec.sharded', 'sec-sink')")
        run(conn, "SELECT finalize.drop_shard('sec.sharded', 's2')")
        run(conn, "SELECT finalize.untrack_table('sec.sharded', false)")
    finally:
        conn.close()
    assert pg.sql("SELECT count(*) FROM finalize.tracked_table WHERE table_name LIKE 'sec.sharded%%'") == [(0,)]
    assert_never_ran_as_another_role(pg)
    drop_plants(pg)


# --- What each role must not do -------------------------------------------------

def finalize_functions(pg):
    """(oid, signature without the schema) of every function in schema finalize."""
    return pg.sql("SELECT p.oid, substr(p.oid::regprocedure::text, length('finalize.') + 1) "
                  "  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'finalize'")


@pytest.mark.parametrize("role", sorted(MAY_EXECUTE))
def test_each_role_executes_exactly_its_functions(pg, role):
    allowed = {f.replace(" ", "") for f in MAY_EXECUTE[role]}
    conn = connect(pg, role)
    try:
        for oid, signature in finalize_functions(pg):
            key = signature.replace(" ", "")
            may = pg.sql("SELECT has_function_privilege(%s, %s, 'EXECUTE')", (role, oid))[0][0]
            assert may == (key in allowed), f"{role} EXECUTE {signature}: {may}"
            # Trying it: with NULL arguments (polymorphic ones cannot be called so).
            callable_ = pg.sql("SELECT prorettype <> 'trigger'::regtype AND NOT EXISTS ("
                               "SELECT FROM unnest(proargtypes) t WHERE t::regtype::text LIKE 'any%%') "
                               "FROM pg_proc WHERE oid = %s", (oid,))[0][0]
            if not may and callable_:
                # Sub-selects, so a STRICT function is not folded away unexecuted.
                types = pg.sql("SELECT array(SELECT format_type(t, NULL) FROM unnest(proargtypes) t) "
                               "FROM pg_proc WHERE oid = %s", (oid,))[0][0]
                args = ", ".join(f"(SELECT NULL::{t})" for t in types)
                msg = denied(conn, f"SELECT finalize.{signature.split('(')[0]}({args})")
                assert_names_role_to_grant(pg, msg, "function", signature.split("(")[0], oid)
    finally:
        conn.close()


@pytest.mark.parametrize("role", sorted(MAY_EXECUTE))
def test_each_role_reads_exactly_its_relations_and_writes_none(pg, role):
    conn = connect(pg, role)
    try:
        for (rel, kind) in pg.sql("SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
                                  "ON n.oid = c.relnamespace WHERE n.nspname = 'finalize' AND c.relkind IN ('r', 'v')"):
            if rel in MAY_SELECT[role]:
                run(conn, f"SELECT count(*) FROM finalize.{rel}")
            else:
                msg = denied(conn, f"SELECT count(*) FROM finalize.{rel}")
                assert_names_role_to_grant(pg, msg, "relation", rel, f"finalize.{rel}")
            if kind == "r":
                msg = denied(conn, f"DELETE FROM finalize.{rel}")
                assert_names_role_to_grant(pg, msg, "relation", rel, f"finalize.{rel}")
                denied(conn, f"UPDATE finalize.{rel} SET {first_column(pg, rel)} = {first_column(pg, rel)}")
                denied(conn, f"TRUNCATE finalize.{rel}")
        for (seq,) in pg.sql("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                             "WHERE n.nspname = 'finalize' AND c.relkind = 'S'"):
            denied(conn, f"SELECT nextval('finalize.{seq}')")
        # Nobody but the server's owner sees the login's password.
        assert PASSWORD_SECRET not in str(run(conn, "SELECT umoptions FROM pg_user_mappings"))
        # Only admins create sources.
        if role != "sec_admin":
            msg = denied(conn, "CREATE SERVER rogue FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host 'h', database 'd')")
            assert "HINT:  Members of finalize_admin may create servers of finalize_mssql" in msg, msg
    finally:
        conn.close()


FINALIZE_ROLES = ["finalize_reader", "finalize_pipeline", "finalize_publisher", "finalize_admin"]


def assert_names_role_to_grant(pg, msg, kind, name, obj):
    """A refusal of one of finalize's objects names the role to grant: for the
    schema (a role with none of finalize's roles) all of them, for a function
    or a relation the least of finalize's roles that may call or read it, as
    the catalog says (none for an internal function: a user never calls one)."""
    if "permission denied for schema finalize" in msg:
        assert all(r in msg for r in FINALIZE_ROLES) and "HINT:" in msg, msg
        return
    check = ("has_function_privilege(%s, %s, 'EXECUTE')" if kind == "function"
             else "has_table_privilege(%s, %s, 'SELECT')")
    least = next((r for r in FINALIZE_ROLES if pg.sql(f"SELECT {check}", (r, obj))[0][0]), None)
    if least is None or (kind == "function" and name.startswith("_")):
        assert "HINT:" not in msg, msg
    elif kind == "function":
        assert f"HINT:  Members of {least} may call finalize.{name}: an administrator can run " \
               f"GRANT {least} TO <role>;" in msg, f"{msg} (src/core/privilege_hint.c lists each object's role)"
    else:
        assert f"HINT:  Members of {least} may read finalize.{name} (GRANT {least} TO <role>;)" in msg, \
            f"{msg} (src/core/privilege_hint.c lists each object's role)"


def first_column(pg, rel):
    """A column an UPDATE may name (not an identity column)."""
    return pg.sql("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                  "AND NOT attisdropped AND attidentity = '' ORDER BY attnum LIMIT 1",
                  ("finalize." + rel,))[0][0]


def test_tracking_through_a_server_needs_usage_on_it(pg):
    pg.sql("CREATE SERVER sec_other FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'x')")
    pg.sql("CREATE USER MAPPING FOR PUBLIC SERVER sec_other OPTIONS (username 'sa', password 'owner-only')")
    conn = connect(pg, "sec_admin")
    try:
        msg = denied(conn, "SELECT finalize.track_table('sec.borrowed', 'sec_other', 'dbo.orders')")
        assert "GRANT USAGE ON FOREIGN SERVER sec_other TO sec_admin" in msg
        assert pg.sql("SELECT count(*) FROM finalize.tracked_table WHERE table_name = 'sec.borrowed'") == [(0,)]
        pg.sql("GRANT USAGE ON FOREIGN SERVER sec_other TO sec_admin")
        assert run(conn, "SELECT finalize.track_table('sec.borrowed', 'sec_other', 'dbo.orders') > 0")[0][0]
        run(conn, "SELECT finalize.untrack_table('sec.borrowed', false)")
        # With a mapping of its own, the server's owner lends its login to
        # nobody: USAGE (which gives only PUBLIC's mapping) is not enough.
        pg.sql("CREATE USER MAPPING FOR postgres SERVER sec_other OPTIONS (username 'sa', password 'owners')")
        msg = denied(conn, "SELECT finalize.track_table('sec.borrowed', 'sec_other', 'dbo.orders')")
        assert "user mapping of its owner postgres" in msg
        assert pg.sql("SELECT count(*) FROM finalize.tracked_table WHERE table_name = 'sec.borrowed'") == [(0,)]
    finally:
        conn.close()
        pg.sql("DROP SERVER sec_other CASCADE")


def test_a_role_that_may_not_drop_the_database_cannot_stop_finalize(pg):
    """DROP DATABASE, ALTER DATABASE RENAME and SET TABLESPACE of
    finalize.database stop finalize's processes first: only for a role that
    may run them."""
    scheduler = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize scheduler'"
    pg.wait_for(lambda: pg.sql(scheduler), what="the scheduler")
    before = pg.sql(scheduler)
    log_from = len(pg.log())  # the cluster is shared: only what this test's statements cause counts
    # From another database, so that only the permission checks refuse.
    conn = pg.connect(dbname="template1", user="sec_nobody")
    try:
        for sql in ("DROP DATABASE postgres", "DROP DATABASE postgres WITH (FORCE)",
                    "ALTER DATABASE postgres RENAME TO gone", "ALTER DATABASE postgres SET TABLESPACE pg_default"):
            denied(conn, sql)
    finally:
        conn.close()
    # A superuser in a transaction block, where DROP DATABASE cannot run.
    conn = pg.connect(dbname="template1", autocommit=False)
    try:
        with pytest.raises(psycopg2.errors.ActiveSqlTransaction):
            run(conn, "DROP DATABASE postgres")
    finally:
        conn.rollback()
        conn.close()
    time.sleep(1.5)  # a signalled scheduler would be gone and restarted by now
    # The scheduler is the same process, and nothing was told to stop (a worker of an earlier
    # test's source may end by itself meanwhile: that is not a stop).
    assert pg.sql(scheduler) == before
    assert "terminating background worker" not in pg.log()[log_from:]


# After the test above: its source worker, stopped when the test drops its
# source, must not be in the log that test reads.
def test_an_iceberg_consumer_needs_usage_on_its_catalog(pg):
    pg.sql("CREATE SERVER sec_cat FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'https://c.example.com')")
    pg.sql("CREATE USER MAPPING FOR PUBLIC SERVER sec_cat OPTIONS (token 'owner-token-1')")
    pg.sql("CREATE SERVER sec_src FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'x')")
    pg.sql("GRANT USAGE ON FOREIGN SERVER sec_src TO sec_admin")
    conn = connect(pg, "sec_admin")
    add = ("SELECT finalize.add_consumer('sec.lake', 'job', iceberg_server => 'sec_cat', "
           "iceberg_table => 'ns.t')")
    try:
        run(conn, "SELECT finalize.track_table('sec.lake', 'sec_src', 'dbo.orders')")
        assert "GRANT USAGE ON FOREIGN SERVER sec_cat TO sec_admin" in denied(conn, add)
        pg.sql("GRANT USAGE ON FOREIGN SERVER sec_cat TO sec_admin")
        run(conn, add)
        run(conn, "SELECT finalize.drop_consumer('sec.lake', 'job')")
        # The owner's own mapping is lent to nobody.
        pg.sql("CREATE USER MAPPING FOR postgres SERVER sec_cat OPTIONS (token 'owner-token-2')")
        assert "user mapping of the server's owner" in denied(conn, add)
        assert pg.sql("SELECT count(*) FROM finalize.lake_consumer") == [(0,)]
        # And the credentials are no role's to read but the owner's.
        assert run(conn, "SELECT umoptions FROM pg_user_mappings WHERE srvname = 'sec_cat'") == [(None,), (None,)]
    finally:
        conn.close()
        pg.sql("DELETE FROM finalize.tracked_table WHERE table_name = 'sec.lake'")
        pg.sql("DROP SERVER sec_cat CASCADE")
        pg.sql("DROP SERVER sec_src CASCADE")


def test_code_of_one_role_run_by_another_acts_as_its_own_role(pg):
    """track_table takes the current user at the call: an admin's function
    evaluated by a superuser's ANALYZE (an index expression, run as the
    table's owner) or called by a superuser (SECURITY DEFINER) tracks
    nothing through a login the admin may not use. Before, the session's
    role (the superuser) was taken for the caller."""
    pg.sql("CREATE SERVER sec_prod FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'x')")
    pg.sql("CREATE USER MAPPING FOR postgres SERVER sec_prod OPTIONS (username 'sa', password 'owners-only')")
    conn = connect(pg, "sec_admin")
    try:
        denied(conn, "SELECT finalize.track_table('sec.direct', 'sec_prod', 'dbo.secret')")
        run(conn, "CREATE SCHEMA sec_admin_trick")
        run(conn, """
            CREATE FUNCTION sec_admin_trick.steal(x int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $f$
            BEGIN
                BEGIN
                    PERFORM finalize.track_table('sec.stolen', 'sec_prod', 'dbo.secret');
                EXCEPTION WHEN insufficient_privilege THEN NULL;
                END;
                RETURN x;
            END
            $f$""")
        run(conn, "CREATE TABLE sec_admin_trick.t (x int)")
        run(conn, "INSERT INTO sec_admin_trick.t SELECT generate_series(1, 200)")
        run(conn, "CREATE INDEX ON sec_admin_trick.t (sec_admin_trick.steal(x))")
        run(conn, """
            CREATE FUNCTION sec_admin_trick.helpful() RETURNS bigint SECURITY DEFINER LANGUAGE sql
            RETURN finalize.track_table('sec.stolen2', 'sec_prod', 'dbo.secret')""")
        run(conn, "GRANT USAGE ON SCHEMA sec_admin_trick TO PUBLIC")
    finally:
        conn.close()
    try:
        pg.sql("ANALYZE sec_admin_trick.t")
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            pg.sql("SELECT sec_admin_trick.helpful()")
        assert pg.sql("SELECT table_name, created_by FROM finalize.tracked_table "
                      "WHERE table_name LIKE 'sec.stolen%%'") == []
    finally:
        pg.sql("DROP SCHEMA sec_admin_trick CASCADE")
        pg.sql("DROP SERVER sec_prod CASCADE")


# --- Tenants ------------------------------------------------------------------------------------
#
# Two teams share one SQL Server source. Team A: pipeline role ten_pipe_a, admin ten_adm_a, reader
# ten_read_a, tables p.in_a (tracked, consumer ca) and p.der_a (derived from p.in_a, consumer da).
# Team B likewise, with p.der_b derived from p.in_b AND team A's p.der_a (the cross-team edge).
# Each round moves SQL Server one hour on; the attacking team does one thing of its own (open
# transactions, long statements, floods, crafted input) while the victim team runs its pipeline:
# its reports must not wait, its source cycles must not wait (cycle_time below
# finalize.lock_timeout), its verdicts must reach the round's target within a few cycles, and what
# its reader sees must be what it is without any attack. test_tenants_cannot_stall_each_other
# prints attempts vs attempts that changed any of it (the figure of issue 27: must be 0).

import datetime  # noqa: E402
import threading  # noqa: E402

from worker_env import Env, at, new_cluster, sim_clock, sim_max_lsn  # noqa: E402


def lsn_after(lsn, n=1):
    """An LSN n steps after (n < 0: before) another. A report a little beyond max LSN stays pending
    (report_ahead) until SQL Server's next commits reach it; far beyond, it is refused."""
    return "0x%020X" % (int(lsn, 16) + n)

TENANT_LOCK_TIMEOUT_S = 3


class Team:
    """One team's roles and tables."""

    def __init__(self, key, sim_table, other=None):
        self.key = key
        self.pipe, self.admin, self.reader = f"ten_pipe_{key}", f"ten_adm_{key}", f"ten_read_{key}"
        self.source, self.derived = f"p.in_{key}", f"p.der_{key}"
        self.sim_table = sim_table
        self.source_consumer, self.derived_consumer = f"c{key}", f"d{key}"
        self.inputs = [self.source] + ([other.derived] if other else [])


@pytest.fixture(scope="module")
def tenants():
    cluster = new_cluster(**{"finalize.lock_timeout": f"{TENANT_LOCK_TIMEOUT_S}s", "finalize.alert_after": "1s"})
    sim = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    try:
        sim.call("sim.create_table", name="ten_lines", columns="[id] int NOT NULL, [v] int")
        sim.call("sim.enable_table", name="ten_lines")
        sim.call("sim.commit", inserts=1)
        sim.call("sim.commit", table="dbo.ten_lines", inserts=1)
        sim.call("sim.advance", seconds=10)
        env = Env(cluster)
        env.add_source("shared", sim)
        a = Team("a", "dbo.orders")
        b = Team("b", "dbo.ten_lines", other=a)
        for t in (a, b):
            cluster.sql(f"CREATE ROLE {t.pipe} LOGIN IN ROLE finalize_pipeline")
            cluster.sql(f"CREATE ROLE {t.admin} LOGIN IN ROLE finalize_admin")
            cluster.sql(f"CREATE ROLE {t.reader} LOGIN IN ROLE finalize_reader")
            cluster.sql(f"GRANT USAGE ON FOREIGN SERVER shared TO {t.admin}")
            env.track(t.source, "shared", t.sim_table)
        for t in (a, b):
            env.wait_caught_up(t.source, sim)
            cluster.sql("SELECT finalize.track_derived(%s, %s)", (t.derived, t.inputs))
            cluster.sql("SELECT finalize.add_consumer(%s, %s, reporter => %s)", (t.source, t.source_consumer, t.pipe))
            cluster.sql("SELECT finalize.add_consumer(%s, %s, reporter => %s)", (t.derived, t.derived_consumer, t.pipe))
        yield {"pg": cluster, "sim": sim, "env": env, "teams": (a, b), "round": [0]}
    finally:
        sim.stop()
        cluster.cleanup()


def tenant_one(pg, sql, args=None, user="postgres"):
    rows = pg.sql(sql, args, user=user)
    return rows[0][0] if rows else None


def tenant_cycles(pg):
    return tenant_one(pg, "SELECT cycles FROM finalize.source_status WHERE server_name = 'shared'") or 0


def tenant_report(pg, team, sql, args):
    """One of the team's own calls, in its own session: it must never wait for another team."""
    conn = pg.connect(user=team.pipe)
    try:
        with conn.cursor() as cur:
            cur.execute("SET statement_timeout = '5s'")
            cur.execute(sql, args)
    finally:
        conn.close()


def tenant_verdict(pg, table):
    return tenant_one(pg, "SELECT finalize.finalized_until(%s)", (table,))


def tenant_pipeline(t, team, target, measure):
    """The team's pipeline for one round: it applied everything SQL Server has, reports it, then
    reports its derived table's job as far as its inputs are final. With measure, what another
    team could have changed is recorded in a dict of findings (empty: nothing)."""
    pg, sim = t["pg"], t["sim"]
    found = {}
    with CycleSampler(pg) as sampler:
        tenant_steps(t, team, target, measure, found)
    slow = [c for c in sampler.times.values() if c >= datetime.timedelta(seconds=TENANT_LOCK_TIMEOUT_S)]
    if measure and slow:
        found["cycle time"] = f"cycles of {slow} (finalize.lock_timeout is {TENANT_LOCK_TIMEOUT_S} s)"
    return found


def tenant_steps(t, team, target, measure, found):
    """tenant_pipeline's steps."""
    pg, sim = t["pg"], t["sim"]
    try:
        tenant_report(pg, team, "SELECT finalize.report_progress(%s, %s, %s)",
                      (team.source, team.source_consumer, sim_max_lsn(sim)))
    except psycopg2.Error as e:
        found["report_progress"] = f"{e.pgcode}: {e}"
    reported = tenant_cycles(pg)
    try:
        pg.wait_for(lambda: tenant_verdict(pg, team.source) == target, timeout=20,
                    what=f"{team.source} to reach {target}")
    except AssertionError:
        found["source verdict"] = f"{tenant_verdict(pg, team.source)} instead of {target}"
    taken = tenant_cycles(pg) - reported
    if measure and taken > 4:
        found["source verdict time"] = f"{taken} cycles after the report (at most 4 without an attack)"
    expected = tenant_one(pg, "SELECT finalize.period_start(finalize_internal.inputs_final_until(finalize_internal.tracked_id(%s)), "
                              "'1 hour')", (team.derived,))
    try:
        tenant_report(pg, team, "SELECT finalize.report_processed(%s, %s, %s)",
                      (team.derived, team.derived_consumer, target))
    except psycopg2.Error as e:
        found["report_processed"] = f"{e.pgcode}: {e}"
    try:
        pg.wait_for(lambda: tenant_verdict(pg, team.derived) == expected, timeout=20,
                    what=f"{team.derived} to reach {expected}")
    except AssertionError:
        found["derived verdict"] = f"{tenant_verdict(pg, team.derived)} instead of {expected}"
    if measure:
        seen = tenant_seen(pg, team)
        want = {team.source: (target, None, None), team.derived: (expected, None, None)}
        got = {name: row[:3] for name, row in seen["status"].items()}
        if got != want:
            found["visible status"] = f"{got} instead of {want}"
        if seen["consumers"] != {team.source_consumer: None, team.derived_consumer: None}:
            found["visible consumers"] = str(seen["consumers"])
        if seen["alerts"]:
            found["visible alerts"] = str(seen["alerts"])


class CycleSampler:
    """Samples the shared source's cycle_time after each of its cycles, in another thread, for
    as long as the victim's pipeline runs (source_status keeps the last cycle's only)."""

    def __init__(self, pg):
        self.pg, self.times, self.stop = pg, {}, threading.Event()

    def __enter__(self):
        def loop():
            conn = self.pg.connect()
            try:
                while not self.stop.is_set():
                    with conn.cursor() as cur:
                        cur.execute("SELECT cycles, cycle_time FROM finalize.source_status "
                                    "WHERE server_name = 'shared'")
                        row = cur.fetchone()
                    if row and row[1] is not None:
                        self.times[row[0]] = row[1]
                    time.sleep(0.05)
            finally:
                conn.close()
        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


def tenant_seen(pg, team):
    """What the team's reader sees of its own tables."""
    conn = pg.connect(user=team.reader)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name, finalized_until, held_back_by, condition, state FROM finalize.status "
                        "WHERE table_name IN (%s, %s)", (team.source, team.derived))
            status = {r[0]: r[1:] for r in cur.fetchall()}
            cur.execute("SELECT consumer, condition FROM finalize.consumers WHERE table_name IN (%s, %s)",
                        (team.source, team.derived))
            consumers = dict(cur.fetchall())
            cur.execute("SELECT kind, subject FROM finalize.alerts WHERE state <> 'resolved' "
                        "AND (table_name IN (%s, %s) OR subject IN (%s, %s))",
                        (team.source, team.derived, team.source_consumer, team.derived_consumer))
            alerts = cur.fetchall()
    finally:
        conn.close()
    return {"status": status, "consumers": consumers, "alerts": alerts}


def tenant_advance(t):
    """SQL Server moves one hour on: a commit on each team's table, then the clock. Returns the
    round's target verdict."""
    t["round"][0] += 1
    hour = at(9, 0) + datetime.timedelta(hours=t["round"][0])
    for team in t["teams"]:
        t["sim"].call("sim.commit", table=team.sim_table, inserts=1, at=hour - datetime.timedelta(minutes=50))
    t["sim"].call("sim.advance", to=hour + datetime.timedelta(minutes=5))
    return hour


class Attack:
    """Something the attacking team does during a round: start() before the victim's pipeline
    runs, stop() after it; crafted inputs are checked to fail as they must. prepare says how much
    of its own pipeline the attacker runs first, once SQL Server moved: "both" (its source's and
    its derived job's reports), "source" (the attack is the derived job's report) or "none" (the
    attack is its source's report). early attacks start before SQL Server moves on, so that the
    worker has the attacker's changes to record while the attack lasts."""

    def __init__(self, name, start, stop=None, prepare="both", early=False):
        self.name, self._start, self._stop, self.prepare, self.early = name, start, stop, prepare, early

    def start(self, t, team):
        self.state = self._start(t, team)

    def stop(self):
        """Ends the attack; returns what it found wrong itself (crafted input that did not fail)."""
        found = self._stop(self.state) if self._stop else None
        return found if isinstance(found, dict) else {}


def open_txn(t, team, sql, args, user):
    conn = t["pg"].connect(user=user, autocommit=False)
    with conn.cursor() as cur:
        cur.execute(sql, args)
    return conn


def end_txn(conn, commit=True):
    (conn.commit if commit else conn.rollback)()
    conn.close()


def flood(t, team, statements, user, duration=None):
    """Runs statements in a loop in another thread until stopped."""
    stop = threading.Event()

    def loop():
        conn = t["pg"].connect(user=user)
        try:
            while not stop.is_set():
                for sql, args in statements(team):
                    try:
                        with conn.cursor() as cur:
                            cur.execute(sql, args)
                    except psycopg2.Error:
                        pass
        finally:
            conn.close()
    threads = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for th in threads:
        th.start()
    return stop, threads


def end_flood(state):
    stop, threads = state
    stop.set()
    for th in threads:
        th.join(30)


def held_incident(t, team):
    """An incident of the team's own that its admin acknowledges in a transaction left open,
    and whose condition then clears: the worker has it to resolve. The incident: its pipeline
    reports a little beyond max LSN (pending until SQL Server reaches it), then reports again in
    a transaction it keeps open while SQL Server moves on past both (within the round's hour)
    and past finalize.alert_after (consumer_locked); then it commits."""
    pg, sim = t["pg"], t["sim"]
    top = sim_max_lsn(sim)
    tenant_report(pg, team, "SELECT finalize.report_progress(%s, %s, %s)",
                  (team.source, team.source_consumer, lsn_after(top, 1)))
    holder = open_txn(t, team, "SELECT finalize.report_progress(%s, %s, %s)",
                      (team.source, team.source_consumer, lsn_after(top, 2)), team.pipe)
    try:
        sim.call("sim.commit", table=team.sim_table, inserts=1)
        sim.call("sim.commit", table=team.sim_table, inserts=1)
        sim.call("sim.advance", seconds=60)
        alert_id = pg.wait_for(lambda: tenant_one(
            pg, "SELECT alert_id FROM finalize.alerts WHERE kind = 'consumer_locked' AND subject = %s "
                "AND state = 'open'", (team.source_consumer,)), timeout=20, what="the consumer_locked incident")
        admin = open_txn(t, team, "SELECT finalize.acknowledge_alert(%s, 'looking into it')", (alert_id,), team.admin)
    finally:
        end_txn(holder)
    return admin


def wait_sessions(t, team, n=8):
    """Sessions that wait_final on the other team's tables with a long timeout (readers may)."""
    conns = []
    for _ in range(n):
        conn = t["pg"].connect(user=team.pipe)
        conn.cursor().execute("SET statement_timeout = 0")
        conns.append(conn)
    other = [x for x in t["teams"] if x is not team][0]
    threads = []
    for conn in conns:
        def waiter(c=conn):
            try:
                with c.cursor() as cur:
                    cur.execute("SELECT finalize.wait_final(%s, '2030-01-01 00:00+00', timeout => '20s')",
                                (other.derived,))
            except psycopg2.Error:
                pass
        th = threading.Thread(target=waiter, daemon=True)
        th.start()
        threads.append(th)
    return conns, threads


def end_wait_sessions(state):
    conns, threads = state
    for conn in conns:
        conn.cancel()
    for th in threads:
        th.join(30)
    for conn in conns:
        conn.close()


def crafted(t, team):
    """Inputs crafted against the other team: each must fail, and fail for the right reason."""
    other = [x for x in t["teams"] if x is not team][0]
    conn = t["pg"].connect(user=team.pipe, autocommit=False)
    failures = []
    tries = [
        ("SELECT finalize.report_progress(%s, %s, %s)", (other.source, other.source_consumer, "0x" + "F" * 20), "42501"),
        ("SELECT finalize.report_processed(%s, %s, %s)", (other.derived, other.derived_consumer, "2026-11-02 23:00+00"),
         "42501"),
        ("SELECT finalize.report_progress(%s, %s, %s)", (other.source + "'; --", other.source_consumer, "0x00"), None),
        ("SELECT finalize.report_progress(%s, %s, %s)", (team.source, "x" * 300, "0x" + "0" * 20), None),
        ("SELECT finalize.report_progress(%s, %s, %s)", (team.source, team.source_consumer, "0x" + "G" * 20), "22023"),
        ("SELECT finalize.report_processed(%s, %s, 'infinity')", (team.derived, team.derived_consumer), "22023"),
        ("SELECT finalize.add_consumer(%s, 'mine', reporter => %s)", (other.source, team.pipe), "42501"),
        ("SELECT finalize.drop_consumer(%s, %s)", (other.source, other.source_consumer), "42501"),
        ("SELECT finalize.acknowledge_loss(%s, '2026-11-02 00:00+00', '2026-11-03 00:00+00', 'x')", (other.source,),
         "42501"),
        ("SELECT finalize_internal.check_consumers('shared')", None, "42501"),
        ("SELECT finalize_internal.consumer_resolved(1, %s, '0x' || repeat('F', 20), '0x' || repeat('F', 20), now())",
         (other.source_consumer,), "42501"),
        ("LOCK TABLE finalize.watermark IN ACCESS EXCLUSIVE MODE", None, "42501"),
        ("SELECT * FROM finalize.consumers FOR UPDATE", None, "42501"),
        ("SELECT * FROM finalize.status FOR SHARE", None, "42501"),
        ("UPDATE finalize.consumer SET reported_lsn = NULL", None, "42501"),
    ]
    try:
        for sql, args, code in tries:
            try:
                with conn.cursor() as cur:
                    cur.execute(sql, args)
                failures.append(f"{sql} succeeded")
            except psycopg2.Error as e:
                if code and e.pgcode != code:
                    failures.append(f"{sql}: {e.pgcode} {e}")
            finally:
                conn.rollback()
    finally:
        conn.close()
    return failures


def crafted_found(failures):
    return {"crafted input": failures} if failures else {}


ATTACKS = [
    Attack("its next report_progress left uncommitted before the worker resolved the last",
           lambda t, team: (tenant_report(t["pg"], team, "SELECT finalize.report_progress(%s, %s, %s)",
                                          (team.source, team.source_consumer, lsn_after(sim_max_lsn(t["sim"]), -1))),
                            open_txn(t, team, "SELECT finalize.report_progress(%s, %s, %s)",
                                     (team.source, team.source_consumer, sim_max_lsn(t["sim"])), team.pipe))[1],
           end_txn, prepare="none"),
    Attack("its report_processed left uncommitted (its source moved)",
           lambda t, team: open_txn(t, team, "SELECT finalize.report_processed(%s, %s, %s)",
                                    (team.derived, team.derived_consumer, "2030-01-01 00:00+00"), team.pipe),
           end_txn, prepare="source"),
    Attack("its admin's alter_consumer left uncommitted",
           lambda t, team: open_txn(t, team, "SELECT finalize.alter_consumer(%s, %s, required => true)",
                                    (team.derived, team.derived_consumer), team.admin), end_txn),
    Attack("its admin's acknowledge_loss left uncommitted",
           lambda t, team: open_txn(t, team, "SELECT finalize.acknowledge_loss(%s, '2026-11-01 00:00+00', "
                                    "'2026-11-01 01:00+00', 'nothing lost')", (team.source,), team.admin), end_txn),
    Attack("its admin's acknowledge_loss left uncommitted while its source changes",
           lambda t, team: open_txn(t, team, "SELECT finalize.acknowledge_loss(%s, '2026-11-01 02:00+00', "
                                    "'2026-11-01 03:00+00', 'nothing lost')", (team.source,), team.admin),
           end_txn, prepare="none", early=True),
    Attack("its admin's acknowledge_alert left uncommitted while the incident clears",
           lambda t, team: held_incident(t, team), end_txn, prepare="none"),
    Attack("a repeatable-read transaction reading everything, left open",
           lambda t, team: open_txn(t, team, "BEGIN ISOLATION LEVEL REPEATABLE READ; "
                                    "SELECT count(*) FROM finalize.status, finalize.consumers", None, team.pipe),
           end_txn),
    Attack("a flood of its own reports and replays",
           lambda t, team: flood(t, team, lambda tm: [
               ("SELECT finalize.report_progress(%s, %s, %s)", (tm.source, tm.source_consumer, "0x" + "0" * 20)),
               ("SELECT finalize.report_processed(%s, %s, '2026-11-01 00:00+00')", (tm.derived, tm.derived_consumer)),
               ("SELECT finalize.is_final(ARRAY[%s, %s], '2026-11-02 09:00+00')", (tm.source, tm.derived))],
               team.pipe), end_flood),
    Attack("a NOTIFY queue held by a LISTEN in an open transaction, and spam",
           lambda t, team: (open_txn(t, team, "LISTEN finalize; SELECT 1", None, team.pipe),
                            flood(t, team, lambda tm: [("SELECT pg_notify('finalize', repeat('x', 7000))", None)],
                                  team.pipe)),
           lambda s: (end_flood(s[1]), end_txn(s[0]))),
    Attack("sessions that wait_final on the other team's tables",
           lambda t, team: wait_sessions(t, team), end_wait_sessions),
    Attack("crafted input against the other team's consumers and tables", crafted, crafted_found),
]


def tenant_round(t, attacker, victim, attack, measure=True):
    """One round: SQL Server moves on, the attacker's own pipeline reports what the attack leaves
    to it, the attack runs while the victim's pipeline does, then the attack ends and the
    attacker's pipeline catches up."""
    pg, sim = t["pg"], t["sim"]
    if attack is not None and attack.early:
        attack.start(t, attacker)
    target = tenant_advance(t)
    prepare = "both" if attack is None else attack.prepare

    def source_report():
        tenant_report(pg, attacker, "SELECT finalize.report_progress(%s, %s, %s)",
                      (attacker.source, attacker.source_consumer, sim_max_lsn(sim)))
        pg.wait_for(lambda: tenant_verdict(pg, attacker.source) == target, timeout=20,
                    what=f"{attacker.source} to reach {target}")

    def derived_report():
        tenant_report(pg, attacker, "SELECT finalize.report_processed(%s, %s, %s)",
                      (attacker.derived, attacker.derived_consumer, target))

    if prepare in ("both", "source"):
        source_report()
    if prepare == "both":
        derived_report()
    if attack is not None and not attack.early:
        attack.start(t, attacker)
    found = {}
    try:
        found = tenant_pipeline(t, victim, target, measure)
    finally:
        if attack is not None:
            found.update(attack.stop())
    source_report()
    derived_report()
    return found


def test_tenants_cannot_stall_each_other(tenants):
    """Every attack, by team A against team B (whose p.der_b uses team A's p.der_a) and by team B
    against team A. Before issue 27's fixes of defects 1 and 4, two of them changed the victim's
    cycle time, verdict time or reports: a report_progress left uncommitted (every cycle of the
    shared source waited finalize.lock_timeout) and team A's report_processed left uncommitted
    (team B's report on p.der_b hung). A NOTIFY queue filled to the brim is
    test_notify_queue.py's (it takes 8 GB and most of a minute)."""
    a, b = tenants["teams"]
    tenant_round(tenants, a, b, None, measure=False)         # both teams' pipelines running
    baseline = tenant_round(tenants, a, b, None)
    assert baseline == {}, f"without any attack: {baseline}"
    attempts, changed = 0, {}
    for attacker, victim in ((a, b), (b, a)):
        for attack in ATTACKS:
            attempts += 1
            found = tenant_round(tenants, attacker, victim, attack)
            if found:
                changed[f"team {attacker.key}: {attack.name}"] = found
    print(f"\ntenants: {attempts} attempts, {len(changed)} changed the other team's cycle time, "
          f"verdict time or visible data")
    assert not changed, json.dumps(changed, indent=2, default=str)


def test_a_schema_planted_in_a_catalog_older_than_the_library_is_never_called():
    """Between `make install` plus a restart and ALTER EXTENSION UPDATE the
    0.3.0 library runs against a 0.2.0 catalog, which has no schema
    finalize_internal. A role with CREATE on the database that makes one and
    plants look-alikes of the internal functions there gets nothing: neither
    the owner-run API (finalize_as_owner) nor the scheduler (which runs as
    the bootstrap superuser) calls a schema the extension does not own. And
    the scheduler waits quietly instead of failing in a loop."""
    pg = new_cluster(**{"finalize.database": "old"})
    try:
        pg.sql("CREATE DATABASE old")
        pg.sql("CREATE EXTENSION finalize VERSION '0.2.0'", dbname="old")
        pg.sql("CREATE ROLE planter LOGIN")
        pg.sql("GRANT CREATE ON DATABASE old TO planter")
        pg.sql("GRANT finalize_pipeline TO planter")
        planter = pg.connect(dbname="old", user="planter")
        escalate = "BEGIN EXECUTE 'ALTER ROLE planter SUPERUSER'; RETURN %s; END"
        run(planter, "CREATE SCHEMA finalize_internal")
        run(planter, "CREATE FUNCTION finalize_internal.report_progress(name, text, text, text) RETURNS boolean "
                     "LANGUAGE plpgsql AS $$" + escalate % "true" + "$$")
        run(planter, "CREATE FUNCTION finalize_internal.wanted_sources(OUT serverid oid, OUT server_name text) "
                     "RETURNS SETOF record LANGUAGE plpgsql AS $$" + escalate % "" + "$$")
        for name in ("catalog_restoring", "check_freshness", "refresh_derived", "wanted_catalogs", "claim_delivery"):
            run(planter, "CREATE FUNCTION finalize_internal.%s() RETURNS text LANGUAGE plpgsql AS $$%s$$"
                % (name, escalate % "NULL"))
        # The owner-run API calls the catalog's own finalize._report_progress (which refuses the table).
        with pytest.raises(psycopg2.Error) as e:
            run(planter, "SELECT finalize.report_progress('nope', 'job', '0x00000000000000000000')")
        assert "nope" in str(e.value), e.value
        planter.close()
        log_from = len(pg.log())
        time.sleep(4)  # the scheduler's rounds
        assert pg.sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'planter'") == [(False,)]
        assert pg.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'finalize scheduler'") == [(1,)]
        assert "finalize_internal" not in pg.log()[log_from:], pg.log()[log_from:][-2000:]
    finally:
        pg.cleanup()
