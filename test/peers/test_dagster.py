"""The Dagster recipes of docs/orchestrators.md, run by Dagster itself: each
recipe is written as printed to a file and imported as a code location
would be (loaded into Definitions), and its sensor is evaluated through
build_sensor_context against a cluster whose verdicts the test moves with
finalize.record_range, with the reader's login in FINALIZE_DSN:

* hourly partitions in UTC: no hour final, a skip; the first evaluation
  starts at the hour tracking began in; then a run request per final hour,
  keyed as HourlyPartitionsDefinition keys it, the cursor past the last;
  the next evaluation sees only hours final since;
* daily partitions in Asia/Seoul: a run request per final Seoul day, keyed by
  its local date as DailyPartitionsDefinition(timezone=...) keys it, up to
  the first day not final.

A requested partition of each job is then run (execute_in_process), so the
keys are ones the jobs accept.

The dagster publication target (docs/publishing.md, "Dagster") reports to a
real dagster-webserver serving the recipe's definitions (a partitioned
asset and the sensor that runs a job per reported hour), started once for
the module; its warehouse's scheduler serves it, so that the alerts worker
delivers. Dagster's own GraphQL API is read back: exactly the final hours
are materialized, in order, each after the capture that made it final; a
webserver killed mid-stream loses nothing; a repeat after an unknown
outcome is recognised by its event id and not reported again; the sensor
runs each reported hour once."""

import datetime
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from peerlib import DB, Warehouse, recipe, write_recipe
from pgcluster import free_port


def load(path):
    """A module from its file, imported as Dagster imports a code location's python_file."""
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recipes(warehouse, tmp_path_factory):
    """The recipe modules, loaded as Dagster loads a code location."""
    from dagster import Definitions
    os.environ["FINALIZE_DSN"] = warehouse.dsn()
    d = tmp_path_factory.mktemp("dagster")
    hours = load(write_recipe("dagster-sensor", str(d / "finalize_hours.py"), "python"))
    days = load(write_recipe("dagster-daily-zone", str(d / "finalize_days.py"), "python"))
    defs = Definitions(jobs=[hours.hourly_orders_job, days.daily_orders_job],
                       sensors=[hours.sales_orders_final_hours, days.sales_orders_final_days])
    Definitions.validate_loadable(defs)
    return hours, days, defs


def evaluate(sensor, defs, cursor=None):
    """One tick of the sensor, as the daemon evaluates it: (partition keys, run keys, cursor, skip message)."""
    from dagster import DagsterInstance, build_sensor_context
    with DagsterInstance.ephemeral() as instance:
        ctx = build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
        data = sensor.evaluate_tick(ctx)
    return ([r.partition_key for r in data.run_requests], [r.run_key for r in data.run_requests],
            data.cursor, data.skip_message)


def test_hourly_sensor_requests_each_final_utc_hour_once(warehouse, recipes):
    hours, _, defs = recipes
    sensor = hours.sales_orders_final_hours
    warehouse.track("sales.orders")
    try:
        # Tracked, nothing final (finalized_until is NULL): a skip, no run.
        keys, _, cursor, skip = evaluate(sensor, defs)
        assert (keys, cursor) == ([], None)
        assert skip.startswith("no hour of sales.orders"), skip
        # Tracking begins at 00:10: the hours before it are final, but the first evaluation starts
        # at the hour tracking began in (finalize.status.tracked_since), not at the partitions' start.
        warehouse.capture("sales.orders", "2026-11-29 00:10+00")
        keys, _, cursor, skip = evaluate(sensor, defs)
        assert (keys, cursor) == ([], None) and skip is not None
        # The capture reaches 02:10: the hours 00:00 and 01:00 are final.
        warehouse.capture("sales.orders", "2026-11-29 02:10+00")
        keys, runs, cursor, skip = evaluate(sensor, defs)
        assert keys == ["2026-11-29-00:00", "2026-11-29-01:00"]
        assert runs == ["sales.orders/2026-11-29T00:00:00+00:00", "sales.orders/2026-11-29T01:00:00+00:00"]
        assert cursor == "2026-11-29T02:00:00+00:00" and skip is None
        # Dagster's own keys for those hours (HourlyPartitionsDefinition, UTC).
        assert set(keys) <= set(hours.hourly.get_partition_keys())
        # The next tick, from the cursor: nothing new.
        keys, _, cursor2, skip = evaluate(sensor, defs, cursor)
        assert (keys, cursor2) == ([], cursor) and skip is not None
        # A tick that evaluates the same hours again asks for the same run keys (run once by Dagster).
        assert evaluate(sensor, defs)[1] == runs
        warehouse.capture("sales.orders", "2026-11-29 04:00:01+00")
        keys, _, cursor, _ = evaluate(sensor, defs, cursor)
        assert (keys, cursor) == (["2026-11-29-02:00", "2026-11-29-03:00"], "2026-11-29T04:00:00+00:00")
        result = hours.hourly_orders_job.execute_in_process(partition_key=keys[0])
        assert result.success
    finally:
        warehouse.untrack_all()


