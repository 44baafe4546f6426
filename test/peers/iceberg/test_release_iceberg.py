"""finalize.release_iceberg: write-audit-publish with the release gate as the audit, against Apache
Iceberg's real REST catalog (RESTCatalogServer) and pyiceberg writers.

A pipeline copies SQL Server's commits (the simulator, read by finalize's real worker over FreeTDS) into
an Iceberg table partitioned by hour(commit_time), writing to an audit branch (WAP); the release audits
the branch's head: its manifests (read by finalize with libavro from the warehouse), the files they name
against the store's listing, the hour's finality and its row count against the CDC facts, and only then
fast-forwards main through the catalog. Each case checks both sides: what release_iceberg answered and
recorded, and where main really is (pyiceberg reads it back) -- a refused release never moves main."""
import datetime
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import psycopg2
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))

import catalog as catalog_lib  # noqa: E402
from fault_proxy import COMMIT, FaultProxy  # noqa: E402
from worker_env import Env, at, lsn_text, new_cluster, sim_clock  # noqa: E402

UTC = datetime.timezone.utc
HOUR = "2026-11-02-09"                     # the partition audited: commits of 09:00-10:00 UTC
FIELD = "commit_time_hour"


@pytest.fixture(scope="module")
def catalog():
    """A catalog whose warehouse the postgres user can read (pytest's temporary directories are 0700)."""
    work = tempfile.mkdtemp(prefix="finalize-release-")
    os.chmod(work, 0o755)
    cat = catalog_lib.start_catalog(work)
    yield cat
    alive = cat.alive()
    cat.stop()
    if not alive:
        sys.stderr.write("\n# %s (the server had died) ends:\n%s\n" % (cat.log_path, catalog_lib.tail(cat.log_path)))
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


@pytest.fixture
def sim():
    s = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    yield s
    s.stop()


@pytest.fixture
def env(pg):
    e = Env(pg)
    yield e
    e.cleanup()
    for (name,) in pg.sql("SELECT srvname FROM pg_foreign_server s JOIN pg_foreign_data_wrapper w "
                          "ON w.oid = s.srvfdw WHERE w.fdwname = 'finalize_iceberg'"):
        pg.sql('DROP SERVER "%s" CASCADE' % name)


@pytest.fixture
def lake(request, env, sim, catalog, writer, namespace):
    """orders tracked in hours (hour 09 final once the simulator's clock passed 10:00), an Iceberg table
    ns.<test> partitioned by hour(commit_time) whose main holds the 08:59 commit, an audit branch from
    main, and the catalog server "lake_catalog" in PostgreSQL."""
    name = "%s.%s" % (namespace, request.node.name.replace("test_", "")[:50])
    writer.call("create_table", name=name, partition=[["commit_time", "hour", FIELD]])
    first = sim.call("sim.commit", inserts=1)[0][0]
    sim.call("sim.advance", seconds=70)
    env.add_source("db", sim)
    env.track("orders", "db", granularity="1 hour")
    env.wait_caught_up("orders", sim)
    lk = Lake(env, sim, writer, catalog, name)
    lk.pipeline.apply([{"lsn": lsn_text(first["start_lsn"]), "at": at(8, 59), "inserts": 1}])
    writer.call("create_branch", table=name, name="audit")
    env.sql("CREATE SERVER lake_catalog FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri %s, timeout '3s')",
            (catalog.uri,))
    return lk


class Pipeline:
    """Writes SQL Server's commits into the Iceberg table: one row per inserted row, the LSN of the last
    commit applied in the snapshot summary (finalize.lsn)."""

    def __init__(self, writer, table):
        self.writer, self.table, self.next_id = writer, table, 1

    def rows(self, commits):
        out = []
        for c in commits:
            for _ in range(c["inserts"]):
                out.append({"id": self.next_id, "op": "i", "lsn": c["lsn"], "commit_time": c["at"].isoformat()})
                self.next_id += 1
        return out

    def apply(self, commits, branch=None, rows=None, lsn=None):
        return self.writer.call("append", table=self.table, rows=rows if rows is not None else self.rows(commits),
                                branch=branch, properties={"finalize.lsn": lsn or commits[-1]["lsn"]})


