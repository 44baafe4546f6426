"""A metadata database moved the way most teams back one up and move it: pg_dumpall --globals-only
for the roles, pg_dump of the database, and in a fresh cluster that preloads finalize (its worker
running) the globals restored first, then pg_restore. Every finalize object and row comes back,
the verdicts equal the ones before, and the worker goes on from the recorded offsets.

The PostgreSQL is the suite's (PG_BIN); FINALIZE_PG_UPGRADE_TO, the pg_config of a newer major
with finalize installed, also restores into a cluster of that major."""

import os
import re
import subprocess

import pytest

from metadata_scenario import (ORDERS, advance, at, check_continues, check_facts_kept, check_sequences, diff, populate, sequences,
                               snapshot, tools, worker_conf)
from pgcluster import PG_BIN, Cluster
from worker_env import Env, sim_clock


@pytest.fixture
def sim():
    s = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    yield s
    s.stop()


@pytest.fixture
def clock_sim():
    """A second SQL Server, whose clock a test steps (the held source)."""
    s = sim_clock(start_time="2026-11-02T08:50:00Z").start()
    yield s
    s.stop()


def dump(pg, bindir=None):
    """pg_dumpall --globals-only and pg_dump -Fc of database postgres (by the programs of bindir,
    default pg's), as files in pg's directory."""
    run = tools(bindir or pg.bin)
    conn = ["-h", pg.dir, "-p", str(pg.port), "-U", "postgres"]
    globals_sql = os.path.join(pg.dir, "globals.sql")
    archive = os.path.join(pg.dir, "metadata.dump")
    for program, args in [("pg_dumpall", conn + ["--globals-only", "-f", globals_sql]),
                          ("pg_dump", conn + ["-Fc", "-f", archive, "postgres"])]:
        done = run(program, *args)
        assert done.returncode == 0, done.stderr
    return globals_sql, archive


def restore_globals(pg, globals_sql):
    """The roles, as psql runs pg_dumpall's script: only the bootstrap superuser already exists."""
    done = tools(pg.bin)("psql", "-h", pg.dir, "-p", str(pg.port), "-U", "postgres", "-d", "postgres",
                         "-X", "-q", "-f", globals_sql)
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert all('role "postgres" already exists' in e for e in errors), done.stderr


def pg_restore(pg, archive, *args):
    """pg_restore into database postgres; returns the CompletedProcess."""
    return tools(pg.bin)("pg_restore", "-h", pg.dir, "-p", str(pg.port), "-U", "postgres", "-d", "postgres",
                         *args, archive)


def moves():
    """(PostgreSQL to restore into, how): the suite's, in one pg_restore and in docs/upgrading.md's
    two passes (everything else with --jobs, finalize's rows in one process after it); and the newer
    major of FINALIZE_PG_UPGRADE_TO."""
    cases = [pytest.param(PG_BIN, "serial", id="same-major"), pytest.param(PG_BIN, "two-pass", id="two-pass")]
    if os.environ.get("FINALIZE_PG_UPGRADE_TO"):
        newer = subprocess.run([os.environ["FINALIZE_PG_UPGRADE_TO"], "--bindir"], check=True,
                               capture_output=True, text=True).stdout.strip()
        cases.append(pytest.param(newer, "serial", id="newer-major"))
    return cases


def restore(pg, archive, how):
    """pg_restore of the archive into database postgres, in one process or in two passes."""
    if how == "serial":
        done = pg_restore(pg, archive, "--exit-on-error")
        assert done.returncode == 0, done.stderr
        return
    entries = toc(pg, archive)
    finalize_rows = [e for e in entries if re.search(r" (TABLE DATA|SEQUENCE SET) finalize ", e)]
    rest = [e for e in entries if e not in finalize_rows]
    for args in (["--jobs=2", "-L", write_list(pg, "rest.list", rest)],
                 ["-L", write_list(pg, "finalize.list", finalize_rows)]):
        done = pg_restore(pg, archive, "--exit-on-error", *args)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("target, how", moves())
def test_a_dump_restored_into_a_fresh_cluster_keeps_every_object_and_the_verdict_continues(sim, clock_sim, store,
                                                                                             target, how):
    """Dumped with the target's pg_dumpall and pg_dump (a newer major's read an older server, as
    PostgreSQL advises for a move to it), restored with its psql and pg_restore."""
    src = Cluster(conf=worker_conf())
    dst = None
    try:
        src.start()
        src.sql("CREATE EXTENSION finalize")
        populate(src, sim, store, clock_sim)
        before, ids = snapshot(src), sequences(src)
        last_fact = before["facts"][-1][0]
        globals_sql, archive = dump(src, target)
        src.stop()

        dst = Cluster(conf=worker_conf(), bindir=target)
        dst.start()
        restore_globals(dst, globals_sql)
        restore(dst, archive, how)
        env = Env(dst)
        env.wait_caught_up(ORDERS, sim)
        after = snapshot(dst)
        assert after == before, diff(before, after)
        check_sequences(ids, sequences(dst))
        check_continues(env, sim, last_fact)
    finally:
        src.cleanup()
        if dst is not None:
            dst.cleanup()


