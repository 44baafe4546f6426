"""Delta Lake consumers with the real writer: delta-rs (the deltalake package) writes Delta tables to
local files, to the S3 test server and to Azurite (Azure Blob Storage), committing with the LSN it applied in the commit's custom
metadata (docs/delta.md's delta-rs recipe, run as printed: CommitProperties(custom_metadata=...), a
top-level key of commitInfo); finalize's lake
worker reads the tables' _delta_log/ and never hears from the writer. Appends move the verdict
exactly as far as they prove; an OPTIMIZE changes nothing; a RESTORE and a table created again are
recorded losses with a data_loss incident, and the pipeline going on past the restored commit does
not make its period final; a malformed commit is that consumer's log_malformed, and no other's.
After every step the ground truth: for every final minute, the rows the Delta table holds (read back
with delta-rs, placed by their commit's time in the simulator) are exactly the inserts SQL Server
committed in it (check_truth: the assertion a verdict ahead of the table fails)."""
import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile

import pyarrow as pa
import pytest
from azure.storage.blob import BlobServiceClient
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from azurite import Azurite  # noqa: E402
from peerlib import recipe  # noqa: E402
from s3proc import S3Server  # noqa: E402
from worker_env import Env, as_utc, assert_never_leads, lsn_text, new_cluster, sim_clock, sim_max_lsn  # noqa: E402

UTC = datetime.timezone.utc
MINUTE = datetime.timedelta(minutes=1)
START = datetime.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
SCHEMA = pa.schema([("id", pa.int64()), ("lsn", pa.string()), ("commit_time", pa.string())])

# docs/delta.md's delta-rs recipe, as printed: every commit of the tests goes through it.
RECIPE = {}
exec(compile(recipe("delta-rs-commit", "python"), "docs/delta.md:delta-rs-commit", "exec"), RECIPE)
commit_batch = RECIPE["commit_batch"]


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster(**{"finalize.alert_after": "1s"})
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    server.create_bucket("lake")
    yield server
    server.stop()


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
    pg.sql("DELETE FROM finalize.alert")