class Lake:
    def __init__(self, env, sim, writer, catalog, table):
        self.env, self.sim, self.writer, self.catalog, self.table = env, sim, writer, catalog, table
        self.pipeline = Pipeline(writer, table)
        self.store = "file://" + catalog.warehouse_path

    def commit(self, hh, mm, inserts=1):
        lsn = lsn_text(self.sim.call("sim.commit", at=at(hh, mm).isoformat(), inserts=inserts)[0][0]["start_lsn"])
        return {"lsn": lsn, "at": at(hh, mm), "inserts": inserts}

    def hour_09(self):
        """Three commits in hour 09 (6 rows), the clock past 10:00, the worker caught up: hour 09 is final."""
        commits = [self.commit(9, 10, 2), self.commit(9, 20, 1), self.commit(9, 30, 3)]
        self.sim.call("sim.advance", to=at(10, 5))
        self.env.wait_caught_up("orders", self.sim)
        self.env.pg.wait_for(lambda: self.env.one("SELECT finalize.is_final('orders', %s)", (at(9, 0),)),
                             timeout=30, what="hour 09 final")
        return commits

    def request(self, **kw):
        r = {"table": "orders", "catalog": "lake_catalog", "iceberg_table": self.table, "store": self.store,
             "partition": {FIELD: HOUR}, "branch": "audit", "row_count": "inserts"}
        r.update(kw)
        return {k: v for k, v in r.items() if v is not None}

    def release(self, **kw):
        row = self.env.pg.sql("SELECT released, generation, problems FROM finalize.release_iceberg(%s::jsonb)",
                              (json.dumps(self.request(**kw)),))[0]
        return {"released": row[0], "generation": row[1], "problems": row[2]}

    def main(self):
        return self.writer.call("refs", table=self.table)["main"]["snapshot_id"]

    def audit_head(self):
        return self.writer.call("refs", table=self.table)["audit"]["snapshot_id"]

    def attempts(self):
        return self.env.sql("SELECT r.released, r.generation, r.problems FROM finalize.releases r "
                            "WHERE r.table_name = 'orders' ORDER BY r.release_id")

    def partition_files(self, ref="audit"):
        return [f for f in self.writer.call("data_files", table=self.table, ref=ref)
                if f["partition"] == [datetime_hour(at(9, 0))]]


def datetime_hour(t):
    """pyiceberg's partition value of hour(t): hours since 1970."""
    return int(t.timestamp()) // 3600


def codes(result):
    return sorted({p["code"] for p in result["problems"]})


def local_path(uri):
    return uri[len("file://"):] if uri.startswith("file://") else uri


def test_a_clean_audit_fast_forwards_main_once(lake):
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    audited, before = lake.audit_head(), lake.main()
    first = lake.release()
    assert first == {"released": True, "generation": str(audited), "problems": []}, first
    assert lake.main() == audited != before
    rows = lake.writer.call("scan", table=lake.table, ref="main")
    assert len([r for r in rows if r["commit_time"].startswith("2026-11-02T09")]) == 6
    report = lake.env.one("SELECT r.report FROM finalize.release r ORDER BY r.release_id DESC LIMIT 1")
    cat = report["catalog"]
    assert cat["outcome"] == "published" and cat["target_snapshot_before"] == before, cat
    assert cat["records"] == 6 and cat["data_files"] >= 1 and cat["position_deletes"] == 0, cat
    assert report["facts"]["inserts"] == 6 and report["facts"]["exact"] is True, report["facts"]
    # The published marker names the snapshot; the same request again is a no-op.
    assert lake.env.one("SELECT finalize.released_generation('orders', %s)", (FIELD + "=" + HOUR,)) == str(audited)
    again = lake.release()
    assert again == first and len(lake.attempts()) == 1 and lake.main() == audited


def test_a_data_file_deleted_from_the_warehouse_is_missing(lake):
    commits = lake.hour_09()
    lake.pipeline.apply(commits[:1], branch="audit")
    lake.pipeline.apply(commits[1:], branch="audit")
    files = lake.partition_files()
    assert len(files) == 2, files
    os.unlink(local_path(files[0]["file_path"]))
    before = lake.main()
    r = lake.release()
    assert not r["released"] and codes(r) == ["missing_object"], r
    assert r["problems"][0]["path"].endswith(os.path.basename(files[0]["file_path"])), r
    assert lake.main() == before, "a refused release moved main"


