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
import threading

import psycopg2
import pytest

from storefiles import write_file as write
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
        "SELECT finalize.release_report(r.release_id), v.current, v.requested_by FROM finalize.release r "
        "JOIN finalize.releases v USING (release_id)")
    assert current is True and who == "postgres"
    assert report["listing"] == report["manifest"]["files"] == files
    assert report["catalog"]["source"] == "registration"
    assert report["catalog"]["location"] == "day=27/hour=08/gen-1/"
    assert report["facts"]["is_final"] is True and report["facts"]["inserts"] == 5
    assert report["problems"] == []


def listing_digest(pg, listing):
    """The digest of a listing as the gate documents it, computed by
    PostgreSQL's own hashtextextended: sum over objects of the hash of
    "path\\nsize\\netag", mod 2^64, with seeds 0 and 1."""
    (a, b), = pg.sql(
        "SELECT sum(hashtextextended(e.key || E'\\n' || s.size || E'\\n' || coalesce(s.etag, ''), 0)::numeric), "
        "       sum(hashtextextended(e.key || E'\\n' || s.size || E'\\n' || coalesce(s.etag, ''), 1)::numeric) "
        "FROM jsonb_each(%s::jsonb) AS e, LATERAL (SELECT CASE jsonb_typeof(e.value) WHEN 'object' "
        "THEN e.value ->> 'size' ELSE e.value #>> '{}' END AS size, e.value ->> 'etag' AS etag) AS s",
        (json.dumps(listing),))
    return "%016x%016x" % (int(a) % 2 ** 64, int(b) % 2 ** 64)


def test_a_listing_larger_than_a_batch_is_stored_compactly_and_rebuilt(pg, table, store):
    # 2,500 objects (more than two batches of the walk), in two directories,
    # with one problem of each kind the listing can show.
    prefix = "day=27/hour=08/gen-1/"
    files = {}
    for i in range(2500):
        path = f"{prefix}{'a' if i < 1300 else 'b/c'}/part-{i:05d}.parquet"
        write(store, path, b"x" * (i % 7))
        files[path] = i % 7
    etagged = f"{prefix}a/part-00003.parquet"
    files[etagged] = {"size": 3, "etag": hashlib.md5(b"xxx").hexdigest()}
    wrong_md5 = f"{prefix}a/part-00010.parquet"
    write(store, wrong_md5, b"yyy")
    files[wrong_md5] = {"size": 3, "etag": '"' + hashlib.md5(b"xxx").hexdigest().upper() + '"'}
    resized = f"{prefix}b/c/part-02000.parquet"
    write(store, resized, b"longer than the manifest says")
    gone = f"{prefix}a/part-00500.parquet"
    os.unlink(os.path.join(store, gone))
    stray = f"{prefix}b/c/stray.parquet"
    write(store, stray, b"!")
    register(pg, "gen-1")
    released, _, problems = gate(pg, manifest(store, "gen-1", files))
    assert released is False
    assert codes(problems) == sorted([("checksum_mismatch", wrong_md5), ("size_mismatch", resized),
                                      ("missing_object", gone), ("stray_object", stray)])
    # What the store holds, as a walk sees it (checksums where the manifest has one).
    on_disk = {}
    for dirpath, _, names in os.walk(os.path.join(store, prefix)):
        for name in names:
            full = os.path.join(dirpath, name)
            key = os.path.relpath(full, store)
            size = os.path.getsize(full)
            if isinstance(files.get(key), dict):
                on_disk[key] = {"size": size, "etag": hashlib.md5(open(full, "rb").read()).hexdigest()}
            else:
                on_disk[key] = size
    (release_id, report, full, delta_bytes), = pg.sql(
        "SELECT release_id, report, finalize.release_report(release_id), pg_column_size(listing_delta) "
        "FROM finalize.release")
    # Stored: only what differs from the manifest (4 records), not 2,500 objects.
    assert "listing" not in report and "files" not in report["manifest"]
    summary = report["listing_summary"]
    assert summary["stored_records"] == 4 and delta_bytes < 400, (summary, delta_bytes)
    assert summary["objects"] == len(on_disk) == 2500
    assert summary["bytes"] == sum(v["size"] if isinstance(v, dict) else v for v in on_disk.values())
    assert summary["manifest_files"] == len(files)
    # Rebuilt: the full report, listing and manifest files as the gate saw them.
    assert full["listing"] == on_disk
    assert full["manifest"] == {"prefix": prefix, "empty": False, "files": files}
    assert full["problems"] == problems and full["catalog"] == report["catalog"]
    assert full["listing_summary"] == summary
    # The digest taken while listing matches the rebuilt listing's.
    assert summary["digest"] == listing_digest(pg, full["listing"])
    assert summary["digest"] != listing_digest(pg, dict(on_disk, **{stray: 2}))
    # A release whose listing agrees stores nothing but the header.
    os.unlink(os.path.join(store, stray))
    fixed = {k: (on_disk[k] if k in on_disk else v) for k, v in files.items()}
    del fixed[gone]
    released, _, problems = gate(pg, manifest(store, "gen-1", fixed))
    assert (released, problems) == (True, [])
    (report, full), = pg.sql("SELECT report, finalize.release_report(release_id) FROM finalize.release "
                             "WHERE release_id > %s", (release_id,))
    assert report["listing_summary"]["stored_records"] == 0
    assert full["listing"] == fixed
    assert pg.sql("SELECT finalize.release_report(-1)") == [(None,)]
    # A stored row changed afterwards (here the manifest's size of one file)
    # would rebuild a listing the gate never saw: refused, not shown.
    some = sorted(fixed)[0]
    pg.sql("UPDATE finalize.release SET manifest = jsonb_set(manifest, ARRAY['files', %s], to_jsonb(123456789)) "
           "WHERE release_id > %s", (some, release_id))
    with pytest.raises(psycopg2.errors.DataCorrupted, match="does not match its summary"):
        pg.sql("SELECT finalize.release_report(release_id) FROM finalize.release WHERE release_id > %s",
               (release_id,))


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


