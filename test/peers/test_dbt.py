"""The dbt recipe of docs/orchestrators.md, run by dbt itself: the sources
file is written as printed into a dbt project (dbt-postgres, the reader's
login), and `dbt source freshness` runs (through dbtRunner, dbt's programmatic
entry point, in the test's process) against a cluster whose verdict the
test moves with finalize.record_range; each run's verdict is read back from
target/sources.json:

* nothing final: max_loaded_at is NULL, which dbt takes as never loaded,
  an error;
* a verdict 8 hours old: error (error_after 6 hours), a non-zero exit;
* a verdict 3 hours old: warn (warn_after 2 hours);
* a verdict of the current hour: pass;

and max_loaded_at is finalize.finalized_until('sales.orders') each time, so
dbt read loaded_at_field and the filter from under `config`. The query dbt
logs is the one the page prints (dbt-freshness-sql). Telemetry is off
(DO_NOT_TRACK=1, --no-send-anonymous-usage-stats), and so is dbt's version
check."""

import contextlib
import io
import json
import os
import re
from datetime import datetime, timezone

import pytest

from peerlib import DB, READER, recipe, write_recipe

# Telemetry off before dbt is imported (it reads these when it starts).
os.environ.update(DO_NOT_TRACK="1", DBT_SEND_ANONYMOUS_USAGE_STATS="false")
from dbt.cli.main import dbtRunner  # noqa: E402

PROJECT = """name: finalize_peer
version: "1.0"
config-version: 2
profile: finalize_peer
"""

PROFILE = """finalize_peer:
  target: dev
  outputs:
    dev:
      type: postgres
      host: 127.0.0.1
      port: {port}
      user: {user}
      password: ""
      dbname: {db}
      schema: public
      threads: 1
"""


@pytest.fixture(scope="module")
def project(warehouse, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("dbt"))
    with open(os.path.join(d, "dbt_project.yml"), "w") as f:
        f.write(PROJECT)
    with open(os.path.join(d, "profiles.yml"), "w") as f:
        f.write(PROFILE.format(port=warehouse.port, user=READER, db=DB))
    write_recipe("dbt-sources", os.path.join(d, "models", "finalize_sources.yml"), "yaml")
    return d


def freshness(project):
    """`dbt source freshness` once, through dbt's own programmatic entry point (dbtRunner, in this process:
    dbt's start costs more than the freshness check, four times over): (exit code as the dbt command would
    give it, the result of sources.json, the freshness query dbt logged, what dbt printed)."""
    for stale in ("target/sources.json", "logs/dbt.log"):
        if os.path.exists(os.path.join(project, stale)):
            os.remove(os.path.join(project, stale))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        res = dbtRunner().invoke(["source", "freshness", "--no-send-anonymous-usage-stats", "--no-version-check",
                                  "--project-dir", project, "--profiles-dir", project, "--log-path",
                                  os.path.join(project, "logs")])
    out = printed.getvalue() + ("" if res.exception is None else repr(res.exception))
    # dbt's command exits 0 on success, 1 when a source is stale past error_after, 2 when dbt failed.
    code = 0 if res.success else 1 if res.exception is None else 2
    path = os.path.join(project, "target", "sources.json")
    assert os.path.exists(path), out
    with open(path) as f:
        results = json.load(f)["results"]
    assert len(results) == 1, results
    with open(os.path.join(project, "logs", "dbt.log")) as f:
        log = f.read()
    queries = re.findall(r"(select\s+max\(.*?)(?:\n\S|\Z)", log, re.S | re.I)
    return code, results[0], queries, out


def when(value):
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def test_source_freshness_reads_the_verdict(warehouse, project):
    warehouse.track("sales.orders")
    try:
        # Tracked, nothing final: finalized_until is NULL, which dbt takes as never loaded (0001-01-01): stale.
        code, result, queries, out = freshness(project)
        assert (code, result["status"]) == (1, "error"), out
        assert when(result["max_loaded_at"]).year == 1, result
        assert result["unique_id"] == "source.finalize_peer.finalize.sales_orders_verdict"

        # The query dbt ran is the page's, whitespace aside (and dbt's query comment).
        sql = " ".join(recipe("dbt-freshness-sql", "sql").split())
        assert queries, out
        assert " ".join(queries[0].split()) == sql, queries[0]

        for lag, status in (("8 hours", "error"), ("3 hours", "warn"), ("0 hours", "pass")):
            warehouse.capture("sales.orders", f"now() - interval '{lag}'")
            until = warehouse.finalized_until("sales.orders")
            code, result, _, out = freshness(project)
            assert result["status"] == status, (lag, result, out)
            assert code == (1 if status == "error" else 0), (lag, code, out)
            # dbt's max_loaded_at is finalize's verdict: loaded_at_field was read from under config.
            assert when(result["max_loaded_at"]) == until.astimezone(timezone.utc), (result, until)
            criteria = result["criteria"]
            assert criteria["warn_after"] == {"count": 2, "period": "hour"}
            assert criteria["error_after"] == {"count": 6, "period": "hour"}
            assert criteria["filter"] == "table_name = 'sales.orders'"
    finally:
        warehouse.untrack_all()
