"""finalize.release_iceberg publishes only what the audited snapshot provably holds, against Apache
Iceberg's real REST catalog (RESTCatalogServer) with pyiceberg writers and finalize's real worker
reading the simulator over FreeTDS.

* Sharded tables (docs/sharding.md): every shard is a SQL Server database with its own LSNs, followed
  in the lake by its own Iceberg consumer (a snapshot property per shard). A shard's partition is held
  only when the snapshot holds that shard's change log up to the periods' end; a partition of every
  shard when it holds every shard's; a shard without the consumer the other shards have is a problem.
* Files outside the periods (issue 41, lead 2): a partition without a time field (an unpartitioned
  table, an identity `dt` string) is released for the periods the request names only when every data
  file's lower and upper bounds of the time column lie inside them."""
import hashlib
import json
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
sys.path.insert(0, HERE)

from test_release_iceberg import catalog, pg  # noqa: E402,F401 (the module's catalog and cluster)
from worker_env import Env, at, lsn_text, sim_clock  # noqa: E402

TABLE = "sales.orders"
HOUR = "2026-11-02-09"
FIELD = "commit_time_hour"
COLUMNS = [["id", "long"], ["op", "string"], ["lsn", "string"], ["shard", "string"], ["dt", "string"],
           ["commit_time", "timestamptz"], ["wall", "timestamp"]]


@pytest.fixture
def sim():
    """One SQL Server instance (one clock) with two shard databases besides demo."""
    s = sim_clock(start_time="2026-11-02T08:59:00Z", extra_databases="db01,db02").start()
    yield s
    s.stop()


@pytest.fixture
def env(pg):  # noqa: F811
    e = Env(pg)
    yield e
    e.cleanup()
    for (name,) in pg.sql("SELECT srvname FROM pg_foreign_server s JOIN pg_foreign_data_wrapper w "
                          "ON w.oid = s.srvfdw WHERE w.fdwname = 'finalize_iceberg'"):
        pg.sql('DROP SERVER "%s" CASCADE' % name)


class Lake:
    """The Iceberg table ns.<test> and the pipeline that copies SQL Server's commits into it: one row per
    inserted row (its shard and commit time), each snapshot's summary carrying, per shard, the LSN of the
    last commit of that shard it applied (finalize.lsn.<shard>)."""

    def __init__(self, env, sim, writer, catalog, name, tracked=TABLE):  # noqa: F811
        self.env, self.sim, self.writer, self.catalog, self.table = env, sim, writer, catalog, name
        self.tracked = tracked
        self.store = "file://" + catalog.warehouse_path
        self.next_id = 1

    def commit(self, db, hh, mm, inserts=1):
        r = self.sim.call("sim.commit", database=db, at=at(hh, mm).isoformat(), inserts=inserts)[0][0]
        return {"db": db, "lsn": lsn_text(r["start_lsn"]), "at": at(hh, mm), "inserts": inserts}

    def rows(self, commits):
        out = []
        for c in commits:
            for _ in range(c["inserts"]):
                out.append({"id": self.next_id, "op": "i", "lsn": c["lsn"], "shard": c.get("db"),
                            "dt": c["at"].date().isoformat(), "commit_time": c["at"].isoformat(),
                            "wall": c["at"].isoformat()})
                self.next_id += 1
        return out

    def apply(self, commits, branch=None, properties=None, rows=None):
        """One snapshot of the commits' rows; each shard's property is its last commit's LSN."""
        props = {"finalize.lsn.%s" % c["db"]: c["lsn"] for c in commits if c.get("db")}
        props.update(properties or {})
        return self.writer.call("append", table=self.table, rows=rows if rows is not None else self.rows(commits),
                                branch=branch, properties=props)["snapshot_id"]

    def main(self):
        refs = self.writer.call("refs", table=self.table)
        return refs["main"]["snapshot_id"] if "main" in refs else None

    def release(self, **kw):
        r = {"table": self.tracked, "catalog": "lake_catalog", "iceberg_table": self.table, "store": self.store}
        r.update(kw)
        row = self.env.pg.sql("SELECT released, generation, problems FROM finalize.release_iceberg(%s::jsonb)",
                              (json.dumps({k: v for k, v in r.items() if v is not None}),))[0]
        return {"released": row[0], "generation": row[1], "problems": row[2]}

    def final(self, table, hh):
        self.env.pg.wait_for(lambda: self.env.one("SELECT finalize.is_final(%s, %s)", (table, at(hh, 0))),
                             timeout=60, what=lambda: "hour %02d of %s final: %s" % (
                                 hh, table, self.env.sql("SELECT table_name, finalized_until, offset_lsn, held_back_by, "
                                                         "condition, state FROM finalize.status "
                                                         "WHERE table_name LIKE %s", (TABLE + "%",))))


