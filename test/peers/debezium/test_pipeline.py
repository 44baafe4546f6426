"""A real CDC pipeline holding the verdict: Debezium's SQL Server connector, embedded (LakePipeline.java),
streams the simulator's dbo.orders into a lake stand-in and reports through the documentation's
FinalizeProgress recipe, while finalize's worker tracks the table from Debezium's snapshot LSN.

The check, after every step of traffic, idle time, a connector restart, a crash between the lake's commit
and the report, and the snapshot: every period finalize calls final holds, in the lake, exactly the
changes SQL Server committed in it (the simulator's ground truth, sim.truth_counts), and at the end the
lake holds the table as SQL Server has it. Run by test/peers/debezium/run, which builds the class path."""

import datetime
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zoneinfo

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(TOP, "test", "lib"))

from pgcluster import Cluster  # noqa: E402
from simproc import Simulator  # noqa: E402

UTC = datetime.timezone.utc
ZONE = "Europe/Berlin"
TABLE = "lake.orders"
GRAIN = datetime.timedelta(minutes=1)
START = datetime.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
CLASSPATH = os.environ.get("DEBEZIUM_CLASSPATH", "")
LOGIN_GRANTS = "dbo.orders,cdc.change_tables,cdc.captured_columns,cdc.lsn_time_mapping"

pytestmark = pytest.mark.skipif(not CLASSPATH, reason="run by test/peers/debezium/run (DEBEZIUM_CLASSPATH)")


def debezium_lsn(raw):
    """The 10 bytes -> Debezium's text form."""
    h = bytes(raw).hex()
    return "%s:%s:%s" % (h[:8], h[8:16], h[16:])


def utc(dt):
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def floor(t):
    return START + ((t - START) // GRAIN) * GRAIN


class Pipeline:
    """One LakePipeline process (a JVM), its properties and its log."""

    def __init__(self, world, mode, login, crash_after=0, lose_writes_after=0):
        self.world = world
        self.log = os.path.join(world.dir, "pipeline-%d.log" % len(world.pipelines))
        props = {
            "debezium.name": "lake-orders",
            "debezium.connector.class": "io.debezium.connector.sqlserver.SqlServerConnector",
            "debezium.offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "debezium.offset.storage.file.filename": os.path.join(world.dir, "offsets.dat"),
            "debezium.offset.flush.interval.ms": "500",
            "debezium.schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "debezium.schema.history.internal.file.filename": os.path.join(world.dir, "history.dat"),
            "debezium.database.hostname": "127.0.0.1",
            "debezium.database.port": str(world.sim.port),
            "debezium.database.user": login,
            "debezium.database.password": "Dbz-Passw0rd!",
            "debezium.database.names": "demo",
            "debezium.database.encrypt": "false",
            "debezium.topic.prefix": "lake",
            "debezium.table.include.list": "dbo.orders",
            "debezium.data.query.mode": mode,
            "debezium.poll.interval.ms": "200",
            "debezium.decimal.handling.mode": "string",
            "debezium.errors.retry.delay.initial.ms": "500",
            "debezium.errors.retry.delay.max.ms": "2000",
            "lake.dir": world.lake,
            "finalize.url": "jdbc:postgresql://127.0.0.1:%d/postgres?user=dbz_pipeline&connectTimeout=10"
                            "&socketTimeout=30" % world.pg.port,
            "finalize.table": TABLE,
            "finalize.consumer": "debezium",
            "finalize.database": "demo",
            "crash.after.apply": str(crash_after),
            "broken.lake.loses.writes.after": str(lose_writes_after),
        }
        path = os.path.join(world.dir, "pipeline.properties")
        with open(path, "w") as f:
            for k, v in props.items():
                f.write("%s=%s\n" % (k, v.replace("\\", "\\\\")))
        self.out = open(self.log, "w")
        self.proc = subprocess.Popen(
            ["java", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-XX:+UseSerialGC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
             "-cp", CLASSPATH, "LakePipeline", path], stdin=subprocess.PIPE, stdout=self.out,
            stderr=subprocess.STDOUT)          # the JVM ends when our end of its stdin closes (we died)
        world.pipelines.append(self)

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self):
        """SIGTERM: the engine closes and flushes its offsets."""
        if self.proc.stdin:
            self.proc.stdin.close()
            self.proc.stdin = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