@pytest.fixture
def lake_dir():
    """A directory the database server's user may read (the tests run as another user)."""
    d = tempfile.mkdtemp(prefix="delta-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Pipeline:
    """A pipeline into a Delta table: one row per inserted row (its LSN and commit time), the LSN of
    the last commit applied in the commit's custom metadata. It never calls finalize."""

    def __init__(self, uri, storage_options=None):
        self.uri, self.options = uri, storage_options
        self.next_id = 1

    def apply(self, commits, lsn=None):
        rows = [{"id": self.next_id + i, "lsn": c["lsn"], "commit_time": c["at"].isoformat()}
                for i, c in enumerate(x for x in commits for _ in range(x["inserts"]))]
        self.next_id += len(rows)
        commit_batch(self.uri, pa.Table.from_pylist(rows, schema=SCHEMA), lsn or commits[-1]["lsn"],
                     storage_options=self.options)

    def table(self):
        return DeltaTable(self.uri, storage_options=self.options)

    def rows(self):
        try:
            return self.table().to_pyarrow_table().to_pylist()
        except TableNotFoundError:          # no table (yet, or any more)
            return []


def commit(sim, at, inserts=1):
    """One committed insert transaction on dbo.orders at a simulated instant."""
    lsn = lsn_text(sim.call("sim.commit", at=at.isoformat(), inserts=inserts)[0][0]["start_lsn"])
    return {"lsn": lsn, "at": at, "inserts": inserts}


def track(env, sim, table):
    """A first commit at 08:59 and its capture; the table tracked in minutes (verdict 09:00)."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=70)
    env.add_source("erp", sim)
    env.track(table, "erp", granularity="1 minute")
    env.wait_caught_up(table, sim)


def until(env, table):
    return env.one("SELECT finalize.finalized_until(%s)", (table,))


def consumer(env, table, name):
    rows = env.pg.rows("SELECT c.*, l.seen_head_id, l.seen_lsn::text AS seen_lsn, l.condition AS lake_condition, "
                       "l.last_error FROM finalize.consumers c JOIN finalize.lake_consumer l USING (consumer) "
                       "WHERE c.table_name = %s AND c.consumer = %s", (table, name))
    return rows[0] if rows else {}


def wait_consumer(env, table, name, predicate, what, timeout=60):
    def check():
        c = consumer(env, table, name)
        return c if predicate(c) else None
    return env.pg.wait_for(check, timeout=timeout, what=lambda: "%s: %s" % (what, consumer(env, table, name)))


def check_truth(env, sim, pipeline, table):
    """No period final that the Delta table does not fully hold: for every minute before the verdict
    (read first), the rows the table holds with commit times in it are exactly the rows SQL Server
    committed in it. A verdict ahead of the table (a RESTORE not seen) fails here."""
    final = until(env, table)
    assert_never_leads(env, table, sim)
    held = {}
    for r in pipeline.rows():
        t = datetime.datetime.fromisoformat(r["commit_time"]).astimezone(UTC).replace(second=0, microsecond=0)
        held[t] = held.get(t, 0) + 1
    truth = {as_utc(r["period_start_utc"]): r["inserts"]
             for r in sim.call("sim.truth_counts", table="dbo.orders",
                               **{"from": START.isoformat(), "to": (START + 30 * MINUTE).isoformat()},
                               granularity_seconds=60)[0]}
    p = START
    while final is not None and p < final:
        assert held.get(p, 0) == truth.get(p, 0), \
            "minute %s is final (until %s) but the Delta table holds %d of the %d rows SQL Server committed" % (
                p, final, held.get(p, 0), truth.get(p, 0))
        p += MINUTE
    return final


def is_final(env, table, at):
    return env.one("SELECT finalize.is_final(%s, %s)", (table, at))


def test_appends_optimize_restore_and_a_table_created_again_on_files(env, sim, lake_dir):
    track(env, sim, "sales.orders")
    store = "file://%s/" % lake_dir
    uri = os.path.join(lake_dir, "orders")
    base = until(env, "sales.orders")

    # The declaration: named (delta_table => ...); the positional calls of the other overloads still
    # resolve as they did (an Iceberg catalog that does not exist, a pipeline).
    with pytest.raises(Exception, match='server "nosuch" does not exist'):
        env.sql("SELECT finalize.add_consumer('sales.orders', 'x', 'nosuch', 'ns.orders')")
    env.sql("SELECT finalize.add_consumer('sales.orders', 'plain', false)")
    env.sql("SELECT finalize.drop_consumer('sales.orders', 'plain')")
    with pytest.raises(Exception, match="is not in store"):
        env.sql("SELECT finalize.add_consumer('sales.orders', 'rs', delta_table => 'file:///elsewhere/orders', "
                "store => %s)", (store,))
    env.sql("SELECT finalize.add_consumer('sales.orders', 'rs', delta_table => %s, store => %s)",
            ("file://" + uri, store))
    with pytest.raises(Exception, match="reads its progress from Delta table file://" + uri):
        env.sql("SELECT finalize.report_progress('sales.orders', 'rs', '0x00000000000000000001')")
    lake = Pipeline(uri)
    c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(5)]
    sim.call("sim.advance", seconds=300)
    env.wait_caught_up("sales.orders", sim)
    # No table yet: the consumer says so and holds the verdict where it was.
    wait_consumer(env, "sales.orders", "rs", lambda r: r.get("lake_condition") == "table_not_found", "no table")
    assert until(env, "sales.orders") == base < START

    # Two commits applied: final up to the second one's minute.
    lake.apply(c[:2])
    wait_consumer(env, "sales.orders", "rs", lambda r: r["reported_lsn"] == c[1]["lsn"], "the first append")
    env.pg.wait_for(lambda: until(env, "sales.orders") == START + MINUTE, timeout=60, what="verdict 09:01")
    assert consumer(env, "sales.orders", "rs")["lake_condition"] is None
    check_truth(env, sim, lake, "sales.orders")
    lake.apply(c[2:3])
    env.pg.wait_for(lambda: until(env, "sales.orders") == START + 2 * MINUTE, timeout=60, what="verdict 09:02")
    check_truth(env, sim, lake, "sales.orders")

    # An OPTIMIZE (dataChange false) neither advances nor holds: the version read moves, nothing else.
    lake.table().optimize.compact()
    optimized = lake.table().version()
    row = wait_consumer(env, "sales.orders", "rs", lambda r: r["seen_head_id"] == optimized, "the OPTIMIZE read")
    assert row["reported_lsn"] == c[2]["lsn"] and row["lake_condition"] is None, row
    assert until(env, "sales.orders") == START + 2 * MINUTE
    assert not env.sql("SELECT * FROM finalize.loss")

    # A RESTORE to the version of the second append: a loss from the third commit on, an incident,
    # the report back to what the table holds.
    lake.table().restore(0)
    loss = env.pg.wait_for(lambda: env.sql("SELECT lost_from, from_lsn, to_lsn FROM finalize.loss"),
                           timeout=60, what="a loss")
    assert loss[0][0] <= c[2]["at"] and loss[0][1] == c[1]["lsn"] and loss[0][2] == c[2]["lsn"], loss
    assert consumer(env, "sales.orders", "rs")["reported_lsn"] == c[1]["lsn"]
    alert = env.sql("SELECT kind, severity, message FROM finalize.alerts WHERE state <> 'resolved' "
                    "AND kind = 'data_loss'")
    assert alert and alert[0][0] == "data_loss" and alert[0][1] == "critical" and "RESTORE" in alert[0][2], alert
    fact = env.sql("SELECT detail FROM finalize.facts WHERE table_name = 'sales.orders' AND event = 'data_loss'")
    assert fact[0][0]["delta_table"] == "file://" + uri and fact[0][0]["held_lsn"] == c[1]["lsn"], fact
    assert not is_final(env, "sales.orders", START + 2 * MINUTE)
    assert is_final(env, "sales.orders", START + MINUTE)
    check_truth(env, sim, lake, "sales.orders")

    # The pipeline goes on past the lost commit (c[3]): minute 09:02, whose row the table lost, must
    # not become final (check_truth fails if it does: the verdict ahead of the table).
    lake.apply(c[3:4])
    wait_consumer(env, "sales.orders", "rs", lambda r: r["reported_lsn"] == c[3]["lsn"], "the append after")
    wait_consumer(env, "sales.orders", "rs", lambda r: (r["consumer_until"] or START) >= START + 3 * MINUTE,
                  "the append after resolved")
    assert not is_final(env, "sales.orders", START + 2 * MINUTE)
    check_truth(env, sim, lake, "sales.orders")
    lake.apply(c[2:3], lsn=c[3]["lsn"])
    wait_consumer(env, "sales.orders", "rs", lambda r: r["seen_head_id"] == lake.table().version(), "the rewrite")
    env.sql("SELECT finalize.acknowledge_loss('sales.orders', %s, 'infinity', 'c2 written again')", (START,))
    env.pg.wait_for(lambda: until(env, "sales.orders") == START + 3 * MINUTE, timeout=60, what="verdict 09:03")
    check_truth(env, sim, lake, "sales.orders")

    # The table dropped and created again, holding only c[4]: nothing before it is provable any more.
    shutil.rmtree(uri)
    lake.next_id = 1
    lake.apply(c[4:5])
    loss = env.pg.wait_for(lambda: env.sql("SELECT lost_from::text FROM finalize.loss WHERE from_lsn IS NULL"),
                           timeout=60, what="the loss of the table created again")
    assert loss[0][0] == "-infinity", loss
    wait_consumer(env, "sales.orders", "rs", lambda r: r["reported_lsn"] == c[4]["lsn"], "the new table's LSN")
    assert not is_final(env, "sales.orders", START)
    check_truth(env, sim, lake, "sales.orders")

    # A consumer declared on a table whose carrier of the LSN was cleaned up, a Parquet checkpoint
    # standing for it (finalize reads JSON commits only): it says so, and the table's next commit
    # with the LSN proves it.
    old = Pipeline(os.path.join(lake_dir, "old"))
    old.apply(c[:1])
    write_deltalake(old.uri, old.table().to_pyarrow_table(), mode="append")     # a backfill, no LSN
    old.table().create_checkpoint()
    os.remove(os.path.join(old.uri, "_delta_log", "%020d.json" % 0))
    env.sql("SELECT finalize.add_consumer('sales.orders', 'late', delta_table => %s, store => %s)",
            ("file://" + old.uri, store))
    row = wait_consumer(env, "sales.orders", "late", lambda r: r["lake_condition"] == "checkpoint_only",
                        "checkpoint_only")
    assert "Parquet checkpoint (version 1)" in row["last_error"] and row["reported_lsn"] is None, row
    old.apply(c[4:5])
    row = wait_consumer(env, "sales.orders", "late", lambda r: r["reported_lsn"] == c[4]["lsn"], "the next commit")
    assert row["lake_condition"] is None, row

    # A consumer declared on a table at version 1 (the LSN proved there, its metaData.id at version 0),
    # then CREATE OR REPLACE TABLE (a new id, every file removed, no LSN): a loss of all it proved.
    repl = Pipeline(os.path.join(lake_dir, "repl"))
    repl.apply(c[:1])
    repl.apply(c[1:2])
    env.sql("SELECT finalize.add_consumer('sales.orders', 'repl', delta_table => %s, store => %s)",
            ("file://" + repl.uri, store))
    wait_consumer(env, "sales.orders", "repl", lambda r: r["reported_lsn"] == c[1]["lsn"], "the replaced table's LSN")
    assert env.one("SELECT seen_table_uuid FROM finalize.lake_consumer WHERE consumer = 'repl'") == \
        repl.table().metadata().id
    DeltaTable.create(repl.uri, SCHEMA, mode="overwrite")
    env.pg.wait_for(lambda: env.sql("SELECT 1 FROM finalize.facts WHERE event = 'data_loss' "
                                    "AND detail->>'consumer' = 'repl' AND detail->>'held_lsn' IS NULL"),
                    timeout=60, what="the loss of the replaced table")
    assert consumer(env, "sales.orders", "repl")["reported_lsn"] is None

    # A table at version 0 with the LSN deleted and created again, empty, as version 0 (the pipeline
    # stopped: no newer commit): the version read last is another commit, a loss.
    again = Pipeline(os.path.join(lake_dir, "again"))
    again.apply(c[:1])
    env.sql("SELECT finalize.add_consumer('sales.orders', 'again', delta_table => %s, store => %s)",
            ("file://" + again.uri, store))
    wait_consumer(env, "sales.orders", "again", lambda r: r["reported_lsn"] == c[0]["lsn"], "version 0's LSN")
    shutil.rmtree(again.uri)
    write_deltalake(again.uri, pa.Table.from_pylist([], schema=SCHEMA), mode="append")
    env.pg.wait_for(lambda: env.sql("SELECT 1 FROM finalize.facts WHERE event = 'data_loss' "
                                    "AND detail->>'consumer' = 'again'"),
                    timeout=60, what="the loss of the table created again at version 0")
    assert consumer(env, "sales.orders", "again")["reported_lsn"] is None

    # A commit over the size cap (a sparse file): the log's condition, not the store's.
    big = Pipeline(os.path.join(lake_dir, "big"))
    big.apply(c[:1])
    env.sql("SELECT finalize.add_consumer('sales.orders', 'big', delta_table => %s, store => %s)",
            ("file://" + big.uri, store))
    wait_consumer(env, "sales.orders", "big", lambda r: r["reported_lsn"] == c[0]["lsn"], "the big table read")
    with open(os.path.join(big.uri, "_delta_log", "%020d.json" % 1), "wb") as f:
        f.truncate(65 * 1024 * 1024)
    row = wait_consumer(env, "sales.orders", "big", lambda r: r["lake_condition"] is not None, "the big commit")
    assert row["lake_condition"] == "log_malformed" and "larger than 64 MB" in row["last_error"], row

    # lsn_from with a typo: no commit carries it, and the consumer says so instead of lagging silently.
    typo = Pipeline(os.path.join(lake_dir, "typo"))
    typo.apply(c[:1])
    env.sql("SELECT finalize.add_consumer('sales.orders', 'typo', delta_table => %s, store => %s, "
            "lsn_from => 'finalize.lns')", ("file://" + typo.uri, store))
    row = wait_consumer(env, "sales.orders", "typo", lambda r: r["lake_condition"] is not None, "the typo")
    assert row["lake_condition"] == "lsn_missing" and '"finalize.lns"' in row["last_error"], row


def s3_server(env, s3):
    """Server lake_s3 on the S3 test server, and delta-rs's options for it."""
    env.sql("CREATE SERVER lake_s3 FOREIGN DATA WRAPPER finalize_s3 OPTIONS (endpoint %s, region %s, bucket 'lake')",
            (s3.endpoint, s3.region))
    env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER lake_s3 OPTIONS (access_key_id %s, secret_access_key %s)",
            (s3.access_key, s3.secret_key))
    env.sources["lake_s3"] = None           # dropped with the sources
    return {"AWS_ENDPOINT_URL": s3.endpoint, "AWS_ACCESS_KEY_ID": s3.access_key,
            "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_REGION": s3.region, "AWS_ALLOW_HTTP": "true",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def test_a_malformed_commit_and_store_faults_on_s3_hold_that_consumer_only_and_idle_polls_write_nothing(
        env, sim, s3):
    track(env, sim, "sales.orders")
    options = s3_server(env, s3)
    good, bad = Pipeline("s3://lake/sales/good", options), Pipeline("s3://lake/sales/bad", options)
    for name, p in (("good", good), ("bad", bad)):
        env.sql("SELECT finalize.add_consumer('sales.orders', %s, delta_table => %s, store => 'lake_s3')",
                (name, p.uri))
    c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(3)]
    sim.call("sim.advance", seconds=200)
    env.wait_caught_up("sales.orders", sim)
    good.apply(c[:1])
    bad.apply(c[:1])
    for name in ("good", "bad"):
        wait_consumer(env, "sales.orders", name, lambda r: r["reported_lsn"] == c[0]["lsn"], name + " read")

    # A commit that is not JSON: the bad table's consumer stops there and says where; the good one
    # goes on, and the verdict waits for the bad one.
    s3.put("lake", "sales/bad/_delta_log/00000000000000000001.json",
           b'{"commitInfo":{"timestamp":1,"finalize.lsn":"%s"}}\n{"add":{"path":"x.parquet","dataChange":tru\n'
           % c[2]["lsn"].encode())
    good.apply(c[1:3])
    row = wait_consumer(env, "sales.orders", "bad", lambda r: r["lake_condition"] == "log_malformed", "malformed")
    assert "Commit 1 of Delta table s3://lake/sales/bad" in row["last_error"] and "line 2" in row["last_error"], row
    assert row["reported_lsn"] == c[0]["lsn"], row
    wait_consumer(env, "sales.orders", "good", lambda r: r["reported_lsn"] == c[2]["lsn"], "good read on")
    assert consumer(env, "sales.orders", "good")["lake_condition"] is None
    env.pg.wait_for(lambda: env.sql("SELECT 1 FROM finalize.alerts WHERE kind = 'log_malformed' "
                                    "AND state <> 'resolved'"), timeout=60, what="the log_malformed incident")
    assert until(env, "sales.orders") <= START + MINUTE
    assert_never_leads(env, "sales.orders", sim)

    # The store refusing the credentials (403), then failing (503): that consumer's condition, in
    # the store's words and without the secret; each clears when the store answers again.
    env.sql("SELECT finalize.drop_consumer('sales.orders', 'bad')")
    for status, condition in ((403, "store_auth_failed"), (503, "store_unreachable")):
        s3.fault(kind="status", status=status, count=-1, match="good")
        row = wait_consumer(env, "sales.orders", "good", lambda r: r["lake_condition"] == condition, condition)
        assert "HTTP %d" % status in row["last_error"] and s3.secret_key not in row["last_error"], row
        assert row["reported_lsn"] == c[2]["lsn"], row
        s3.clear("faults")
        wait_consumer(env, "sales.orders", "good", lambda r: r["lake_condition"] is None, condition + " cleared")

    # A commit listed but answering 404 for a while (a replica behind): the store's condition, no loss.
    nxt = good.table().version() + 1
    s3.fault(kind="status", status=404, code="NoSuchKey", count=-1, match="good/_delta_log/%020d.json" % nxt)
    s3.put("lake", "sales/good/_delta_log/%020d.json" % nxt,
           '{"commitInfo":{"timestamp":1,"operation":"WRITE","finalize.lsn":"%s"}}\n' % c[2]["lsn"])
    row = wait_consumer(env, "sales.orders", "good", lambda r: r["lake_condition"] is not None, "the commit not found")
    assert row["lake_condition"] == "store_unreachable" and "is listed" in row["last_error"], row
    s3.clear("faults")
    wait_consumer(env, "sales.orders", "good", lambda r: r["seen_head_id"] == nxt and r["lake_condition"] is None,
                  "the commit read")
    # The version read last answering 404 for a while when read again before the next commit: the
    # same, not a loss (it is still listed).
    s3.fault(kind="status", status=404, code="NoSuchKey", count=-1, match="good/_delta_log/%020d.json" % nxt)
    s3.put("lake", "sales/good/_delta_log/%020d.json" % (nxt + 1),
           '{"commitInfo":{"timestamp":2,"operation":"WRITE","finalize.lsn":"%s"}}\n' % c[2]["lsn"])
    row = wait_consumer(env, "sales.orders", "good", lambda r: r["lake_condition"] is not None, "read last not found")
    assert row["lake_condition"] == "store_unreachable" and "Commit %d " % nxt in row["last_error"], row
    s3.clear("faults")
    wait_consumer(env, "sales.orders", "good",
                  lambda r: r["seen_head_id"] == nxt + 1 and r["lake_condition"] is None, "the next commit read")
    assert not env.sql("SELECT 1 FROM finalize.facts WHERE event = 'data_loss' AND detail->>'consumer' = 'good'")

    # Idle polls of a consumer whose table does not move write nothing: its row keeps its version
    # while the worker lists the log again and again.
    xmin = env.one("SELECT xmin::text FROM finalize.lake_consumer WHERE consumer = 'good'")
    s3.clear("requests")
    env.pg.wait_for(lambda: len([r for r in s3.requests() if "list-type" in (r["query"] or "")]) >= 5,
                    timeout=60, what="five polls of the good table")
    assert env.one("SELECT xmin::text FROM finalize.lake_consumer WHERE consumer = 'good'") == xmin

    # The server pointed at another bucket: what the consumer proved may not be there, a loss.
    s3.create_bucket("lake2")
    env.sql("ALTER SERVER lake_s3 OPTIONS (SET bucket 'lake2')")
    env.pg.wait_for(lambda: env.sql("SELECT 1 FROM finalize.facts WHERE event = 'data_loss' "
                                    "AND detail->>'consumer' = 'good' AND detail->>'reason' LIKE '%store changed%'"),
                    timeout=60, what="the loss of the store changed")
    assert consumer(env, "sales.orders", "good")["reported_lsn"] is None