def test_daily_sensor_in_seoul_requests_each_final_local_day(warehouse, recipes):
    _, days, defs = recipes
    sensor = days.sales_orders_final_days
    warehouse.track("sales.orders_daily", "1 day", "Asia/Seoul")
    try:
        keys, _, cursor, skip = evaluate(sensor, defs, "2026-11-25T00:00:00+09:00")
        assert (keys, cursor) == ([], "2026-11-25T00:00:00+09:00")
        assert skip.startswith("no day of sales.orders_daily"), skip
        warehouse.capture("sales.orders_daily", "2026-11-24 20:00+00")
        # 15:30 UTC on the 27th is 00:30 in Seoul on the 28th: the Seoul days up to the 27th are final.
        warehouse.capture("sales.orders_daily", "2026-11-27 15:30+00")
        keys, runs, cursor, skip = evaluate(sensor, defs, "2026-11-25T00:00:00+09:00")
        assert keys == ["2026-11-25", "2026-11-26", "2026-11-27"]
        assert runs == ["sales.orders_daily/2026-11-25", "sales.orders_daily/2026-11-26",
                        "sales.orders_daily/2026-11-27"]
        assert cursor == "2026-11-28T00:00:00+09:00" and skip is None
        # Dagster's own keys for those days (DailyPartitionsDefinition in Asia/Seoul).
        assert set(keys) <= set(days.daily.get_partition_keys())
        # From the cursor: the Seoul day 2026-11-28 is not final yet.
        keys, _, cursor2, skip = evaluate(sensor, defs, cursor)
        assert (keys, cursor2) == ([], cursor) and skip is not None
        # The whole 28th (Seoul) captured: that day alone.
        warehouse.capture("sales.orders_daily", "2026-11-28 15:00:01+00")
        keys, _, cursor, _ = evaluate(sensor, defs, cursor)
        assert (keys, cursor) == (["2026-11-28"], "2026-11-29T00:00:00+09:00")
        # With no cursor the sensor starts at the Seoul day tracking began on (the first capture, 05:00
        # on the 25th), not at the partitions' first day, 2026-11-01: the days before are final but
        # were not observed, and are not run.
        keys, _, cursor, _ = evaluate(sensor, defs)
        assert keys == ["2026-11-%02d" % d for d in range(25, 29)] and cursor == "2026-11-29T00:00:00+09:00"
        result = days.daily_orders_job.execute_in_process(partition_key="2026-11-28")
        assert result.success
    finally:
        warehouse.untrack_all()


# ---------------------------------------------------------------------------
# The dagster publication target: finalize reports each final hour to a real webserver.

ASSET = ["lake", "sales", "orders"]
PUBLICATION = "orders_to_dagster"
MATERIALIZATIONS = """
query Materializations($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) {
    __typename
    ... on Asset { assetMaterializations(limit: 1000) {
      partition timestamp tags { key value } metadataEntries { label ... on TextMetadataEntry { text } } } }
  }
}"""