def test_a_truncated_file_is_a_size_mismatch(lake):
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    (f,) = lake.partition_files()
    with open(local_path(f["file_path"]), "r+b") as fh:
        fh.truncate(f["file_size_in_bytes"] - 10)
    before = lake.main()
    r = lake.release()
    assert not r["released"] and codes(r) == ["size_mismatch"], r
    assert lake.main() == before


def test_a_period_that_is_not_final_is_not_published(lake):
    commits = [lake.commit(9, 10, 2)]
    lake.sim.call("sim.advance", to=at(9, 40))
    lake.env.wait_caught_up("orders", lake.sim)
    lake.pipeline.apply(commits, branch="audit")
    before = lake.main()
    r = lake.release()
    assert not r["released"] and "not_finalized" in codes(r), r
    assert lake.main() == before


def test_a_dropped_batch_is_a_row_count_short_by_one(lake):
    commits = lake.hour_09()
    rows = lake.pipeline.rows(commits)
    lake.pipeline.apply(commits, branch="audit", rows=rows[:2] + rows[3:])
    before = lake.main()
    r = lake.release()
    assert not r["released"] and codes(r) == ["row_count_mismatch"], r
    detail = r["problems"][0]["detail"]
    assert "hold 5 row(s)" in detail and "say 6" in detail and "missing" in detail, detail
    # The ranges involved are named (the worker may have read the hour in one range or several).
    ranges = json.loads(detail.split("Ranges: ", 1)[1])
    assert sum(x["inserts"] for x in ranges) == 6 and all(x["end_lsn"] and x["inside"] for x in ranges), detail
    assert lake.main() == before


def test_a_duplicate_batch_is_a_row_count_over(lake):
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    lake.pipeline.next_id -= 3
    lake.pipeline.apply(commits[2:], branch="audit")       # the last commit's 3 rows, written twice
    r = lake.release()
    assert not r["released"] and codes(r) == ["row_count_mismatch"], r
    assert "hold 9 row(s)" in r["problems"][0]["detail"] and "twice" in r["problems"][0]["detail"], r


def test_a_file_referenced_twice_is_a_duplicate(lake):
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    (f,) = lake.partition_files()
    lake.writer.call("duplicate_file", table=lake.table, file_path=f["file_path"], branch="audit")
    r = lake.release()
    assert not r["released"] and "duplicate_file" in codes(r), r


def test_position_deletes_are_counted(lake):
    """A stray row written, then deleted by a position delete (merge-on-read): the partition's rows are
    its records less the deletes, which is what pyiceberg's scan reads."""
    commits = lake.hour_09()
    rows = lake.pipeline.rows(commits)
    stray = dict(rows[0], id=999)
    lake.pipeline.apply(commits, branch="audit", rows=rows + [stray])
    (f,) = lake.partition_files()
    assert f["record_count"] == 7
    lake.writer.call("position_delete", table=lake.table, positions=[[f["file_path"], 6]], branch="audit")
    scanned = lake.writer.call("scan", table=lake.table, ref="audit")
    assert len([r for r in scanned if r["commit_time"].startswith("2026-11-02T09")]) == 6
    assert 999 not in [r["id"] for r in scanned]
    r = lake.release()
    assert r["released"], r
    report = lake.env.one("SELECT r.report FROM finalize.release r ORDER BY r.release_id DESC LIMIT 1")
    assert report["catalog"]["records"] == 7 and report["catalog"]["position_deletes"] == 1, report["catalog"]
    assert report["catalog"]["delete_files"] == 1


def test_a_concurrent_commit_to_main_is_never_overwritten(lake, catalog, writer):
    """The commit is held at the proxy while a writer commits to main; the catalog then refuses the
    publish (assert-ref-snapshot-id), which is catalog_moved, and main keeps the writer's snapshot."""
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    proxy = FaultProxy(catalog.uri)
    try:
        lake.env.sql("ALTER SERVER lake_catalog OPTIONS (SET uri %s, SET timeout '20s')", (proxy.uri,))
        proxy.set_stall(match=COMMIT)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=lake.release()))
        t.start()
        lake.env.pg.wait_for(lambda: proxy.stalled == 1, timeout=30, what="the publish's commit at the proxy")
        other = writer.call("append", table=lake.table, rows=[{"id": 5000, "op": "i", "lsn": "x",
                                                                "commit_time": at(11, 0).isoformat()}])
        proxy.set_pass()
        t.join(30)
        r = out["r"]
        assert not r["released"] and codes(r) == ["catalog_moved"], r
        assert lake.main() == other["snapshot_id"], "the writer's commit was overwritten"
        assert proxy.count(method="POST") == 1
    finally:
        proxy.stop()
    assert lake.attempts()[-1][0] is False