def test_a_first_read_slower_than_a_poll_goes_on_where_it_stopped_and_keeps_the_condition(env, sim, s3):
    """A store so slow that each poll reads one commit: the first read's walk back from the newest
    commit to the carrier goes on where the last poll stopped (it used to start again from the newest
    each poll and never end), and a poll cut before anything was judged records nothing: the
    consumer's condition stays until the table is read (it used to be cleared by an empty poll)."""
    track(env, sim, "sales.orders")
    slow = Pipeline("s3://lake/sales/slow", s3_server(env, s3))
    c = [commit(sim, START + datetime.timedelta(seconds=10))]
    sim.call("sim.advance", seconds=100)
    env.wait_caught_up("sales.orders", sim)
    slow.apply(c)
    for v in range(1, 4):                   # commits that carry no LSN above the carrier
        s3.put("lake", "sales/slow/_delta_log/%020d.json" % v,
               '{"commitInfo":{"timestamp":%d,"operation":"OPTIMIZE"}}\n' % (1000 + v))
    s3.fault(kind="status", status=503, count=-1, match="slow")
    env.sql("SELECT finalize.add_consumer('sales.orders', 'slow', delta_table => %s, store => 'lake_s3')",
            (slow.uri,))
    wait_consumer(env, "sales.orders", "slow", lambda r: r["lake_condition"] == "store_unreachable", "503")
    s3.clear("faults")
    # Each commit answers after a second, five polls' time: a poll reads one and runs out of time.
    s3.fault(kind="stall", seconds=1, count=-1, match="slow/_delta_log/0000")
    seen = []

    def read():
        r = consumer(env, "sales.orders", "slow")
        seen.append((r["lake_condition"], r["reported_lsn"]))
        return r if r["reported_lsn"] is not None else None
    row = env.pg.wait_for(read, timeout=60, what=lambda: "the carrier read: %s" % seen[-5:])
    s3.clear("faults")
    assert row["reported_lsn"] == c[0]["lsn"] and row["seen_head_id"] == 3 and row["lake_condition"] is None, row
    assert (None, None) not in seen, "the condition was cleared before the table was read: %s" % seen
    env.sql("SELECT finalize.drop_consumer('sales.orders', 'slow')")


