"""The worker against a simulator as strict as SQL Server's documentation:
exactly the least-privilege login of docs/sql-server.md (no SELECT on the cdc schema),
every accepted TDS version, commit times stamped in another zone than the
server's clock, DDL longer than the default TEXTSIZE, a case-sensitive
database, a NOLOCK scan that loses its place (601) and a compile error in
one table's read (208) that must not cost the others."""

import datetime
import json
import re
import select
import time
from pathlib import Path

import psycopg2
import pymssql
import pytest

from worker_env import (at, as_utc, assert_chain, assert_never_leads, lsn_text, new_cluster, sim_clock,
                        truth_counts)

UTC = datetime.timezone.utc
LOGIN_PAGE = Path(__file__).resolve().parents[2] / "docs" / "sql-server.md"
LOGIN = "svc_finalize"        # the SQL Server login the page's script creates
GATING_ROLE = "cdc_gate"      # the capture instance's @role_name the script adds it to
PASSWORD = "Fin4lize-Reader!"


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


def readme_login_script():
    """The T-SQL block docs/sql-server.md gives a DBA to create finalize's login."""
    text = LOGIN_PAGE.read_text()
    m = re.search(r"<!-- least-privilege-login -->\s*```sql\n(.*?)```", text, re.S)
    assert m, "docs/sql-server.md has no least-privilege login script"
    return m.group(1)


def run_script(sim, script, login=None, password=None):
    """Runs a T-SQL script statement batch by batch (GO separates batches)."""
    conn = sim.connect(login=login, password=password)
    try:
        cur = conn.cursor()
        for batch in re.split(r"^\s*GO\s*$", script, flags=re.M | re.I):
            if batch.strip():
                cur.execute(batch)
    finally:
        conn.close()


def first_commit(sim, table="dbo.orders"):
    """A commit and a capture, so that max LSN exists."""
    sim.call("sim.commit", table=table, inserts=1)
    sim.call("sim.advance", seconds=10)


def listen(pg):
    conn = pg.connect()
    conn.cursor().execute("LISTEN finalize_alert")
    return conn