def test_a_catalog_that_loses_the_commits_answer_publishes_once_on_retry(lake, catalog):
    """The catalog applies the commit but its answer is lost: an error, nothing recorded; the retry
    finds main at the audited snapshot, records the release, and sends no second commit."""
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    audited = lake.audit_head()
    proxy = FaultProxy(catalog.uri)
    try:
        lake.env.sql("ALTER SERVER lake_catalog OPTIONS (SET uri %s)", (proxy.uri,))
        proxy.set_lost_answer(match=COMMIT)
        with pytest.raises(psycopg2.Error) as e:
            lake.release()
        assert "could not publish snapshot %d" % audited in str(e.value), e.value
        assert "publishes it once" in str(e.value), e.value
        assert lake.attempts() == [], "a failed publish recorded an attempt"
        assert lake.main() == audited, "the catalog did apply the commit"
        proxy.set_pass()
        proxy.reset()
        r = lake.release()
        assert r["released"] and r["problems"] == [], r
        assert proxy.count(method="POST") == 0, "the retry committed again"
    finally:
        proxy.stop()
    assert [a[0] for a in lake.attempts()] == [True]
    report = lake.env.one("SELECT r.report FROM finalize.release r ORDER BY r.release_id DESC LIMIT 1")
    assert report["catalog"]["outcome"] == "already_published"


def delivery_worker(pg):
    return pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize alerts'")


def test_the_publish_commit_carries_the_verdict_properties_of_a_publication(lake, catalog, writer):
    """An iceberg_property publication of the same Iceberg table through the same catalog, whose events
    for hours 08 and 09 are recorded (final) but not yet sent (the delivery worker is off): the one
    commit that publishes the hour also moves the publication's properties to its end, never past
    the verdict; the delivery worker, back, finds them there and commits nothing."""
    pg = lake.env.pg
    proxy = FaultProxy(catalog.uri)
    try:
        lake.env.sql("ALTER SERVER lake_catalog OPTIONS (SET uri %s)", (proxy.uri,))
        lake.env.sql("SELECT finalize.add_publication('orders', 'props', 'lake_catalog', %s::jsonb)",
                     (json.dumps({"iceberg_table": lake.table}),))
        pg.sql("ALTER SYSTEM SET finalize.alerts_enabled = off")
        pg.reload()
        pg.wait_for(lambda: not delivery_worker(pg), what="the delivery worker stopped")
        commits = lake.hour_09()
        lake.pipeline.apply(commits, branch="audit")
        events = lake.env.sql("SELECT e.event_id::text, e.period_end, e.state, e.attempts FROM finalize.publication_event e "
                              "ORDER BY e.event_seq")
        assert [e[1:] for e in events] == [(at(9, 0), "pending", 0), (at(10, 0), "pending", 0)], events
        r = lake.release()
        assert r["released"] and r["problems"] == [], r
        posts = [json.loads(q["body"]) for q in proxy.requests if q["method"] == "POST" and "/tables/" in q["path"]]
        assert len(posts) == 1 and sorted(u["action"] for u in posts[0]["updates"]) == [
            "set-properties", "set-snapshot-ref"], posts
        props = writer.call("properties", table=lake.table)
        verdict = lake.env.one("SELECT finalize.finalized_until('orders')")
        assert props["finalize.finalized-until"] == "2026-11-02T10:00:00Z" and props["finalize.event-id"] == events[1][0]
        # Never ahead: the property names no instant the verdict has not reached.
        assert datetime.datetime.fromisoformat(props["finalize.finalized-until"].replace("Z", "+00:00")) <= verdict
        report = lake.env.one("SELECT r.report FROM finalize.release r ORDER BY r.release_id DESC LIMIT 1")
        assert report["catalog"]["properties"] == {"publication": "props", "event_id": events[1][0]}, report
        proxy.reset()
        pg.sql("ALTER SYSTEM RESET finalize.alerts_enabled")
        pg.reload()
        pg.wait_for(lambda: lake.env.sql("SELECT e.outcome FROM finalize.publication_event e") == [("already",)] * 2,
                    timeout=60, what="the events delivered as already there")
        assert proxy.count(method="POST") == 0
    finally:
        pg.sql("ALTER SYSTEM RESET finalize.alerts_enabled")
        pg.reload()
        proxy.stop()