def codes(result):
    return sorted({p["code"] for p in result["problems"]})


def table_name(request, namespace):
    """ns.<the test's name>, shortened, unique per parameter."""
    name = re.sub(r"\W", "_", request.node.name.replace("test_", "")).strip("_").lower()
    return "%s.%s_%s" % (namespace, name[:40], hashlib.sha1(name.encode()).hexdigest()[:6])


def add_catalog(env, catalog):  # noqa: F811
    env.sql("CREATE SERVER lake_catalog FOREIGN DATA WRAPPER finalize_iceberg "
            "OPTIONS (uri %s, timeout '3s', poll_interval '1 second')", (catalog.uri,))


def wait_shard_caught_up(env, sim, db):
    target = lsn_text(sim.call("sim.state", database=db)[0][0]["max_lsn"])
    shard = "%s/%s" % (TABLE, db)
    env.pg.wait_for(lambda: (env.status(shard) or {}).get("offset_lsn") == target, timeout=30,
                    what=lambda: "%s to reach %s: %s" % (shard, target, env.status(shard)))


@pytest.fixture
def sharded(request, env, sim, catalog, writer, namespace):  # noqa: F811
    """sales.orders sharded over db01 and db02 (one source server per database), tracked in hours, each
    shard's first commit at 08:59 captured; the Iceberg table partitioned by identity(shard) and
    hour(commit_time), whose main holds both 08:59 rows; the catalog server lake_catalog."""
    name = table_name(request, namespace)
    writer.call("create_table", name=name, columns=COLUMNS,
                partition=[["shard", "identity", "shard"], ["commit_time", "hour", FIELD]])
    lake = Lake(env, sim, writer, catalog, name)
    first = [lake.commit(db, 8, 59) for db in ("db01", "db02")]
    sim.call("sim.advance", seconds=70)
    env.sql("SELECT finalize.track_sharded(%s, '1 hour')", (TABLE,))
    for db in ("db01", "db02"):
        env.sql("CREATE SERVER %s FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', port '%d', "
                "database '%s', encrypt 'off')" % (db, sim.port, db))
        env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (username 'sa', password 'Passw0rd!')" % db)
        env.sources[db] = sim
        env.sql("SELECT finalize.add_shard(%s, %s, %s, 'dbo.orders')", (TABLE, db, db))
    for db in ("db01", "db02"):
        wait_shard_caught_up(env, sim, db)
    lake.apply(first)
    add_catalog(env, catalog)
    return lake


def follow(lake, db):
    """An Iceberg consumer on the shard: its LSN is the shard's property of main's snapshots."""
    lake.env.sql("SELECT finalize.add_consumer(%s, 'lake', iceberg_server => 'lake_catalog', iceberg_table => %s, "
                 "lsn_property => %s)", ("%s/%s" % (TABLE, db), lake.table, "finalize.lsn." + db))