def alerts(conn, until, timeout=10):
    """finalize_alert payloads until one satisfies until(payload)."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(until(p) for p in seen):
        if select.select([conn], [], [], 0.2)[0]:
            conn.poll()
            seen.extend(json.loads(n.payload) for n in conn.notifies)
            conn.notifies.clear()
    return seen


def test_the_readme_login_is_all_the_worker_needs(env, pg):
    sim = sim_clock(database="erp", start_time="2026-11-02T08:59:00Z").start()
    try:
        # The source table has a gating role, as a careful DBA sets it up.
        sim.call("sim.disable_table", name="orders")
        sim.call("sim.enable_table", name="orders", role_name=GATING_ROLE)
        run_script(sim, readme_login_script().replace("<password>", PASSWORD))
        # The login may use the query functions, not the change table.
        with pytest.raises(pymssql.Error, match="229"):
            run_script(sim, "SELECT TOP (1) * FROM cdc.dbo_orders_CT", login=LOGIN, password=PASSWORD)

        first_commit(sim)
        env.add_source("erp", sim, login=LOGIN, password=PASSWORD)
        env.track("sales.orders", "erp")
        env.wait_caught_up("sales.orders", sim)
        for when, ops in [(at(9, 5), dict(inserts=3)), (at(9, 30), dict(updates=2)), (at(9, 59), dict(deletes=1)),
                          (at(10, 10), dict(inserts=1))]:
            sim.call("sim.commit", at=when, **ops)
            sim.call("sim.advance", seconds=6)
            env.wait_caught_up("sales.orders", sim)
            assert_never_leads(env, "sales.orders", sim)
        sim.call("sim.advance", to=at(11, 0, 30))
        env.wait_caught_up("sales.orders", sim)
        assert env.status("sales.orders")["finalized_until"] == at(11, 0)
        assert env.status("sales.orders")["condition"] is None
        facts = env.facts("sales.orders")
        assert_chain(facts)
        counted = {}
        for f in facts:
            if f["first_commit_time"] is not None:
                hour = f["first_commit_time"].replace(minute=0, second=0, microsecond=0)
                a, b, c = counted.get(hour, (0, 0, 0))
                counted[hour] = (a + f["inserts"], b + f["updates"], c + f["deletes"])
        truth = truth_counts(sim, "dbo.orders", at(9, 0), at(11, 0))
        assert counted == {k: v for k, v in truth.items() if v != (0, 0, 0)}

        # Cleanup passing the offset while the worker reads is still a loss
        # with this login (the query function refuses the range: 313).
        offset = env.status("sales.orders")["offset_lsn"]
        lost = lsn_text(sim.call("sim.commit", inserts=2, at=at(11, 10))[0][0]["start_lsn"])
        # Armed before the capture makes the commit visible (as in test_worker_cycle's purge
        # test): a worker fast enough to read it between the two calls would see no purge.
        sim.call("sim.fault_purge", capture_instance="dbo_orders")
        sim.call("sim.advance", to=at(11, 20))
        st = env.wait_status("sales.orders", lambda s: s.get("state") == "data_lost", what="data loss")
        # Nothing of the purged read is recorded. The offset may have moved on to a dummy row that
        # capture wrote before the commit (300 s of silence in the advance to 11:20; CI read it).
        assert offset <= st["offset_lsn"] < lost, (offset, st["offset_lsn"], lost)

        # Without the gating role the instance is invisible to the login.
        run_script(sim, "ALTER ROLE [%s] DROP MEMBER [%s];" % (GATING_ROLE, LOGIN))
        env.sql("SELECT finalize.untrack_table('sales.orders')")
        with pytest.raises(psycopg2.Error) as e:
            env.track("sales.orders", "erp")
        assert e.value.pgcode == "42501" and e.value.diag.message_primary == \
            'login "%s" may not read the capture instance of SQL Server table [dbo].[orders]' % LOGIN
        env.track("sales.orders", "erp", check_source=False)
        st = env.wait_status("sales.orders", lambda s: s.get("condition") == "no_capture_instance",
                             what="no capture instance without the gating role")
        assert 'Login "%s" may not read the capture instance' % LOGIN in st["condition_detail"], st
    finally:
        sim.stop()


@pytest.mark.parametrize("tds_version", ["7.1", "7.2", "7.3", "7.4"])
def test_every_accepted_tds_version_reads_the_same_facts(env, sim, tds_version):
    first_commit(sim)
    env.add_source("erp", sim, tds_version=tds_version)
    env.track("sales.orders", "erp")
    env.wait_caught_up("sales.orders", sim)
    sim.call("sim.commit", at=at(9, 20), inserts=2, updates=1)
    sim.call("sim.advance", to=at(10, 0, 30))
    env.wait_caught_up("sales.orders", sim)
    st = env.status("sales.orders")
    assert st["finalized_until"] == at(10, 0) and st["condition"] is None
    # One range, or more when a worker cycle ran while sim.advance was still moving the clock: the
    # commit's counts once, every other range empty.
    ranges = [(f["inserts"], f["updates"], f["deletes"]) for f in env.facts("sales.orders")][1:]
    assert sorted(ranges, reverse=True) == [(2, 1, 0)] + [(0, 0, 0)] * (len(ranges) - 1), ranges
    # SQL Server's clock decoded (below 7.3 datetime2 would arrive as nvarchar).
    src = env.source_status("erp")
    clock = as_utc(sim.call("sim.state")[0][0]["clock_utc"])
    assert abs((src["server_time"] - clock).total_seconds()) < 2, src
    # So stall detection works: a stopped capture job is seen for what it is.
    sim.call("sim.capture_stop")
    sim.call("sim.advance", seconds=3600)
    env.pg.wait_for(lambda: (env.source_status("erp") or {}).get("condition") == "capture_stalled",
                    timeout=30, what=lambda: "capture_stalled with tds_version %s: %s"
                    % (tds_version, env.source_status("erp")))


def test_commit_times_ahead_of_the_servers_clock_stop_the_source(env, pg):
    # Commits stamped two hours ahead of the clock SYSDATETIMEOFFSET() reports.
    sim = sim_clock(start_time="2026-11-02T08:59:00Z", commit_time_offset=120).start()
    listener = listen(pg)
    try:
        first_commit(sim)
        env.add_source("erp", sim)
        env.track("sales.orders", "erp")
        src = env.pg.wait_for(lambda: (env.source_status("erp") or {}).get("condition") == "commit_time_ahead"
                              and env.source_status("erp"), timeout=30,
                              what=lambda: "commit_time_ahead: %s" % env.source_status("erp"))
        assert "later than SQL Server's own clock" in src["last_error"]
        assert env.status("sales.orders")["finalized_until"] is None, "nothing was recorded"
        seen = alerts(listener, lambda p: p.get("alert") == "commit_time_ahead")
        assert any(p.get("alert") == "commit_time_ahead" and p.get("server") == "erp" for p in seen), seen
        assert src["held_by"] == "commit_time_ahead"
        # Stamps that agree with the clock again prove nothing (a capture job
        # lagging more than the stamps lead looks the same): the source stays
        # held until a person releases it.
        sim.call("sim.set_clock_quirk", commit_time_offset_minutes=0)
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=10)
        cycles = env.source_status("erp")["cycles"]
        env.pg.wait_for(lambda: env.source_status("erp")["cycles"] >= cycles + 3, timeout=30, what="three cycles")
        src = env.source_status("erp")
        assert src["condition"] == "commit_time_ahead" and "release_source('erp')" in src["last_error"], src
        assert env.status("sales.orders")["finalized_until"] is None
        assert env.one("SELECT finalize.release_source('erp')") is True
        env.wait_caught_up("sales.orders", sim)
        assert_never_leads(env, "sales.orders", sim)
        assert env.source_status("erp")["held_by"] is None
        assert env.one("SELECT finalize.release_source('erp')") is False
        with pytest.raises(Exception, match='no status for server "nope"'):
            env.sql("SELECT finalize.release_source('nope')")
    finally:
        listener.close()
        sim.stop()


def test_ddl_longer_than_the_default_textsize_arrives_whole(env, sim):
    first_commit(sim)
    env.add_source("erp", sim)
    env.track("sales.orders", "erp")
    env.wait_caught_up("sales.orders", sim)
    # A real statement of exactly 10,000 characters (20,000 bytes in UTF-16,
    # five times the 4,096 bytes SQL Server sends a client that sets no TEXTSIZE).
    values, n = "", 0
    while len(values) + 100 < 10000:
        values += ("" if n == 0 else ", ") + "N'n%07d'" % n
        n += 1
    shape = "ALTER TABLE dbo.orders ADD note nvarchar(40) NULL CONSTRAINT %s CHECK (note IN (%s))"
    name = "ck_note_" + "x" * (10000 - len(shape % ("ck_note_", values)))
    command = shape % (name, values)
    assert len(command) == 10000
    sim.call("sim.ddl", table="dbo.orders", command=command, at=at(9, 10))
    sim.call("sim.advance", to=at(9, 20))
    env.wait_caught_up("sales.orders", sim)
    event = [f for f in env.facts("sales.orders") if f["event"] == "schema_change"][-1]
    assert [d["command"] for d in event["detail"]["ddl"]] == [command]


def test_a_case_sensitive_database_keeps_dbo_Orders_and_dbo_orders_apart(env):
    sim = sim_clock(start_time="2026-11-02T08:59:00Z", collation="SQL_Latin1_General_CP1_CS_AS").start()
    try:
        sim.call("sim.create_table", name="Orders", columns="[id] int NOT NULL PRIMARY KEY, [note] nvarchar(20)")
        sim.call("sim.enable_table", name="Orders")
        first_commit(sim)
        first_commit(sim, table="dbo.Orders")
        env.add_source("erp", sim)
        env.track("sales.orders", "erp", source_table="dbo.orders")
        env.track("sales.orders_upper", "erp", source_table="dbo.Orders")
        env.wait_caught_up("sales.orders", sim)
        env.wait_caught_up("sales.orders_upper", sim)
        assert env.status("sales.orders")["capture_instance"] == "dbo_orders"
        assert env.status("sales.orders_upper")["capture_instance"] == "dbo_Orders"
        sim.call("sim.commit", table="dbo.orders", inserts=3, at=at(9, 10))
        sim.call("sim.commit", table="dbo.Orders", inserts=5, at=at(9, 11))
        sim.call("sim.advance", to=at(9, 20))
        env.wait_caught_up("sales.orders", sim)
        env.wait_caught_up("sales.orders_upper", sim)
        assert sum(f["inserts"] for f in env.facts("sales.orders")) == 3
        assert sum(f["inserts"] for f in env.facts("sales.orders_upper")) == 5
        # A name that differs only in case from the source table is another table.
        with pytest.raises(psycopg2.Error) as e:
            env.track("sales.orders_wrong_case", "erp", source_table="DBO.ORDERS")
        assert e.value.pgcode == "HV00R" and e.value.diag.message_primary == \
            'SQL Server table [DBO].[ORDERS] does not exist in database "demo"'
        env.track("sales.orders_wrong_case", "erp", source_table="DBO.ORDERS", check_source=False)
        st = env.wait_status("sales.orders_wrong_case", lambda s: s.get("condition") == "no_capture_instance",
                             what="DBO.ORDERS does not exist in a case-sensitive database")
        assert st["condition_detail"].startswith("SQL Server table [DBO].[ORDERS] does not exist"), st
    finally:
        sim.stop()


def test_a_nolock_scan_that_loses_its_place_is_read_again(env, sim):
    first_commit(sim)
    env.add_source("erp", sim)
    env.track("sales.orders", "erp")
    env.wait_caught_up("sales.orders", sim)
    sim.call("sim.fault_error", number=601, message="Could not continue scan with NOLOCK due to data movement.",
             **{"class": 12}, pattern="fn_cdc_get_all_changes", count=1)
    sim.call("sim.commit", at=at(9, 10), inserts=4)
    sim.call("sim.advance", to=at(9, 20))
    env.wait_caught_up("sales.orders", sim)
    assert sim.call("sim.fault_clear")[0][0]["cleared"] == 0, "the 601 fault fired"
    st = env.status("sales.orders")
    assert st["condition"] is None, st
    assert sum(f["inserts"] for f in env.facts("sales.orders")) == 4
    assert_chain(env.facts("sales.orders"))


@pytest.mark.parametrize("number,message", [
    (208, "Invalid object name 'cdc.fn_cdc_get_all_changes_dbo_lines'."),      # aborts its sp_executesql
    (245, "Conversion failed when converting the nvarchar value 'x' to data type int."),  # aborts the batch
])
def test_a_statement_that_fails_costs_only_its_own_table(env, sim, number, message):
    sim.call("sim.create_table", name="lines", columns="[id] int NOT NULL PRIMARY KEY, [qty] int")
    sim.call("sim.enable_table", name="lines")
    first_commit(sim)
    first_commit(sim, table="dbo.lines")
    env.add_source("erp", sim)
    env.track("sales.orders", "erp")
    env.track("sales.lines", "erp", source_table="dbo.lines")
    env.wait_caught_up("sales.orders", sim)
    env.wait_caught_up("sales.lines", sim)
    sim.call("sim.fault_error", number=number, message=message, pattern="fn_cdc_get_all_changes_dbo_lines",
             count=-1)
    sim.call("sim.commit", table="dbo.lines", at=at(9, 10), inserts=1)
    sim.call("sim.commit", table="dbo.orders", at=at(9, 11), inserts=2)
    sim.call("sim.advance", to=at(9, 20))
    env.wait_caught_up("sales.orders", sim)
    st = env.wait_status("sales.lines", lambda s: s.get("condition") == "read_failed", what="lines read_failed")
    assert "error %d" % number in st["condition_detail"] and message in st["condition_detail"]
    sim.call("sim.fault_clear")
    env.wait_caught_up("sales.lines", sim)
    assert env.status("sales.lines")["condition"] is None


def test_hundreds_of_tables_resolve_their_names_in_bounded_statements(env, sim):
    # 520 tables: their names are resolved 100 per statement, so no statement
    # grows with the number of tables (the simulator refuses a compound
    # SELECT of more than 500 terms, as sqlite does).
    first_commit(sim)
    env.add_source("erp", sim)
    names = ["many.t%03d" % i for i in range(520)]
    # Each track_table checks the source table with a login of its own: once is enough here (this
    # test is about the worker's statements). The others in one transaction: the worker's cycles
    # with 1, 2, ... 519 tables cost the suite more CPU than any other test.
    env.track(names[0], "erp")
    conn = env.pg.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL finalize.source_check_timeout = 0")
            cur.execute("SELECT count(finalize.track_table(n, 'erp', 'dbo.orders', '1 hour', 'max_lsn', 'warn', 'stop')) "
                        "FROM unnest(%s::text[]) n", (names[1:],))
            assert cur.fetchone()[0] == 519
    finally:
        conn.close()
    def baselines():
        return env.one("SELECT count(*) FROM finalize.status WHERE offset_lsn IS NOT NULL")
    env.pg.wait_for(lambda: baselines() == 520, timeout=60, what=lambda: "520 baselines (%s so far)" % baselines())
    sim.call("sim.commit", at=at(9, 10), inserts=2)
    sim.call("sim.advance", to=at(9, 20))
    env.wait_caught_up(names[-1], sim, timeout=120)   # 520 tables, a loaded machine
    env.wait_caught_up(names[0], sim)
    assert env.one("SELECT count(*) FROM finalize.facts WHERE table_name LIKE 'many.%%' AND inserts = 2") == 520
