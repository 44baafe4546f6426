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
import datetime
import json
import os
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
           ["commit_time", "timestamptz"]]


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

    def __init__(self, env, sim, writer, catalog, name):  # noqa: F811
        self.env, self.sim, self.writer, self.catalog, self.table = env, sim, writer, catalog, name
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
                            "dt": c["at"].date().isoformat(), "commit_time": c["at"].isoformat()})
                self.next_id += 1
        return out

    def apply(self, commits, branch=None, properties=None):
        """One snapshot of the commits' rows; each shard's property is its last commit's LSN."""
        props = {"finalize.lsn.%s" % c["db"]: c["lsn"] for c in commits if c.get("db")}
        props.update(properties or {})
        return self.writer.call("append", table=self.table, rows=self.rows(commits), branch=branch,
                                properties=props)["snapshot_id"]

    def release(self, **kw):
        r = {"table": TABLE, "catalog": "lake_catalog", "iceberg_table": self.table, "store": self.store}
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
    name = "%s.%s" % (namespace, request.node.name.replace("test_", "")[:50])
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