def descendants(pid):
    """The processes under pid (from /proc): the webserver's code server runs in a session of its own."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Webserver:
    """dagster-webserver serving a definitions file, its instance (SQLite) in home; it can be
    killed and started again on the same port and home."""

    def __init__(self, defs, home, logfile):
        self.defs, self.home, self.logfile = defs, home, logfile
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self, timeout=90):
        exe = os.path.join(os.path.dirname(sys.executable), "dagster-webserver")
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen([exe, "-f", self.defs, "-h", "127.0.0.1", "-p", str(self.port)],
                                         cwd=os.path.dirname(self.defs), env=dict(os.environ, DAGSTER_HOME=self.home),
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/server_info", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                with open(self.logfile) as f:
                    raise AssertionError("dagster-webserver did not start: " + f.read()[-3000:])
            time.sleep(0.2)

    def kill(self):
        """SIGKILL of the webserver and of every process under it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for pid in [self.proc.pid] + descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    def materializations(self):
        """The asset's materializations as Dagster's GraphQL API gives them, oldest first: dicts
        of partition, timestamp (seconds), tags and text metadata."""
        answer = self.post("/graphql", {"query": MATERIALIZATIONS, "variables": {"key": {"path": ASSET}}})
        assert "errors" not in answer, answer
        asset = answer["data"]["assetOrError"]
        assert asset["__typename"] == "Asset", asset
        return [{"partition": m["partition"], "timestamp": int(m["timestamp"]) / 1000,
                 "tags": {t["key"]: t["value"] for t in m["tags"]},
                 "metadata": {e["label"]: e.get("text") for e in m["metadataEntries"]}}
                for m in reversed(asset["assetMaterializations"])]


@pytest.fixture(scope="module")
def dagster_web(tmp_path_factory):
    """dagster-webserver serving the recipe's definitions (dagster-publication), once per module."""
    d = tmp_path_factory.mktemp("dagster-web")
    defs = write_recipe("dagster-publication", str(d / "finalize_orders.py"), "python")
    os.mkdir(d / "home")
    web = Webserver(defs, str(d / "home"), str(d / "webserver.log")).start()
    yield web
    web.kill()


@pytest.fixture(scope="module")
def publisher():
    """A warehouse whose scheduler serves it: its alerts worker delivers the publications."""
    w = Warehouse(conf={"finalize.database": DB})
    yield w
    w.cleanup()


def hour_key(ts):
    return ts.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d-%H:%M")


def outbox(w):
    """The publication's events in the order they were recorded."""
    return w.sql("SELECT e.event_id::text, e.period_start, e.state, e.attempts, e.last_error, e.outcome "
                 "FROM finalize.publication_event e JOIN finalize.publication p USING (publication_id) "
                 "WHERE p.name = %s ORDER BY e.event_seq", (PUBLICATION,))


def final_hours(w):
    """The keys of the hours the publication covers that finalize holds final now."""
    start, until = w.sql("SELECT p.started_from, finalize.finalized_until('sales.orders') "
                         "FROM finalize.publications p WHERE p.publication = %s", (PUBLICATION,))[0]
    keys = []
    while until is not None and start + datetime.timedelta(hours=1) <= until:
        keys.append(hour_key(start))
        start += datetime.timedelta(hours=1)
    return keys


class Stream:
    """The captures of sales.orders, remembering when each hour became final: an hour is
    final only after the capture that made it so was recorded (time.time() before it)."""

    def __init__(self, w):
        self.w, self.final_at = w, {}

    def capture(self, commit_time):
        before = time.time()
        self.w.capture("sales.orders", commit_time)
        for key in final_hours(self.w):
            self.final_at.setdefault(key, before)

    def check(self, web):
        """Waits until every event is delivered; Dagster then holds exactly the final hours, once
        each, in period order, each materialized after it became final, with finalize's event."""
        expected = final_hours(self.w)
        # The capture recorded every event in its own transaction: once they are all delivered,
        # everything finalize sent is in Dagster.
        self.w.pg.wait_for(lambda: len(outbox(self.w)) >= len(expected)
                           and all(e[2] == "delivered" for e in outbox(self.w)),
                           timeout=60, what=lambda: f"the events of {expected} delivered: {outbox(self.w)}")
        mats = web.materializations()
        # Nothing early and nothing lost: the materialized partitions are the final hours, no more.
        assert [m["partition"] for m in mats] == expected, (mats, expected)
        events = {hour_key(e[1]): e[0] for e in outbox(self.w)}
        for m in mats:
            # An hour reported before the capture that made it final would fail here.
            assert m["timestamp"] >= self.final_at[m["partition"]], (m, self.final_at)
            meta = m["metadata"]
            assert meta["event_id"] == events[m["partition"]] == m["tags"]["dagster/data_version"]
            assert meta["event"] == "final" and meta["table"] == "sales.orders"
            assert meta["partition_key"] == m["partition"]
            assert meta["period_end"] <= meta["finalized_until"]
        return mats


