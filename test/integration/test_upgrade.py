"""Versioned releases. Every released install script is frozen in
src/sql/release/ and never edited; every change to SQL objects after a
release goes into an upgrade script (src/sql/upgrade/) with default_version
bumped. Installing any released version and running ALTER EXTENSION finalize
UPDATE must give exactly the catalog a fresh install gives - every member
object, function definition and grant, column, constraint, index, view,
trigger, type and comment - and keep facts, verdicts and releases."""

import json
import os
import re
import subprocess
from datetime import datetime, timezone

import pytest

from storefiles import write_file

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RELEASES = os.path.join(TOP, "src", "sql", "release")


def default_version():
    with open(os.path.join(TOP, "finalize.control")) as f:
        return re.search(r"^default_version\s*=\s*'([^']+)'", f.read(), re.M).group(1)


def vkey(v):
    return tuple(int(x) for x in v.split("."))


def released_versions():
    names = os.listdir(RELEASES) if os.path.isdir(RELEASES) else []
    return sorted((m.group(1) for m in (re.fullmatch(r"finalize--(\d+\.\d+\.\d+)\.sql", n) for n in names) if m),
                  key=vkey)


# What a database's finalize catalog looks like, as sets of text rows that
# do not depend on OIDs or on the order objects were created in (an upgrade
# adds a column at the end of its table; a fresh install may declare it
# anywhere, so columns compare by name).
SNAPSHOT = {
    "members": """
        SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
          FROM pg_catalog.pg_depend d
         WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize')""",
    "functions": """
        SELECT p.oid::pg_catalog.regprocedure::text,
               CASE WHEN p.prokind IN ('f', 'p') THEN pg_catalog.pg_get_functiondef(p.oid) END,
               p.proacl::text, pg_catalog.obj_description(p.oid, 'pg_proc')
          FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'finalize'::pg_catalog.regnamespace""",
    "relations": """
        SELECT c.relname, c.relkind, c.relacl::text, pg_catalog.obj_description(c.oid, 'pg_class'),
               CASE WHEN c.relkind IN ('v', 'm') THEN pg_catalog.pg_get_viewdef(c.oid) END
          FROM pg_catalog.pg_class c WHERE c.relnamespace = 'finalize'::pg_catalog.regnamespace""",
    "columns": """
        SELECT c.relname, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_catalog.pg_get_expr(d.adbin, d.adrelid), a.attacl::text, pg_catalog.col_description(c.oid, a.attnum)
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
          LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
         WHERE c.relnamespace = 'finalize'::pg_catalog.regnamespace""",
    "constraints": """
        SELECT co.conrelid::pg_catalog.regclass::text, co.contypid::pg_catalog.regtype::text, co.conname,
               pg_catalog.pg_get_constraintdef(co.oid)
          FROM pg_catalog.pg_constraint co WHERE co.connamespace = 'finalize'::pg_catalog.regnamespace""",
    "indexes": """
        SELECT pg_catalog.pg_get_indexdef(i.indexrelid)
          FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
         WHERE c.relnamespace = 'finalize'::pg_catalog.regnamespace""",
    "triggers": """
        SELECT pg_catalog.pg_get_triggerdef(t.oid)
          FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = 'finalize'::pg_catalog.regnamespace AND NOT t.tgisinternal""",
    "types": """
        SELECT t.typname, t.typtype, pg_catalog.format_type(t.typbasetype, t.typtypmod), t.typnotnull,
               t.typacl::text, pg_catalog.obj_description(t.oid, 'pg_type'),
               (SELECT pg_catalog.string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                  FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid)
          FROM pg_catalog.pg_type t
         WHERE t.typnamespace = 'finalize'::pg_catalog.regnamespace AND t.typtype IN ('d', 'e', 'b', 'r')""",
    "config": """
        SELECT e.extversion, (SELECT pg_catalog.array_agg(x::pg_catalog.regclass::text ORDER BY x::pg_catalog.regclass::text)
                                FROM pg_catalog.unnest(e.extconfig) AS x)::text, e.extcondition::text
          FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize'""",
    "foreign": """
        SELECT w.fdwname, w.fdwhandler::pg_catalog.regproc::text, w.fdwvalidator::pg_catalog.regproc::text, w.fdwacl::text
          FROM pg_catalog.pg_foreign_data_wrapper w""",
}