# --- Local stores never follow links below the root, never open non-files ---

def outside_dir():
    d = tempfile.mkdtemp(prefix="finalize-outside.")
    os.chmod(d, 0o755)
    return d


def register(pg, generation, partition="day=27/hour=08", table=TABLE):
    pg.sql("SELECT finalize.register_partition(%s, %s, %s)", (table, partition, f"{partition}/{generation}/"))


@pytest.mark.parametrize("link", ["day=27", "day=27/hour=08", "day=27/hour=08/gen-1"])
def test_a_prefix_through_a_symlink_has_no_objects(pg, table, store, link):
    elsewhere = outside_dir()
    try:
        # The generation's files exist, but outside the store: the prefix reaches them through a link.
        files = publish_files(elsewhere, "gen-1")
        target = os.path.join(elsewhere, link)
        os.makedirs(os.path.dirname(os.path.join(store, link)), exist_ok=True)
        d = os.path.dirname(os.path.join(store, link))
        while d != store:
            os.chmod(d, 0o755)
            d = os.path.dirname(d)
        os.symlink(target, os.path.join(store, link))
        assert sorted(os.listdir(os.path.join(store, "day=27/hour=08/gen-1"))) == sorted(
            os.path.basename(p) for p in files)      # what a link-following walk would find
        register(pg, "gen-1")
        released, _, problems = gate(pg, manifest(store, "gen-1", files))
        assert released is False
        assert codes(problems) == [("empty_location", None)] + sorted(("missing_object", p) for p in files)
        (report,) = pg.sql("SELECT finalize.release_report(release_id) FROM finalize.release")[0]
        assert report["listing"] == {}
        assert published(pg) is None
        # The store's root itself may be a link (an administrator's choice): that one is followed.
        root_link = os.path.join(outside_dir(), "store-link")
        try:
            os.symlink(elsewhere, root_link)
            assert gate(pg, manifest(root_link, "gen-1", files)) == (True, "gen-1", [])
        finally:
            shutil.rmtree(os.path.dirname(root_link), ignore_errors=True)
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


def test_links_inside_the_prefix_are_not_objects(pg, table, store):
    elsewhere = outside_dir()
    try:
        files = publish_files(store, "gen-1")
        write(elsewhere, "secret.parquet", b"not part of the store")
        write(elsewhere, "dir/inner.parquet", b"not part of the store either")
        write(store, "day=27/hour=09/other.parquet", b"in the store, another partition")
        gen = os.path.join(store, "day=27/hour=08/gen-1")
        os.symlink(os.path.join(elsewhere, "secret.parquet"), os.path.join(gen, "link-to-file.parquet"))
        os.symlink(os.path.join(elsewhere, "dir"), os.path.join(gen, "link-to-dir"))
        os.symlink(os.path.join(store, "day=27/hour=09"), os.path.join(gen, "link-inside-store"))
        os.symlink(os.path.join(gen, "part-00000.parquet"), os.path.join(gen, "link-to-sibling.parquet"))
        os.symlink("/nonexistent/target", os.path.join(gen, "dangling.parquet"))
        register(pg, "gen-1")
        assert gate(pg, manifest(store, "gen-1", files)) == (True, "gen-1", [])
        (report,) = pg.sql("SELECT finalize.release_report(release_id) FROM finalize.release")[0]
        assert report["listing"] == files
        # A real stray next to them still counts (the walk itself works).
        write(store, "day=27/hour=08/gen-1/sub/real-stray.parquet", b"!")
        released, _, problems = gate(pg, manifest(store, "gen-1", files))
        assert released is False
        assert codes(problems) == [("stray_object", "day=27/hour=08/gen-1/sub/real-stray.parquet")]
        # A link named in the manifest is not an object either.
        with_link = dict(files)
        with_link["day=27/hour=08/gen-1/link-to-file.parquet"] = len(b"not part of the store")
        os.unlink(os.path.join(store, "day=27/hour=08/gen-1/sub/real-stray.parquet"))
        released, _, problems = gate(pg, manifest(store, "gen-1", with_link))
        assert released is False
        assert codes(problems) == [("missing_object", "day=27/hour=08/gen-1/link-to-file.parquet")]
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


