"""The worker's guards against a misbehaving source: schema changes,
capture-instance switches, data loss and recovery, stalled capture, faults
and awkward names. None of them may move a verdict ahead of the truth."""

import datetime
import json
import select
import time

import pytest

from worker_env import at, assert_chain, assert_never_leads, lsn_text, new_cluster

UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster(**{"finalize.query_timeout": "2s", "finalize.max_retry_interval": "1600ms"})
    yield cluster
    cluster.cleanup()


def start(env, sim, table="g.orders", **kw):
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    if "erp" not in env.sources:
        env.add_source("erp", sim)
    env.track(table, "erp", **kw)
    env.wait_caught_up(table, sim)


def step(sim, **commit):
    """One commit (if any) and a capture cycle."""
    if commit:
        sim.call("sim.commit", **commit)
    sim.call("sim.advance", seconds=6)


def per_range_truth(sim, facts, table="dbo.orders"):
    """Every range fact's counts equal the commits in its LSN range."""
    commits = sim.call("sim.truth_commits", table=table)[0]
    for f in facts:
        if f["kind"] != "range" or f["start_lsn"] is None:
            continue
        got = [0, 0, 0]
        for c in commits:
            lsn = lsn_text(c["commit_lsn"])
            if f["start_lsn"] < lsn <= f["end_lsn"]:
                got[0] += c["inserts"]
                got[1] += c["updates"]
                got[2] += c["deletes"]
        assert got == [f["inserts"], f["updates"], f["deletes"]], f


class Listener:
    def __init__(self, pg, channel):
        self.conn = pg.connect()
        self.conn.cursor().execute(f"LISTEN {channel}")

    def wait(self, predicate, timeout=15):
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            if select.select([self.conn], [], [], 0.2)[0]:
                self.conn.poll()
                for n in self.conn.notifies:
                    seen.append(json.loads(n.payload))
                self.conn.notifies.clear()
                for p in seen:
                    if predicate(p):
                        return p
        raise AssertionError(f"no matching notification; saw {seen}")


# 1. Schema changes -----------------------------------------------------------

def test_ddl_warns_by_default(env, sim):
    start(env, sim)
    sim.call("sim.ddl", table="dbo.orders", command="ALTER TABLE dbo.orders ADD note nvarchar(20)")
    step(sim, inserts=2)
    env.wait_caught_up("g.orders", sim)
    st = env.status("g.orders")
    assert st["state"] == "active"
    assert "ALTER TABLE dbo.orders ADD note nvarchar(20)" in st["last_schema_change"]
    ev = [f for f in env.facts("g.orders") if f["event"] == "schema_change"]
    assert len(ev) == 1 and ev[0]["detail"]["ddl"][0]["command"].startswith("ALTER TABLE")
    assert sum(f["inserts"] for f in env.facts("g.orders")) == 2


def test_ddl_blocks_by_policy_until_resumed(env, sim, pg):
    alerts = Listener(pg, "finalize_alert")
    start(env, sim, ddl_policy="block")
    before = env.status("g.orders")
    sim.call("sim.ddl", table="dbo.orders", command="ALTER TABLE dbo.orders DROP COLUMN status")
    step(sim, inserts=1)
    st = env.wait_status("g.orders", lambda s: s.get("state") == "schema_blocked", what="blocked")
    assert "ALTER TABLE dbo.orders DROP COLUMN status" in st["state_detail"]
    assert "finalize.resume_table('g.orders')" in st["state_detail"]
    assert st["offset_lsn"] == before["offset_lsn"]
    assert alerts.wait(lambda p: p["alert"] == "schema_blocked")["table"] == "g.orders"
    sim.call("sim.advance", to=at(11, 0))
    time.sleep(1)
    assert env.status("g.orders")["finalized_until"] == before["finalized_until"], "blocked: the verdict stays"
    assert_never_leads(env, "g.orders", sim)
    assert "counts as reviewed" in env.one("SELECT finalize.resume_table('g.orders')")
    env.wait_caught_up("g.orders", sim)
    st = env.status("g.orders")
    assert st["state"] == "active" and st["finalized_until"] == at(10, 0)
    assert sum(f["inserts"] for f in env.facts("g.orders")) == 1
    per_range_truth(sim, env.facts("g.orders"))