def test_a_head_rewritten_while_a_first_read_reads_it_is_read_again(env, sim, s3):
    """The newest commit written again between its read and the listing of its identity: the poll
    records nothing, and the next one reads what the commit holds now. (The identity used to be
    listed after the read only: the old content's LSN was recorded with the new commit's identity,
    which then matched every poll, and what the table holds was never read.)"""
    track(env, sim, "sales.orders")
    head = Pipeline("s3://lake/sales/head", s3_server(env, s3))
    c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(2)]
    sim.call("sim.advance", seconds=200)
    env.wait_caught_up("sales.orders", sim)
    head.apply(c[:1])
    key = "sales/head/_delta_log/%020d.json" % 0
    # Each listing of the commit's identity answers after 5 seconds; the commit is written again
    # once its read is over, while the listing after it waits.
    s3.fault(kind="stall", seconds=5, count=-1, match="head%2F_delta_log%2F" + "%020d.json" % 0)
    s3.clear("requests")
    env.sql("SELECT finalize.add_consumer('sales.orders', 'head', delta_table => %s, store => 'lake_s3')",
            (head.uri,))
    env.pg.wait_for(lambda: [r for r in s3.requests() if r["method"] == "GET" and key in r["path"]
                             and "list-type" not in (r["query"] or "")], timeout=30, what="the commit read")
    s3.put("lake", key, '{"commitInfo":{"timestamp":5,"operation":"WRITE","finalize.lsn":"%s"}}\n' % c[1]["lsn"])
    row = wait_consumer(env, "sales.orders", "head", lambda r: r["reported_lsn"] == c[1]["lsn"],
                        "what the commit holds now", timeout=60)
    s3.clear("faults")
    assert row["seen_head_id"] == 0 and row["lake_condition"] is None, row
    env.sql("SELECT finalize.drop_consumer('sales.orders', 'head')")