def test_a_catalog_that_fails_the_commit_records_nothing(lake, catalog):
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    before = lake.main()
    proxy = FaultProxy(catalog.uri)
    try:
        lake.env.sql("ALTER SERVER lake_catalog OPTIONS (SET uri %s)", (proxy.uri,))
        proxy.set_status(503, message="catalog is restarting", match=COMMIT)
        with pytest.raises(psycopg2.Error) as e:
            lake.release()
        assert "catalog is restarting" in str(e.value), "the catalog's words reach the user: %s" % e.value
        assert lake.attempts() == [] and lake.main() == before
        proxy.set_pass()
        assert lake.release()["released"]
    finally:
        proxy.stop()


def test_a_wap_id_and_a_tag(lake):
    """The audited snapshot named by its wap.id (Spark's spark.wap.id), published as a tag."""
    commits = lake.hour_09()
    snap = lake.writer.call("append", table=lake.table, rows=lake.pipeline.rows(commits), branch="audit",
                            properties={"finalize.lsn": commits[-1]["lsn"], "wap.id": "w-42"})
    before = lake.main()
    r = lake.release(branch=None, wap_id="w-42", tag=True)
    assert r["released"] and r["generation"] == str(snap["snapshot_id"]), r
    refs = lake.writer.call("refs", table=lake.table)
    tag = "finalize/orders/%s=%s" % (FIELD, HOUR)
    assert refs[tag] == {"type": "tag", "snapshot_id": snap["snapshot_id"]}, refs
    assert lake.main() == before, "a tag publish does not move main"


def test_a_snapshot_that_does_not_hold_the_periods_changes_is_lake_behind(lake):
    """With a lake consumer, the audited snapshot's LSN property must reach every change of the period."""
    commits = lake.hour_09()
    lake.env.sql("SELECT finalize.add_consumer('orders', 'lake', iceberg_server => 'lake_catalog', "
                 "iceberg_table => %s)", (lake.table,))
    lake.pipeline.apply(commits, branch="audit", lsn=commits[0]["lsn"])
    r = lake.release()
    assert not r["released"] and codes(r) == ["lake_behind"], r
    assert commits[0]["lsn"] in r["problems"][0]["detail"], r


def test_requests_that_are_wrong_are_errors_naming_the_field(lake):
    lake.hour_09()
    cases = [
        (dict(partition={FIELD: "2026-11-02"}), 'field "partition"', "2026-11-27-08"),
        # Every file of an hour-partitioned table holds every hour: no one period vouches for them.
        (dict(partition={}, period_start="2026-11-02T09:00:00Z"), 'field "partition"', 'does not name field "%s"' % FIELD),
        (dict(branch="nope"), 'field "branch"', "not a branch"),
        (dict(period_start="2026-11-02T08:00:00Z"), 'field "period_start"',
         "disagrees with the partition: its time fields hold [2026-11-02 09:00:00+00, 2026-11-02 10:00:00+00)"),
        (dict(row_count="all"), 'field "row_count"', "inserts"),
        (dict(snapshot_id=1), 'field "snapshot_id"', "exactly one"),
        (dict(extra=1), 'field "extra"', "not a field"),
        (dict(catalog="db"), 'field "catalog"', "not a finalize_iceberg server"),
        (dict(table="nope"), "nope", "track"),
    ]
    for kw, where, what in cases:
        with pytest.raises(psycopg2.Error) as e:
            lake.release(**kw)
        assert where in str(e.value) and what in str(e.value), (kw, str(e.value))
        if where.startswith("field"):
            assert '"time_column"' in e.value.diag.message_hint, e.value.diag.message_hint
    assert lake.attempts() == []