def snapshot(pg, dbname):
    """The finalize catalog of a database, kind -> set of rows."""
    return {kind: set(pg.sql(query, dbname=dbname)) for kind, query in SNAPSHOT.items()}


def differences(a, b):
    """What differs between two snapshots, kind -> (only in a, only in b)."""
    return {k: (sorted(map(str, a[k] - b[k])), sorted(map(str, b[k] - a[k]))) for k in a if a[k] != b[k]}


@pytest.fixture
def databases(pg):
    made = []

    def make(name, version=None):
        pg.sql('DROP DATABASE IF EXISTS "%s"' % name)
        pg.sql('CREATE DATABASE "%s"' % name)
        made.append(name)
        pg.sql("CREATE EXTENSION finalize" + (" VERSION '%s'" % version if version else ""), dbname=name)
        return name
    yield make
    for name in made:
        pg.sql('DROP DATABASE IF EXISTS "%s"' % name)


def build_script():
    """The current version's install script as make assembles it."""
    subprocess.run(["make", "-s", "-C", TOP, "finalize--%s.sql" % default_version()], check=True,
                   capture_output=True)
    with open(os.path.join(TOP, "finalize--%s.sql" % default_version()), "rb") as f:
        return f.read()


def test_released_versions_are_frozen_and_the_current_one_is_released_or_newer():
    versions = released_versions()
    assert versions, "no released install script in src/sql/release/"
    current = default_version()
    assert vkey(versions[-1]) <= vkey(current)
    if versions[-1] == current:
        # Not bumped since the release: the parts must still build it, byte for byte.
        with open(os.path.join(RELEASES, "finalize--%s.sql" % current), "rb") as f:
            assert f.read() == build_script(), (
                "src/sql/*.sql changed since %s was released: put the change into "
                "src/sql/upgrade/finalize--%s--<next>.sql and bump default_version" % (current, current))
    else:
        # Every released version reaches the current one through upgrade scripts.
        upgrades = os.listdir(os.path.join(TOP, "src", "sql", "upgrade"))
        for older in versions:
            v = older
            while v != current:
                step = [n for n in upgrades if n.startswith("finalize--%s--" % v)]
                assert len(step) == 1, "no single upgrade script from %s" % v
                v = re.fullmatch(r"finalize--[\d.]+--([\d.]+)\.sql", step[0]).group(1)


def versions_to_update_from():
    """Every release older than the current version; until there is one, the
    current release itself (the update is then a no-op, and the test still
    runs the whole path: data made, updated, compared)."""
    older = [v for v in released_versions() if v != default_version()]
    return older or released_versions()[-1:]


def old_release(sql, manifest, released):
    """A release attempt as an older version's gate stored it: that gate's
    library is not loaded here, and this one's publishes nothing into a
    catalog of another version (it refuses: the gate never guesses what an
    older catalog means)."""
    sql("INSERT INTO finalize.release (table_id, partition, generation, store, prefix, released, period_start, "
        "problems, report, requested_by) VALUES (finalize._tracked_id(%s), %s, %s, %s, %s, %s, %s, '[]', "
        "jsonb_build_object('manifest', %s::jsonb), current_user) RETURNING release_id",
        (manifest["table"], manifest["partition"], manifest["generation"], manifest["store"], manifest["prefix"],
         released, manifest["period_start"], json.dumps(manifest)))
    if released:
        sql("INSERT INTO finalize.published (table_id, partition, generation, prefix, release_id, published_at) "
            "SELECT r.table_id, r.partition, r.generation, r.prefix, r.release_id, r.requested_at "
            "FROM finalize.release r WHERE r.release_id = (SELECT max(release_id) FROM finalize.release)")