def toc(pg, archive):
    """pg_restore -l's entries of an archive (its table of contents), one line each."""
    done = tools(pg.bin)("pg_restore", "-l", archive)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line and not line.startswith(";")]


def write_list(pg, name, entries):
    """A pg_restore -L list file in pg's directory."""
    path = os.path.join(pg.dir, name)
    with open(path, "w") as f:
        f.write("\n".join(entries) + "\n")
    os.chmod(path, 0o644)
    return path


def test_workers_never_record_on_a_half_restored_catalog(sim, store):
    """The restore stops half way (pg_restore -L: the schema, the sources, the tracked tables and
    their watermarks, but no facts yet) while the target's worker runs and SQL Server moves on: the
    worker must not record a range on that catalog (its fact would take the ids of the facts still
    to come, whose COPY then fails, or break their chain). Once the rest is restored, the verdict is
    the one dumped and the worker goes on from it."""
    src = Cluster(conf=worker_conf())
    dst = None
    try:
        src.start()
        src.sql("CREATE EXTENSION finalize")
        populate(src, sim, store)
        before = snapshot(src)
        last_fact = before["facts"][-1][0]
        globals_sql, archive = dump(src)
        src.stop()
        entries = toc(src, archive)
        first = [e for e in entries if " TABLE DATA " not in e and " SEQUENCE SET " not in e or
                 " TABLE DATA finalize tracked_table " in e or " TABLE DATA finalize watermark " in e]
        rest = [e for e in entries if e not in first]

        dst = Cluster(conf=worker_conf())
        dst.start()
        restore_globals(dst, globals_sql)
        done = pg_restore(dst, archive, "--exit-on-error", "-L", write_list(src, "first.list", first))
        assert done.returncode == 0, done.stderr
        advance(sim, inserts=2, at=at(11, 5))
        env = Env(dst)
        # Either the worker acts on the half-restored catalog, or finalize says why it waits.
        dst.wait_for(lambda: env.one("SELECT count(*) FROM finalize.fact") > 0 or
                     "waits for the restore" in dst.log(), what="the worker's next step")
        done = pg_restore(dst, archive, "--exit-on-error", "-L", write_list(src, "rest.list", rest))
        assert done.returncode == 0, done.stderr
        env.wait_caught_up(ORDERS, sim)
        check_facts_kept(before["facts"], snapshot(dst)["facts"])
        check_continues(env, sim, last_fact)
    finally:
        src.cleanup()
        if dst is not None:
            dst.cleanup()


# What pg_dump keeps of the catalog, read from the catalog itself: a table added later must choose.
RUNTIME_TABLES = {"catalog_lock", "table_condition", "consumer_hold", "alert_target_state"}


# The tables purge_facts empties in bulk: the seal has no foreign key to them (a key would check the
# seal for every row deleted); the id sequences cover their restore.
BY_SEQUENCE = {"event_fact", "lateness_hour", "late_period", "alert_delivery"}


def test_every_table_pg_dump_keeps_is_restored_before_the_seal_or_its_sequence(pg):
    """A serial restore (docs/upgrading.md) loads the rows of an extension's tables in the order of
    their foreign keys, then sets every sequence. Each table pg_dump keeps is covered either by the
    seal's foreign keys (finalize.catalog_seal references it, directly or through the tables it
    references: its rows come before the seal's) or by the sequence check of
    finalize_internal.catalog_restoring() (it has an identity checked there, or a NOT NULL key to a table
    covered so: that sequence is behind while its rows load); the tables purge_facts empties in bulk
    are not referenced by the seal at all; and every table of finalize is either kept or the
    workers' runtime state."""
    kept = {r[0] for r in pg.sql(
        "SELECT c.relname FROM pg_extension e, unnest(e.extconfig) AS x JOIN pg_class c ON c.oid = x "
        "WHERE e.extname = 'finalize' AND c.relkind = 'r'")}
    tables = {r[0] for r in pg.sql("SELECT relname FROM pg_class WHERE relnamespace = 'finalize'::regnamespace "
                                   "AND relkind = 'r'")}
    assert tables - kept == RUNTIME_TABLES
    # (referencing, referenced, whether every column of the key is NOT NULL)
    edges = [(a.split(".", 1)[1], b.split(".", 1)[1], not_null) for a, b, not_null in pg.sql(
        "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text, "
        "bool_and(a.attnotnull) FROM pg_constraint c JOIN pg_attribute a "
        "ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey) "
        "WHERE c.contype = 'f' AND c.connamespace = 'finalize'::regnamespace GROUP BY c.oid")]
    by_keys, todo = set(), ["catalog_seal"]
    while todo:
        table = todo.pop()
        for referencing, referenced, _ in edges:
            if referencing == table and referenced not in by_keys:
                by_keys.add(referenced)
                todo.append(referenced)
    assert not {b for a, b, _ in edges if a == "catalog_seal"} & BY_SEQUENCE, \
        "a foreign key of the seal to a table purge_facts empties checks the seal for every row deleted"
    checked = pg.sql("SELECT prosrc FROM pg_proc WHERE oid = 'finalize_internal.catalog_restoring()'::regprocedure")[0][0]
    identities = pg.sql("SELECT c.relname, pg_get_serial_sequence(a.attrelid::regclass::text, a.attname) "
                        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                        "WHERE c.relnamespace = 'finalize'::regnamespace AND a.attidentity <> ''")
    assert identities and all(f"FROM {seq} q" in checked for _, seq in identities), identities
    by_sequence = {table for table, _ in identities}
    grown = True
    while grown:
        more = {a for a, b, not_null in edges if not_null and b in by_sequence} - by_sequence
        by_sequence |= more
        grown = bool(more)
    neither = kept - {"catalog_seal"} - by_keys - by_sequence
    assert not neither, f"restored after the seal with no sequence behind: {sorted(neither)}"
    assert BY_SEQUENCE <= by_sequence - by_keys, sorted(BY_SEQUENCE - (by_sequence - by_keys))
    print("covered by the seal's foreign keys:", sorted(by_keys & kept))
    print("covered by the sequence check only:", sorted((kept & by_sequence) - by_keys))


