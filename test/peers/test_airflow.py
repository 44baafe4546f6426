"""The Airflow recipes of docs/orchestrators.md (and README.md), run by Airflow
itself: each recipe is written as printed into a DAG folder (the trigger
module into the plugins folder, which Airflow puts on the Python path) of one
AIRFLOW_HOME for the whole module (a SQLite metadata database, `airflow db
migrate` once), its connection finalize_metadata given as
AIRFLOW_CONN_FINALIZE_METADATA, and each DAG is run by dag.test() against a
cluster whose verdicts the test moves with finalize.record_range:

* the SqlSensor DAG in reschedule mode: its first poke finds the hour not
  final and reschedules the task (a task_reschedule row), and once the hour's
  capture is recorded the next poke succeeds;
* the daily DAG in Asia/Seoul: its data_interval_start renders as Seoul
  midnight, and the sensor waits for the Seoul day;
* the deferrable sensor: it defers, its trigger sleeps in wait_final (seen in
  pg_stat_activity), and the commit that makes the hour final ends the wait.

The one thing changed from the page is the sensors' poke_interval (60 and
300 seconds printed, checked, then 1 second), so that a reschedule takes a
second."""

import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from peerlib import write_recipe

HOME = tempfile.mkdtemp(prefix="finalize-airflow.")
DAGS = os.path.join(HOME, "dags")
PLUGINS = os.path.join(HOME, "plugins")
METADATA = os.path.join(HOME, "airflow.db")
# Before anything imports airflow, which reads its configuration once.
os.environ.update({
    "AIRFLOW_HOME": HOME,
    "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
    "AIRFLOW__CORE__PLUGINS_FOLDER": PLUGINS,
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sqlite:///" + METADATA,
})