def test_a_fifo_is_not_an_object_and_never_blocks_the_gate(pg, table, store):
    files = publish_files(store, "gen-1")
    fifo = "day=27/hour=08/gen-1/part-00003.parquet"
    os.mkfifo(os.path.join(store, fifo))
    os.chmod(os.path.join(store, fifo), 0o644)
    # The manifest asks for its checksum (an etag), and for a real file's too.
    first = sorted(files)[0]
    with open(os.path.join(store, first), "rb") as f:
        first_md5 = hashlib.md5(f.read()).hexdigest()
    m_files = dict(files)
    m_files[first] = {"size": files[first], "etag": f'"{first_md5}"'}
    m_files[fifo] = {"size": 0, "etag": '"d41d8cd98f00b204e9800998ecf8427e"'}
    register(pg, "gen-1")
    conn = pg.connect()
    outcome = {}

    def run():
        try:
            with conn.cursor() as cur:
                cur.execute("SET statement_timeout = '20s'")
                cur.execute("SELECT * FROM finalize.release_gate(%s)", (json.dumps(manifest(store, "gen-1", m_files)),))
                outcome["row"] = cur.fetchone()
        except Exception as ex:  # noqa: BLE001 - reported below
            outcome["error"] = ex

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():
        # Stuck in open(2) of the FIFO, where no timeout reaches: a writer lets it go.
        try:
            os.close(os.open(os.path.join(store, fifo), os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass                        # no reader: stuck elsewhere
        t.join(30)
        conn.close()
        pytest.fail("the gate blocked on a FIFO")
    conn.close()
    assert "error" not in outcome, outcome
    released, generation, problems = outcome["row"]
    assert (released, generation) == (False, "gen-1")
    assert codes(problems) == [("missing_object", fifo)]
    (report,) = pg.sql("SELECT finalize.release_report(release_id) FROM finalize.release")[0]
    assert fifo not in report["listing"]
    assert report["listing"][first]["etag"].strip('"') == first_md5


# --- retired_generations never offers a prefix that overlaps a published one ---

ITEMS = "lake.items"


def release_at(pg, root, table, partition, generation, prefix, names, period_start=P09):
    """Writes files under prefix, registers the partition there and releases it (must pass)."""
    files = {}
    for i, name in enumerate(names):
        path = prefix + name
        data = f"{table}:{partition}:{generation}:{i}".encode()
        write(root, path, data)
        files[path] = len(data)
    pg.sql("SELECT finalize.register_partition(%s, %s, %s)", (table, partition, prefix))
    m = {"table": table, "partition": partition, "generation": generation, "store": "file://" + root,
         "prefix": prefix, "files": files, "period_start": period_start}
    assert gate(pg, m) == (True, generation, []), (table, partition, generation)
    return files


def test_retired_generations_never_overlap_a_published_prefix(pg, table, store):
    pg.sql("SELECT finalize.track_table(%s, 'src', 'dbo.items')", (ITEMS,))
    # Final until 10:00, so that its releases pass the finality check.
    pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-27 06:00+00')", (ITEMS,))
    pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
           "'2026-11-27 10:00+00')", (ITEMS,))
    # Another table's generation at "day=27/": the ancestor of every prefix of lake.orders below.
    release_at(pg, store, ITEMS, "p4", "g1", "day=27/", ["seed.parquet"])
    release_at(pg, store, ITEMS, "p4", "g2", "items/p4/g2/", ["a.parquet"])
    # lake.orders hour=08: g1 at the partition's root, then g2 and g3 below it (siblings).
    release_at(pg, store, TABLE, "day=27/hour=08", "g1", "day=27/hour=08/", ["part-0.parquet"], P08)
    release_at(pg, store, TABLE, "day=27/hour=08", "g2", "day=27/hour=08/g2/", ["part-0.parquet"], P08)
    release_at(pg, store, TABLE, "day=27/hour=08", "g3", "day=27/hour=08/g3/", ["part-0.parquet"], P08)
    # hour=09: g1 below, then g2 at the partition's root (its descendant g1 lies inside it).
    release_at(pg, store, TABLE, "day=27/hour=09", "g1", "day=27/hour=09/g1/", ["part-0.parquet"], P09)
    shutil.rmtree(os.path.join(store, "day=27/hour=09/g1"))
    release_at(pg, store, TABLE, "day=27/hour=09", "g2", "day=27/hour=09/", ["part-0.parquet"], P09)
    # lake.items p1 left "shared/x/", which lake.orders day=27/hour=07 now publishes (equal prefix).
    release_at(pg, store, ITEMS, "p1", "g1", "shared/x/", ["a.parquet"])
    release_at(pg, store, ITEMS, "p1", "g2", "items/p1/g2/", ["a.parquet"])
    shutil.rmtree(os.path.join(store, "shared"))
    release_at(pg, store, TABLE, "day=27/hour=07", "s1", "shared/x/", ["b.parquet"])
    # lake.items p5: plain siblings.
    release_at(pg, store, ITEMS, "p5", "g1", "items/p5/g1/", ["a.parquet"])
    release_at(pg, store, ITEMS, "p5", "g2", "items/p5/g2/", ["a.parquet"])

    pg.sql("UPDATE finalize.release SET requested_at = requested_at - interval '2 days'")
    # Every superseded generation (what a retirement list without the overlap rule would offer).
    superseded = pg.sql("SELECT v.table_name, v.partition, v.generation, v.prefix FROM finalize.releases v "
                        "WHERE v.released AND NOT v.current ORDER BY 1, 2, 3")
    assert superseded == [
        (ITEMS, "p1", "g1", "shared/x/"),
        (ITEMS, "p4", "g1", "day=27/"),
        (ITEMS, "p5", "g1", "items/p5/g1/"),
        (TABLE, "day=27/hour=08", "g1", "day=27/hour=08/"),
        (TABLE, "day=27/hour=08", "g2", "day=27/hour=08/g2/"),
        (TABLE, "day=27/hour=09", "g1", "day=27/hour=09/g1/"),
    ]
    retired = pg.sql("SELECT table_name, partition, generation, prefix "
                     "FROM finalize.retired_generations(NULL, '1 day') ORDER BY 1, 2, 3")
    assert retired == [
        (ITEMS, "p5", "g1", "items/p5/g1/"),                  # sibling of a published prefix: retired
        (TABLE, "day=27/hour=08", "g2", "day=27/hour=08/g2/"),  # sibling of .../g3/: retired
    ]
    # Per table, the same rule.
    assert pg.sql("SELECT generation, prefix FROM finalize.retired_generations(%s, '1 day')", (ITEMS,)) == [
        ("g1", "items/p5/g1/")]
    assert pg.sql("SELECT generation, prefix FROM finalize.retired_generations(%s, '1 day')", (TABLE,)) == [
        ("g2", "day=27/hour=08/g2/")]
    # Once the overlapping publication moves away, the old generation is offered again.
    release_at(pg, store, TABLE, "day=27/hour=07", "s2", "day=27/hour=07/s2/", ["b.parquet"])
    pg.sql("UPDATE finalize.release SET requested_at = requested_at - interval '2 days' "
           "WHERE requested_at > now() - interval '1 day'")
    assert ("g1", "shared/x/") in pg.sql("SELECT generation, prefix FROM finalize.retired_generations(%s, '1 day')",
                                         (ITEMS,))


# --- The gate and register_partition take the same partition lock ---

def gate_in_thread(pg, m, autocommit=True):
    conn = pg.connect(autocommit=autocommit)
    with conn.cursor() as cur:
        cur.execute("SET statement_timeout = '60s'")
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    outcome = {}

    def run():
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),))
                outcome["row"] = cur.fetchone()
        except Exception as ex:  # noqa: BLE001 - reported by the test
            outcome["error"] = ex

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return conn, pid, t, outcome


