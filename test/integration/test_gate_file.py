"""The release gate against local file:// stores: each broken boundary is
rejected with a concrete reason, a correct release publishes its generation,
a correction switches the marker, and retired generations are listed only
after the retention window.

The CDC facts are recorded through the write path (finalize.record_range),
the same function the worker calls, so each period's finality and change
counts are known exactly; the worker itself is off in this cluster."""

import hashlib
import json
import os
import shutil
import tempfile

import psycopg2
import pytest

from pgcluster import cluster_with_source

TABLE = "lake.orders"
P08 = "2026-11-27 08:00+00"   # final, 5 changes
P09 = "2026-11-27 09:00+00"   # final, no changes
P10 = "2026-11-27 10:00+00"   # not final


@pytest.fixture(scope="module")
def pg():
    cluster = cluster_with_source({"finalize.enabled": "off"})
    yield cluster
    cluster.cleanup()


@pytest.fixture
def store():
    """A local store the server (running as postgres) can read."""
    root = tempfile.mkdtemp(prefix="finalize-store.")
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def table(pg):
    """A tracked table whose facts make 07:00, 08:00 and 09:00 final; 08:00
    has five inserts, 09:00 none; 10:00 is not final."""
    pg.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (TABLE,))
    for start, end, at, inserts, first, last in [
        (None, "0x00000000000000000100", "2026-11-27 06:00+00", 0, None, None),
        ("0x00000000000000000100", "0x00000000000000000200", "2026-11-27 08:00+00", 0, None, None),
        ("0x00000000000000000200", "0x00000000000000000300", "2026-11-27 09:00+00", 5,
         "2026-11-27 08:10+00", "2026-11-27 08:50+00"),
        ("0x00000000000000000300", "0x00000000000000000400", "2026-11-27 10:00+00", 0, None, None),
    ]:
        pg.sql("SELECT finalize.record_range(%s, %s, %s, %s, %s, 0, 0, %s, %s)",
               (TABLE, start, end, at, inserts, first, last))
    yield TABLE
    pg.sql("DELETE FROM finalize.tracked_table")


def write(root, path, data):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    for d in [os.path.dirname(full)]:
        while d.startswith(root) and d != root:
            os.chmod(d, 0o755)
            d = os.path.dirname(d)
    with open(full, "wb") as f:
        f.write(data)
    os.chmod(full, 0o644)


def manifest(root, generation, files, partition="day=27/hour=08", period_start=P08, **extra):
    m = {"table": TABLE, "partition": partition, "generation": generation,
         "store": "file://" + root, "prefix": f"{partition}/{generation}/", "files": files}
    if period_start is not None:
        m["period_start"] = period_start
    m.update(extra)
    return m


def gate(pg, m, user="postgres"):
    (released, generation, problems), = pg.sql("SELECT * FROM finalize.release_gate(%s)",
                                               (json.dumps(m),), user=user)
    return released, generation, problems


def codes(problems):
    return sorted((p["code"], p["path"]) for p in problems)


def publish_files(root, generation, partition="day=27/hour=08", n=3):
    """Writes n objects of a generation; the manifest's files map."""
    files = {}
    for i in range(n):
        path = f"{partition}/{generation}/part-{i:05d}.parquet"
        data = f"{generation}:{i}".encode() * (i + 1)
        write(root, path, data)
        files[path] = len(data)
    return files


def published(pg, partition="day=27/hour=08"):
    return pg.sql("SELECT finalize.released_generation(%s, %s)", (TABLE, partition))[0][0]


def test_a_matching_release_is_published_with_its_report(pg, table, store):
    files = publish_files(store, "gen-1")
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    assert published(pg) is None
    assert gate(pg, manifest(store, "gen-1", files)) == (True, "gen-1", [])
    assert published(pg) == "gen-1"
    (report, current, who), = pg.sql(
        "SELECT r.report, v.current, v.requested_by FROM finalize.release r "
        "JOIN finalize.releases v USING (release_id)")
    assert current is True and who == "postgres"
    assert report["listing"] == report["manifest"]["files"] == files
    assert report["catalog"]["source"] == "registration"
    assert report["catalog"]["location"] == "day=27/hour=08/gen-1/"
    assert report["facts"]["is_final"] is True and report["facts"]["inserts"] == 5
    assert report["problems"] == []