@pytest.fixture(scope="module")
def airflow(warehouse):
    """The recipes in the DAG and plugins folders, the metadata database migrated, the connection set."""
    write_recipe("airflow-sql-sensor", os.path.join(DAGS, "orders_hourly.py"), "python")
    write_recipe("airflow-daily-zone", os.path.join(DAGS, "orders_daily.py"), "python")
    write_recipe("airflow-trigger-dag", os.path.join(DAGS, "orders_hourly_deferred.py"), "python")
    write_recipe("airflow-trigger", os.path.join(PLUGINS, "finalize_triggers.py"), "python")
    os.environ["AIRFLOW_CONN_FINALIZE_METADATA"] = warehouse.uri()
    cli = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run([cli, "db", "migrate"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    import airflow  # noqa: F401  (configures the ORM on the migrated database)
    yield
    import shutil
    shutil.rmtree(HOME, ignore_errors=True)


def load_dag(name, dag_id):
    """The DAG of a file of the DAG folder, as Airflow's DAG processor finds it (a DagBag)."""
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=os.path.join(DAGS, name + ".py"))
    assert not bag.import_errors, bag.import_errors
    assert list(bag.dags) == [dag_id]
    return bag.dags[dag_id]


def metadata(query, args=()):
    """Rows of Airflow's metadata database (read beside the running dag.test())."""
    conn = sqlite3.connect(METADATA, timeout=30)
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


def reschedules(dag_id):
    return metadata("SELECT count(*) FROM task_reschedule r JOIN task_instance t ON t.id = r.ti_id "
                    "WHERE t.dag_id = ?", (dag_id,))[0][0]


class When(threading.Thread):
    """Runs action() once condition() holds (polled), beside dag.test(); failing after timeout."""

    def __init__(self, condition, action, timeout=120):
        super().__init__(daemon=True)
        self.condition, self.action, self.timeout = condition, action, timeout
        self.done, self.error = False, None
        self.start()

    def run(self):
        deadline = time.monotonic() + self.timeout
        try:
            while not self.condition():
                if time.monotonic() > deadline:
                    raise AssertionError("timed out waiting for the condition")
                time.sleep(0.2)
            self.action()
            self.done = True
        except Exception as e:  # reported by check()
            self.error = e

    def check(self):
        self.join(30)
        assert self.error is None, self.error
        assert self.done


def shorten_pokes(dag, task_id, printed):
    sensor = dag.task_dict[task_id]
    assert sensor.mode == "reschedule"
    assert sensor.poke_interval == printed
    sensor.poke_interval = 1
    return sensor


def task_state(dr, task_id):
    (ti,) = [ti for ti in dr.get_task_instances() if ti.task_id == task_id]
    return ti


def rendered(dag_id, task_id):
    import json
    (fields,) = metadata("SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = ? AND task_id = ?",
                         (dag_id, task_id))[0]
    return json.loads(fields)


def test_sql_sensor_reschedules_until_the_hour_is_final(warehouse, airflow):
    import pendulum
    warehouse.track("sales.orders")
    try:
        dag = load_dag("orders_hourly", "orders_hourly")
        shorten_pokes(dag, "wait_for_sales_orders_hour", 60)
        # The capture has reached 14:30: the hour [14:00, 15:00) is not final.
        warehouse.capture("sales.orders", "2026-11-29 14:30+00")
        # Once the first poke has rescheduled the task, the capture passes 15:00.
        then = When(lambda: reschedules("orders_hourly") >= 1,
                    lambda: warehouse.capture("sales.orders", "2026-11-29 15:00:02+00"))
        # The run at 15:00 of CronDataIntervalTimetable("@hourly"): data interval [14:00, 15:00).
        dr = dag.test(logical_date=pendulum.datetime(2026, 11, 29, 15, tz="UTC"))
        then.check()
        assert dr.state == "success"
        assert task_state(dr, "wait_for_sales_orders_hour").state == "success"
        assert reschedules("orders_hourly") >= 1
        params = rendered("orders_hourly", "wait_for_sales_orders_hour")["parameters"]
        assert params["table"] == "sales.orders"
        assert pendulum.parse(params["period"]) == pendulum.datetime(2026, 11, 29, 14, tz="UTC")
    finally:
        warehouse.untrack_all()


def test_daily_dag_in_seoul_waits_for_the_seoul_day(warehouse, airflow):
    import pendulum
    warehouse.track("sales.orders_daily", "1 day", "Asia/Seoul")
    try:
        dag = load_dag("orders_daily", "orders_daily")
        shorten_pokes(dag, "wait_for_sales_orders_day", 300)
        warehouse.capture("sales.orders_daily", "2026-11-27 20:00+00")
        # One second before Seoul's midnight: the Seoul day 2026-11-28 is not final.
        warehouse.capture("sales.orders_daily", "2026-11-28 14:59:59+00")
        then = When(lambda: reschedules("orders_daily") >= 1,
                    lambda: warehouse.capture("sales.orders_daily", "2026-11-28 15:00:01+00"))
        # The run at Seoul midnight 2026-11-29: data interval the Seoul day 2026-11-28.
        dr = dag.test(logical_date=pendulum.datetime(2026, 11, 29, tz="Asia/Seoul"))
        then.check()
        assert dr.state == "success"
        assert reschedules("orders_daily") >= 1
        day = rendered("orders_daily", "wait_for_sales_orders_day")["parameters"]["day"]
        # Seoul midnight, rendered in UTC.
        assert day == "2026-11-27 15:00:00+00:00", day
    finally:
        warehouse.untrack_all()


def test_deferrable_sensor_fires_when_wait_final_returns(warehouse, airflow):
    import pendulum
    warehouse.track("sales.orders")
    try:
        dag = load_dag("orders_hourly_deferred", "orders_hourly_deferred")
        warehouse.capture("sales.orders", "2026-11-29 14:30+00")

        def trigger_waits():
            return warehouse.sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'orchestrator' "
                                 "AND wait_event_type = 'Extension'")[0][0] == 1

        # The trigger's wait_final sleeps (the hour is not final); then the capture passes 15:00.
        then = When(trigger_waits, lambda: warehouse.capture("sales.orders", "2026-11-29 15:00:02+00"))
        dr = dag.test(logical_date=pendulum.datetime(2026, 11, 29, 15, tz="UTC"))
        then.check()
        assert dr.state == "success"
        ti = task_state(dr, "wait_for_sales_orders_hour")
        assert ti.state == "success"
        event = metadata("SELECT value FROM xcom WHERE dag_id = ? AND key = 'return_value'",
                         ("orders_hourly_deferred",))
        assert len(event) == 1, event
        assert "sales.orders" in str(event[0][0])
    finally:
        warehouse.untrack_all()