def wait_on_lock(pg, pid, holder_pid):
    """Waits until pid waits for a lock that holder_pid holds."""
    pg.wait_for(lambda: pg.sql("SELECT wait_event_type, %s = ANY (pg_blocking_pids(pid)) "
                               "FROM pg_stat_activity WHERE pid = %s",
                               (holder_pid, pid)) == [("Lock", True)],
                timeout=30, what=lambda: f"pid {pid} to wait on a lock held by {holder_pid}: " + repr(
                    pg.sql("SELECT state, wait_event_type, wait_event, query FROM pg_stat_activity WHERE pid = %s",
                           (pid,))))


def test_a_gate_waits_for_an_open_registration_and_then_sees_it(pg, table, store):
    files1 = publish_files(store, "gen-1")
    register(pg, "gen-1")
    assert gate(pg, manifest(store, "gen-1", files1))[0]
    files2 = publish_files(store, "gen-2", n=4)
    a = pg.connect(autocommit=False)
    b = None
    try:
        with a.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            a_pid = cur.fetchone()[0]
            cur.execute("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-2/')", (TABLE,))
        b, b_pid, t, outcome = gate_in_thread(pg, manifest(store, "gen-2", files2))
        t.join(1.0)
        assert t.is_alive(), f"the gate did not wait for the open registration: {outcome}"
        wait_on_lock(pg, b_pid, a_pid)
        assert t.is_alive()
        a.commit()
        t.join(30)
        assert not t.is_alive(), "the gate did not return after the registration committed"
        assert "error" not in outcome, outcome
        # It read the catalog after the lock: A's registration.
        assert outcome["row"] == (True, "gen-2", [])
        assert published(pg) == "gen-2"
        (catalog,) = pg.sql("SELECT report->'catalog' FROM finalize.release ORDER BY release_id DESC LIMIT 1")[0]
        assert catalog["location"] == "day=27/hour=08/gen-2/"
    finally:
        a.rollback()
        a.close()
        if b is not None:
            t.join(30)
            b.close()


def test_a_registration_waits_for_an_open_release(pg, table, store):
    files1 = publish_files(store, "gen-1")
    register(pg, "gen-1")
    b = pg.connect(autocommit=False)
    a = pg.connect()
    try:
        with b.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            b_pid = cur.fetchone()[0]
            cur.execute("SELECT * FROM finalize.release_gate(%s)", (json.dumps(manifest(store, "gen-1", files1)),))
            assert cur.fetchone() == (True, "gen-1", [])
        with a.cursor() as cur:
            cur.execute("SET statement_timeout = '60s'")
            cur.execute("SELECT pg_backend_pid()")
            a_pid = cur.fetchone()[0]
            # Another partition is not held up.
            cur.execute("SELECT finalize.register_partition(%s, 'day=27/hour=09', 'day=27/hour=09/gen-1/')", (TABLE,))
        outcome = {}

        def run():
            try:
                with a.cursor() as cur:
                    cur.execute("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-2/')",
                                (TABLE,))
                    outcome["done"] = True
            except Exception as ex:  # noqa: BLE001 - reported below
                outcome["error"] = ex

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(1.0)
        assert t.is_alive(), f"the registration did not wait for the open release: {outcome}"
        wait_on_lock(pg, a_pid, b_pid)
        assert pg.sql("SELECT location FROM finalize.partition_registration WHERE partition = 'day=27/hour=08'") == [
            ("day=27/hour=08/gen-1/",)]
        b.commit()
        t.join(30)
        assert not t.is_alive(), "the registration did not return after the release committed"
        assert outcome == {"done": True}
        assert published(pg) == "gen-1"
        assert pg.sql("SELECT location FROM finalize.partition_registration WHERE partition = 'day=27/hour=08'") == [
            ("day=27/hour=08/gen-2/",)]
    finally:
        b.rollback()
        b.close()
        a.close()