def test_a_shards_partition_from_a_snapshot_that_lacks_the_hours_rows_is_lake_behind(sharded):
    """The issue's scenario: s1 holds two of hour 09's three commits of db01 (3 of 6 rows), s2 the rest
    and a 10:02 commit; hour 09 is final once the consumer read s2. Tagging s1 for db01's hour 09 would
    publish half the hour: the shard's consumer is consulted, and it is lake_behind."""
    lake = sharded
    follow(lake, "db01")
    c = [lake.commit("db01", 9, 10, 2), lake.commit("db01", 9, 20, 1), lake.commit("db01", 9, 30, 3),
         lake.commit("db01", 10, 2, 1)]
    lake.sim.call("sim.advance", to=at(10, 5).isoformat())
    s1 = lake.apply(c[:2])
    lake.apply(c[2:])
    lake.final(TABLE + "/db01", 9)
    r = lake.release(partition={"shard": "db01", FIELD: HOUR}, snapshot_id=s1, tag=True)
    assert not r["released"] and codes(r) == ["lake_behind"], r
    detail = r["problems"][0]["detail"]
    assert TABLE + "/db01" in detail and c[1]["lsn"] in detail and "finalize.lsn.db01" in detail, detail
    assert not any(ref.startswith("finalize/") for ref in lake.writer.call("refs", table=lake.table)), \
        "a refused release created its tag"
    report = lake.env.one("SELECT r.report FROM finalize.release r ORDER BY r.release_id DESC LIMIT 1")
    (held,) = report["catalog"]["lake_consumers"]
    assert held["table_name"] == TABLE + "/db01" and held["committed_lsn"] == c[1]["lsn"], held


def test_an_all_shards_partition_is_held_by_every_shards_consumer(sharded):
    """sA holds db01's hour 09 whole (up to its 10:01 commit) and one of db02's two commits of hour 09; sB
    the rest. A partition of every shard (no shard field) from sA is lake_behind for db02 alone (each
    shard's LSN against its own CDC ranges); db01's partition from sA is released (db02 does not hold
    it); every shard's from sB is."""
    lake = sharded
    follow(lake, "db01")
    follow(lake, "db02")
    c = [lake.commit("db01", 9, 10, 2), lake.commit("db02", 9, 15, 1), lake.commit("db01", 9, 40, 1),
         lake.commit("db02", 9, 45, 2), lake.commit("db01", 10, 1, 1), lake.commit("db02", 10, 2, 1)]
    lake.sim.call("sim.advance", to=at(10, 5).isoformat())
    sa = lake.apply([c[0], c[1], c[2], c[4]])
    sb = lake.apply([c[3], c[5]])
    lake.final(TABLE, 9)
    r = lake.release(partition={FIELD: HOUR}, snapshot_id=sa, tag="every-shard-sa")
    assert not r["released"] and codes(r) == ["lake_behind"], r
    (p,) = r["problems"]
    assert TABLE + "/db02" in p["detail"] and c[1]["lsn"] in p["detail"] and "/db01" not in p["detail"], p
    r = lake.release(partition={"shard": "db01", FIELD: HOUR}, snapshot_id=sa, tag="db01-sa")
    assert r == {"released": True, "generation": str(sa), "problems": []}, r
    r = lake.release(partition={FIELD: HOUR}, snapshot_id=sb, tag="every-shard-sb")
    assert r["released"] and r["problems"] == [], r
    report = lake.env.one("SELECT r.report FROM finalize.release r ORDER BY r.release_id DESC LIMIT 1")
    assert [h["table_name"] for h in report["catalog"]["lake_consumers"]] == [TABLE + "/db01", TABLE + "/db02"]