def make_history(pg, dbname, store):
    """Facts, verdicts, events, conditions and releases, made through the
    SQL API (and the worker's functions) of whatever version is installed;
    releases through the gate when it is this version's, else as that
    version stored them (old_release)."""
    def sql(query, args=None):
        return pg.sql(query, args, dbname=dbname)
    sql("CREATE SERVER up FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'erp')")
    sql("CREATE USER MAPPING FOR CURRENT_USER SERVER up OPTIONS (username 'u', password 'p')")
    sql("SELECT finalize.track_table('up.orders', 'up', 'dbo.orders', '1 hour')")
    sql("SELECT finalize.record_range('up.orders', NULL, '0x00000000000000000010', "
        "'2026-11-02 09:00:05+00', 0, 0, 0, NULL, NULL, 'dbo_orders', NULL, NULL)")
    sql("SELECT finalize.record_range('up.orders', '0x00000000000000000010', '0x00000000000000000020', "
        "'2026-11-02 10:00:05+00', 3, 1, 0, '2026-11-02 09:10+00', '2026-11-02 09:50+00', 'dbo_orders', "
        "NULL, NULL)")
    # Empty ranges, coalesced into one fact (the next empty range after the
    # update must still coalesce into it).
    for start, end, at in [("0x00000000000000000020", "0x00000000000000000030", "2026-11-02 10:20:00+00"),
                           ("0x00000000000000000030", "0x00000000000000000040", "2026-11-02 10:40:00+00")]:
        sql("SELECT finalize.record_range('up.orders', %s, %s, %s, 0, 0, 0, NULL, NULL, 'dbo_orders', NULL, NULL)",
            (start, end, at))
    # A second table stopped by a data loss, a third untracked with its facts
    # kept, a condition per table and a source held by commit_time_ahead.
    sql("SELECT finalize.track_table('up.lines', 'up', 'dbo.lines', '1 day', ddl_policy => 'block')")
    sql("SELECT finalize.record_range('up.lines', NULL, '0x00000000000000000010', '2026-11-02 09:00:05+00')")
    sql("SELECT finalize._record_event(finalize._tracked_id('up.lines'), 'data_loss', '0x00000000000000000010', "
        "'0x00000000000000000090', 'dbo_lines', '{\"cause\": \"cleanup\"}', 'data_lost', 'lost')")
    sql("SELECT finalize._set_condition(finalize._tracked_id('up.orders'), 'lock_timeout', 'held')")
    sql("SELECT finalize._set_condition(finalize._tracked_id('up.lines'), 'no_capture_instance', 'gone')")
    sql("SELECT finalize._source_failed('up', NULL, 'commit_time_ahead', 'ahead', '2026-11-02 11:00+00')")
    sql("SELECT finalize.track_table('up.old', 'up', 'dbo.old', '15 minutes')")
    sql("SELECT finalize.record_range('up.old', NULL, '0x00000000000000000010', '2026-11-02 09:00:05+00')")
    sql("SELECT finalize.untrack_table('up.old')")
    # Releases: a published generation, a rejected attempt, a projection.
    files = {}
    for i in range(2):
        path = "hour=09/gen-1/part-%d.parquet" % i
        write_file(store, path, b"x" * (i + 1))
        files[path] = i + 1
    sql("SELECT finalize.register_partition('up.orders', 'hour=09', 'hour=09/gen-1/')")
    manifest = {"table": "up.orders", "partition": "hour=09", "generation": "gen-1", "store": "file://" + store,
                "prefix": "hour=09/gen-1/", "files": files, "period_start": "2026-11-02 09:00+00"}
    current = sql("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'finalize'")[0][0] == \
        default_version()
    if current:
        assert sql("SELECT released FROM finalize.release_gate(%s)", (json.dumps(manifest),)) == [(True,)]
    else:
        with pytest.raises(Exception, match="the release gate publishes nothing|publishes nothing until"):
            sql("SELECT released FROM finalize.release_gate(%s)", (json.dumps(manifest),))
        old_release(sql, manifest, True)
    manifest.update(generation="gen-2", prefix="hour=09/gen-2/")
    if current:
        assert sql("SELECT released FROM finalize.release_gate(%s)", (json.dumps(manifest),)) == [(False,)]
    else:
        old_release(sql, manifest, False)
    sql("SELECT finalize.set_projection('up.orders', 'hour={hour}/', '2026-11-01', '2026-12-01')")