def test_one_missing_object_is_rejected_and_the_marker_stays(pg, table, store):
    files = publish_files(store, "gen-1")
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    assert gate(pg, manifest(store, "gen-1", files))[0]
    files2 = publish_files(store, "gen-2")
    os.unlink(os.path.join(store, "day=27/hour=08/gen-2/part-00001.parquet"))
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-2/')", (TABLE,))
    released, generation, problems = gate(pg, manifest(store, "gen-2", files2))
    assert (released, generation) == (False, "gen-2")
    assert codes(problems) == [("missing_object", "day=27/hour=08/gen-2/part-00001.parquet")]
    assert "14 bytes" in problems[0]["detail"] and "no such object" in problems[0]["detail"]
    assert published(pg) == "gen-1"
    rows = pg.sql("SELECT generation, released, problem_count, current FROM finalize.releases ORDER BY release_id")
    assert rows == [("gen-1", True, 0, True), ("gen-2", False, 1, False)]


def test_one_stray_object_is_rejected(pg, table, store):
    files = publish_files(store, "gen-1")
    write(store, "day=27/hour=08/gen-1/part-00000 (copy).parquet", b"left over by a retried task")
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    released, _, problems = gate(pg, manifest(store, "gen-1", files))
    assert released is False
    assert codes(problems) == [("stray_object", "day=27/hour=08/gen-1/part-00000 (copy).parquet")]
    assert published(pg) is None


def test_a_catalog_entry_at_the_previous_generation_is_rejected(pg, table, store):
    files1 = publish_files(store, "gen-1")
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    assert gate(pg, manifest(store, "gen-1", files1))[0]
    # The correction's objects are complete, but the catalog still points at gen-1.
    files2 = publish_files(store, "gen-2", n=4)
    released, _, problems = gate(pg, manifest(store, "gen-2", files2))
    assert released is False
    assert [p["code"] for p in problems] == ["catalog_mismatch"]
    assert "day=27/hour=08/gen-1/" in problems[0]["detail"]
    assert published(pg) == "gen-1"


def test_a_correction_is_a_new_generation_and_the_marker_switches(pg, table, store):
    files1 = publish_files(store, "gen-1")
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    assert gate(pg, manifest(store, "gen-1", files1))[0]
    files2 = publish_files(store, "gen-2", n=4)
    # The catalog move and the release in one transaction: all or nothing.
    conn = pg.connect(autocommit=False)
    with conn.cursor() as cur:
        cur.execute("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-2/')", (TABLE,))
        cur.execute("SELECT released FROM finalize.release_gate(%s)", (json.dumps(manifest(store, "gen-2", files2)),))
        assert cur.fetchone()[0] is True
        assert published(pg) == "gen-1"          # not before the commit
        conn.rollback()
    assert published(pg) == "gen-1"
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 1
    with conn.cursor() as cur:
        cur.execute("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-2/')", (TABLE,))
        cur.execute("SELECT released FROM finalize.release_gate(%s)", (json.dumps(manifest(store, "gen-2", files2)),))
        assert cur.fetchone()[0] is True
    conn.commit()
    conn.close()
    assert published(pg) == "gen-2"
    assert pg.sql("SELECT generation, current FROM finalize.releases ORDER BY release_id") == [
        ("gen-1", False), ("gen-2", True)]


def test_retired_generations_wait_for_the_retention_window(pg, table, store):
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    for gen in ["gen-1", "gen-2", "gen-3"]:
        files = publish_files(store, gen)
        pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', %s)", (TABLE, f"day=27/hour=08/{gen}/"))
        assert gate(pg, manifest(store, gen, files))[0]
    # A failed attempt is not a generation anyone read.
    files4 = publish_files(store, "gen-4")
    assert not gate(pg, manifest(store, "gen-4", files4))[0]
    retired = "SELECT generation, prefix FROM finalize.retired_generations(%s, %s) ORDER BY superseded_at"
    assert pg.sql(retired, (TABLE, None)) == []                 # default: finalize.generation_retention
    assert pg.sql(retired, (TABLE, "1 hour")) == []
    # Superseded one second ago: retired once the window is shorter than that.
    pg.sql("UPDATE finalize.release SET requested_at = requested_at - interval '2 days'")
    assert pg.sql(retired, (TABLE, "1 day")) == [
        ("gen-1", "day=27/hour=08/gen-1/"), ("gen-2", "day=27/hour=08/gen-2/")]
    assert pg.sql(retired, ("other.table", "1 day")) == []
    # The default window is the server's setting.
    pg.sql("ALTER SYSTEM SET finalize.generation_retention = '1d'")
    pg.sql("SELECT pg_reload_conf()")
    try:
        pg.wait_for(lambda: pg.sql("SELECT generation FROM finalize.retired_generations() ORDER BY 1")
                    == [("gen-1",), ("gen-2",)], timeout=10, what="the new retention")
    finally:
        pg.sql("ALTER SYSTEM RESET finalize.generation_retention")
        pg.sql("SELECT pg_reload_conf()")
    assert published(pg) == "gen-3"