# 2. Capture-instance switch ----------------------------------------------------

def test_a_newer_capture_instance_is_followed_from_its_start(env, sim):
    start(env, sim)
    step(sim, inserts=2)
    env.wait_caught_up("g.orders", sim)
    sim.call("sim.enable_table", name="orders", capture_instance="dbo_orders_v2")
    sim.call("sim.commit", inserts=3)            # captured by both instances
    step(sim, inserts=4)
    env.wait_caught_up("g.orders", sim)
    facts = env.facts("g.orders")
    switch = [f for f in facts if f["event"] == "instance_switch"]
    assert len(switch) == 1 and switch[0]["capture_instance"] == "dbo_orders_v2"
    assert switch[0]["detail"]["from"] == "dbo_orders" and switch[0]["detail"]["to"] == "dbo_orders_v2"
    assert env.status("g.orders")["capture_instance"] == "dbo_orders_v2"
    assert sum(f["inserts"] for f in facts) == 2 + 3 + 4, "nothing counted twice across the switch"
    assert_chain(facts)
    per_range_truth(sim, facts)
    # Dropping the old instance afterwards changes nothing.
    sim.call("sim.disable_table", name="orders", capture_instance="dbo_orders")
    step(sim, inserts=1)
    env.wait_caught_up("g.orders", sim)
    assert env.status("g.orders")["state"] == "active"
    assert sum(f["inserts"] for f in env.facts("g.orders")) == 10


def test_old_instance_dropped_before_the_switch_is_data_loss(env, sim, pg):
    start(env, sim)
    pg.sql("ALTER SYSTEM SET finalize.enabled = off")
    pg.reload()
    pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker'"),
                what="the worker to stop")
    step(sim, inserts=2)                          # only in dbo_orders
    sim.call("sim.enable_table", name="orders", capture_instance="dbo_orders_v2")
    step(sim, inserts=3)
    sim.call("sim.disable_table", name="orders", capture_instance="dbo_orders")
    offset = env.status("g.orders")["offset_lsn"]
    pg.sql("ALTER SYSTEM RESET finalize.enabled")
    pg.reload()
    st = env.wait_status("g.orders", lambda s: s.get("state") == "data_lost", what="data loss")
    assert 'Capture instance "dbo_orders" was dropped' in st["state_detail"]
    event = env.facts("g.orders", kind="event")[-1]
    assert event["event"] == "data_loss" and event["start_lsn"] == offset
    assert event["detail"]["cause"] == "capture instance dropped"
    assert_never_leads(env, "g.orders", sim)


# 3. Data loss and recovery -------------------------------------------------------

def lose_data(env, sim, pg):
    """Cleanup passes the table's offset while its worker is stopped."""
    pg.sql("ALTER SYSTEM SET finalize.enabled = off")
    pg.reload()
    pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker'"),
                what="the worker to stop")
    clock = sim.call("sim.state")[0][0]["clock_utc"].replace(tzinfo=UTC)
    sim.call("sim.commit", inserts=4, at=clock + datetime.timedelta(minutes=1))
    sim.call("sim.advance", seconds=600)
    sim.call("sim.cleanup", low_lsn=sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])
    pg.sql("ALTER SYSTEM RESET finalize.enabled")
    pg.reload()


