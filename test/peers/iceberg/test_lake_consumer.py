"""finalize follows a pyiceberg writer that never calls it, through Apache Iceberg's real REST catalog
(RESTCatalogServer): the writer puts the LSN it applied into each commit's snapshot summary, and
finalize's lake worker reads the table's snapshots. Appends move the verdict exactly as far as they
prove; a compaction (operation=replace) changes nothing; a commit to another branch does not count; a
rollback records a loss with a data_loss incident until acknowledge_loss. After every step the ground
truth is checked: the simulator's own counts per period against what a pyiceberg scan of the table
returns per period, so that no period is final the table does not fully hold."""
import datetime
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))

from worker_env import Env, as_utc, assert_never_leads, lsn_text, new_cluster, sim_clock  # noqa: E402

UTC = datetime.timezone.utc
MINUTE = datetime.timedelta(minutes=1)
START = datetime.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster(**{"finalize.alert_after": "2s"})
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
    pg.sql("DELETE FROM finalize.alert")


class Pipeline:
    """The pipeline: applies SQL Server's commits to the Iceberg table, one row per inserted row,
    with the LSN of the last commit it applied in the snapshot summary. It never calls finalize."""

    def __init__(self, writer, table, prop="finalize.lsn"):
        self.writer, self.table, self.prop = writer, table, prop
        self.next_id = 1

    def rows(self, commits):
        out = []
        for c in commits:
            for _ in range(c["inserts"]):
                out.append({"id": self.next_id, "op": "i", "lsn": c["lsn"], "commit_time": c["at"].isoformat()})
                self.next_id += 1
        return out

    def apply(self, commits, branch=None, lsn=None):
        return self.writer.call("append", table=self.table, rows=self.rows(commits), branch=branch,
                                properties={self.prop: lsn or commits[-1]["lsn"]})


def commit(sim, at, inserts=1):
    """One committed insert transaction on dbo.orders at a simulated instant."""
    lsn = lsn_text(sim.call("sim.commit", at=at.isoformat(), inserts=inserts)[0][0]["start_lsn"])
    return {"lsn": lsn, "at": at, "inserts": inserts}


def track(env, sim, table, source):
    """A first commit at 08:59 and its capture; the table tracked in minutes (verdict 09:00)."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=70)
    env.add_source(source, sim)
    env.track(table, source, granularity="1 minute")
    env.wait_caught_up(table, sim)


def add_catalog(env, name, uri, mapping=None, **options):
    opts = {"uri": uri, "poll_interval": "1 second", "timeout": "2 seconds"}
    opts.update(options)
    env.sql('CREATE SERVER "%s" FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (%s)'
            % (name, ", ".join("%s %s" % (k, quote(v)) for k, v in opts.items())))
    if mapping:
        env.sql('CREATE USER MAPPING FOR CURRENT_USER SERVER "%s" OPTIONS (%s)'
                % (name, ", ".join("%s %s" % (k, quote(v)) for k, v in mapping.items())))


def quote(v):
    return "'" + str(v).replace("'", "''") + "'"


def add_consumer(env, table, consumer, server, iceberg_table, ref="main"):
    env.sql("SELECT finalize.add_consumer(%s, %s, iceberg_server => %s, iceberg_table => %s, ref => %s)",
            (table, consumer, server, iceberg_table, ref))


def consumer(env, table, name):
    conn = env.pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM finalize.consumers WHERE table_name = %s AND consumer = %s", (table, name))
            row = cur.fetchone()
            return None if row is None else dict(zip([d[0] for d in cur.description], row))
    finally:
        conn.close()


def until(env, table):
    return env.one("SELECT finalize.finalized_until(%s)", (table,))


def wait_consumer(env, table, name, predicate, what, timeout=30):
    def check():
        c = consumer(env, table, name) or {}
        return c if predicate(c) else None
    return env.pg.wait_for(check, timeout=timeout, what=lambda: "%s: %s" % (what, consumer(env, table, name)))


def check_truth(env, sim, writer, table, iceberg_table, ref="main"):
    """No period final that the Iceberg table does not fully hold: for every minute before the
    verdict (read first), the rows the table holds with commit times in it are exactly the rows
    SQL Server committed in it."""
    final = until(env, table)
    assert_never_leads(env, table, sim)
    refs = writer.call("refs", table=iceberg_table)
    rows = writer.call("scan", table=iceberg_table, ref=ref) if ref in refs else []
    held = {}
    for r in rows:
        t = datetime.datetime.fromisoformat(r["commit_time"]).astimezone(UTC).replace(second=0, microsecond=0)
        held[t] = held.get(t, 0) + 1
    truth = {}
    for r in sim.call("sim.truth_counts", table="dbo.orders", **{"from": START.isoformat(),
                                                                 "to": (START + 30 * MINUTE).isoformat()},
                      granularity_seconds=60)[0]:
        truth[as_utc(r["period_start_utc"])] = r["inserts"]
    p = START
    while final is not None and p < final:
        assert held.get(p, 0) == truth.get(p, 0), \
            "period %s is final (until %s) but the lake holds %d of the %d rows SQL Server committed" % (
                p, final, held.get(p, 0), truth.get(p, 0))
        p += MINUTE
    return final


def polls(seconds=3.0):
    """A few of the lake worker's polls (poll_interval 1 second)."""
    time.sleep(seconds)