# What the update must keep: every row of every table of the extension, its
# sequences, and what the sensors and the gate answer (lag, which moves with
# the clock, aside).
KEPT = {
    "sequences": "SELECT c.relname, pg_catalog.pg_sequence_last_value(c.oid::pg_catalog.regclass) "
                 "FROM pg_catalog.pg_class c WHERE c.relnamespace = 'finalize'::pg_catalog.regnamespace "
                 "AND c.relkind = 'S' ORDER BY 1",
    "finalized_until": "SELECT t, finalize.finalized_until(t) FROM unnest(ARRAY['up.orders', 'up.lines']) AS t",
    "is_final": "SELECT t, p, finalize.is_final(t, p) FROM unnest(ARRAY['up.orders', 'up.lines']) AS t, "
                "unnest(ARRAY['2026-11-01 23:00+00', '2026-11-02 08:00+00', '2026-11-02 09:00+00', "
                "'2026-11-02 10:00+00']::timestamptz[]) AS p ORDER BY 1, 2",
    # (a reason may say more than it did: 0.3.0 says where tracking began; see REASONS)
    "explain_verdict": "SELECT e.table_name, e.period_start, e.period_end, e.is_final, e.finalized_until, "
                       "e.captured_until, e.state FROM unnest(ARRAY['up.orders', 'up.lines']) AS t, "
                       "unnest(ARRAY['2026-11-02 09:00+00', '2026-11-02 10:00+00']::timestamptz[]) AS p, "
                       "finalize.explain_verdict(t, p) AS e ORDER BY 1, 2",
    # (the columns every version has: 0.3.0 adds before_tracking)
    "changes_by_period": "SELECT period_start, period_end, is_final, covered, inserts, updates, deletes, "
                         "straddling_ranges, exact FROM finalize.changes_by_period('up.orders', "
                         "'2026-11-02 08:00+00', '2026-11-02 12:00+00')",
    "status": "SELECT table_name, server_name, source_table, capture_instance, granularity, state, state_detail, "
              "condition, condition_detail, finalized_until, offset_lsn, captured_until, advanced_at, recorded_at, "
              "source_condition, source_max_lsn, last_poll, last_error, next_attempt "
              "FROM finalize.status ORDER BY table_name",
    "facts": "SELECT f::text FROM finalize.facts f ORDER BY fact_id",
    "releases": "SELECT r::text FROM finalize.releases r ORDER BY release_id",
    "released_generation": "SELECT finalize.released_generation('up.orders', 'hour=09')",
    "held": "SELECT * FROM finalize._source_hold('up')",
}


# The reasons explain_verdict gives: after an update each still says what it said, and may say more.
REASONS = ("SELECT e.reason FROM unnest(ARRAY['up.orders', 'up.lines']) AS t, "
           "unnest(ARRAY['2026-11-02 09:00+00', '2026-11-02 10:00+00']::timestamptz[]) AS p, "
           "finalize.explain_verdict(t, p) AS e ORDER BY t, p")


def columns_of(pg, dbname):
    """Table of the extension -> its columns, in order."""
    return dict(pg.sql("SELECT c.relname, pg_catalog.array_agg(a.attname::text ORDER BY a.attnum) "
                       "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid "
                       "AND a.attnum > 0 AND NOT a.attisdropped "
                       "WHERE c.relnamespace = 'finalize'::pg_catalog.regnamespace AND c.relkind = 'r' "
                       "GROUP BY c.relname", dbname=dbname))