def test_resume_after_a_data_loss(env, sim, pg):
    start(env, sim)
    lose_data(env, sim, pg)
    st = env.wait_status("g.orders", lambda s: s.get("state") == "data_lost", what="data loss")
    frozen = st["finalized_until"]
    assert "resume_table" in st["state_detail"]
    assert "resumes at its capture instance's current min LSN" in env.one("SELECT finalize.resume_table('g.orders')")
    st = env.wait_status("g.orders", lambda s: s.get("state") == "active", what="resumed")
    min_lsn = lsn_text(sim.query("SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders') AS m")[0]["m"])
    resumed = [f for f in env.facts("g.orders", kind="event") if f["event"] == "resumed"][-1]
    assert resumed["detail"]["after"] == "data_loss" and resumed["detail"]["by"] == "postgres"
    assert resumed["end_lsn"] < min_lsn and resumed["detail"]["min_lsn"] == min_lsn
    # The verdict resumes only from there: the next ranges move it again.
    assert env.status("g.orders")["finalized_until"] == frozen
    step(sim, inserts=2)
    sim.call("sim.advance", to=at(11, 5))
    env.wait_caught_up("g.orders", sim)
    assert env.one("SELECT w.finalized_until FROM finalize.watermark w "
                   "WHERE w.table_id = finalize_internal.tracked_id('g.orders')") == at(11, 0)
    # The lost periods hold the verdict until acknowledged: finalize.status shows it as the sensors do.
    assert env.status("g.orders")["finalized_until"] == env.one("SELECT finalize.finalized_until('g.orders')") \
        == frozen
    facts = env.facts("g.orders")
    assert sum(f["inserts"] for f in facts) == 2
    per_range_truth(sim, facts)
    # Periods that overlap the lost range are not covered by facts.
    rows = env.sql("SELECT period_start, covered FROM finalize.changes_by_period('g.orders', %s, %s)",
                   (at(9, 0), at(11, 0)))
    assert rows[0][1] is False and rows[-1][1] is True
    assert_never_leads(env, "g.orders", sim)


def test_automatic_resume_once_within_the_window(env, sim, pg):
    start(env, sim, on_data_loss="resume")
    lose_data(env, sim, pg)
    env.pg.wait_for(lambda: any(f["event"] == "resumed" for f in env.facts("g.orders", kind="event")),
                    what="an automatic resume")
    st = env.status("g.orders")
    assert st["state"] == "active"
    events = [f["event"] for f in env.facts("g.orders", kind="event")]
    assert events == ["data_loss", "resumed"]
    resumed = env.facts("g.orders", kind="event")[-1]
    assert resumed["detail"]["by"].startswith("finalize worker")
    # A second loss within finalize.data_loss_window needs the explicit step.
    env.wait_caught_up("g.orders", sim)
    lose_data(env, sim, pg)
    st = env.wait_status("g.orders", lambda s: s.get("state") == "data_lost", what="a second loss")
    assert "second loss within finalize.data_loss_window" in st["state_detail"]


# 4. Stalled capture versus an idle database ---------------------------------------

def test_stalled_capture_is_not_an_idle_database(env, sim, pg):
    alerts = Listener(pg, "finalize_alert")
    start(env, sim)
    env.sql("ALTER SERVER erp OPTIONS (ADD capture_stall_threshold '10 minutes')")
    # Idle for half an hour: dummy rows keep max LSN moving, nothing stalls.
    for _ in range(6):
        sim.call("sim.advance", seconds=300)
        env.wait_caught_up("g.orders", sim)
        assert env.source_status("erp")["condition"] == "ok"
    before = env.status("g.orders")["finalized_until"]
    # The capture job stops while commits go on.
    sim.call("sim.capture_stop")
    sim.call("sim.commit", inserts=5)
    sim.call("sim.advance", seconds=900)
    st = env.wait_status("g.orders", lambda s: s.get("source_condition") == "capture_stalled", what="stall")
    assert "sp_cdc_start_job" in st["last_error"] and st["finalized_until"] == before
    assert alerts.wait(lambda p: p["alert"] == "capture_stalled")["server"] == "erp"
    assert_never_leads(env, "g.orders", sim)
    assert "capture is stalled" in env.one("SELECT reason FROM finalize.explain_verdict('g.orders')")
    sim.call("sim.capture_start")
    sim.call("sim.advance", seconds=10)
    env.wait_caught_up("g.orders", sim)
    assert env.source_status("erp")["condition"] == "ok"
    assert alerts.wait(lambda p: p["alert"] == "capture_resumed")["server"] == "erp"
    assert sum(f["inserts"] for f in env.facts("g.orders")) == 5


def test_zero_min_lsn_is_its_own_condition(env, sim):
    sim.call("sim.create_login", login="reader", password="R3ader!pw", tables="dbo.orders")
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim, login="reader", password="R3ader!pw")
    env.track("g.orders", "erp")
    env.wait_caught_up("g.orders", sim)
    # The permission goes away between the read of the range and the min LSN.
    # (The stall stays below the module's 2 s query timeout.)
    sim.call("sim.fault_stall", seconds=1.6, pattern="fn_cdc_get_min_lsn", count=1)
    step(sim, inserts=1)
    time.sleep(0.6)
    sim.call("sim.revoke", login="reader", object="dbo.orders")
    # The worker says no_access for that cycle; from the next one on the
    # instance is no longer listed for the login (no_capture_instance).
    seen = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "no_capture_instance" not in seen:
        s = env.status("g.orders")
        seen.setdefault(s["condition"], s["condition_detail"])
        time.sleep(0.02)
    assert "no_access" in seen, seen
    assert "0x00000000000000000000" in seen["no_access"] and "reader" in seen["no_access"]
    assert sum(f["inserts"] for f in env.facts("g.orders")) == 0