class World:
    """The simulator (SQL Server), a PostgreSQL cluster running finalize's worker, the lake directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="finalize-debezium-")
        os.chmod(self.dir, 0o755)
        self.lake = os.path.join(self.dir, "lake")
        self.pipelines = []
        self.sim = self.pg = None
        try:
            self._start()
        except Exception:
            self.cleanup()
            raise
        self.snapshot_lsn = None
        self.mode = "function"
        self.checks = 0
        self.final_periods_with_changes = set()

    def _start(self):
        """The simulator, its logins, and the cluster with finalize and the source."""
        self.sim = Simulator(clock="sim", start_time="2026-11-02T09:00:00Z", timezone=ZONE, pollinginterval=5,
                             dummy_interval=300, cleanup_time="").start()
        for login, extra in (("dbz", ""), ("dbz_direct", ",cdc.dbo_orders_CT")):
            self.sim.call("sim.create_login", login=login, password="Dbz-Passw0rd!", tables=LOGIN_GRANTS + extra)
        self.pg = Cluster(conf={"finalize.poll_interval": "200ms", "finalize.max_retry_interval": "1s"})
        self.pg.start()
        self.pg.sql("CREATE EXTENSION finalize")
        self.pg.sql("CREATE ROLE dbz_pipeline LOGIN IN ROLE finalize_pipeline")
        # clock_tolerance 0: the simulated clock is never stepped here, and the checks follow the
        # verdict the lake's commit times give (test_worker_time.py covers the tolerance)
        self.pg.sql("CREATE SERVER src FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', port '%d', "
                    "database 'demo', encrypt 'off', timezone '%s', clock_tolerance '0 s')" % (self.sim.port, ZONE))
        self.pg.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER src OPTIONS (username 'sa', password 'Passw0rd!')")

    def one(self, query, args=None):
        rows = self.pg.sql(query, args)
        return rows[0][0] if rows else None

    def cleanup(self, failed=False):
        """Stops everything; keeps the work directory (logs, lake) of a failed test."""
        try:
            for p in self.pipelines:
                p.stop()
        finally:
            if self.pg:
                self.pg.cleanup()
            if self.sim:
                self.sim.stop()
        if failed:
            print("kept %s (pipeline logs, lake, offsets)" % self.dir)
        elif not os.environ.get("KEEP_WORKDIR"):
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- SQL Server ---------------------------------------------------------------------------

    def commit(self, at, inserts=0, updates=0, deletes=0):
        self.sim.call("sim.commit", table="dbo.orders", inserts=inserts, updates=updates, deletes=deletes,
                      at=at.strftime("%Y-%m-%dT%H:%M:%S"))
        return at

    def advance(self, to):
        self.sim.call("sim.advance", to=to.strftime("%Y-%m-%dT%H:%M:%S"))

    def last_transaction_lsn(self):
        """The greatest captured transaction's LSN (Debezium ignores dummy rows, tran_id 0x00)."""
        raw = self.sim.query("SELECT MAX(start_lsn) AS m FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00")[0]["m"]
        return debezium_lsn(raw)

    def mapping(self):
        """Every mapping row's LSN (Debezium's form) -> (tran_begin_time, tran_end_time), UTC."""
        rows = self.sim.query("SELECT start_lsn, tran_begin_time, tran_end_time FROM cdc.lsn_time_mapping")
        z = zoneinfo.ZoneInfo(ZONE)
        return {debezium_lsn(r["start_lsn"]): tuple(r[c].replace(tzinfo=z).astimezone(UTC)
                                                    for c in ("tran_begin_time", "tran_end_time")) for r in rows}

    def truth(self, start, end):
        """(inserts, updates, deletes) SQL Server committed per period in [start, end)."""
        span = {"from": start.strftime("%Y-%m-%dT%H:%M:%S"), "to": end.strftime("%Y-%m-%dT%H:%M:%S")}
        rows = self.sim.call("sim.truth_counts", table="dbo.orders", granularity_seconds=60, **span)[0]
        return {utc(r["period_start_utc"]): (r["inserts"], r["updates"], r["deletes"]) for r in rows}

    def source_rows(self):
        rows = self.sim.query("SELECT order_id, customer, amount, status FROM dbo.orders")
        return {r["order_id"]: (r["customer"], str(r["amount"]), r["status"]) for r in rows}

    # --- the lake -----------------------------------------------------------------------------

    def lake_events(self):
        """Every event the lake holds, in the order it was applied: [(payload, file)]."""
        out = []
        for path in sorted(glob.glob(os.path.join(self.lake, "batch-*.jsonl"))):
            with open(path) as f:
                for line in f:
                    value = json.loads(line)
                    out.append(value.get("payload", value))
        return out

    def lake_changes(self):
        """The streaming changes in the lake, each once: {(commit_lsn, change_lsn, event_serial_no): payload}."""
        seen = {}
        for e in self.lake_events():
            s = e["source"]
            if s.get("snapshot") in (None, "false"):
                seen.setdefault((s["commit_lsn"], s["change_lsn"], s.get("event_serial_no")), e)
        return seen

    def lake_table(self):
        """The table the lake holds: the snapshot, then each change once, in LSN order."""
        rows = {}
        for e in self.lake_events():
            if e["source"].get("snapshot") not in (None, "false") and e["op"] == "r":
                rows[e["after"]["order_id"]] = e["after"]
        for _, e in sorted(self.lake_changes().items()):
            if e["op"] == "d":
                rows.pop(e["before"]["order_id"], None)
            else:
                rows[e["after"]["order_id"]] = e["after"]
        return {k: (v["customer"], v["amount"], v["status"]) for k, v in rows.items()}

    def lake_has(self, lsn):
        return any(k[0] == lsn for k in self.lake_changes())

    # --- the checks ---------------------------------------------------------------------------

    def check(self):
        """No period is final that the lake does not fully hold. Reads the verdict first: the lake only
        grows, so what it holds afterwards is at least what it held when the verdict was given."""
        until = self.one("SELECT finalize.finalized_until(%s)", (TABLE,))
        self.checks += 1
        if until is None:
            return None
        times = self.mapping()
        first = floor(times[self.snapshot_lsn][1]) + GRAIN   # the periods wholly after the snapshot
        changes = self.lake_changes()
        lake = {}
        for (commit_lsn, _, _), e in changes.items():
            begin, t = times[commit_lsn]
            # source.ts_ms: function mode maps the LSN (fn_cdc_map_lsn_to_time: tran_end_time), direct mode
            # joins lsn_time_mapping and takes tran_begin_time (SqlServerConnection.java).
            shown = begin if self.mode == "direct" else t
            assert abs(e["source"]["ts_ms"] / 1000 - shown.timestamp()) < 0.005, \
                f"source.ts_ms {e['source']['ts_ms']} of {commit_lsn} is not its time {shown} ({self.mode} mode)"
            c = lake.setdefault(floor(t), [0, 0, 0])
            c["cud".index(e["op"])] += 1
        if until <= first:
            return until
        for period, counts in self.truth(first, until).items():
            got = tuple(lake.get(period, (0, 0, 0)))
            assert got == counts, (f"period {period:%H:%M} is final (finalized_until {until:%H:%M:%S}) but the lake "
                                   f"holds {got} (inserts, updates, deletes) of the {counts} SQL Server committed")
            if sum(counts):
                self.final_periods_with_changes.add(period)
        return until

    def wait_lake(self, lsn, pipeline, timeout=90):
        """Until the lake holds the change at ``lsn`` (checking on the way)."""
        deadline = time.monotonic() + timeout
        while not self.lake_has(lsn):
            assert pipeline.proc.poll() is None, "the pipeline ended:\n" + pipeline.text()[-4000:]
            assert time.monotonic() < deadline, f"the lake never got {lsn}:\n" + pipeline.text()[-4000:]
            self.check()
            time.sleep(0.2)

    def wait_verdict(self, at_least, pipeline, timeout=60):
        """Until finalized_until reaches ``at_least`` (checking on the way)."""
        deadline = time.monotonic() + timeout
        while True:
            until = self.check()
            if until is not None and until >= at_least:
                return until
            assert time.monotonic() < deadline, (
                f"finalized_until stayed at {until}, expected {at_least}:\n"
                + str(self.pg.sql("SELECT * FROM finalize.consumers")) + "\n" + pipeline.text()[-3000:])
            time.sleep(0.2)