def kept(pg, dbname, before=None):
    """Rows of every table of the extension and the answers in KEPT. Given
    what kept() said before an update, only what existed then: its tables
    with their columns (an update may add columns) and its sequences (and
    tables) - every row and value must still be there, unchanged."""
    columns = before["columns"] if before else columns_of(pg, dbname)
    out = {"columns": columns}
    for rel, cols in columns.items():
        row = ", ".join('t."%s"' % c for c in cols)
        out["table " + rel] = pg.sql('SELECT ROW(%s)::text FROM finalize."%s" t ORDER BY 1' % (row, rel),
                                     dbname=dbname)
    for name, query in KEPT.items():
        out[name] = pg.sql(query, dbname=dbname)
    if before:
        had = {r[0] for r in before["sequences"]}
        out["sequences"] = [r for r in out["sequences"] if r[0] in had]
    return out


# On every major (test/run-tests lane): the update from the oldest release, through every script.
@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.every_major) if i == 0 else v
                                     for i, v in enumerate(versions_to_update_from())])
def test_every_release_updates_to_exactly_a_fresh_install(pg, databases, store, version):
    old = databases("up_from_%s" % version.replace(".", "_"), version)
    make_history(pg, old, store)
    before = kept(pg, old)
    reasons = pg.sql(REASONS, dbname=old)
    # Every table holds rows, so a lost or rewritten row shows.
    assert all(before["table " + rel] for rel in ("tracked_table", "watermark", "fact", "table_condition",
                                                    "source_status", "partition_registration", "projection",
                                                    "release", "published", "catalog_lock")), before
    assert before["finalized_until"] == [("up.orders", datetime(2026, 11, 2, 10, tzinfo=timezone.utc)),
                                         ("up.lines", datetime(2026, 11, 2, tzinfo=timezone.utc))]
    assert before["released_generation"] == [("gen-1",)]
    pg.sql("ALTER EXTENSION finalize UPDATE", dbname=old)
    assert pg.sql("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'finalize'",
                  dbname=old) == [(default_version(),)]
    after = kept(pg, old, before)
    assert {k: (before[k], after[k]) for k in before if before[k] != after[k]} == {}
    assert all(now.startswith(then) for (then,), (now,) in zip(reasons, pg.sql(REASONS, dbname=old))), reasons
    # Each table's source verdict is the verdict it had: no consumer held it.
    assert pg.sql("SELECT count(*) FROM finalize.watermark WHERE source_until IS DISTINCT FROM finalized_until",
                  dbname=old) == [(0,)]
    fresh = databases("up_fresh")
    assert differences(snapshot(pg, old), snapshot(pg, fresh)) == {}
    # The updated write path goes on from the facts the old version recorded:
    # an empty range coalesces into the old fact, a range with rows advances.
    facts = pg.sql("SELECT count(*) FROM finalize.fact", dbname=old)
    pg.sql("SELECT finalize.record_range('up.orders', '0x00000000000000000040', '0x00000000000000000050', "
           "'2026-11-02 10:50+00', 0, 0, 0, NULL, NULL, 'dbo_orders', NULL, NULL)", dbname=old)
    assert pg.sql("SELECT count(*) FROM finalize.fact", dbname=old) == facts
    assert pg.sql("SELECT finalize.record_range('up.orders', '0x00000000000000000050', '0x00000000000000000060', "
                  "'2026-11-02 11:00:01+00', 1, 0, 0, '2026-11-02 10:55+00', '2026-11-02 10:55+00', "
                  "'dbo_orders', NULL, NULL)", dbname=old) == [(datetime(2026, 11, 2, 11, tzinfo=timezone.utc),)]


