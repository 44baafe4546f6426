"""Incidents raised by the worker (issue 15, first part): a refused login
opens one incident with SQL Server's own text once it lasted
finalize.alert_after, however many cycles it lasts, and resolves when
logins work again; a data loss opens one that the acknowledgement of the
loss resolves; a blocked schema change one that resume_table resolves."""

import pytest

from worker_env import new_cluster


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster(**{"finalize.alert_after": "1s"})
    yield cluster
    cluster.cleanup()


def start(env, sim, table="a.orders", **kw):
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim)
    env.sql("SELECT finalize.track_table(%s, 'erp', 'dbo.orders'" +
            "".join(", %s => %%s" % k for k in kw) + ")", (table,) + tuple(kw.values()))
    env.wait_caught_up(table, sim)


def incidents(env, kind):
    return env.sql("SELECT state, count, message, table_name, server_name FROM finalize.alerts "
                   "WHERE kind = %s ORDER BY alert_id", (kind,))


def test_a_refused_login_is_one_incident_until_logins_work(env, sim):
    start(env, sim)
    sim.call("sim.kill_sessions")
    sim.call("sim.fault_refuse_logins", count=-1, message="Login failed for user 'sa'.")
    sim.call("sim.commit", inserts=2)
    sim.call("sim.advance", seconds=6)
    env.pg.wait_for(lambda: [r for r in incidents(env, "unreachable") if r[1] >= 3],
                    what=lambda: "an incident counted over cycles: %s" % incidents(env, "unreachable"))
    (state, count, message, table, server), = incidents(env, "unreachable")
    assert state == "open" and server == "erp" and table is None
    assert "18456" in message and "Login failed for user 'sa'." in message
    sim.call("sim.fault_clear")
    env.wait_caught_up("a.orders", sim)
    env.pg.wait_for(lambda: incidents(env, "unreachable")[0][0] == "resolved", what="the incident to resolve")
    assert len(incidents(env, "unreachable")) == 1


def test_a_data_loss_is_an_incident_until_acknowledged(env, sim, pg):
    start(env, sim, on_data_loss="resume")
    pg.sql("ALTER SYSTEM SET finalize.enabled = off")
    pg.reload()
    pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker'"),
                what="the worker to stop")
    sim.call("sim.commit", inserts=4)
    sim.call("sim.advance", seconds=30)
    sim.call("sim.cleanup", low_lsn=sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])
    pg.sql("ALTER SYSTEM RESET finalize.enabled")
    pg.reload()
    env.pg.wait_for(lambda: incidents(env, "data_loss"), what="a data_loss incident")
    (state, _, message, table, server), = incidents(env, "data_loss")
    assert state == "open" and table == "a.orders" and server == "erp"
    assert "cleanup" in message.lower() or "lost" in message.lower(), message
    span = env.sql("SELECT finalize.period_start(min(l.lost_from), '1 hour'), "
                   "finalize.period_end(max(l.lost_to), '1 hour') FROM finalize.loss l")[0]
    env.sql("SELECT finalize.acknowledge_loss('a.orders', %s, %s, 're-snapshotted')", span)
    assert incidents(env, "data_loss")[0][0] == "resolved"


def test_a_blocked_schema_change_is_an_incident_until_resumed(env, sim):
    start(env, sim, ddl_policy="block")
    sim.call("sim.ddl", table="dbo.orders", command="ALTER TABLE dbo.orders ADD note nvarchar(10) NULL")
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=6)
    env.wait_status("a.orders", lambda s: s.get("state") == "schema_blocked")
    (state, _, message, table, _), = incidents(env, "schema_blocked")
    assert state == "open" and table == "a.orders" and "ADD note" in message
    env.sql("SELECT finalize.resume_table('a.orders')")
    assert incidents(env, "schema_blocked")[0][0] == "resolved"