def test_a_repeatable_read_gate_never_publishes_against_a_catalog_that_moved(pg, table, store):
    """Under REPEATABLE READ the lock cannot refresh the gate's snapshot: a
    registration committed while the gate waited for it is invisible there,
    so the gate fails with a serialization failure instead of publishing
    where readers no longer look (it returned released = true before)."""
    files2 = publish_files(store, "gen-2")
    register(pg, "gen-2")
    a = pg.connect(autocommit=False)
    b = None
    try:
        with a.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            a_pid = cur.fetchone()[0]
            cur.execute("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-3/')", (TABLE,))
        b = pg.connect(autocommit=False)
        b.set_session(isolation_level="REPEATABLE READ")
        with b.cursor() as cur:
            cur.execute("SET statement_timeout = '60s'")
            cur.execute("SELECT pg_backend_pid()")      # takes the transaction's snapshot
            b_pid = cur.fetchone()[0]
        outcome = {}

        def run():
            try:
                with b.cursor() as cur:
                    cur.execute("SELECT * FROM finalize.release_gate(%s)",
                                (json.dumps(manifest(store, "gen-2", files2)),))
                    outcome["row"] = cur.fetchone()
            except Exception as ex:  # noqa: BLE001 - reported below
                outcome["error"] = ex

        t = threading.Thread(target=run, daemon=True)
        t.start()
        wait_on_lock(pg, b_pid, a_pid)
        a.commit()
        t.join(30)
        assert not t.is_alive()
        assert isinstance(outcome.get("error"), psycopg2.errors.SerializationFailure), outcome
        assert "catalog of partition" in str(outcome["error"])
        b.rollback()
        assert published(pg) is None
        assert pg.sql("SELECT count(*) FROM finalize.release") == [(0,)]
        # Retried (here in READ COMMITTED), it sees where the catalog points now.
        released, _, problems = gate(pg, manifest(store, "gen-2", files2))
        assert not released and [p["code"] for p in problems] == ["catalog_mismatch"]
    finally:
        a.rollback()
        a.close()
        if b is not None:
            b.close()


def test_a_gate_waits_for_an_open_projection_change_and_then_sees_it(pg, table, store):
    """set_projection moves every partition of a table: it takes the table's
    catalog lock, which every release of the table shares, so a release
    waits for it and then checks against the new projection (before, it did
    not wait and published at the old location)."""
    files = publish_files(store, "gen-1", partition="proj-a/27/08")
    pg.sql("SELECT finalize.set_projection(%s, 'proj-a/{day}/{hour}/gen-1/', '2026-11-01+00', '2026-12-01+00')",
           (TABLE,))
    m = manifest(store, "gen-1", files, prefix="proj-a/27/08/gen-1/")
    a = pg.connect(autocommit=False)
    b = None
    try:
        with a.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            a_pid = cur.fetchone()[0]
            cur.execute("SELECT finalize.set_projection(%s, 'proj-b/{day}/{hour}/gen-1/', "
                        "'2026-11-01+00', '2026-12-01+00')", (TABLE,))
        b, b_pid, t, outcome = gate_in_thread(pg, m)
        wait_on_lock(pg, b_pid, a_pid)
        a.commit()
        t.join(30)
        assert not t.is_alive() and "error" not in outcome, outcome
        released, _, problems = outcome["row"]
        assert not released and [p["code"] for p in problems] == ["catalog_mismatch"]
        assert "proj-b/27/08/gen-1/" in problems[0]["detail"]
        assert published(pg) is None
    finally:
        a.rollback()
        a.close()
        if b is not None:
            b.close()


def test_thousands_of_problems_come_back_whole(pg, table, store):
    """The problems the gate returns outlive its catalog step (they were
    allocated in SPI's memory, freed before they were returned: a few
    thousand of them crashed the server). finalize.gate_max_problems (1000
    by default) lists the first of each code and counts the rest."""
    pg.sql("SELECT finalize.register_partition(%s, 'day=27/hour=08', 'day=27/hour=08/gen-1/')", (TABLE,))
    files = {f"day=27/hour=08/gen-1/part-{i:05d}.parquet": i + 1 for i in range(5000)}
    released, _, problems = gate(pg, manifest(store, "gen-1", files))
    assert released is False
    listed = [p for p in problems if p["code"] == "missing_object" and p["path"] is not None]
    assert len(listed) == 1000 and {p["path"] for p in listed} <= set(files)
    assert [(p["code"], p["path"]) for p in problems if p["path"] is None] == [
        ("empty_location", None), ("missing_object", None)]
    assert problems[-1]["detail"].startswith("4000 more missing_object problems are not listed")
    (stored,) = pg.sql("SELECT problems FROM finalize.release")[0]
    assert stored == problems