def test_overwritten_objects_are_caught_by_size_and_by_checksum(pg, table, store):
    files = publish_files(store, "gen-1")
    a, b, c = sorted(files)
    with open(os.path.join(store, b), "rb") as f:
        etag_b = hashlib.md5(f.read()).hexdigest()
    files_with_etags = {a: files[a], b: {"size": files[b], "etag": f'"{etag_b}"'}, c: files[c]}
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    assert gate(pg, manifest(store, "gen-1", files_with_etags))[0]
    # Same size, other bytes: only the checksum can tell.
    with open(os.path.join(store, b), "rb") as f:
        data = f.read()
    write(store, b, bytes(reversed(data)))
    # Longer: the size tells.
    write(store, a, b"x" * (files[a] + 7))
    released, _, problems = gate(pg, manifest(store, "gen-1", files_with_etags))
    assert released is False
    assert codes(problems) == [("checksum_mismatch", b), ("size_mismatch", a)]
    size_problem = next(p for p in problems if p["code"] == "size_mismatch")
    assert str(files[a]) in size_problem["detail"] and str(files[a] + 7) in size_problem["detail"]


def test_manifest_paths_outside_the_prefix_are_wrong_prefix(pg, table, store):
    files = publish_files(store, "gen-1")
    write(store, "day=27/hour=09/gen-1/part-00000.parquet", b"abc")
    files["day=27/hour=09/gen-1/part-00000.parquet"] = 3
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    released, _, problems = gate(pg, manifest(store, "gen-1", files))
    assert released is False
    assert codes(problems) == [("wrong_prefix", "day=27/hour=09/gen-1/part-00000.parquet")]


def test_a_projection_range_that_omits_a_valid_date_is_a_gap(pg, table, store):
    files = publish_files(store, "gen-1", partition="day=27/hour=08")
    # The projection ends an hour too early: 08:00 is a valid, final period.
    pg.sql("SELECT finalize.set_projection(%s, 'day={day}/hour={hour}/gen-1/', '2026-11-01', %s)", (TABLE, P08))
    released, _, problems = gate(pg, manifest(store, "gen-1", files))
    assert released is False
    assert [p["code"] for p in problems] == ["projection_gap"]
    assert "2026-11-27 08:00:00+00" in problems[0]["detail"]
    pg.sql("SELECT finalize.set_projection(%s, 'day={day}/hour={hour}/gen-1/', '2026-11-01', '2026-12-01')", (TABLE,))
    assert gate(pg, manifest(store, "gen-1", files)) == (True, "gen-1", [])
    # A projection to another location is a catalog mismatch.
    pg.sql("SELECT finalize.set_projection(%s, 'dt={year}-{month}-{day}/h={hour}/', '2026-11-01', '2026-12-01')",
           (TABLE,))
    released, _, problems = gate(pg, manifest(store, "gen-1", files))
    assert [p["code"] for p in problems] == ["catalog_mismatch"]
    assert "dt=2026-11-27/h=08/" in problems[0]["detail"]


def test_a_projected_empty_location_is_not_a_success(pg, table, store):
    pg.sql("SELECT finalize.set_projection(%s, 'day={day}/hour={hour}/g/', '2026-11-01', '2026-12-01')", (TABLE,))
    os.makedirs(os.path.join(store, "day=27/hour=09/g"))
    m = manifest(store, "g", {}, partition="day=27/hour=09", period_start=P09)
    released, _, problems = gate(pg, m)
    assert released is False
    assert [p["code"] for p in problems] == ["empty_location"]
    assert '"empty": true' in problems[0]["detail"]
    # Without period_start nothing can confirm emptiness either.
    released, _, problems = gate(pg, dict(m, period_start=None) | {"empty": False})
    assert released is False
    # Saying so, for a final period with no changes: released.
    assert gate(pg, dict(m, empty=True)) == (True, "g", [])
    assert published(pg, "day=27/hour=09") == "g"