def test_a_shard_without_the_lake_consumer_the_others_have_is_a_problem(sharded):
    """db01 is followed in the lake, db02 is not: what a snapshot holds of db02 cannot be told, so
    neither db02's partition nor every shard's is released (lake_consumer_missing); db01's is."""
    lake = sharded
    follow(lake, "db01")
    commits = [lake.commit("db01", 9, 10, 2), lake.commit("db02", 9, 20, 1), lake.commit("db01", 10, 2, 1)]
    lake.sim.call("sim.advance", to=at(10, 5).isoformat())
    snap = lake.apply(commits)
    lake.final(TABLE, 9)
    for partition in ({FIELD: HOUR}, {"shard": "db02", FIELD: HOUR}):
        r = lake.release(partition=partition, snapshot_id=snap, tag=True)
        assert not r["released"] and codes(r) == ["lake_consumer_missing"], (partition, r)
        assert TABLE + "/db02" in r["problems"][0]["detail"], r
    r = lake.release(partition={"shard": "db01", FIELD: HOUR}, snapshot_id=snap, tag=True)
    assert r["released"] and r["problems"] == [], r


def test_a_shard_named_as_the_table_takes_no_partition_of_every_shard(sharded):
    """release_iceberg({"table": "sales.orders/db01", "partition": {hour}}): the Iceberg partition holds
    every shard's rows (db02's 09:45 commit is missing from the snapshot), and db01's verdict and consumer
    alone published it. Refused with unknown_shard while the Iceberg table holds other shards (a field
    "shard" in its specs, or another shard's lake consumer following it); the shard's own partition
    ({"shard": "db01", ...}) is released."""
    lake = sharded
    c = [lake.commit("db01", 9, 10, 2), lake.commit("db02", 9, 15, 1), lake.commit("db02", 9, 45, 2),
         lake.commit("db01", 10, 1, 1), lake.commit("db02", 10, 2, 1)]
    lake.sim.call("sim.advance", to=at(10, 5).isoformat())
    snap = lake.apply([c[0], c[1], c[3]])
    lake.final(TABLE + "/db01", 9)
    shard = TABLE + "/db01"
    r = lake.release(table=shard, partition={FIELD: HOUR}, snapshot_id=snap, tag=True)
    assert not r["released"] and codes(r) == ["unknown_shard"], r
    assert 'field "shard"' in r["problems"][0]["detail"] and "shard=db01" in r["problems"][0]["detail"], r
    follow(lake, "db01")
    follow(lake, "db02")
    r = lake.release(table=shard, partition={FIELD: HOUR}, snapshot_id=snap, tag="every-shard")
    assert not r["released"] and codes(r) == ["unknown_shard"], r
    assert 'lake consumer of shard "%s/db02"' % TABLE in r["problems"][0]["detail"], r
    r = lake.release(table=shard, partition={"shard": "db02", FIELD: HOUR}, snapshot_id=snap, tag="db02")
    assert not r["released"] and codes(r) == ["unknown_shard"], r
    assert not any(ref.startswith("finalize/") or ref in ("every-shard", "db02")
                   for ref in lake.writer.call("refs", table=lake.table)), "a refused release created its tag"
    r = lake.release(table=shard, partition={"shard": "db01", FIELD: HOUR}, snapshot_id=snap, tag=True)
    assert r["released"] and r["problems"] == [], r


# --- files outside the periods ------------------------------------------------------------------

@pytest.fixture
def plain(request, env, sim, catalog, writer, namespace):  # noqa: F811
    """orders tracked in hours on the demo database, its first commit (08:59) captured, the catalog
    server lake_catalog; make(partition, properties) creates the Iceberg table ns.<test> with COLUMNS."""
    first = sim.call("sim.commit", inserts=1)[0][0]
    sim.call("sim.advance", seconds=70)
    env.add_source("db", sim)
    env.track("orders", "db", granularity="1 hour")
    env.wait_caught_up("orders", sim)
    add_catalog(env, catalog)
    lake = Lake(env, sim, writer, catalog, table_name(request, namespace), tracked="orders")
    lake.first = {"lsn": lsn_text(first["start_lsn"]), "at": at(8, 59), "inserts": 1}

    def make(partition=None, properties=None):
        writer.call("create_table", name=lake.table, columns=COLUMNS, partition=partition, properties=properties)
        return lake
    return make