def gate_with(pg, m, *settings):
    """release_gate in a session with the given SET statements."""
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            for s in settings:
                cur.execute(s)
            cur.execute("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),))
            return cur.fetchone()
    finally:
        conn.close()


@pytest.mark.parametrize("form", ["inline", "streamed"])
def test_a_massive_disagreement_is_bounded_and_still_recorded(pg, table, store, form):
    # The store holds 1,500 objects the manifest does not name, the manifest
    # 1,500 the store lacks (a wrong generation): 3,000 problems. With
    # gate_max_problems 10 and gate_max_delta 8kB the attempt lists 10 of
    # each code plus one count per code, and stores a delta cut short,
    # which release_report returns as such instead of a wrong listing.
    prefix = "day=27/hour=08/gen-1/"
    for i in range(1500):
        write(store, f"{prefix}s/stray-{i:05d}", b"x")
    files = {f"{prefix}m/missing-{i:05d}": 1 for i in range(1500)}
    register(pg, "gen-1")
    m = manifest(store, "gen-1", files)
    if form == "streamed":
        m = streamed(store, "gen-1", write_lines(store, "day=27/hour=08/gen-1.jsonl", files))
    released, _, problems = gate_with(pg, m, "SET finalize.gate_max_problems = 10",
                                      "SET finalize.gate_max_delta = '8kB'")
    assert released is False
    assert len(problems) == 22
    for code in ("missing_object", "stray_object"):
        assert len([p for p in problems if p["code"] == code and p["path"] is not None]) == 10
        (summary,) = [p for p in problems if p["code"] == code and p["path"] is None]
        assert summary["detail"].startswith(f"1490 more {code} problems are not listed")
    (count, stored, report, delta_len), = pg.sql(
        "SELECT count(*) OVER (), problems, finalize.release_report(release_id), length(listing_delta) "
        "FROM finalize.release")
    assert count == 1 and stored == problems
    assert delta_len <= 8192
    summary = report["listing_summary"]
    assert summary["delta_truncated"] is True and summary["objects"] == 1500
    assert "listing" not in report
    delta = report["listing_delta"]
    assert delta["truncated"] is True
    assert 0 < len(delta["listed"]) + len(delta["absent"]) == summary["stored_records"] < 3000
    if form == "inline":
        assert report["manifest"]["files"] == files


def test_a_null_files_location_is_an_inline_manifest_in_the_report(pg, table, store):
    files = publish_files(store, "gen-1")
    register(pg, "gen-1")
    assert gate(pg, manifest(store, "gen-1", files, files_location=None)) == (True, "gen-1", [])
    (report,), = pg.sql("SELECT finalize.release_report(release_id) FROM finalize.release")
    assert report["listing"] == report["manifest"]["files"] == files
    assert "listing_delta" not in report


def test_a_damaged_summary_count_is_reported_as_corruption(pg, table, store):
    files = publish_files(store, "gen-1")
    register(pg, "gen-1")
    assert gate(pg, manifest(store, "gen-1", files))[0]
    for bad in ("1e30", "1.5", "-1"):
        pg.sql("UPDATE finalize.release SET report = jsonb_set(report, '{listing_summary,objects}', %s::jsonb)",
               (bad,))
        with pytest.raises(psycopg2.Error) as e:
            pg.sql("SELECT finalize.release_report(release_id) FROM finalize.release")
        assert e.value.pgcode == "XX001" and "does not match its summary" in e.value.pgerror


def test_retired_generations_never_offer_where_the_catalog_sends_readers(pg, table, store):
    """A superseded generation that the catalog points at again (a
    registration moved back, or the table's projection for its period) is
    live data: never offered for deletion."""
    retired = "SELECT generation FROM finalize.retired_generations(%s, '1 day') ORDER BY 1"
    for gen in ("gen-1", "gen-2", "gen-3"):
        files = publish_files(store, gen)
        register(pg, gen)
        assert gate(pg, manifest(store, gen, files))[0]
    pg.sql("UPDATE finalize.release SET requested_at = requested_at - interval '2 days'")
    assert pg.sql(retired, (TABLE,)) == [("gen-1",), ("gen-2",)]
    # The registration moves back to gen-1 (readers read it again).
    register(pg, "gen-1")
    assert pg.sql(retired, (TABLE,)) == [("gen-2",)]
    # The table's projection renders gen-2's prefix for its period.
    register(pg, "gen-3")
    pg.sql("SELECT finalize.set_projection(%s, 'day={day}/hour={hour}/gen-2/', '2026-11-27+00', '2026-11-28+00')",
           (TABLE,))
    assert pg.sql(retired, (TABLE,)) == [("gen-1",)]
    # Outside the projection's range, it is not where readers look.
    pg.sql("SELECT finalize.set_projection(%s, 'day={day}/hour={hour}/gen-2/', '2026-11-28+00', '2026-11-29+00')",
           (TABLE,))
    assert pg.sql(retired, (TABLE,)) == [("gen-1",), ("gen-2",)]


def write_lines(root, key, files, extra_lines=()):
    """A JSON Lines manifest object: one {"path", "size"[, "etag"]} per line."""
    lines = []
    for path, v in files.items():
        entry = {"path": path, **(v if isinstance(v, dict) else {"size": v})}
        lines.append(json.dumps(entry))
    lines.extend(extra_lines)
    write(root, key, ("\n".join(lines) + "\n").encode())
    return "file://" + os.path.join(root, key)


def streamed(root, generation, location, **extra):
    m = manifest(root, generation, None, **extra)
    del m["files"]
    m["files_location"] = location
    return m


def test_a_streamed_manifest_finds_what_the_inline_one_finds(pg, table, store):
    # 2,500 files (two walk batches), every kind of problem; the same files
    # inline and as a JSON Lines object give the same problems, and the
    # streamed attempt stores the location and a digest, not the files.
    prefix = "day=27/hour=08/gen-1/"
    files = {}
    for i in range(2500):
        path = f"{prefix}{'a' if i % 2 else 'b/c'}/part-{i:05d}.parquet"
        write(store, path, b"x" * (i % 5))
        files[path] = i % 5
    data = b"checked content"
    write(store, prefix + "sum.bin", data)
    files[prefix + "sum.bin"] = {"size": len(data), "etag": hashlib.md5(b"other!!!!!!!!!!").hexdigest()}
    files[prefix + "a/part-00001.parquet"] = 7                  # size_mismatch
    files[prefix + "gone.parquet"] = 3                          # missing_object
    files["day=27/hour=08/gen-0/old.parquet"] = 1               # wrong_prefix
    write(store, prefix + "b/c/stray.parquet", b"s")            # stray_object
    register(pg, "gen-1")
    released, _, inline_problems = gate(pg, manifest(store, "gen-1", files))
    location = write_lines(store, "day=27/hour=08/gen-1.files.jsonl", files)
    released2, gen, problems = gate(pg, streamed(store, "gen-1", location))
    assert (released, released2, gen) == (False, False, "gen-1")
    assert problems == inline_problems
    assert codes(problems) == sorted([
        ("checksum_mismatch", prefix + "sum.bin"), ("size_mismatch", prefix + "a/part-00001.parquet"),
        ("missing_object", prefix + "gone.parquet"), ("wrong_prefix", "day=27/hour=08/gen-0/old.parquet"),
        ("stray_object", prefix + "b/c/stray.parquet")])
    (manifest_col, report, delta_len), = pg.sql(
        "SELECT manifest, finalize.release_report(release_id), length(listing_delta) FROM finalize.release "
        "ORDER BY release_id DESC LIMIT 1")
    assert "files" not in manifest_col and manifest_col["files_location"] == location
    assert delta_len < 400
    summary = report["manifest"]["files_summary"]
    assert summary["files"] == len(files)
    assert summary["bytes"] == sum(v["size"] if isinstance(v, dict) else v for v in files.values())
    assert summary["digest"] == listing_digest(pg, files)
    assert report["listing_summary"]["manifest_files"] == len(files)
    assert report["listing_delta"]["absent"] == [prefix + "gone.parquet"]
    assert set(report["listing_delta"]["listed"]) == {
        prefix + "sum.bin", prefix + "a/part-00001.parquet", prefix + "b/c/stray.parquet"}
    # Once the files agree, the streamed manifest releases the generation.
    del files[prefix + "gone.parquet"], files["day=27/hour=08/gen-0/old.parquet"]
    files[prefix + "a/part-00001.parquet"] = 1
    files[prefix + "b/c/stray.parquet"] = 1
    files[prefix + "sum.bin"]["etag"] = hashlib.md5(data).hexdigest()
    location = write_lines(store, "day=27/hour=08/gen-1.files.jsonl", files)
    assert gate(pg, streamed(store, "gen-1", location)) == (True, "gen-1", [])
    assert published(pg) == "gen-1"


@pytest.mark.parametrize("line,expected", [
    ('{"path": "day=27/hour=08/gen-1/a", "size": 1', "line 2 of"),
    ('["day=27/hour=08/gen-1/a", 1]', "line 2 of"),
    ('{"path": "day=27/hour=08/gen-1/a", "size": "1"}', "the size must be a number"),
    ('{"path": "day=27/hour=08/gen-1/a", "size": 1.5}', "not a whole non-negative number"),
    ('{"path": "../etc/passwd", "size": 1}', "a path must be relative"),
    ('{"size": 1}', "has no \"path\" string"),
])
def test_a_malformed_line_names_the_object_and_the_line(pg, table, store, line, expected):
    location = write_lines(store, "m.jsonl", {"day=27/hour=08/gen-1/ok": 1}, [line])
    with pytest.raises(psycopg2.Error) as e:
        gate(pg, streamed(store, "gen-1", location))
    assert e.value.pgcode == "22023"
    assert f'line 2 of "{location}"' in e.value.pgerror and expected in e.value.pgerror
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0


def test_a_line_that_is_not_valid_utf8_names_the_object_and_the_line(pg, table, store):
    # PostgreSQL 15's JSON parser passes raw bytes: the gate checks them.
    write(store, "m.jsonl", b'{"path": "day=27/hour=08/gen-1/ok", "size": 1}\n'
                            b'{"path": "day=27/hour=08/gen-1/caf\xe9", "size": 1}\n')
    location = "file://" + os.path.join(store, "m.jsonl")
    with pytest.raises(psycopg2.Error) as e:
        gate(pg, streamed(store, "gen-1", location))
    assert e.value.pgcode == "22023"
    assert f'line 2 of "{location}" is not valid UTF8' in e.value.pgerror
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0


def test_files_location_is_checked_and_read_only_inside_the_store(pg, table, store, request):
    outside = outside_dir()
    request.addfinalizer(lambda: shutil.rmtree(outside, ignore_errors=True))
    write(outside, "m.jsonl", b'{"path": "day=27/hour=08/gen-1/a", "size": 1}\n')
    both = manifest(store, "gen-1", {})
    both["files_location"] = "file://" + store + "/m.jsonl"
    for m, code, text in [
        (both, "22023", "cannot be given with \"files\""),
        (streamed(store, "gen-1", "file://" + outside + "/m.jsonl"), "22023", "not an object of the partition's store"),
        (streamed(store, "gen-1", "file://" + store + "/../m.jsonl"), "22023", "not an object of the partition's store"),
        (streamed(store, "gen-1", "s3://lake/m.jsonl"), "22023", "not an object of the partition's store"),
        (streamed(store, "gen-1", "file://" + store + "/nothing.jsonl"), "58P01", "No such file or directory"),
    ]:
        with pytest.raises(psycopg2.Error) as e:
            gate(pg, m)
        assert e.value.pgcode == code and text in e.value.pgerror, e.value.pgerror
    # A link below the root is not followed, even to a file inside the store.
    write(store, "real.jsonl", b"")
    os.symlink(os.path.join(store, "real.jsonl"), os.path.join(store, "link.jsonl"))
    with pytest.raises(psycopg2.Error) as e:
        gate(pg, streamed(store, "gen-1", "file://" + store + "/link.jsonl"))
    assert "could not open manifest object" in e.value.pgerror
    # Reading it needs the same privilege as listing the store.
    pg.sql("DROP ROLE IF EXISTS pub_stream")
    pg.sql("CREATE ROLE pub_stream LOGIN IN ROLE finalize_publisher")
    try:
        with pytest.raises(psycopg2.Error) as e:
            gate(pg, streamed(store, "gen-1", "file://" + store + "/real.jsonl"), user="pub_stream")
        assert e.value.pgcode == "42501"
    finally:
        pg.sql("DROP ROLE pub_stream")
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0


def test_a_streamed_manifest_that_lists_a_file_twice_is_refused(pg, table, store):
    location = write_lines(store, "m.jsonl", {"day=27/hour=08/gen-1/a": 1},
                           ['{"path": "day=27/hour=08/gen-1/a", "size": 2}'])
    with pytest.raises(psycopg2.Error) as e:
        gate(pg, streamed(store, "gen-1", location))
    assert e.value.pgcode == "22023" and 'lists "day=27/hour=08/gen-1/a" twice' in e.value.pgerror


def test_a_streamed_sort_larger_than_work_mem_spills_and_agrees(pg, table, store):
    # 20,000 files with work_mem at its minimum (64 kB): both sorts spill to
    # temporary files; the one stray and the one missing file are found.
    prefix = "day=27/hour=08/gen-1/"
    files = {f"{prefix}d{i % 7}/p-{i:06d}": 0 for i in range(20000)}
    for path in files:
        write(store, path, b"")
    write(store, prefix + "d0/zz-stray", b"")
    files[prefix + "d3/aa-missing"] = 0
    location = write_lines(store, "day=27/hour=08/gen-1.jsonl", files)
    register(pg, "gen-1")
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET work_mem = '64kB'")
            cur.execute("SELECT * FROM finalize.release_gate(%s)", (json.dumps(streamed(store, "gen-1", location)),))
            released, _, problems = cur.fetchone()
    finally:
        conn.close()
    assert released is False
    assert codes(problems) == [("missing_object", prefix + "d3/aa-missing"), ("stray_object", prefix + "d0/zz-stray")]


def gate_debug(pg, m, work_mem=None):
    """The gate's result and its DEBUG1 notes on how each side of a streamed
    comparison was ordered (spooled as it came, or sorted)."""
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET client_min_messages = debug1")
            if work_mem:
                cur.execute("SET work_mem = %s", (work_mem,))
            cur.execute("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),))
            released, _, problems = cur.fetchone()
        notes = [n.split("DEBUG:  ", 1)[-1].strip() for n in conn.notices if "finalize: " in n]
    finally:
        conn.close()
    return released, problems, notes


# Names whose byte order is not the order of a walk over sorted names:
# "." (0x2e) and "-" sort before "/" (0x2f), so the file "a.b" and the
# directory "a-" come before everything in the directory "a".
AWKWARD = ["a.b", "a/x", "a-/y", "a0", "a/b/c", "a/b.c", "a/b-c", "a/b/c.d", "ab", "A", "caf\u00e9", "a b",
           "a~", "a/b/", "a./z", "b/a", "b.a"]


def test_a_walk_in_byte_order_is_spooled_not_sorted_even_for_awkward_names(pg, table, store):
    # The local store is walked in byte order of whole keys (a directory
    # sorts as its name plus "/"); a manifest written in that order is
    # spooled too; both are checked object by object and find exactly what
    # the inline manifest finds.
    prefix = "day=27/hour=08/gen-1/"
    files = {}
    for i, name in enumerate(n for n in AWKWARD if not n.endswith("/")):
        write(store, prefix + name, b"x" * i)
        files[prefix + name] = i
    write(store, prefix + "a/stray", b"")                     # stray_object
    files[prefix + "a/b/missing"] = 1                         # missing_object
    files[prefix + "a.b"] = 99                                # size_mismatch
    register(pg, "gen-1")
    _, _, inline = gate(pg, manifest(store, "gen-1", files))
    expected = sorted([("missing_object", prefix + "a/b/missing"), ("size_mismatch", prefix + "a.b"),
                       ("stray_object", prefix + "a/stray")])
    assert codes(inline) == expected
    ordered = dict(sorted(files.items(), key=lambda kv: kv[0].encode()))
    location = write_lines(store, "day=27/hour=08/gen-1.jsonl", ordered)
    released, problems, notes = gate_debug(pg, streamed(store, "gen-1", location))
    assert released is False and problems == inline
    assert f"finalize: manifest object of {len(files)} objects came in path order, not sorted" in notes, notes
    assert f"finalize: listing of {len(files)} objects came in path order, not sorted" in notes, notes
    # The same manifest in another order is sorted, with the same result.
    location = write_lines(store, "day=27/hour=08/gen-1.jsonl", dict(reversed(list(ordered.items()))))
    released, problems, notes = gate_debug(pg, streamed(store, "gen-1", location))
    assert released is False and problems == inline
    assert f"finalize: manifest object of {len(files)} objects came out of order and was sorted" in notes, notes


def test_an_object_out_of_order_after_a_spilled_spool_is_sorted_and_agrees(pg, table, store):
    # work_mem at 256 kB: 20,000 objects in 200 small directories are walked
    # in order (the walk holds a quarter of work_mem of entries) and spooled
    # to a temporary file; the manifest is in order but for its last line,
    # so its spool (spilled too) moves into a sort.
    prefix = "day=27/hour=08/gen-1/"
    files = {f"{prefix}d{i // 100:03d}/p-{i:06d}": 0 for i in range(20000)}
    for path in files:
        write(store, path, b"")
    write(store, prefix + "d050/zz-stray", b"")
    del files[f"{prefix}d100/p-010000"]
    os.unlink(os.path.join(store, f"{prefix}d101/p-010100"))
    files[prefix + "d000/aa-late"] = 0
    write(store, prefix + "d000/aa-late", b"")
    location = write_lines(store, "day=27/hour=08/gen-1.jsonl", files)
    register(pg, "gen-1")
    released, problems, notes = gate_debug(pg, streamed(store, "gen-1", location), work_mem="256kB")
    assert released is False
    assert codes(problems) == [("missing_object", f"{prefix}d101/p-010100"),
                               ("stray_object", f"{prefix}d050/zz-stray"),
                               ("stray_object", f"{prefix}d100/p-010000")]
    assert "finalize: manifest object of 20000 objects came out of order and was sorted" in notes, notes
    assert "finalize: listing of 20001 objects came in path order, not sorted" in notes, notes