def test_appends_optimize_and_a_restore_on_azure_blob_storage(env, sim):
    """The same story on Azurite through a finalize_azure server (Shared Key), the table named by
    its abfss:// location; delta-rs writes it through the emulator's endpoint."""
    with Azurite() as az:
        BlobServiceClient.from_connection_string(az.connection_string(), connection_verify=az.ca) \
            .create_container("lake")
        env.sql("CREATE SERVER lake_az FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
                "container 'lake', endpoint %s, ca_file %s)", (az.endpoint, az.ca))
        env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER lake_az OPTIONS (account_key %s)", (az.key,))
        env.sources["lake_az"] = None       # dropped with the sources
        # The writer's own client trusts no test CA: only it skips the check (finalize verifies).
        lake = Pipeline("az://lake/sales/orders", {"azure_storage_account_name": az.account,
                                                   "azure_storage_account_key": az.key,
                                                   "azure_storage_endpoint": az.endpoint,
                                                   "allow_invalid_certificates": "true"})
        track(env, sim, "sales.orders")
        env.sql("SELECT finalize.add_consumer('sales.orders', 'az', delta_table => %s, store => 'lake_az')",
                ("abfss://lake@devstoreaccount1.dfs.core.windows.net/sales/orders",))
        c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(4)]
        sim.call("sim.advance", seconds=240)
        env.wait_caught_up("sales.orders", sim)
        lake.apply(c[:2])
        lake.apply(c[2:3])
        env.pg.wait_for(lambda: until(env, "sales.orders") == START + 2 * MINUTE, timeout=60, what="verdict 09:02")
        check_truth(env, sim, lake, "sales.orders")
        lake.table().optimize.compact()
        optimized = lake.table().version()
        wait_consumer(env, "sales.orders", "az", lambda r: r["seen_head_id"] == optimized, "the OPTIMIZE read")
        assert until(env, "sales.orders") == START + 2 * MINUTE and not env.sql("SELECT * FROM finalize.loss")
        lake.table().restore(0)
        loss = env.pg.wait_for(lambda: env.sql("SELECT from_lsn, to_lsn FROM finalize.loss"), timeout=60,
                               what="a loss")
        assert loss[0] == (c[1]["lsn"], c[2]["lsn"]), loss
        lake.apply(c[3:4])
        wait_consumer(env, "sales.orders", "az", lambda r: (r["consumer_until"] or START) >= START + 3 * MINUTE,
                      "the append after resolved")
        assert not is_final(env, "sales.orders", START + 2 * MINUTE)
        check_truth(env, sim, lake, "sales.orders")