def test_a_fast_forward_that_would_publish_another_partition_is_refused(lake):
    """The audit branch also holds a row of hour 10 (not final): fast-forwarding main to it for hour 09
    would publish hour 10 unaudited. A tag publishes hour 09's audit alone."""
    commits = lake.hour_09()
    rows = lake.pipeline.rows(commits)
    later = {"id": 7000, "op": "i", "lsn": commits[-1]["lsn"], "commit_time": at(10, 2).isoformat()}
    lake.pipeline.apply(commits, branch="audit", rows=rows + [later])
    before = lake.main()
    r = lake.release()
    assert not r["released"] and codes(r) == ["unaudited_change"], r
    assert "commit_time_hour=2026-11-02-10" in r["problems"][0]["path"], r
    assert lake.main() == before
    assert lake.release(tag=True)["released"]


def test_position_deletes_that_name_no_data_file_leave_the_count_unknown(lake):
    """A position-delete file whose entry does not say which data file it deletes from cannot be
    counted from the manifests: row_count_unknown, never a subtraction on a guess."""
    commits = lake.hour_09()
    rows = lake.pipeline.rows(commits)
    lake.pipeline.apply(commits, branch="audit", rows=rows + [dict(rows[0], id=999)])
    (f,) = lake.partition_files()
    lake.writer.call("position_delete", table=lake.table, positions=[[f["file_path"], 6]], branch="audit",
                     reference=False)
    r = lake.release()
    assert not r["released"] and codes(r) == ["row_count_unknown"], r
    assert "1 delete file(s)" in r["problems"][0]["detail"], r


def test_a_cut_manifest_is_an_error(lake):
    commits = lake.hour_09()
    snap = lake.pipeline.apply(commits, branch="audit")
    snaps = {s["snapshot_id"]: s for s in lake.writer.call("snapshots", table=lake.table)}
    assert snap["snapshot_id"] in snaps
    md = lake.catalog.load_table(lake.table)["metadata"]
    listed = next(s["manifest-list"] for s in md["snapshots"] if s["snapshot-id"] == snap["snapshot_id"])
    with open(local_path(listed), "r+b") as fh:
        size = fh.seek(0, 2)
        fh.truncate(size - 7)
    with pytest.raises(psycopg2.Error) as e:
        lake.release()
    assert "manifest list" in str(e.value) and "nothing was released" in str(e.value).lower(), e.value
    assert lake.attempts() == []


def test_a_publisher_with_look_alikes_everywhere_cannot_escalate_through_a_release(lake):
    """release_iceberg runs parts as the extension's owner: a publisher that planted look-alike types,
    domains, operators and functions in pg_temp and in a schema ahead of pg_catalog (test_security's
    plant) gets none of them run as anyone else, and its releases still work (one published, one
    refused)."""
    from test_security import assert_never_ran_as_another_role, drop_plants, plant, run
    pg = lake.env.pg
    pg.sql("CREATE ROLE sec_iceberg LOGIN IN ROLE finalize_publisher, pg_read_server_files")
    pg.sql("GRANT CREATE ON DATABASE postgres TO sec_iceberg")
    pg.sql("GRANT USAGE ON FOREIGN SERVER lake_catalog TO sec_iceberg")
    try:
        commits = lake.hour_09()
        lake.pipeline.apply(commits, branch="audit")
        conn = pg.connect(user="sec_iceberg")
        try:
            plant(conn, "sec_iceberg")
            refused = run(conn, "SELECT released, problems FROM finalize.release_iceberg(%s)",
                          (json.dumps(lake.request(partition={FIELD: "2026-11-02-10"}, period_start=None)),))[0]
            assert not refused[0] and "not_finalized" in {p["code"] for p in refused[1]}, refused
            released = run(conn, "SELECT released, generation, problems FROM finalize.release_iceberg(%s)",
                           (json.dumps(lake.request()),))[0]
            assert released == (True, str(lake.audit_head()), []), released
            assert lake.main() == lake.audit_head()
            run(conn, "SELECT 'x'::sec_iceberg_evil.text")          # the trap works for its own role
            assert ("sec_iceberg",) in pg.sql("SELECT who FROM sec_iceberg_evil.log")
        finally:
            conn.close()
        assert_never_ran_as_another_role(pg)
    finally:
        drop_plants(pg)
        pg.sql("DROP OWNED BY sec_iceberg")
        pg.sql("DROP ROLE sec_iceberg")