# On every major (test/run-tests lane): the lake worker against the real catalog.
@pytest.mark.every_major
def test_appends_compactions_branches_and_a_rollback(env, sim, catalog, writer, table):
    track(env, sim, "sales.orders", "erp")
    add_catalog(env, "lake", catalog.uri)
    base = until(env, "sales.orders")
    add_consumer(env, "sales.orders", "spark", "lake", table)
    lake = Pipeline(writer, table)
    c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(5)]
    sim.call("sim.advance", seconds=300)
    env.wait_caught_up("sales.orders", sim)
    # Nothing committed to the lake yet: the consumer holds the verdict where it was.
    polls()
    assert until(env, "sales.orders") == base < START
    check_truth(env, sim, writer, "sales.orders", table)

    # Two commits applied: final up to the second one's minute (its own minute is not complete).
    lake.apply(c[:2])
    wait_consumer(env, "sales.orders", "spark", lambda r: r["reported_lsn"] == c[1]["lsn"], "the first append")
    env.pg.wait_for(lambda: until(env, "sales.orders") == START + MINUTE, timeout=20, what="verdict 09:01")
    check_truth(env, sim, writer, "sales.orders", table)

    # A compaction (replace) carries no property: nothing changes.
    snap = writer.call("compact", table=table)
    assert snap["operation"] == "replace" and "finalize.lsn" not in snap["summary"]
    polls()
    row = consumer(env, "sales.orders", "spark")
    assert row["reported_lsn"] == c[1]["lsn"] and row["condition"] is None, row
    assert until(env, "sales.orders") == START + MINUTE
    check_truth(env, sim, writer, "sales.orders", table)

    # A writer that commits to another branch does not count.
    writer.call("create_branch", table=table, name="audit")
    lake_audit = Pipeline(writer, table)
    lake_audit.next_id = 1000
    lake_audit.apply(c[2:], branch="audit")
    polls()
    assert consumer(env, "sales.orders", "spark")["reported_lsn"] == c[1]["lsn"]
    assert until(env, "sales.orders") == START + MINUTE
    check_truth(env, sim, writer, "sales.orders", table)

    # main moves on: the verdict follows it, and only as far as the LSN committed.
    before_c2 = writer.call("current", table=table)["snapshot_id"]
    lake.apply(c[2:3])
    wait_consumer(env, "sales.orders", "spark", lambda r: r["reported_lsn"] == c[2]["lsn"], "the third commit")
    env.pg.wait_for(lambda: until(env, "sales.orders") == START + 2 * MINUTE, timeout=20, what="verdict 09:02")
    check_truth(env, sim, writer, "sales.orders", table)

    # A rollback of main to before the third commit: a loss from its period on, an incident.
    writer.call("rollback", table=table, snapshot_id=before_c2)
    loss = env.pg.wait_for(lambda: env.sql("SELECT lost_from, lost_to, from_lsn, to_lsn FROM finalize.loss"),
                           timeout=20, what="a loss")
    lost_from = loss[0][0]
    assert lost_from <= c[2]["at"] and loss[0][2] == c[1]["lsn"] and loss[0][3] == c[2]["lsn"], loss
    row = consumer(env, "sales.orders", "spark")
    assert row["reported_lsn"] == c[1]["lsn"], row
    alert = env.sql("SELECT kind, severity, message FROM finalize.alerts WHERE state <> 'resolved'")
    assert alert and alert[0][0] == "data_loss" and alert[0][1] == "critical" and table in alert[0][2], alert
    fact = env.sql("SELECT detail FROM finalize.facts WHERE table_name = 'sales.orders' AND event = 'data_loss'")
    assert fact[0][0]["cause"] == "lake_rollback" and fact[0][0]["held_lsn"] == c[1]["lsn"], fact
    # The worker recorded each minute's commits as facts of their own (its reads split at the
    # table's period boundaries): the loss starts at the third commit, and 09:01, whose one commit
    # the lake still holds, stays final.
    assert not env.one("SELECT finalize.is_final('sales.orders', %s)", (START + 2 * MINUTE,))
    assert env.one("SELECT finalize.is_final('sales.orders', %s)", (START + MINUTE,))
    assert until(env, "sales.orders") <= START + 2 * MINUTE
    check_truth(env, sim, writer, "sales.orders", table)

    # The pipeline writes the third commit again; the loss holds until an admin acknowledges it.
    lake.apply(c[2:4])
    wait_consumer(env, "sales.orders", "spark", lambda r: r["reported_lsn"] == c[3]["lsn"], "the rewrite")
    polls(2)
    assert not env.one("SELECT finalize.is_final('sales.orders', %s)", (START + 2 * MINUTE,))
    check_truth(env, sim, writer, "sales.orders", table)
    env.sql("SELECT finalize.acknowledge_loss('sales.orders', %s, 'infinity', 'rewritten after the rollback')",
            (START,))
    env.pg.wait_for(lambda: until(env, "sales.orders") == START + 3 * MINUTE, timeout=20, what="verdict 09:03")
    check_truth(env, sim, writer, "sales.orders", table)


