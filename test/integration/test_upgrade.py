"""Versioned releases. Every released install script is frozen in
src/sql/release/ and never edited; every change to SQL objects after a
release goes into an upgrade script (src/sql/upgrade/) with default_version
bumped. Installing any released version and running ALTER EXTENSION finalize
UPDATE must give exactly the catalog a fresh install gives - every member
object, function definition and grant, column, constraint, index, view,
trigger, type and comment - and keep facts, verdicts and releases."""

import os
import re
import subprocess

import pytest

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


@pytest.mark.parametrize("version", versions_to_update_from())
def test_every_release_updates_to_exactly_a_fresh_install(pg, databases, version):
    old = databases("up_from_%s" % version.replace(".", "_"), version)
    # Facts, a verdict and a release made by the old version.
    pg.sql("CREATE SERVER up FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'erp')",
           dbname=old)
    pg.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER up OPTIONS (username 'u', password 'p')", dbname=old)
    pg.sql("SELECT finalize.track_table('up.orders', 'up', 'dbo.orders', '1 hour')", dbname=old)
    pg.sql("SELECT finalize.record_range('up.orders', NULL, '0x00000000000000000010', "
           "'2026-11-02 09:00:05+00', 0, 0, 0, NULL, NULL, 'dbo_orders', NULL, NULL)", dbname=old)
    pg.sql("SELECT finalize.record_range('up.orders', '0x00000000000000000010', '0x00000000000000000020', "
           "'2026-11-02 10:00:05+00', 3, 1, 0, '2026-11-02 09:10+00', '2026-11-02 09:50+00', 'dbo_orders', "
           "NULL, NULL)", dbname=old)
    before = pg.sql("SELECT finalize.finalized_until('up.orders'), (SELECT count(*) FROM finalize.facts)",
                    dbname=old)
    pg.sql("ALTER EXTENSION finalize UPDATE", dbname=old)
    after = pg.sql("SELECT finalize.finalized_until('up.orders'), (SELECT count(*) FROM finalize.facts)",
                   dbname=old)
    assert after == before
    fresh = databases("up_fresh")
    assert differences(snapshot(pg, old), snapshot(pg, fresh)) == {}


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