def database_tracking(pg, name, tables, version=None):
    """A new database name of pg with finalize (of version, default the newest) and a source
    "src" that is never reached, tracking tables (without track_table's check of the source)."""
    pg.sql(f'DROP DATABASE IF EXISTS "{name}"')
    pg.sql(f'CREATE DATABASE "{name}"')
    pg.sql("CREATE EXTENSION finalize" + (f" VERSION '{version}'" if version else ""), dbname=name)
    pg.sql("CREATE SERVER src FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'd')",
           dbname=name)
    conn = pg.connect(dbname=name)
    try:
        with conn.cursor() as cur:
            cur.execute("SET finalize.source_check_timeout = 0")
            for table in tables:
                cur.execute("SELECT finalize.track_table(%s, 'src', %s)", (table, "dbo." + table.split(".")[1]))
    finally:
        conn.close()


def test_a_dump_of_an_older_version_is_restored_into_it_and_updated(pg):
    """docs/upgrading.md's way for a dump of an older finalize: that version created first, the dump
    restored with --exit-on-error from a list without the schema (which CREATE EXTENSION made), the
    update seals the catalog: its workers may act, and the rows are those dumped."""
    pg.sql('DROP DATABASE IF EXISTS "old_restored"')
    pg.sql('CREATE DATABASE "old_restored"')
    try:
        database_tracking(pg, "old_dump", ["old.orders"], version="0.2.0")
        pg.sql("SELECT finalize.record_range('old.orders', NULL, '0x00000000000000000100', '2026-11-27 06:00+00')",
               dbname="old_dump")
        archive = os.path.join(pg.dir, "old.dump")
        done = tools(pg.bin)("pg_dump", "-h", pg.dir, "-p", str(pg.port), "-U", "postgres", "-Fc", "-f", archive,
                             "old_dump")
        assert done.returncode == 0, done.stderr
        pg.sql("CREATE EXTENSION finalize VERSION '0.2.0'", dbname="old_restored")
        entries = [e for e in toc(pg, archive) if " SCHEMA - finalize " not in e]
        assert len(entries) < len(toc(pg, archive)), toc(pg, archive)
        listed = write_list(pg, "old.list", entries)
        done = tools(pg.bin)("pg_restore", "-h", pg.dir, "-p", str(pg.port), "-U", "postgres", "-d", "old_restored",
                             "--exit-on-error", "-L", listed, archive)
        assert done.returncode == 0 and "ERROR" not in done.stderr, done.stderr
        pg.sql("ALTER EXTENSION finalize UPDATE", dbname="old_restored")
        assert pg.sql("SELECT finalize_internal.catalog_restoring(), finalize.finalized_until('old.orders')",
                      dbname="old_restored") == [(None, pg.sql("SELECT '2026-11-27 06:00+00'::timestamptz")[0][0])]
    finally:
        pg.sql('DROP DATABASE IF EXISTS "old_dump"')
        pg.sql('DROP DATABASE IF EXISTS "old_restored"')


def test_a_sequence_restarted_above_its_rows_is_not_behind_them(pg):
    """ALTER SEQUENCE ... RESTART WITH a value above the table's ids (or a dump of such a sequence,
    which pg_dump sets with is_called false) hands out no id that is taken: the catalog is whole
    and the workers act. Restarted at a taken id it is behind, and the workers wait."""
    try:
        database_tracking(pg, "restarted", ["a.orders", "a.payments"])
        pg.sql("ALTER SEQUENCE finalize.tracked_table_table_id_seq RESTART WITH 1000", dbname="restarted")
        assert pg.sql("SELECT finalize_internal.catalog_restoring()", dbname="restarted") == [(None,)]
        pg.sql("ALTER SEQUENCE finalize.tracked_table_table_id_seq RESTART WITH 2", dbname="restarted")
        why = pg.sql("SELECT finalize_internal.catalog_restoring()", dbname="restarted")[0][0]
        assert why is not None and "tracked_table_table_id_seq stands at 1, below the greatest id of its table, 2" \
            in why, why
    finally:
        pg.sql('DROP DATABASE IF EXISTS "restarted"')
