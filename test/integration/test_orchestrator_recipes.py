"""The documentation's orchestrator recipes (docs/orchestrators.md, the
local-day block of docs/periods.md, the Airflow sensor the README repeats),
run as SQL against a real server. The SQL is read from the pages themselves
(README.md and docs/*.md): the fenced block after each
`<!-- recipe: name -->` marker (a recipe given on two pages must be the same
on both), its Python string
constants named *_SQL (found with ast, so the code must parse) or the block
itself for SQL; so the examples cannot drift from what is tested. Here, with
Debian's interpreter, each statement is run the way the tool runs it
(psycopg2 with the same parameters; dbt's freshness query as the page writes
it down, checked against its sources.yml) as a login in finalize_reader, and
its answers are checked before and after a range is recorded. The tools
themselves run every recipe as printed in test/peers/ (test/run-tests peers:
Airflow's dag.test(), Dagster's sensor evaluation, dbt source freshness),
each in its own virtual environment; the last test here checks that no
recipe of the orchestrators' page is left out there."""

import ast
import glob
import os
import re
import threading

import psycopg2
import pytest
import yaml

from pgcluster import cluster_with_source

TOP = os.path.join(os.path.dirname(__file__), "..", "..")
PAGES = [os.path.join(TOP, "README.md")] + sorted(glob.glob(os.path.join(TOP, "docs", "*.md")))
DB = "warehouse"  # the database of the dbt recipe


def recipe(name):
    """(language, body) of the fenced block after the recipe's marker, on every page that gives it."""
    found = {}
    for page in PAGES:
        with open(page) as f:
            text = f.read()
        for m in re.finditer(r"<!-- recipe: %s -->\n```(\w+)\n(.*?)\n```" % re.escape(name), text, re.S):
            found.setdefault((m.group(1), m.group(2)), []).append(os.path.relpath(page, TOP))
    assert found, f"no page (README.md, docs/*.md) has recipe {name}"
    assert len(found) == 1, f"recipe {name} differs between {list(found.values())}"
    return next(iter(found))


def sql_constants(name):
    """The string constants named *_SQL of a Python recipe."""
    lang, body = recipe(name)
    assert lang == "python"
    found = {}
    for node in ast.parse(body).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id.endswith("_SQL"):
                    found[target.id] = node.value.value
    assert found, f"recipe {name} has no *_SQL constant"
    return found


@pytest.fixture(scope="module")
def pgr():
    cluster = cluster_with_source({"finalize.enabled": "off"})
    cluster.sql(f"CREATE DATABASE {DB}")
    cluster.sql("CREATE EXTENSION finalize", dbname=DB)
    cluster.sql("CREATE SERVER src FOREIGN DATA WRAPPER finalize_mssql "
                "OPTIONS (host '127.0.0.1', database 'demo')", dbname=DB)
    cluster.sql("CREATE ROLE orchestrator LOGIN IN ROLE finalize_reader")
    yield cluster
    cluster.cleanup()


@pytest.fixture
def orders(pgr):
    """sales.orders, hourly, tracked: nothing final yet."""
    pgr.sql("SELECT finalize.track_table('sales.orders', 'src', 'dbo.orders')", dbname=DB)
    yield "sales.orders"
    pgr.sql("DELETE FROM finalize.tracked_table", dbname=DB)


def reader(pg):
    return pg.connect(dbname=DB, user="orchestrator")


def rows(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def record(pg, start, end, commit_time):
    pg.sql("SELECT finalize.record_range('sales.orders', %s, %s, %s)", (start, end, commit_time), dbname=DB)


def test_airflow_sql_sensor_pokes_false_then_true(pgr, orders):
    sql = sql_constants("airflow-sql-sensor")["IS_FINAL_SQL"]
    # What SqlSensor hands psycopg2: the recipe's parameters, rendered
    # (data_interval_start renders as an ISO 8601 instant).
    params = {"table": "sales.orders", "period": "2026-11-29T14:00:00+00:00"}
    conn = reader(pgr)
    assert rows(conn, sql, params) == [(False,)]
    record(pgr, None, "0x00000000000000000100", "2026-11-29 14:30+00")
    assert rows(conn, sql, params) == [(False,)]
    record(pgr, "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 15:00:02+00")
    assert rows(conn, sql, params) == [(True,)]
    conn.close()


def test_airflow_trigger_returns_true_when_another_session_advances(pgr, orders):
    sql = sql_constants("airflow-trigger")["WAIT_FINAL_SQL"]
    assert "interval '5 minutes'" in sql  # bounded waits, as the page says
    record(pgr, None, "0x00000000000000000100", "2026-11-29 14:30+00")
    answer = {}

    def trigger_query():
        conn = reader(pgr)
        try:
            answer["final"] = rows(conn, sql, ("sales.orders", "2026-11-29T14:00:00+00:00"))
        except psycopg2.Error as e:
            answer["error"] = e
        finally:
            conn.close()

    t = threading.Thread(target=trigger_query, daemon=True)
    t.start()
    # The trigger's query sleeps in wait_final before the range commits.
    pgr.wait_for(lambda: pgr.sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'orchestrator' "
                                 "AND wait_event_type = 'Extension'")[0][0] == 1,
                 timeout=60, what="the trigger's wait_final to sleep")
    record(pgr, "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 15:00:02+00")
    t.join(120)
    assert not t.is_alive(), "wait_final did not return"
    assert answer == {"final": [(True,)]}