def test_an_empty_manifest_for_a_period_with_changes_is_rejected(pg, table, store):
    pg.sql("SELECT finalize.set_projection(%s, 'day={day}/hour={hour}/g/', '2026-11-01', '2026-12-01')", (TABLE,))
    released, _, problems = gate(pg, manifest(store, "g", {}, empty=True))
    assert released is False
    assert [p["code"] for p in problems] == ["empty_location"]
    assert "5 change(s)" in problems[0]["detail"]


def test_an_unfinished_period_is_not_released(pg, table, store):
    files = publish_files(store, "gen-1", partition="day=27/hour=10")
    pg.sql("SELECT finalize.set_projection(%s, 'day={day}/hour={hour}/gen-1/', '2026-11-01', '2026-12-01')", (TABLE,))
    released, _, problems = gate(pg, manifest(store, "gen-1", files, partition="day=27/hour=10", period_start=P10))
    assert released is False
    assert [p["code"] for p in problems] == ["not_finalized"]
    assert "2026-11-27 10:00" in problems[0]["detail"]
    assert published(pg, "day=27/hour=10") is None
    # The watermark moves on; the same manifest is released.
    pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000400', '0x00000000000000000500', "
           "'2026-11-27 11:00:01+00')", (TABLE,))
    assert gate(pg, manifest(store, "gen-1", files, partition="day=27/hour=10", period_start=P10))[0]


def test_awkward_keys_and_every_problem_at_once(pg, table, store):
    names = ["part 0.csv", "Grüße/ümlaut.csv", "100% sure+plus=eq.csv", "日本語.csv"]
    files = {}
    for n in names:
        path = "day=27/hour=08/gen-1/" + n
        write(store, path, n.encode())
        files[path] = len(n.encode())
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    assert gate(pg, manifest(store, "gen-1", files)) == (True, "gen-1", [])
    # Several problems are all reported, sorted by path.
    broken = dict(files)
    broken["day=27/hour=08/gen-1/absent.csv"] = 1
    broken["day=27/hour=08/gen-1/part 0.csv"] += 1
    write(store, "day=27/hour=08/gen-1/zz stray.csv", b"!")
    released, _, problems = gate(pg, manifest(store, "gen-1", broken))
    assert released is False
    assert [(p["code"], p["path"]) for p in problems] == [
        ("missing_object", "day=27/hour=08/gen-1/absent.csv"),
        ("size_mismatch", "day=27/hour=08/gen-1/part 0.csv"),
        ("stray_object", "day=27/hour=08/gen-1/zz stray.csv"),
    ]


def test_publishers_need_read_server_files_for_local_stores(pg, table, store):
    files = publish_files(store, "gen-1")
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    pg.sql("DROP ROLE IF EXISTS gate_publisher")
    pg.sql("CREATE ROLE gate_publisher LOGIN IN ROLE finalize_publisher")
    try:
        with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="pg_read_server_files"):
            gate(pg, manifest(store, "gen-1", files), user="gate_publisher")
        assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
        pg.sql("GRANT pg_read_server_files TO gate_publisher")
        assert gate(pg, manifest(store, "gen-1", files), user="gate_publisher")[0]
        assert pg.sql("SELECT requested_by FROM finalize.releases") == [("gate_publisher",)]
        # Readers see the published generation but cannot release.
        pg.sql("DROP ROLE IF EXISTS gate_reader")
        pg.sql("CREATE ROLE gate_reader LOGIN IN ROLE finalize_reader")
        assert pg.sql("SELECT finalize.released_generation(%s, 'day=27/hour=08')", (TABLE,),
                      user="gate_reader") == [("gen-1",)]
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            gate(pg, manifest(store, "gen-1", files), user="gate_reader")
    finally:
        pg.sql("DELETE FROM finalize.tracked_table")
        pg.sql("DROP ROLE IF EXISTS gate_reader")
        pg.sql("DROP OWNED BY gate_publisher")
        pg.sql("DROP ROLE gate_publisher")


def test_a_missing_store_directory_is_an_error_that_stores_nothing(pg, table, store):
    m = manifest(store + "/absent", "gen-1", {"day=27/hour=08/gen-1/a": 1})
    with pytest.raises(psycopg2.Error) as e:
        gate(pg, m)
    assert "absent" in str(e.value)
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