class PipelineProcess:
    """delta_pipeline.py (docs/delta.md's recipe in a CDC pipeline) in this interpreter, its output kept."""

    def __init__(self, cfg_path, log_path):
        self.cfg_path, self.log_path, self.proc = cfg_path, log_path, None

    def start(self):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "delta_pipeline.py"), self.cfg_path],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


def lake_lsn(uri):
    """The newest finalize.lsn the Delta table's history holds, or None."""
    try:
        return next((h["finalize.lsn"] for h in DeltaTable(uri).history() if "finalize.lsn" in h), None)
    except TableNotFoundError:              # no table yet
        return None


def cdc_truth(env, sim, uri, end):
    """No minute final whose changes (inserts, updates, deletes placed by their commit LSN's true time)
    the table does not hold exactly as SQL Server committed them; returns the verdict."""
    final = until(env, "sales.orders")
    assert_never_leads(env, "sales.orders", sim)
    times = {lsn_text(c["commit_lsn"]): as_utc(c["commit_time_utc"])
             for c in sim.call("sim.truth_commits", table="dbo.orders")[0]}
    held = {}
    for r in DeltaTable(uri).to_pyarrow_table().to_pylist():
        t = times[r["lsn"]].replace(second=0, microsecond=0)
        i, u, d = held.get(t, (0, 0, 0))
        held[t] = (i + (r["op"] == "i"), u + (r["op"] == "u"), d + (r["op"] == "d"))
    truth = {as_utc(r["period_start_utc"]): (r["inserts"], r["updates"], r["deletes"])
             for r in sim.call("sim.truth_counts", table="dbo.orders",
                               **{"from": START.isoformat(), "to": end.isoformat()}, granularity_seconds=60)[0]}
    p = START
    while final is not None and p < final:
        assert held.get(p, (0, 0, 0)) == truth.get(p, (0, 0, 0)), \
            "minute %s is final (until %s), the table holds %s of the %s SQL Server committed" % (
                p, final, held.get(p, (0, 0, 0)), truth.get(p, (0, 0, 0)))
        p += MINUTE
    return final, held, truth