def test_dagster_sensor_sees_each_final_hour_once(pgr, orders):
    sql = sql_constants("dagster-sensor")["FINAL_HOURS_SQL"]
    conn = reader(pgr)
    hours = lambda after: [p.isoformat() for (p,) in rows(conn, sql, {"table": "sales.orders", "after": after})]
    # Nothing final (finalized_until is NULL): no run, with a cursor or without.
    assert hours("2026-11-29 00:00+00") == [] and hours(None) == []
    record(pgr, None, "0x00000000000000000100", "2026-11-29 02:10+00")
    assert hours("2026-11-29 00:00+00") == ["2026-11-29T00:00:00+00:00", "2026-11-29T01:00:00+00:00"]
    # Without a cursor (the first evaluation): from the hour tracking began in (02:10), not the
    # hours before it, which are final but were not observed.
    assert hours(None) == []
    # The cursor moves past the last hour run: the next evaluation sees only new hours.
    assert hours("2026-11-29 02:00+00") == []
    record(pgr, "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 04:00:01+00")
    assert hours("2026-11-29 02:00+00") == ["2026-11-29T02:00:00+00:00", "2026-11-29T03:00:00+00:00"]
    assert hours(None) == ["2026-11-29T02:00:00+00:00", "2026-11-29T03:00:00+00:00"]
    conn.close()


def test_dbt_freshness_query_returns_the_verdict(pgr, orders):
    lang, sources = recipe("dbt-sources")
    assert lang == "yaml"
    lang, sql = recipe("dbt-freshness-sql")
    assert lang == "sql"
    # The query is what dbt's collect_freshness renders from the sources file:
    # max(loaded_at_field), now(), the quoted relation and the filter.
    table = yaml.safe_load(sources)["sources"][0]
    src, t = table, table["tables"][0]
    expected = ("select max({field}) as max_loaded_at, now() as snapshotted_at "
                'from "{db}"."{schema}"."{ident}" where {filter}').format(
        field=t["config"]["loaded_at_field"], db=src["database"], schema=src["schema"],
        ident=t["identifier"], filter=t["config"]["freshness"]["filter"])
    assert " ".join(sql.split()) == expected
    assert src["database"] == DB

    conn = reader(pgr)
    # Tracked, nothing final: NULL, which dbt reports as never loaded.
    (max_loaded_at, snapshotted_at), = rows(conn, sql)
    assert max_loaded_at is None and snapshotted_at is not None
    record(pgr, None, "0x00000000000000000100", "2026-11-29 14:30+00")
    (max_loaded_at, _), = rows(conn, sql)
    assert max_loaded_at == rows(conn, "SELECT finalize.finalized_until('sales.orders')")[0][0]
    assert max_loaded_at.isoformat() == "2026-11-29T14:00:00+00:00"
    conn.close()


def call_keyword(name, keyword):
    """The string given as keyword `keyword` in a call of a Python recipe (SqlSensor(sql=...))."""
    lang, body = recipe(name)
    assert lang == "python"
    for node in ast.walk(ast.parse(body)):
        if isinstance(node, ast.keyword) and node.arg == keyword and isinstance(node.value, ast.Constant):
            return node.value.value
    raise AssertionError(f"recipe {name} has no {keyword}= string")


@pytest.fixture
def seoul_days(pgr):
    """sales.orders_daily, Seoul days, tracked: nothing final yet."""
    pgr.sql("SELECT finalize.track_table('sales.orders_daily', 'src', 'dbo.orders', '1 day', "
            "period_zone => 'Asia/Seoul')", dbname=DB)
    yield "sales.orders_daily"
    pgr.sql("DELETE FROM finalize.tracked_table", dbname=DB)


def record_daily(pg, start, end, commit_time):
    pg.sql("SELECT finalize.record_range('sales.orders_daily', %s, %s, %s)", (start, end, commit_time), dbname=DB)


def test_airflow_daily_dag_in_a_zone_asks_for_its_local_day(pgr, seoul_days):
    """A @daily DAG with a start_date in Asia/Seoul: data_interval_start of the run for 2026-11-28 renders as
    2026-11-27T15:00:00+00:00 (Seoul midnight, in UTC), and the sensor's query answers for that Seoul day."""
    from datetime import datetime
    from zoneinfo import ZoneInfo
    sql = call_keyword("airflow-daily-zone", "sql")
    start = datetime(2026, 11, 28, tzinfo=ZoneInfo("Asia/Seoul")).astimezone(ZoneInfo("UTC"))
    params = {"table": "sales.orders_daily", "day": start.isoformat()}
    assert params["day"] == "2026-11-27T15:00:00+00:00"
    conn = reader(pgr)
    assert rows(conn, sql, params) == [(False,)]
    record_daily(pgr, None, "0x00000000000000000100", "2026-11-27 20:00+00")
    record_daily(pgr, "0x00000000000000000100", "0x00000000000000000200", "2026-11-28 14:59:59+00")
    assert rows(conn, sql, params) == [(False,)]    # one second before Seoul's midnight
    record_daily(pgr, "0x00000000000000000200", "0x00000000000000000300", "2026-11-28 15:00:01+00")
    assert rows(conn, sql, params) == [(True,)]
    conn.close()