@pytest.fixture
def world(request):
    w = World()
    yield w
    w.cleanup(failed=getattr(request.node, "failed_call", False))


def traffic(world, pipeline, minute_from, minutes, seed):
    """Three transactions in each minute (inserts, updates, deletes), the clock moving on after each, the
    invariant checked at each step and the lake caught up at the end of each minute; returns the last
    commit's time."""
    rnd = random.Random(seed)
    last = None
    for m in range(minute_from, minute_from + minutes):
        for sec in (10, 25, 40):
            last = world.commit(START + datetime.timedelta(minutes=m, seconds=sec), inserts=rnd.randint(1, 3),
                                updates=rnd.randint(0, 2), deletes=rnd.randint(0, 1))
            world.advance(START + datetime.timedelta(minutes=m, seconds=sec + 10))
            world.check()
        world.advance(START + datetime.timedelta(minutes=m + 1))
        world.wait_lake(world.last_transaction_lsn(), pipeline)
    return last


def run_pipeline_story(world, mode, login, full=True):
    """Snapshot, traffic, idle time, a restart, a crash between apply and report: the invariant holds
    throughout, the verdict moves, and the lake ends holding the table SQL Server holds. ``full=False``
    stops after the restart (idle time and the crash are the recipe's, whatever the query mode)."""
    # The snapshot: finalize tracks the table from the snapshot's LSN, once the snapshot is in the lake.
    p = start_tracked(world, mode, login)
    assert sum(1 for e in world.lake_events() if e["op"] == "r") == 20
    assert world.check() is None or world.check() <= START + GRAIN, "final before the pipeline reported"

    # Traffic: the verdict follows the lake, one transaction behind (the last one may go on).
    last = traffic(world, p, 1, 4, seed=1)
    world.wait_verdict(floor(last), p)

    # Idle: the clock runs on, dummy rows move max LSN, nothing is reported: the verdict lags, never leads.
    for sec in range(20, 140 if full else 40, 20):
        world.advance(floor(last) + datetime.timedelta(seconds=sec + 60))
        world.check()
    assert not world.one("SELECT finalize.is_final(%s, %s)", (TABLE, floor(last))), \
        "the period of a transaction the pipeline cannot know is whole is final"

    # A connector restart: stopped cleanly, traffic while it is down, replayed from its offsets.
    p.stop()
    last = traffic_while_down(world, floor(last) + 3 * GRAIN)
    p = Pipeline(world, mode, login)
    last = traffic(world, p, int((floor(last) - START) / GRAIN) + 1, 2, seed=2)
    world.wait_verdict(floor(last), p)

    # A crash between the lake's commit and the report: the verdict stays; after the restart, Debezium
    # replays from its offsets, the lake ignores what it has, and the report follows.
    if full:
        p, last = crash_and_recover(world, p, mode, login, last)
    finish(world, p, mode, 8 if full else 5, last)