# 5. Faults -------------------------------------------------------------------------

def test_a_stalled_query_times_out_and_the_source_recovers(env, sim):
    start(env, sim)
    sim.call("sim.fault_stall", seconds=30, pattern="COUNT_BIG", count=1)
    step(sim, inserts=3)
    st = env.wait_status("g.orders", lambda s: s.get("source_condition") == "timeout", what="a timeout")
    assert "finalize.query_timeout" in st["last_error"]
    env.wait_caught_up("g.orders", sim)
    assert env.source_status("erp")["condition"] == "ok"
    facts = env.facts("g.orders")
    assert sum(f["inserts"] for f in facts) == 3
    assert_chain(facts)
    per_range_truth(sim, facts)


def test_refused_logins_back_off_and_recover(env, sim):
    start(env, sim)
    sim.call("sim.kill_sessions")
    sim.call("sim.fault_refuse_logins", count=-1, message="Login failed for user 'sa'.")
    step(sim, inserts=2)
    waits = set()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(waits) < 5:
        s = env.source_status("erp")
        if s["condition"] == "unreachable" and s["next_attempt"]:
            waits.add(round((s["next_attempt"] - s["last_error_at"]).total_seconds(), 1))
        time.sleep(0.05)
    st = env.source_status("erp")
    assert "18456" in st["last_error"] and "Login failed for user 'sa'." in st["last_error"]
    assert sorted(waits)[:4] == [0.2, 0.4, 0.8, 1.6], waits      # doubling, capped at 1.6 s
    assert max(waits) == 1.6
    sim.call("sim.fault_clear")
    env.wait_caught_up("g.orders", sim)
    assert sum(f["inserts"] for f in env.facts("g.orders")) == 2


def test_a_connection_dropped_mid_result_is_retried(env, sim):
    start(env, sim)
    sim.call("sim.fault_drop", pattern="sp_cdc_help_change_data_capture", after_rows=0, count=2)
    step(sim, inserts=2)
    env.wait_caught_up("g.orders", sim)
    facts = env.facts("g.orders")
    assert sum(f["inserts"] for f in facts) == 2
    per_range_truth(sim, facts)


# 6. Names ----------------------------------------------------------------------------

def test_awkward_names_work_and_inject_nothing(env, sim, pg):
    schema, name = "sales data", "order]lines 'ü'; DROP TABLE x --"
    ci = "ci ]' ü"
    sim.call("sim.create_table", schema=schema, name=name, columns="[id] int NOT NULL, [v] nvarchar(10)")
    sim.call("sim.enable_table", schema=schema, name=name, capture_instance=ci)
    sim.call("sim.advance", seconds=6)
    sim.call("sim.commit", table=f"[{schema}].[{name.replace(']', ']]')}]", inserts=1)
    sim.call("sim.advance", seconds=6)
    env.add_source("erp", sim)
    lake = 'lake."odd" ]name ü \\ {'
    listener = Listener(pg, "finalize")
    env.track(lake, "erp", source_table=f"[{schema}].[{name.replace(']', ']]')}]", granularity="1 minute")
    env.wait_caught_up(lake, sim)
    sim.call("sim.commit", table=f"[{schema}].[{name.replace(']', ']]')}]", inserts=3, updates=1)
    sim.call("sim.advance", seconds=120)
    env.wait_caught_up(lake, sim)
    st = env.status(lake)
    assert st["capture_instance"] == ci and st["source_table"] == f"{schema}.{name}"
    assert sum(f["inserts"] for f in env.facts(lake)) == 3
    assert listener.wait(lambda p: p["table"] == lake)["table"] == lake
    assert sim.query("SELECT COUNT(*) AS n FROM sys.tables WHERE name = N'x'")[0]["n"] == 0