def test_the_comparison_sees_every_kind_of_difference(pg, databases):
    """The upgrade test is only as good as its comparison: two fresh installs
    agree, and each kind of drift an upgrade script could leave is seen."""
    a, b = databases("cmp_a"), databases("cmp_b")
    assert differences(snapshot(pg, a), snapshot(pg, b)) == {}
    drift = [
        ("functions", "ALTER FUNCTION finalize.quote_mssql_ident(text) SET work_mem = '1MB'"),
        ("functions", "REVOKE EXECUTE ON FUNCTION finalize.finalized_until(text) FROM finalize_reader"),
        ("columns", "ALTER TABLE finalize.source_status ALTER COLUMN cycles SET DEFAULT 1"),
        ("constraints", "ALTER TABLE finalize.source_status ADD CONSTRAINT drift CHECK (cycles >= 0)"),
        ("indexes", "DROP INDEX finalize.published_prefix_idx"),
        ("relations", "COMMENT ON TABLE finalize.source_status IS 'drift'"),
        ("functions", "CREATE FUNCTION finalize.drift() RETURNS int LANGUAGE sql AS 'SELECT 1'"),
        ("members", "ALTER EXTENSION finalize ADD FUNCTION finalize.drift()"),
        ("members", "ALTER EXTENSION finalize DROP TABLE finalize.catalog_lock"),
    ]
    base = snapshot(pg, a)
    for kind, statement in drift:
        pg.sql(statement, dbname=b)
        assert kind in differences(base, snapshot(pg, b)), statement


@pytest.mark.parametrize("version", [v for v in released_versions() if vkey(v) < vkey("0.2.0")])
def test_losses_recorded_before_the_update_hold_their_periods(pg, databases, version):
    """Before 0.2.0 a period that lost changes to CDC cleanup became final
    once its table resumed. The update turns every such restart (a "resumed"
    event) into a loss: its periods are not final until an admin
    acknowledges it, and the others stay as they were."""
    db = databases("up_loss_from_%s" % version.replace(".", "_"), version)

    def sql(query, args=None):
        return pg.sql(query, args, dbname=db)
    sql("CREATE SERVER up FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'erp')")
    sql("SELECT finalize.track_table('up.events', 'up', 'dbo.events', '1 hour')")
    sql("SELECT finalize.record_range('up.events', NULL, '0x00000000000000000010', '2026-11-02 09:00:05+00')")
    sql("SELECT finalize.record_range('up.events', '0x00000000000000000010', '0x00000000000000000020', "
        "'2026-11-02 10:15:00+00', 1, 0, 0, '2026-11-02 09:30+00', '2026-11-02 09:30+00')")
    sql("SELECT finalize._record_event(finalize._tracked_id('up.events'), 'data_loss', '0x00000000000000000020', "
        "'0x00000000000000000090', 'dbo_events', '{\"cause\": \"cleanup\"}', 'data_lost', 'lost')")
    sql("SELECT finalize.resume_table('up.events')")
    sql("SELECT finalize._resume_after_loss(finalize._tracked_id('up.events'), '0x0000000000000000008F', "
        "'2026-11-02 12:20:00+00', 'dbo_events', false, '{}')")
    sql("SELECT finalize.record_range('up.events', '0x0000000000000000008F', '0x000000000000000000A0', "
        "'2026-11-02 14:00:01+00')")
    hours = ["2026-11-02 09:00+00", "2026-11-02 10:00+00", "2026-11-02 11:00+00", "2026-11-02 12:00+00",
             "2026-11-02 13:00+00"]

    def final():
        return [r[0] for r in sql("SELECT finalize.is_final('up.events', p::timestamptz) FROM unnest(%s) AS p",
                                  (hours,))]

    def final_by_facts():
        return [r[0] for r in sql("SELECT is_final FROM finalize.changes_by_period('up.events', "
                                  "'2026-11-02 09:00+00', '2026-11-02 14:00+00') ORDER BY period_start")]
    assert final() == [True] * 5
    assert sql("SELECT finalize.finalized_until('up.events')") == [(datetime(2026, 11, 2, 14, tzinfo=timezone.utc),)]
    pg.sql("ALTER EXTENSION finalize UPDATE", dbname=db)
    # Hours 10 to 12 intersect the lost commit times [10:15, 12:20]; the
    # verdict stops at the first of them until the loss is acknowledged.
    assert final() == final_by_facts() == [True, False, False, False, True]
    assert sql("SELECT finalize.finalized_until('up.events')") == [(datetime(2026, 11, 2, 10, tzinfo=timezone.utc),)]
    assert sql("SELECT lost_from, lost_to, from_lsn, to_lsn, fact_id IS NOT NULL FROM finalize.loss") == [
        (datetime(2026, 11, 2, 10, 15, tzinfo=timezone.utc), datetime(2026, 11, 2, 12, 20, tzinfo=timezone.utc),
         "0x00000000000000000020", "0x0000000000000000008F", True)]
    reason = sql("SELECT reason FROM finalize.explain_verdict('up.events', '2026-11-02 11:00+00')")[0][0]
    assert "finalize.acknowledge_loss('up.events'" in reason and "0x0000000000000000008F" in reason
    assert sql("SELECT finalize.acknowledge_loss('up.events', '2026-11-02 10:00+00', '2026-11-02 13:00+00', "
               "'re-snapshotted')") == [(1,)]
    assert final() == final_by_facts() == [True] * 5
    assert sql("SELECT loss_blocked FROM finalize.watermark") == [(False,)]
    assert sql("SELECT finalize.finalized_until('up.events')") == [(datetime(2026, 11, 2, 14, tzinfo=timezone.utc),)]