def test_a_cdc_pipeline_into_delta_killed_and_restarted_moves_the_verdict_without_calling_finalize(
        env, sim, lake_dir):
    """pymssql reads SQL Server's change table, delta-rs commits each batch with the LSN read up to (an
    empty commit when nothing changed), and the pipeline resumes from its table's own history after a
    kill -9; after every step the verdict claims no minute the table does not hold exactly."""
    track(env, sim, "sales.orders")
    start_lsn = env.status("sales.orders")["offset_lsn"]
    uri = os.path.join(lake_dir, "cdc")
    env.sql("SELECT finalize.add_consumer('sales.orders', 'cdc-to-delta', delta_table => %s, store => %s)",
            ("file://" + uri, "file://%s/" % lake_dir))
    cfg = {"mssql": {"server": "127.0.0.1", "port": sim.port, "user": "sa", "password": "Passw0rd!",
                     "database": sim.database},
           "capture_instance": "dbo_orders", "start_lsn": start_lsn, "table": uri, "interval": 0.2,
           "heartbeat": 0.5}
    with open(os.path.join(lake_dir, "pipeline.json"), "w") as f:
        json.dump(cfg, f)
    pipeline = PipelineProcess(os.path.join(lake_dir, "pipeline.json"), os.path.join(lake_dir, "pipeline.log"))
    pipeline.start()
    rng = random.Random(45)
    t = START + datetime.timedelta(seconds=15)
    finals = []
    try:
        for step in range(8):
            if step == 4:
                pipeline.kill()             # between two commits: what it read and did not commit is read again
            if step == 5:
                pipeline.start()
            for _ in range(rng.randint(1, 3)):
                kind = rng.choice(["i", "i", "u", "d"]) if step > 1 else "i"
                sim.call("sim.commit", at=t.isoformat(), **{{"i": "inserts", "u": "updates", "d": "deletes"}[kind]: 1})
                t += datetime.timedelta(seconds=rng.randint(1, 8))
            t = max(t, START + (step + 1) * datetime.timedelta(seconds=30))
            sim.call("sim.advance", to=t.isoformat())
            if step != 4:
                target = sim_max_lsn(sim)
                env.pg.wait_for(lambda: (lake_lsn(uri) or "") >= target, timeout=60,
                                what=lambda: "the pipeline to commit %s: %s" % (target, pipeline.output()[-1500:]))
            finals.append(cdc_truth(env, sim, uri, t + MINUTE)[0])
        # Idle: SQL Server's capture logs an empty transaction every 5 minutes, which the pipeline
        # commits as an empty append: the verdict follows the table to everything captured.
        last_change = t
        t += 6 * MINUTE
        sim.call("sim.advance", to=t.isoformat())
        env.pg.wait_for(lambda: until(env, "sales.orders") == env.status("sales.orders")["source_until"]
                        > last_change, timeout=30,
                        what=lambda: "the verdict to follow the table to the source's %s: %s; pipeline: %s" % (
                            env.status("sales.orders")["source_until"], until(env, "sales.orders"),
                            pipeline.output()[-1500:]))
        final, held, truth = cdc_truth(env, sim, uri, t + MINUTE)
        assert sum(map(sum, held.values())) == sum(map(sum, truth.values())) > 8, (held, truth)
        assert finals == sorted(finals) and final >= finals[-1], finals
        lines = [json.loads(line) for line in pipeline.output().splitlines() if line.startswith("{")]
        starts = [line["started_from"] for line in lines if "started_from" in line]
        assert len(starts) == 2 and starts[0] == start_lsn and starts[1] > start_lsn, starts
        assert consumer(env, "sales.orders", "cdc-to-delta")["lake_condition"] is None
    finally:
        if pipeline.alive():
            pipeline.kill()