def test_each_final_hour_is_one_materialization_in_order_never_early_across_a_webserver_kill(
        publisher, dagster_web):
    """The recipe's publication reports every hour that becomes final to the webserver, once, in
    order, never before it is final; the webserver killed while hours become final loses none:
    they wait in the outbox and arrive in order once it is back."""
    w, web = publisher, dagster_web
    stream = Stream(w)
    w.track("sales.orders")
    # Tracking begins at 00:10: the publication starts at the next hour to become final.
    w.capture("sales.orders", "2026-11-29 00:10+00")
    w.sql(recipe("dagster-publication-sql", "sql").replace("http://localhost:3000", web.url))
    assert final_hours(w) == [] and outbox(w) == []
    stream.capture("2026-11-29 02:10+00")
    assert len(stream.check(web)) == 2
    # The webserver dies; two more hours become final meanwhile and wait.
    web.kill()
    stream.capture("2026-11-29 04:00:01+00")
    w.pg.wait_for(lambda: outbox(w)[2][3] >= 1 and "no answer from the Dagster webserver" in (outbox(w)[2][4] or ""),
                  timeout=60, what=lambda: f"an attempt at the hour 02:00 that failed: {outbox(w)}")
    assert [e[2] for e in outbox(w)] == ["delivered", "delivered", "pending", "pending"]
    web.start()
    w.sql("SELECT finalize.retry_publication('sales.orders', %s)", (PUBLICATION,))
    mats = stream.check(web)
    assert [m["partition"] for m in mats] == ["2026-11-29-%02d:00" % h for h in range(4)]
    assert [e[5] for e in outbox(w)] == ["sent"] * 4


def test_a_repeat_after_an_unknown_outcome_is_found_not_reported_again(publisher, dagster_web):
    """An event whose earlier attempt reached Dagster unheard (its materialization is there,
    finalize recorded a failure) is found by its event id before the next attempt: it is
    delivered as 'already', and Dagster holds one materialization of the hour. The recipe's
    sensor then runs each reported hour once, keyed by finalize's event id."""
    from dagster import DagsterInstance, build_sensor_context
    from dagster._core.instance.ref import InstanceRef

    w, web = publisher, dagster_web
    stream = Stream(w)
    stream.final_at.update({k: 0 for k in final_hours(w)})
    before = len(outbox(w))
    # finalize cannot reach the webserver: its server points at a closed port.
    closed = f"http://127.0.0.1:{free_port()}"
    w.sql("ALTER SERVER dagster OPTIONS (SET url %s)", (closed,))
    stream.capture("2026-11-29 05:00:01+00")
    w.pg.wait_for(lambda: len(outbox(w)) == before + 1 and outbox(w)[-1][3] >= 1 and outbox(w)[-1][4],
                  timeout=60, what=lambda: f"a failed attempt at the hour 04:00: {outbox(w)}")
    event_id = outbox(w)[-1][0]
    # What that attempt would have left had it reached Dagster and its answer been lost.
    assert web.post("/report_asset_materialization/" + "/".join(ASSET),
                    {"partition": "2026-11-29-04:00", "data_version": event_id,
                     "metadata": {"event_id": event_id, "event": "final", "table": "sales.orders",
                                  "partition_key": "2026-11-29-04:00", "period_end": "2026-11-29T05:00:00Z",
                                  "finalized_until": "2026-11-29T05:00:00Z"}}) == {}
    w.sql("ALTER SERVER dagster OPTIONS (SET url %s)", (web.url,))
    w.sql("SELECT finalize.retry_publication('sales.orders', %s)", (PUBLICATION,))
    mats = stream.check(web)
    assert [m["partition"] for m in mats] == ["2026-11-29-%02d:00" % h for h in range(5)]
    assert outbox(w)[-1][5] == "already" and outbox(w)[-1][3] >= 2

    # The recipe's sensor, evaluated against the webserver's instance: a run per reported hour, in order.
    module = load(web.defs)
    with DagsterInstance.from_ref(InstanceRef.from_dir(web.home)) as instance:
        data = module.sales_orders_published.evaluate_tick(
            build_sensor_context(instance=instance, definitions=module.defs))
        assert [r.partition_key for r in data.run_requests] == [m["partition"] for m in mats]
        assert [r.run_key for r in data.run_requests] == [e[0] for e in outbox(w)]
        again = module.sales_orders_published.evaluate_tick(
            build_sensor_context(instance=instance, definitions=module.defs, cursor=data.cursor))
        assert again.run_requests == [] and again.skip_message is not None