@pytest.mark.parametrize("version", [v for v in released_versions() if vkey(v) < vkey("0.2.0")])
def test_servers_declared_before_encryption_keep_working_after_the_update(pg, databases, version):
    """0.2.0 encrypts and verifies by default. A server declared under an older release (which
    encrypted only when SQL Server offered it and verified nothing) keeps that behaviour through
    the update, said in a WARNING; one that already says how to encrypt is left alone."""
    db = databases("up_tls_from_%s" % version.replace(".", "_"), version)
    pg.sql("CREATE SERVER legacy FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'erp')",
           dbname=db)
    pg.sql("CREATE SERVER other_fdw_server FOREIGN DATA WRAPPER finalize_s3 OPTIONS (bucket 'lake')", dbname=db)
    conn = pg.connect(dbname=db)
    try:
        conn.cursor().execute("ALTER EXTENSION finalize UPDATE")
        notices = "".join(conn.notices)
    finally:
        conn.close()
    options = dict(pg.sql("SELECT srvname, srvoptions FROM pg_foreign_server ORDER BY srvname", dbname=db))
    assert "encrypt=request" in options["legacy"] and "trust_server_certificate=true" in options["legacy"]
    assert not any(o.startswith("encrypt") for o in options["other_fdw_server"])
    assert 'server "legacy" keeps the unverified encryption' in notices, notices
    # A server created after the update gets the verified default (no options added).
    pg.sql("CREATE SERVER fresh FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'erp')",
           dbname=db)
    assert pg.sql("SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'fresh'", dbname=db)[0][0] == \
        ["host=127.0.0.1", "database=erp"]


def test_the_new_library_answers_a_0_2_0_catalog_in_its_periods(pg, databases):
    """Between the new library's start and ALTER EXTENSION UPDATE, the C functions run against the 0.2.0
    declarations, which pass no zone: they answer in UTC as 0.2.0 did (an event-time table records its
    ranges through _event_bound's three arguments; reading a fourth crashed the server)."""
    db = databases("up_mixed_0_2_0", "0.2.0")

    def sql(query, args=None):
        return pg.sql(query, args, dbname=db)
    assert sql("SELECT finalize._event_bound('2026-11-29 12:00+00', '10 minutes', '1 hour'), "
               "finalize.period_start('2026-11-28 12:00+00', '7 days'), "
               "finalize._period_final('2026-11-28 12:00+00', '1 day', '2026-11-29 00:00+00')") == \
        [(datetime(2026, 11, 29, 11, tzinfo=timezone.utc), datetime(2026, 11, 28, tzinfo=timezone.utc), True)]
    sql("CREATE SERVER up FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'erp')")
    sql("SELECT finalize.track_table('up.events', 'up', 'dbo.orders', '1 hour', event_time_column => 'created_at', "
        "allowed_lateness => '10 minutes')")
    sql("SELECT finalize.record_range('up.events', NULL, '0x00000000000000000010', '2026-11-02 09:00:05+00')")
    sql("SELECT finalize.record_range('up.events', '0x00000000000000000010', '0x00000000000000000020', "
        "'2026-11-02 11:00:05+00')")
    assert sql("SELECT finalize.finalized_until('up.events')") == [(datetime(2026, 11, 2, 10, tzinfo=timezone.utc),)]