def hour_09(lake, later=()):
    """Hour 09's three commits (6 rows) and the (hh, mm) commits of later, the clock past 10:00 (later's
    hours past too), the worker caught up: hour 09 is final."""
    commits = [lake.commit(None, 9, 10, 2), lake.commit(None, 9, 20, 1), lake.commit(None, 9, 30, 3)]
    commits += [lake.commit(None, hh, mm) for hh, mm in later]
    lake.sim.call("sim.advance", to=at(max([10] + [hh for hh, _ in later]), 5).isoformat())
    lake.env.wait_caught_up("orders", lake.sim)
    lake.final("orders", 9)
    return commits


def test_an_unpartitioned_table_is_not_released_on_one_hours_count(plain):
    """The issue's scenario: main holds an 08:59 row, the audit branch adds 5 of hour 09's 6 rows. A release
    of {} for hour 09 counted every file of the table against hour 09's facts (6 = 6, the 08:59 row filling
    the missing one). Nothing places the files in hour 09 but their bounds of the time column: without a
    time column named it is time_column_unknown, with it the 08:59 file is files_outside_period."""
    lake = plain()
    lake.apply([lake.first])
    lake.writer.call("create_branch", table=lake.table, name="audit")
    commits = hour_09(lake)
    rows = lake.rows(commits)
    lake.apply(commits, branch="audit", rows=rows[:2] + rows[3:])
    before = lake.main()
    request = dict(partition={}, period_start="2026-11-02T09:00:00Z", branch="audit", row_count="inserts")
    r = lake.release(**request)
    assert not r["released"] and codes(r) == ["time_column_unknown"], r
    hour = "[2026-11-02 09:00:00+00, 2026-11-02 10:00:00+00)"
    assert "time_column" in r["problems"][0]["detail"] and hour in r["problems"][0]["detail"], r
    r = lake.release(time_column="commit_time", **request)
    assert not r["released"] and codes(r) == ["files_outside_period"], r
    (p,) = r["problems"]
    (main_file,) = lake.writer.call("data_files", table=lake.table, ref="main")
    assert p["path"] == main_file["file_path"], (p, main_file)
    # The periods released and the instants the file holds, each its own (not one buffer printed twice).
    assert "released, %s (this one holds [2026-11-02 08:59:00+00, 2026-11-02 08:59:00.000001+00))" % hour \
        in p["detail"] and '"commit_time"' in p["detail"], p
    assert lake.main() == before, "a refused release moved main"


def test_an_identity_dt_partition_is_not_released_on_one_hours_finality(plain):
    """identity(dt) on an hourly table: dt=2026-11-02 holds hour 09 (final) and an 10:30 row (hour 10 is
    not final). Released with period_start 09:00 it published the day on hour 09's finality."""
    lake = plain(partition=[["dt", "identity", "dt"]])
    lake.apply([lake.first])
    lake.writer.call("create_branch", table=lake.table, name="audit")
    commits = hour_09(lake)
    late = lake.commit(None, 10, 30)
    lake.sim.call("sim.advance", to=at(10, 40).isoformat())
    lake.apply(commits[:2], branch="audit")
    lake.apply(commits[2:] + [late], branch="audit")
    before = lake.main()
    request = dict(partition={"dt": "2026-11-02"}, period_start="2026-11-02T09:00:00Z", branch="audit")
    r = lake.release(**request)
    assert not r["released"] and codes(r) == ["time_column_unknown"], r
    r = lake.release(time_column="commit_time", **request)
    assert not r["released"] and codes(r) == ["files_outside_period"], r
    detail = r["problems"][0]["detail"]
    # main's 08:59 file and the one with the 10:30 row are outside; the one of 09:10 and 09:20 is not.
    assert "2 data file(s)" in detail, detail
    assert lake.main() == before