def crash_and_recover(world, p, mode, login, last):
    """The crash step of the story -> (the pipeline running after it, the last commit's time)."""
    p.stop()
    reported = world.one("SELECT reported_lsn FROM finalize.consumers WHERE consumer = 'debezium'")
    batches = len(glob.glob(os.path.join(world.lake, "batch-*.jsonl")))
    p = Pipeline(world, mode, login, crash_after=1)
    t = floor(last) + GRAIN
    for sec in (10, 25):
        world.commit(t + datetime.timedelta(seconds=sec), inserts=1, updates=1)
        world.advance(t + datetime.timedelta(seconds=sec + 5))
        world.check()
        if p.proc.poll() is None:
            time.sleep(1.0)
    assert p.proc.wait(90) == 137, "the pipeline did not crash at its crash point:\n" + p.text()[-3000:]
    assert "crashing between apply and report" in p.text()
    assert len(glob.glob(os.path.join(world.lake, "batch-*.jsonl"))) == batches + 1, \
        "the crashed batch is not in the lake"
    world.check()
    assert world.one("SELECT reported_lsn FROM finalize.consumers WHERE consumer = 'debezium'") == reported, \
        "a report went out after the crash point"
    p = Pipeline(world, mode, login)
    last = traffic(world, p, int((t - START) / GRAIN) + 1, 2, seed=3)
    world.wait_verdict(floor(last), p)
    assert len(world.lake_events()) > len(world.lake_changes()) + 20, "nothing was replayed after the crash"
    return p, last


def finish(world, p, mode, periods, last):
    """The end: the lake holds what SQL Server holds; the checks saw final periods with changes."""
    world.advance(floor(last) + 2 * GRAIN)
    world.wait_lake(world.last_transaction_lsn(), p)
    # The lake holds the last transaction's first change; its others may be in the pipeline's next
    # batch (a transaction's events can span two batches: CI's load once split one), so the lake is
    # compared with SQL Server once it has caught up, checking the verdict on the way.
    deadline = time.monotonic() + 60
    while world.lake_table() != world.source_rows() and time.monotonic() < deadline:
        assert p.proc.poll() is None, "the pipeline ended:\n" + p.text()[-4000:]
        world.check()
        time.sleep(0.2)
    assert world.lake_table() == world.source_rows()
    assert len(world.final_periods_with_changes) >= periods, sorted(world.final_periods_with_changes)
    p.stop()
    logs = "".join(x.text() for x in world.pipelines)
    assert not re.search(r"\] ERROR ", logs), logs[-6000:]
    print("%s mode: %d checks, %d final periods with changes checked, finalized_until %s, %d events in the lake "
          "(%d distinct changes)" % (mode, world.checks, len(world.final_periods_with_changes),
                                    world.one("SELECT finalize.finalized_until(%s)", (TABLE,)),
                                    len(world.lake_events()), len(world.lake_changes())))