def test_dagster_daily_partitions_in_a_zone_see_each_final_local_day_once(pgr, seoul_days):
    sql = sql_constants("dagster-daily-zone")["FINAL_DAYS_SQL"]
    conn = reader(pgr)

    def final_days(after):
        out = []
        for p, final in rows(conn, sql, {"table": "sales.orders_daily", "after": after, "zone": "Asia/Seoul"}):
            if not final:
                break
            # The recipe's partition key: the local date.
            out.append(p.astimezone(ZoneInfo("Asia/Seoul")).strftime("%Y-%m-%d"))
        return out
    from zoneinfo import ZoneInfo
    assert final_days("2026-11-25T00:00:00+09:00") == [] and final_days(None) == []
    record_daily(pgr, None, "0x00000000000000000100", "2026-11-24 20:00+00")
    record_daily(pgr, "0x00000000000000000100", "0x00000000000000000200", "2026-11-27 15:30+00")
    assert final_days("2026-11-25T00:00:00+09:00") == ["2026-11-25", "2026-11-26", "2026-11-27"]
    # Without a cursor: from the Seoul day tracking began on (05:00 on the 25th), none before.
    assert final_days(None) == ["2026-11-25", "2026-11-26", "2026-11-27"]
    assert final_days("2026-11-20T00:00:00+09:00")[:1] == ["2026-11-20"]
    # The cursor past the last day run: only the days final since.
    assert final_days("2026-11-28T00:00:00+09:00") == []
    conn.close()


def test_the_local_day_recipe_from_track_table_to_the_gate(pgr, store):
    """The local-day block of docs/periods.md, statement by statement (the store is a local one here): the Seoul day
    2026-11-28 is released only once it is final, and the projection places it at dt=2026-11-28/."""
    import json
    from storefiles import write_file
    lang, block = recipe("local-day")
    assert lang == "sql"
    statements = [s.strip() for s in re.split(r";\s*(?:--[^\n]*)?\n", block + "\n") if s.strip()
                  and not all(line.strip().startswith("--") for line in s.strip().splitlines())]
    statements = ["\n".join(line for line in s.splitlines() if not line.strip().startswith("--")) for s in statements]
    write_file(store, "dt=2026-11-28/part-0.parquet", b"x" * 1048576)
    results = []
    for s in statements:
        s = s.replace('"store": "lake"', json.dumps({"store": "file://" + store})[1:-1]).replace("'erp'", "'src'")
        results.append(pgr.sql(s, dbname=DB))
    assert results[1] == [(False,)] and results[2] == [(None,)]
    released, generation, problems = results[4][0]
    assert (released, [p["code"] for p in problems]) == (False, ["not_finalized"]), problems
    pgr.sql("SELECT finalize.record_range('sales.orders_daily', NULL, '0x00000000000000000100', "
            "'2026-11-27 00:00+00')", dbname=DB)
    pgr.sql("SELECT finalize.record_range('sales.orders_daily', '0x00000000000000000100', "
            "'0x00000000000000000200', '2026-11-28 15:00:01+00')", dbname=DB)
    released, generation, problems = pgr.sql(statements[4].replace('"store": "lake"', json.dumps(
        {"store": "file://" + store})[1:-1]), dbname=DB)[0]
    assert (released, generation, problems) == (True, "g1", [])
    assert pgr.sql("SELECT finalize.finalized_until('sales.orders_daily')", dbname=DB)[0][0].isoformat() == \
        "2026-11-28T15:00:00+00:00"
    pgr.sql("DELETE FROM finalize.tracked_table", dbname=DB)


def test_every_orchestrator_recipe_is_run_by_its_tool():
    """Each Python and YAML recipe of docs/orchestrators.md (and the README's) is written out and run by a
    test of test/peers/, which name it as write_recipe("name", ...)."""
    names = set()
    for page in (os.path.join(TOP, "README.md"), os.path.join(TOP, "docs", "orchestrators.md")):
        with open(page) as f:
            names |= set(re.findall(r"<!-- recipe: ([\w-]+) -->\n```(?:python|yaml)\n", f.read()))
    assert names >= {"airflow-sql-sensor", "airflow-daily-zone", "airflow-trigger", "dagster-sensor",
                     "dagster-daily-zone", "dbt-sources"}, names
    run = set()
    for path in glob.glob(os.path.join(TOP, "test", "peers", "test_*.py")):
        with open(path) as f:
            run |= set(re.findall(r"write_recipe\(\"([\w-]+)\"", f.read()))
    assert names <= run, f"recipes no peer test runs: {sorted(names - run)}"