@pytest.mark.parametrize("partition", [None, [["dt", "identity", "dt"]]], ids=["unpartitioned", "identity_dt"])
def test_files_whose_bounds_lie_inside_the_period_are_released(plain, partition):
    """A snapshot whose files hold hour 09's rows alone (bounds 09:10 to 09:30) is released for hour 09,
    counted (inserts) and tagged; the next snapshot, which adds a 10:02 row, is files_outside_period."""
    lake = plain(partition=partition)
    commits = hour_09(lake, later=[(10, 2)])
    lake.apply(commits[:1])
    s1 = lake.apply(commits[1:3])
    request = dict(partition={} if partition is None else {"dt": "2026-11-02"}, period_start="2026-11-02T09:00:00Z",
                   time_column="commit_time", row_count="inserts", tag=True)
    r = lake.release(snapshot_id=s1, **request)
    assert r == {"released": True, "generation": str(s1), "problems": []}, r
    report = lake.env.one("SELECT r.report FROM finalize.release r ORDER BY r.release_id DESC LIMIT 1")
    assert report["catalog"]["records"] == 6 and report["catalog"]["data_files"] == 2, report["catalog"]
    assert report["catalog"]["time_column"] == "commit_time", report["catalog"]
    s2 = lake.apply(commits[3:])
    r = lake.release(snapshot_id=s2, **dict(request, tag="hour-09-s2"))
    assert not r["released"] and "files_outside_period" in codes(r), r


def test_a_row_without_a_time_does_not_stand_in_for_a_missing_one(plain):
    """A snapshot holds 5 of hour 09's 6 rows and a row whose commit_time is null (a pipeline's bug, another
    writer's row): the file's bounds (09:10 to 09:30) lie inside hour 09, as bounds leave nulls out, and
    6 = 6 rows. The null row is of no period and the hour lacks a row: the file's null count of the
    column (null_value_counts) refuses it (files_outside_period), as a file of nulls alone is."""
    lake = plain()
    commits = hour_09(lake)
    rows = lake.rows(commits)
    snap = lake.apply(commits, rows=rows[:5] + [dict(rows[5], commit_time=None)])
    request = dict(partition={}, period_start="2026-11-02T09:00:00Z", time_column="commit_time", tag=True,
                   row_count="inserts")
    r = lake.release(snapshot_id=snap, **request)
    assert not r["released"] and codes(r) == ["files_outside_period"], r
    (p,) = r["problems"]
    (f,) = lake.writer.call("data_files", table=lake.table, ref="main")
    assert p["path"] == f["file_path"] and '"commit_time" is null' in p["detail"], p
    snap = lake.apply([], rows=[dict(rows[5], id=100, commit_time=None)])
    r = lake.release(snapshot_id=snap, **dict(request, tag="with-a-file-of-nulls"))
    assert not r["released"] and "2 data file(s)" in r["problems"][0]["detail"], r
    assert not any(ref.startswith("finalize/") for ref in lake.writer.call("refs", table=lake.table)), \
        "a refused release created its tag"


def test_files_without_bounds_of_the_time_column_are_refused(plain):
    """write.metadata.metrics.default=none: pyiceberg writes no bounds, so nothing shows which periods the
    files of a partition without a time field hold (file_bounds_missing). A table partitioned by
    hour(commit_time) with the same metrics is released: its partition values place the files."""
    lake = plain(properties={"write.metadata.metrics.default": "none"})
    commits = hour_09(lake)
    snap = lake.apply(commits)
    r = lake.release(partition={}, period_start="2026-11-02T09:00:00Z", time_column="commit_time",
                     snapshot_id=snap, tag=True)
    assert not r["released"] and codes(r) == ["file_bounds_missing"], r
    assert "write.metadata.metrics.column.commit_time" in r["problems"][0]["detail"], r
    hourly = Lake(lake.env, lake.sim, lake.writer, lake.catalog, lake.table + "_hourly", tracked="orders")
    hourly.writer.call("create_table", name=hourly.table, columns=COLUMNS, properties={
        "write.metadata.metrics.default": "none"}, partition=[["commit_time", "hour", "commit_time_hour"]])
    snap = hourly.apply(commits)
    r = hourly.release(partition={"commit_time_hour": HOUR}, snapshot_id=snap, tag=True, row_count="inserts")
    assert r["released"] and r["problems"] == [], r


