"""The airflow publication (docs/publishing.md, "Airflow") against Airflow 3.3 itself: its api-server, scheduler
and dag-processor (LocalExecutor, a SQLite metadata database, the simple auth manager with a user and password),
started once for the module, the recipe DAG (a PartitionedAssetTimetable on the asset) in its DAG folder as the
page prints it, and the recipe's SQL run as printed (the URL and password put in). finalize's alerts worker posts
through a fault proxy in front of the api-server (test/peers/iceberg/fault_proxy.py), which counts and can spoil
requests; everything is read back through Airflow's REST API:

* each hour runs the DAG once, with dag_run.partition_key naming it (the task returns it: its XCom), and only once
  the hour is final: an hour that is not yet final is neither in the outbox nor in Airflow when a later event (of
  another table, posted after that commit) has been delivered;
* an answer lost after Airflow created the event: the next attempt finds the event by its event_id and posts
  nothing (one event, one DAG run);
* the api-server killed (SIGKILL) in the middle of a stream of hours and started again: every hour arrives, in
  order, once;
* a token refused is replaced once, then the attempt fails as refused; a wrong password opens publication_failing
  with Airflow's words, and the logins back off (one per attempt, further and further apart)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from peerlib import Warehouse, recipe, write_recipe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "iceberg"))
from fault_proxy import FaultProxy  # noqa: E402
from pgcluster import free_port  # noqa: E402

USER, PASSWORD = "finalize", "s3cret-passw0rd"
ASSET = "s3://lake/sales/orders"
BARRIER = "s3://lake/test/barrier"
POST_EVENTS = r"^POST /api/v2/assets/events$"
TOKEN = "/auth/token"
# A second DAG, on another asset: the barrier the never-early check waits for (not a recipe).
BARRIER_DAG = '''from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

with DAG(dag_id="barrier", schedule=PartitionedAssetTimetable(assets=Asset(uri="%s", name="barrier"))):
    @task
    def noop():
        pass

    noop()
''' % BARRIER


def hour(h):
    """The partition key of the hour starting at h:00 on 2026-11-29 (UTC, the table's zone)."""
    return "2026-11-29T%02d:00:00" % h


class Airflow:
    """Airflow's api-server, scheduler and dag-processor on loopback, in one AIRFLOW_HOME."""

    def __init__(self):
        self.home = tempfile.mkdtemp(prefix="finalize-airflow-publish.")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        dags = os.path.join(self.home, "dags")
        self.env = dict(os.environ, **{
            "AIRFLOW_HOME": self.home,
            "AIRFLOW__CORE__DAGS_FOLDER": dags,
            "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(self.home, "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sqlite:///" + os.path.join(self.home, "airflow.db"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USER + ":admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": os.path.join(self.home, "passwords.json"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": self.url + "/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "finalize-tests-jwt-secret-0123456789abcdef",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
            # A task's calls to the api-server wait 5 s by default, five tries in all; CI's load once kept
            # the api-server from answering that long and the run failed (httpx.ReadTimeout in the
            # scheduler's log). Airflow's description of the option: "Increase this value if you experience
            # timeout errors under high load". With 120 s a 45 s SIGSTOP of the api-server mid-task passes.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
        })
        write_recipe("airflow-publication-dag", os.path.join(dags, "orders_by_hour.py"), "python")
        with open(os.path.join(dags, "barrier.py"), "w") as f:
            f.write(BARRIER_DAG)
        with open(os.path.join(self.home, "passwords.json"), "w") as f:
            json.dump({USER: PASSWORD}, f)
        self.cli = os.path.join(os.path.dirname(sys.executable), "airflow")
        out = subprocess.run([self.cli, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        self.procs = {}
        for name in ("dag-processor", "scheduler", "api-server"):
            self.start(name)
        self._token = None
        self._asset_ids = {}
        self.wait(lambda: self.asset_id(ASSET) and self.asset_id(BARRIER), "both assets listed", 120)

    def start(self, name):
        """Starts one component in a process group of its own (its children die with it)."""
        log = open(os.path.join(self.home, name + ".log"), "a")
        self.procs[name] = subprocess.Popen([self.cli, name], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def kill(self, name):
        """SIGKILL to the component's process group: no answer, no goodbye."""
        p = self.procs.pop(name)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)

    def stop(self):
        """Kills every component (nothing of them is kept) and removes the home."""
        for name in list(self.procs):
            self.kill(name)
        if not os.environ.get("FINALIZE_KEEP_AIRFLOW"):
            shutil.rmtree(self.home, ignore_errors=True)

    def log_tail(self, name="api-server"):
        with open(os.path.join(self.home, name + ".log")) as f:
            return f.read()[-3000:]

    def wait(self, predicate, what, timeout=180, log="api-server"):
        """Polls the predicate once a second (each poll is a request or two Airflow's api-server answers
        from SQLite: polled faster, it took a good part of the CPU the machine has under CI's load) until it
        holds; the time it took is printed (pytest shows it with a failure)."""
        started = time.monotonic()
        while True:
            try:
                value = predicate()
            except (urllib.error.URLError, ConnectionError, OSError):
                value = None
            if value:
                print("waited %.1f s for %s" % (time.monotonic() - started, what))
                return value
            assert time.monotonic() < started + timeout, "timed out after %d s waiting for %s\n%s" % (
                timeout, what, self.log_tail(log))
            time.sleep(1)

    def get(self, path, tries=10, timeout=30):
        """A GET of the REST API, straight to the api-server, as the test's own user (again after a 5xx
        or a reply slower than 30 s: Airflow's SQLite is sometimes busy, and CI's load once held an
        answer past the 10 s this waited at first)."""
        for _ in range(tries):
            try:
                if self._token is None:
                    req = urllib.request.Request(self.url + TOKEN,
                                                 json.dumps({"username": USER, "password": PASSWORD}).encode(),
                                                 {"Content-Type": "application/json"})
                    self._token = json.load(urllib.request.urlopen(req, timeout=timeout))["access_token"]
                req = urllib.request.Request(self.url + path, headers={"Authorization": "Bearer " + self._token})
                return json.load(urllib.request.urlopen(req, timeout=timeout))
            except urllib.error.HTTPError as e:
                if e.code == 401:
                    self._token = None
                elif e.code >= 500:
                    time.sleep(0.3)
                else:
                    raise
            except urllib.error.URLError as e:
                if not isinstance(e.reason, TimeoutError):
                    raise
            except TimeoutError:
                pass
        raise AssertionError("the REST API kept refusing or timing out " + path)

    def asset_id(self, uri):
        """The asset's id, asked once (an asset keeps its id)."""
        if uri not in self._asset_ids:
            found = [a["id"] for a in self.get("/api/v2/assets?uri_pattern=" + urllib.parse.quote(uri, safe=""))[
                "assets"] if a["uri"] == uri]
            if not found:
                return None
            self._asset_ids[uri] = found[0]
        return self._asset_ids[uri]

    def events(self, uri=ASSET):
        """The asset's events, oldest first."""
        got = self.get("/api/v2/assets/events?asset_id=%d&order_by=timestamp&limit=100" % self.asset_id(uri))
        return got["asset_events"]

    def keys(self, uri=ASSET):
        return [e["partition_key"] for e in self.events(uri)]

    def why_failed(self, runs, dag_id="orders_by_hour"):
        """What Airflow says of failed runs: each task instance's state and the end of its log, then the
        scheduler's log (a failure on CI is read from this text alone). It never raises, and asks each thing
        once for at most 10 s: the failure it describes is the news, and a stalled api-server may be its cause."""
        def ask(path):
            try:
                return self.get(path, tries=1, timeout=10)
            except Exception as e:                  # noqa: BLE001 (a description must not replace the failure)
                text.append("(%s could not be read: %r)" % (path, e))
                return None
        text = []
        for r in runs:
            base = "/api/v2/dags/%s/dagRuns/%s/taskInstances" % (dag_id, urllib.parse.quote(r["dag_run_id"], safe=""))
            text.append("run %s: %s" % (r["dag_run_id"], json.dumps(r, default=str)))
            for ti in (ask(base) or {}).get("task_instances", []):
                text.append("task %s: state %s, try %s" % (ti.get("task_id"), ti.get("state"), ti.get("try_number")))
                log = ask("%s/%s/logs/%d?full_content=true" % (base, ti.get("task_id"), ti.get("try_number") or 1))
                if log is not None:
                    text.append(json.dumps(log.get("content"), default=str)[-4000:])
        try:
            text.append("scheduler's log:\n" + self.log_tail("scheduler"))
        except OSError as e:
            text.append("(the scheduler's log could not be read: %s)" % e)
        return "\n".join(text)

    def runs(self, dag_id="orders_by_hour"):
        """The DAG's runs, oldest first."""
        return self.get("/api/v2/dags/%s/dagRuns?order_by=id&limit=100" % dag_id)["dag_runs"]


@pytest.fixture(scope="module")
def warehouse():
    """The peers' cluster, with finalize's scheduler and delivery worker running in database warehouse (its
    source workers stay off: the verdicts move by finalize.record_range)."""
    w = Warehouse(conf={"finalize.database": "warehouse"})
    yield w
    w.cleanup()


@pytest.fixture(scope="module")
def airflow():
    started = time.monotonic()
    a = Airflow()
    print("airflow started in %.1f s" % (time.monotonic() - started))
    yield a
    a.stop()


@pytest.fixture(scope="module")
def proxy(airflow):
    p = FaultProxy(airflow.url)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def published(warehouse, airflow, proxy):
    """sales.orders, final up to 13:00, published to Airflow by the recipe's SQL as printed (its URL the proxy's,
    its password the real one); sales.returns published to the barrier asset."""
    warehouse.track("sales.orders")
    warehouse.track("sales.returns")
    warehouse.capture("sales.orders", "2026-11-29 13:00:02+00")
    warehouse.capture("sales.returns", "2026-11-29 13:00:02+00")
    sql = recipe("airflow-publication", "sql")
    for printed, real in (("https://airflow.example.com", proxy.uri), ("the-password", PASSWORD)):
        assert printed in sql
        sql = sql.replace(printed, real)
    for statement in sql.split(";\n"):
        if statement.strip():
            warehouse.sql(statement)
    warehouse.sql("SELECT finalize.add_publication('sales.returns', 'barrier', 'airflow_prod', %s)",
                  (json.dumps({"asset_uri": BARRIER}),))
    # The recipe's 10 s per attempt, raised to the most it may be: under CI's load Airflow once took 40 s
    # to answer a login, and the attempt's timeout began another login before the POST the test expects.
    # These tests are about what finalize sends; attempts that time out are test_publications.py's.
    warehouse.sql("ALTER SERVER airflow_prod OPTIONS (SET timeout '60 seconds')")
    return warehouse


def outbox(warehouse, table="sales.orders"):
    """The publication's events: (partition key as Airflow gets it, state, attempts, outcome), in order."""
    return warehouse.sql(
        "SELECT to_char(e.period_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS'), e.state, e.attempts, "
        "e.outcome, e.event_id::text FROM finalize.publication_event e JOIN finalize.publication p "
        "USING (publication_id) WHERE p.table_id = finalize_internal.tracked_id(%s) ORDER BY e.event_seq", (table,))


def delivered(warehouse, key, table="sales.orders"):
    return any(r[0] == key and r[1] == "delivered" for r in outbox(warehouse, table))


def runs_done(airflow, n):
    """The DAG's runs once there are n and all of them succeeded (one listing: a run that ends between two
    listings is not counted twice)."""
    runs = airflow.runs()
    failed = [r for r in runs if r["state"] == "failed"]
    assert not failed, airflow.why_failed(failed)      # no use waiting for those
    return runs if len(runs) == n and all(r["state"] == "success" for r in runs) else None


def test_each_final_hour_runs_the_dag_once_and_never_before_it_is_final(published, airflow, proxy):
    w = published
    w.capture("sales.orders", "2026-11-29 14:00:02+00")            # 13:00 is final
    airflow.wait(lambda: airflow.keys() == [hour(13)], "the event of 13:00")
    w.capture("sales.orders", "2026-11-29 14:59:59+00")            # 14:00 is not
    # The barrier: an event recorded after that commit, delivered by the same worker.
    w.capture("sales.returns", "2026-11-29 14:00:02+00")
    airflow.wait(lambda: airflow.keys(BARRIER) == [hour(13)], "the barrier's event")
    airflow.wait(lambda: delivered(w, hour(13), "sales.returns"), "the barrier recorded as delivered")
    # The assert that catches a period sent early: 14:00 is in neither the outbox nor Airflow.
    assert [r[0] for r in outbox(w)] == [hour(13)]
    assert airflow.keys() == [hour(13)]
    w.capture("sales.orders", "2026-11-29 15:00:02+00")            # 14:00 is final
    airflow.wait(lambda: airflow.keys() == [hour(13), hour(14)], "the event of 14:00")
    # The runs are the scheduler's and its task processes' (CI's load once kept them from ending for 120 s).
    runs = airflow.wait(lambda: runs_done(airflow, 2), "both runs done", 300, log="scheduler")
    # One run per final hour, in order, its partition key the hour; the task saw it as dag_run.partition_key.
    assert [r["partition_key"] for r in runs] == [hour(13), hour(14)]
    for r in runs:
        # Waited for: CI once listed a run as successful while its task's XCom still answered 404
        # (wait() takes an HTTP error for "not yet").
        path = ("/api/v2/dags/orders_by_hour/dagRuns/%s/taskInstances/load_hour/xcomEntries/return_value"
                % urllib.parse.quote(r["dag_run_id"], safe=""))
        xcom = airflow.wait(lambda: airflow.get(path), "the XCom of " + r["dag_run_id"])
        assert xcom["value"] == r["partition_key"]
    # The extra is finalize's event: its event_id the outbox's, the period's bounds, the table.
    events = airflow.events()
    rows = outbox(w)
    for e, row in zip(events, rows):
        assert e["extra"]["event_id"] == row[4] and e["extra"]["table"] == "sales.orders"
        assert e["extra"]["event"] == "final" and e["extra"]["from_rest_api"] is True
        assert e["extra"]["period_start"] == row[0] + "Z"
        assert e["extra"]["period_end"] == hour(int(row[0][11:13]) + 1) + "Z"
    # Delivered, each by one POST (Airflow holds one event per hour, above). An attempt may still outlast
    # its timeout when Airflow is slow to answer (py-spy attached to it once made it so); the next one
    # then finds the event the first created ("already"), or posts it if none was.
    assert [r[0] for r in rows] == [hour(13), hour(14)] and len(events) == 2, (rows, events)
    for r in rows:
        assert r[1] == "delivered" and (r[3] == "sent" if r[2] == 1 else r[3] in ("sent", "already")), r
    # Each event posted once: three events (two hours and the barrier's), three POSTs Airflow answered.
    assert sum(1 for r in proxy.requests if r["method"] == "POST" and r["path"] == "/api/v2/assets/events"
               and isinstance(r["status"], int) and 200 <= r["status"] < 300) == 3
    # One login for all of it: the token is kept.
    assert proxy.count(TOKEN, "POST") == 1


def test_a_lost_answer_is_found_by_event_id_and_not_posted_again(published, airflow, proxy):
    w = published
    proxy.set_lost_answer(match=POST_EVENTS)
    try:
        w.capture("sales.orders", "2026-11-29 16:00:02+00")        # 15:00 is final
        airflow.wait(lambda: any(r["status"] == "dropped" for r in proxy.requests), "a lost answer")
    finally:
        proxy.set_pass()
    airflow.wait(lambda: delivered(w, hour(15)), "15:00 recorded as delivered")
    row = [r for r in outbox(w) if r[0] == hour(15)][0]
    assert row[3] == "already" and row[2] >= 2, row
    assert airflow.keys() == [hour(13), hour(14), hour(15)]
    airflow.wait(lambda: len(airflow.runs()) == 3, "the run of 15:00", 300, log="scheduler")
    assert [r["partition_key"] for r in airflow.runs()] == [hour(13), hour(14), hour(15)]
    # The POST went out once; the attempt after it searched the asset's events.
    assert sum(1 for r in proxy.requests if r["method"] == "POST" and r["path"] == "/api/v2/assets/events"
               and r["status"] == "dropped") == 1
    assert any(r["path"] == "/api/v2/assets/events" and r["method"] == "GET" for r in proxy.requests)


def test_the_api_server_killed_mid_stream_loses_and_repeats_nothing(published, airflow, proxy):
    w = published
    w.capture("sales.orders", "2026-11-29 21:00:02+00")            # 16:00 to 20:00 are final at once
    airflow.wait(lambda: hour(16) in airflow.keys(), "the first hour of the stream")
    airflow.kill("api-server")
    w.capture("sales.orders", "2026-11-29 22:00:02+00")            # 21:00 too, while Airflow is down
    # The worker tries and fails (no answer) before Airflow comes back.
    airflow.wait(lambda: any(r[1] == "pending" and r[2] >= 2 for r in outbox(w)), "a failed attempt")
    airflow.start("api-server")
    expected = [hour(h) for h in range(13, 22)]
    airflow.wait(lambda: airflow.keys() == expected, "every hour, in order, once")
    airflow.wait(lambda: all(r[1] == "delivered" for r in outbox(w)), "all recorded as delivered")
    # The runs are the scheduler's (a loop of its own over the events, on SQLite, which the api-server's restart
    # and a loaded machine slow down): waited for longer, its log shown if they never come.
    airflow.wait(lambda: len(airflow.runs()) == len(expected), "a run per hour", 300, log="scheduler")
    assert [r["partition_key"] for r in airflow.runs()] == expected
    assert airflow.keys() == expected


def test_refused_credentials_fail_at_once_and_back_off(published, airflow, proxy):
    w = published
    # A token refused is replaced once; refused again, the attempt fails as refused.
    proxy.reset()
    proxy.set_status(401, body={"detail": "Not authenticated"}, match=POST_EVENTS)
    w.capture("sales.orders", "2026-11-29 23:00:02+00")            # 22:00 is final
    airflow.wait(lambda: proxy.count("/api/v2/assets/events", "POST") >= 2, "a post, a login, a post")
    seen = [(r["method"], r["path"], r["status"]) for r in proxy.requests][:3]
    assert seen == [("POST", "/api/v2/assets/events", 401), ("POST", TOKEN, 201),
                    ("POST", "/api/v2/assets/events", 401)], seen
    proxy.set_pass()
    airflow.wait(lambda: delivered(w, hour(22)), "22:00 once Airflow takes the token again")
    # A wrong password: publication_failing with Airflow's words, logins backing off.
    w.sql("ALTER USER MAPPING FOR CURRENT_USER SERVER airflow_prod OPTIONS (SET password 'wrong-passw0rd')")
    proxy.reset()
    w.capture("sales.orders", "2026-11-30 00:00:02+00")            # 23:00 is final
    alert = airflow.wait(lambda: w.sql("SELECT message FROM finalize.alerts WHERE kind = 'publication_failing' "
                                       "AND state = 'open'"), "publication_failing")
    assert "Invalid credentials" in alert[0][0] and "wrong-passw0rd" not in alert[0][0], alert
    # Three answered: the back-off is measured from each answer.
    airflow.wait(lambda: sum(1 for r in proxy.requests if r["path"] == TOKEN and r.get("answered")) >= 3,
                 "three logins answered")
    logins = [r for r in proxy.requests if r["path"] == TOKEN]
    attempts = [r[2] for r in outbox(w) if r[0] == hour(23)][0]
    # One login per attempt, each after a longer wait than the one before: from the refused login's
    # answer to the next login (Airflow's own slowness in answering, which CI's load once made 35 s,
    # is not finalize's wait).
    assert len(logins) in (attempts, attempts + 1), (len(logins), attempts)
    answered = [r for r in logins if r.get("answered")]
    waits = [b["time"] - a["answered"] for a, b in zip(answered, answered[1:])]
    assert all(later >= earlier * 0.9 for earlier, later in zip(waits, waits[1:])) and waits[-1] > waits[0], waits
    assert airflow.keys()[-1] == hour(22)
    w.sql("ALTER USER MAPPING FOR CURRENT_USER SERVER airflow_prod OPTIONS (SET password %s)", (PASSWORD,))
    w.sql("SELECT finalize.retry_publication('sales.orders', 'orders_to_airflow')")
    airflow.wait(lambda: airflow.keys()[-1] == hour(23), "23:00 once the password is right")