@pytest.mark.parametrize("version", [v for v in released_versions() if vkey(v) < vkey("0.3.0")])
def test_every_table_keeps_its_periods_through_the_update(pg, databases, version):
    """0.3.0 cuts periods in a table's zone and reads whole weeks written in days as ISO weeks (from
    Monday); before, every table's periods were UTC's and '7 days' counted from Saturday 2000-01-01. The
    update gives every table period_zone 'UTC' and writes such granularities in hours, which keeps those
    periods: every answer about a period is the one it was, and a WARNING names the tables."""
    db = databases("up_periods_from_%s" % version.replace(".", "_"), version)

    def sql(query, args=None):
        return pg.sql(query, args, dbname=db)
    sql("CREATE SERVER up FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'erp')")
    grains = {"up.weekly": "7 days", "up.fortnight": "14 days", "up.hours168": "168 hours", "up.daily": "1 day",
              "up.quarter_hours": "15 minutes"}
    for t, g in grains.items():
        sql("SELECT finalize.track_table(%s, 'up', 'dbo.orders', %s)", (t, g))
        sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000010', '2026-10-01 00:00+00')", (t,))
        sql("SELECT finalize.record_range(%s, '0x00000000000000000010', '0x00000000000000000020', "
            "'2026-11-26 13:20+00', 2, 0, 0, '2026-11-20 10:00+00', '2026-11-25 10:00+00')", (t,))
    probes = ["2026-11-14 12:00+00", "2026-11-21 00:00+00", "2026-11-22 12:00+00", "2026-11-26 13:10+00"]
    question = ("SELECT t, p, finalize.is_final(t, p::timestamptz), e.period_start, e.period_end, e.is_final, "
                "e.finalized_until FROM unnest(%s) AS t, unnest(%s) AS p, "
                "LATERAL finalize.explain_verdict(t, p::timestamptz) AS e ORDER BY 1, 2")
    before = sql(question, (list(grains), probes))
    counts = ("SELECT period_start, period_end, is_final, covered, inserts, updates, deletes, straddling_ranges, "
              "exact FROM finalize.changes_by_period(%s, '2026-11-10', '2026-11-27')")
    by_period = {t: sql(counts, (t,)) for t in grains}
    conn = pg.connect(dbname=db)
    try:
        conn.cursor().execute("ALTER EXTENSION finalize UPDATE")
        notices = "".join(conn.notices)
    finally:
        conn.close()
    if vkey(version) < vkey("0.3.0"):
        assert "up.fortnight, up.weekly" in notices and "ISO weeks" in notices, notices
    assert sql(question, (list(grains), probes)) == before
    assert {t: sql(counts, (t,)) for t in grains} == by_period
    assert dict(sql("SELECT table_name, period_zone FROM finalize.tracked_table")) == dict.fromkeys(grains, "UTC")
    assert sql("SELECT granularity::text FROM finalize.tracked_table WHERE table_name = 'up.weekly'") == \
        [("168:00:00",)]
    # A table tracked now with '7 days' gets ISO weeks: Monday 2026-11-23.
    sql("SELECT finalize.track_table('up.iso', 'up', 'dbo.orders', '7 days')")
    assert sql("SELECT period_start FROM finalize.explain_verdict('up.iso', '2026-11-26 12:00+00')") == \
        [(datetime(2026, 11, 23, tzinfo=timezone.utc),)]