def test_time_fields_of_different_columns_place_no_period(plain):
    """hour(commit_time) named h, then (spec evolution, pyiceberg allows it) h as hour(updated_at): the newer
    files sit in h=09 by their updated_at (09:45) while they hold a row committed at 11:02, in an hour that is
    not final. Likewise day(commit_time) with hour(updated_at) in one spec: the hour cuts nothing of the
    day's commits. Periods of one column cannot be read from fields of two: the request is an error, and
    nothing is released."""
    lake = plain()
    lake.writer.call("drop_table", name=lake.table)
    columns = COLUMNS + [["updated_at", "timestamptz"]]
    lake.writer.call("create_table", name=lake.table, columns=columns, partition=[["commit_time", "hour", "h"]])
    lake.writer.call("update_spec", table=lake.table, remove=["h"])
    lake.writer.call("update_spec", table=lake.table, add=[["updated_at", "hour", "h"]])
    commits = hour_09(lake, later=[(11, 2)])
    rows = [dict(row, updated_at="2026-11-02T09:45:00+00:00") for row in lake.rows(commits)]
    snap = lake.apply(commits, rows=rows)
    mixed = Lake(lake.env, lake.sim, lake.writer, lake.catalog, lake.table + "_mixed", tracked="orders")
    mixed.writer.call("create_table", name=mixed.table, columns=columns,
                      partition=[["commit_time", "day", "d"], ["updated_at", "hour", "h"]])
    mixed_snap = mixed.apply(commits, rows=rows)
    attempts = lake.env.one("SELECT count(*) FROM finalize.release")
    for target, request in ((lake, dict(partition={"h": HOUR}, snapshot_id=snap)),
                            (mixed, dict(partition={"d": "2026-11-02", "h": HOUR}, snapshot_id=mixed_snap))):
        with pytest.raises(Exception) as e:
            target.release(tag=True, **request)
        assert 'field "partition"' in str(e.value) and 'column "updated_at"' in str(e.value) and \
            'column "commit_time"' in str(e.value), str(e.value)
    assert lake.env.one("SELECT count(*) FROM finalize.release") == attempts
    for target in (lake, mixed):
        assert not any(ref.startswith("finalize/") for ref in target.writer.call("refs", table=target.table))


def test_a_time_column_that_cannot_prove_the_periods_is_an_error(plain):
    """time_column must be a column of the table, of a date and time type, with a zone where bounds are the
    proof (a timestamp without zone is a wall-clock time: which instants it names is unknown), and the
    column of the specs' time fields when they have one."""
    lake = plain()
    hour_09(lake)
    snap = lake.apply([lake.first])
    attempts = lake.env.one("SELECT count(*) FROM finalize.release")
    cases = [("nope", "is not a column"), ("dt", "of type string"), ("wall", "of no zone")]
    for column, what in cases:
        with pytest.raises(Exception) as e:
            lake.release(partition={}, period_start="2026-11-02T09:00:00Z", time_column=column, snapshot_id=snap,
                         tag=True)
        assert 'field "time_column"' in str(e.value) and what in str(e.value), (column, str(e.value))
    hourly = Lake(lake.env, lake.sim, lake.writer, lake.catalog, lake.table + "_hourly", tracked="orders")
    hourly.writer.call("create_table", name=hourly.table, columns=COLUMNS,
                       partition=[["commit_time", "hour", "commit_time_hour"]])
    snap = hourly.apply([lake.first])
    with pytest.raises(Exception) as e:
        hourly.release(partition={"commit_time_hour": HOUR}, time_column="wall", snapshot_id=snap, tag=True)
    assert 'field "time_column"' in str(e.value) and "transforms of" in str(e.value), str(e.value)
    assert lake.env.one("SELECT count(*) FROM finalize.release") == attempts, "an error recorded an attempt"