def traffic_while_down(world, t):
    """Two transactions while the pipeline is down; returns the last commit's time."""
    world.commit(t + datetime.timedelta(seconds=10), inserts=2, deletes=1)
    last = world.commit(t + datetime.timedelta(seconds=30), updates=2)
    world.advance(t + datetime.timedelta(seconds=45))
    world.check()
    return last


def test_function_mode_pipeline_never_runs_the_verdict_ahead_of_the_lake(world):
    run_pipeline_story(world, "function", "dbz")


def test_direct_mode_pipeline_never_runs_the_verdict_ahead_of_the_lake(world):
    run_pipeline_story(world, "direct", "dbz_direct", full=False)


def start_tracked(world, mode, login, **kw):
    """20 orders, the pipeline's snapshot of them, and the table tracked from the snapshot's LSN."""
    world.commit(START + datetime.timedelta(seconds=5), inserts=20)
    world.advance(START + datetime.timedelta(seconds=20))
    world.mode = mode
    p = Pipeline(world, mode, login, **kw)
    deadline = time.monotonic() + 120
    while not any(e["source"].get("snapshot") == "last" for e in world.lake_events()):
        assert p.proc.poll() is None and time.monotonic() < deadline, "no snapshot:\n" + p.text()[-4000:]
        time.sleep(0.3)
    world.snapshot_lsn = [e for e in world.lake_events() if e["source"].get("snapshot") == "last"][0]["source"][
        "commit_lsn"]
    world.one("SELECT finalize.track_table(%s, 'src', 'dbo.orders', '1 minute', start_from => %s)",
              (TABLE, world.snapshot_lsn))
    world.one("SELECT finalize.add_consumer(%s, 'debezium', reporter => 'dbz_pipeline')", (TABLE,))
    return p


def test_the_check_catches_a_pipeline_whose_lake_loses_writes(world):
    """The test of the test: the same pipeline with a lake that silently loses its writes from some batch
    on, while the reports go on, releases periods the lake does not hold, and the check says so."""
    p = start_tracked(world, "function", "dbz")
    last = traffic(world, p, 1, 1, seed=4)
    world.wait_verdict(floor(last), p)
    p.stop()
    p = Pipeline(world, "function", "dbz", lose_writes_after=1)
    t = floor(last) + GRAIN
    with pytest.raises(AssertionError, match="is final .* but the lake holds") as caught:
        for i in range(4):
            world.commit(t + i * GRAIN + datetime.timedelta(seconds=10), inserts=1)
            world.advance(t + (i + 1) * GRAIN)
            time.sleep(1.0)
            world.check()
        # The restarted pipeline's JVM and connector start first: on a loaded machine (CI), more than 30 s.
        world.wait_verdict(t + 3 * GRAIN, p, timeout=120)
    assert "the lake loses every write" in p.text()
    print(caught.value)


def test_direct_mode_is_refused_without_select_on_the_change_table(world):
    """data.query.mode=direct reads cdc.dbo_orders_CT, which only a grant on it (or on SCHEMA::cdc) allows:
    the login that streams in function mode gets SQL Server's Msg 229, and nothing is reported (snapshots
    never are)."""
    p = start_tracked(world, "direct", "dbz")
    world.commit(START + datetime.timedelta(minutes=1, seconds=10), inserts=2)
    world.commit(START + datetime.timedelta(minutes=2, seconds=10), inserts=2)
    world.advance(START + datetime.timedelta(minutes=3))
    denied = "The SELECT permission was denied on the object 'dbo_orders_CT', database 'demo', schema 'cdc'."
    deadline = time.monotonic() + 60
    while denied not in p.text():
        assert time.monotonic() < deadline, "no Msg 229 in the pipeline's log:\n" + p.text()[-4000:]
        time.sleep(0.5)
    assert not world.lake_changes(), "a change reached the lake without SELECT on the change table"
    assert world.check() is None or world.check() <= START + GRAIN
    assert world.one("SELECT reported_lsn FROM finalize.consumers WHERE consumer = 'debezium'") is None, \
        "a report without a streaming change"
