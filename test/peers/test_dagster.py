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
keys are ones the jobs accept."""

import importlib.util
import os

import pytest

from peerlib import write_recipe


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