def test_a_report_for_an_iceberg_consumer_is_refused(env, sim, catalog, table):
    track(env, sim, "sales.refused", "erp")
    add_catalog(env, "lake", catalog.uri)
    add_consumer(env, "sales.refused", "spark", "lake", table)
    with pytest.raises(Exception) as e:
        env.sql("SELECT finalize.report_progress('sales.refused', 'spark', '0x00000000000000000001')")
    assert "reads its progress from Iceberg table " + table in str(e.value)


def test_a_rollback_covers_a_lost_commit_stamped_before_the_offset_by_a_clock_step_back(env, sim, catalog, writer,
                                                                                      table):
    """Issue 41: SQL Server's clock is 20 s fast when c1 commits (stamped 09:02:00); the worker reads it
    (its offset; with a clock_tolerance of 30 s the verdict is 09:01). The clock is stepped back and c2
    is stamped 09:01:47, in minute 09:01, before the worker reads it; the lake holds c1 and c2, and is
    rolled back to c1. The loss started at the offset's commit time (09:02:00), so once the pipeline
    went on without c2, minute 09:01 was final with the lake lacking c2. A change the worker has not
    read may lie the tolerance before its offset's commit time: the loss starts there, as every
    loss does."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=70)
    env.add_source("erp", sim, clock_tolerance="30 s")
    env.track("sales.orders", "erp", granularity="1 minute")
    env.wait_caught_up("sales.orders", sim)
    add_catalog(env, "lake", catalog.uri)
    add_consumer(env, "sales.orders", "spark", "lake", table)
    lake = Pipeline(writer, table)

    sim.call("sim.advance", to=(START + datetime.timedelta(minutes=1, seconds=40)).isoformat())
    sim.call("sim.step_clock", seconds=20)
    c1 = commit(sim, START + datetime.timedelta(minutes=1, seconds=40))
    c1["at"] = START + 2 * MINUTE                        # what the fast clock stamped
    sim.call("sim.advance", seconds=6)
    env.wait_caught_up("sales.orders", sim)
    assert env.one("SELECT offset_lsn::text FROM finalize.watermark w JOIN finalize.tracked_table t "
                   "USING (table_id) WHERE t.table_name = 'sales.orders'") == c1["lsn"]
    sim.call("sim.capture_stop")
    sim.call("sim.step_clock", seconds=-20)
    c2 = commit(sim, START + datetime.timedelta(minutes=1, seconds=47))   # stamped 09:01:47
    lake.apply([c1])
    s1 = writer.call("current", table=table)["snapshot_id"]
    wait_consumer(env, "sales.orders", "spark", lambda r: r["reported_lsn"] == c1["lsn"], "the first append")
    lake.apply([c2])
    env.pg.wait_for(lambda: env.one("SELECT seen_lsn::text FROM finalize.lake_consumer") == c2["lsn"],
                    timeout=20, what="the lake worker to see c2")
    writer.call("rollback", table=table, snapshot_id=s1)
    loss = env.pg.wait_for(lambda: env.sql("SELECT lost_from FROM finalize.loss"), timeout=20, what="a loss")
    assert loss[0][0] <= c2["at"], "the loss starts after the lost commit %s: %s" % (c2["at"], loss)

    # The pipeline goes on without c2: minute 09:01 must not become final.
    sim.call("sim.capture_start")
    c3 = commit(sim, START + datetime.timedelta(minutes=2, seconds=40))
    sim.call("sim.advance", to=(START + datetime.timedelta(minutes=3, seconds=30)).isoformat())
    env.wait_caught_up("sales.orders", sim)
    lake.apply([c3])
    wait_consumer(env, "sales.orders", "spark", lambda r: (r["consumer_until"] or START) >= START + 2 * MINUTE,
                  "the pipeline's next commit resolved")
    assert not env.one("SELECT finalize.is_final('sales.orders', %s)", (START + MINUTE,))
    check_truth(env, sim, writer, "sales.orders", table)
