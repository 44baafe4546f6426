"""Many databases on one simulator instance: one clock, per-database CDC state, faults per database, scale."""
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pymssql
import pytest

from tdsraw import Raw, tokens

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib")
sys.path.insert(0, LIB)
from certs import make_test_pki  # noqa: E402

SIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mssql-sim")


def wait_for(pred, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for %s" % what)


def state(sim, database=None):
    return sim.call("sim.state", database=database)[0][0]


def error_number(payload):
    """Number of the first ERROR token of a login response."""
    assert payload[0] == 0xAA, payload[:16]
    return struct.unpack_from("<i", payload, 3)[0]


@pytest.fixture
def msim(make_sim):
    return make_sim(extra_databases="shard_%03d:2", timezone="Europe/Berlin", dummy_interval=0)


def test_default_instance_has_one_database(make_sim):
    sim = make_sim()
    assert sim.query("SELECT name, database_id, is_cdc_enabled FROM sys.databases") == [
        {"name": "master", "database_id": 1, "is_cdc_enabled": False},
        {"name": "demo", "database_id": 5, "is_cdc_enabled": True}]
    assert sim.databases() == ["demo"]
    assert state(sim)["databases"] == 1


def test_databases_have_their_own_lsns_and_truth_and_share_the_clock(msim):
    rows = msim.query("SELECT name, database_id, is_cdc_enabled FROM sys.databases ORDER BY database_id")
    assert [(r["name"], r["database_id"], r["is_cdc_enabled"]) for r in rows] == [
        ("master", 1, False), ("demo", 5, True), ("shard_001", 6, True), ("shard_002", 7, True)]
    a = msim.call("sim.commit", database="shard_001", inserts=3)[0]
    b = msim.call("sim.commit", database="shard_002", inserts=5, transactions=2)[0]
    assert len(a) == 1 and len(b) == 2
    # nothing is captured before the capture jobs run; one advance (from demo) runs every database's job
    for db in ("shard_001", "shard_002"):
        assert msim.query("SELECT sys.fn_cdc_get_max_lsn() AS m", database=db)[0]["m"] is None
    adv = msim.call("sim.advance", seconds=5)[0][0]
    m1 = msim.query("SELECT sys.fn_cdc_get_max_lsn() AS m, COUNT(*) AS n FROM cdc.dbo_orders_CT",
                    database="shard_001")[0]
    m2 = msim.query("SELECT sys.fn_cdc_get_max_lsn() AS m, COUNT(*) AS n FROM cdc.dbo_orders_CT",
                    database="shard_002")[0]
    assert (m1["m"], m1["n"]) == (a[0]["start_lsn"], 3)
    assert (m2["m"], m2["n"]) == (b[-1]["start_lsn"], 10)
    assert msim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"] is None      # demo: no commit
    assert m1["m"] != m2["m"]                                                       # separate LSN spaces
    # a commit in one database moves only its own max LSN
    msim.call("sim.commit", database="shard_002", inserts=1)
    msim.call("sim.advance", seconds=5)
    assert msim.query("SELECT sys.fn_cdc_get_max_lsn() AS m", database="shard_001")[0]["m"] == m1["m"]
    assert msim.query("SELECT sys.fn_cdc_get_max_lsn() AS m", database="shard_002")[0]["m"] > m2["m"]
    # ground truth per database
    t1 = msim.call("sim.truth_commits", database="shard_001")[0]
    t2 = msim.call("sim.truth_commits", database="shard_002")[0]
    assert [(r["inserts"], r["captured"]) for r in t1] == [(3, True)]
    assert [r["inserts"] for r in t2] == [5, 5, 1] and all(r["captured"] for r in t2)
    assert msim.call("sim.truth_commits")[0] == []
    # one clock and one time zone: the same instant and offset everywhere
    clocks = {db: state(msim, db) for db in ("demo", "shard_001", "shard_002")}
    assert {c["clock_utc"] for c in clocks.values()} == {adv["clock_utc"].replace(second=10)}
    assert {c["timezone"] for c in clocks.values()} == {"Europe/Berlin"}
    assert {c["database"] for c in clocks.values()} == {"demo", "shard_001", "shard_002"}
    now = {db: msim.query("SELECT SYSDATETIMEOFFSET() AS t, DB_NAME() AS d", database=db)[0]
           for db in ("demo", "shard_002")}
    assert now["demo"]["t"] == now["shard_002"]["t"] and now["shard_002"]["d"] == "shard_002"
    assert a[0]["commit_time_local"].hour == 1      # 2026-03-01 00:00 UTC is 01:00 in Berlin


def test_use_db_name_and_create_database(msim):
    c = msim.connect(database="shard_001")
    cur = c.cursor()
    cur.execute("SELECT DB_NAME(), DB_ID(), DB_NAME(7), DB_ID('SHARD_002')")
    assert cur.fetchone() == ("shard_001", 6, "shard_002", 7)
    cur.execute("USE [shard_002]")
    cur.execute("SELECT DB_NAME(), COUNT(*) FROM cdc.change_tables")
    assert cur.fetchone() == ("shard_002", 1)
    with pytest.raises(pymssql.Error) as e:
        cur.execute("USE [shard_999]")
    assert e.value.args[0] == 911
    cur.execute("SELECT DB_NAME()")
    assert cur.fetchone() == ("shard_002",)
    cur.execute("USE master")
    cur.execute("SELECT DB_NAME(), DB_ID()")
    assert cur.fetchone() == ("master", 1)
    # a new empty database: no CDC until enabled; it is usable at once
    row = msim.create_database("fresh", demo=False)
    assert (row["name"], row["is_cdc_enabled"]) == ("fresh", False)
    with pytest.raises(pymssql.Error) as e:
        msim.create_database("FRESH")
    assert e.value.args[0] == 1801
    cur.execute("USE fresh")
    cur.execute("SELECT sys.fn_cdc_get_max_lsn(), (SELECT COUNT(*) FROM sys.tables)")
    assert cur.fetchone() == (None, 0)
    with pytest.raises(pymssql.Error) as e:
        cur.execute("SELECT * FROM cdc.lsn_time_mapping")
    assert e.value.args[0] == 208
    cur.execute("EXEC sim.create_table @name = 'items', @columns = 'id int NOT NULL, v nvarchar(10)'")
    cur.execute("EXEC sim.cdc_enable")
    cur.execute("EXEC sim.enable_table @name = 'items'")
    cur.execute("EXEC sim.commit @table = 'dbo.items', @inserts = 4")
    cur.execute("EXEC sim.capture")
    cur.execute("SELECT COUNT(*) FROM cdc.dbo_items_CT")
    assert cur.fetchone() == (4,)
    assert msim.query("SELECT is_cdc_enabled FROM sys.databases WHERE name = 'fresh'")[0]["is_cdc_enabled"]
    # the next empty database starts from the first one's files (a template): the same, and independent
    msim.create_database("fresh2", demo=False)
    assert msim.query("SELECT COUNT(*) AS n FROM sys.tables", database="fresh2") == [{"n": 0}]
    msim.call("sim.create_table", database="fresh2", name="items", columns="id int NOT NULL")
    msim.call("sim.cdc_enable", database="fresh2")
    msim.call("sim.enable_table", database="fresh2", name="items")
    msim.call("sim.commit", database="fresh2", table="dbo.items", inserts=2)
    msim.call("sim.capture", database="fresh2")
    assert msim.query("SELECT COUNT(*) AS n FROM cdc.dbo_items_CT", database="fresh2") == [{"n": 2}]
    cur.execute("SELECT COUNT(*) FROM cdc.dbo_items_CT")
    assert cur.fetchone() == (4,)
    # a database created like the demo one
    row = msim.create_database("shard_003")
    assert row["is_cdc_enabled"] and msim.databases()[-3:] == ["fresh", "fresh2", "shard_003"]
    assert msim.query("SELECT capture_instance FROM cdc.change_tables", database="shard_003") == [
        {"capture_instance": "dbo_orders"}]
    c.close()


def test_login_to_an_unknown_database_fails_like_sql_server(msim):
    r = Raw(msim.port)
    r.prelogin()
    _, payload = r.login(database="shard_404")
    assert error_number(payload) == 4060
    assert 'Cannot open database "shard_404" requested by the login.'.encode("utf-16-le") in payload
    assert tokens(payload)[-1] == (0xFD, 0x02)
    r = Raw(msim.port)
    r.prelogin()
    _, payload = r.login(database="shard_002")
    assert "shard_002".encode("utf-16-le") in payload and tokens(payload)[-1] == (0xFD, 0)
    r.close()


def test_a_login_needs_a_user_in_the_database_it_opens(msim):
    msim.call("sim.create_login", database="shard_001", login="reader", password="Rd!12345", cdc_select=1)
    c = msim.connect(login="reader", password="Rd!12345", database="shard_001")
    cur = c.cursor()
    cur.execute("SELECT COUNT(*) FROM cdc.lsn_time_mapping")
    assert cur.fetchone() == (0,)
    with pytest.raises(pymssql.Error) as e:
        cur.execute("USE shard_002")
    assert e.value.args[0] == 916
    c.close()
    with pytest.raises(pymssql.Error):
        msim.connect(login="reader", password="Rd!12345", database="shard_002")
    # the same login gets a user in shard_002 too; its permissions there are its own
    msim.call("sim.create_login", database="shard_002", login="reader", password="Rd!12345")
    c = msim.connect(login="reader", password="Rd!12345", database="shard_002")
    with pytest.raises(pymssql.Error) as e:
        c.cursor().execute("SELECT COUNT(*) FROM cdc.lsn_time_mapping")
    assert e.value.args[0] == 229
    c.close()


def test_per_database_jobs_and_settings(msim):
    msim.call("sim.capture_stop", database="shard_001")
    msim.call("sim.commit", database="shard_001", inserts=1)
    msim.call("sim.commit", database="shard_002", inserts=1)
    msim.call("sim.advance", seconds=10)
    assert msim.query("SELECT sys.fn_cdc_get_max_lsn() AS m", database="shard_001")[0]["m"] is None
    assert msim.query("SELECT sys.fn_cdc_get_max_lsn() AS m", database="shard_002")[0]["m"] is not None
    jobs = msim.call("sys.sp_cdc_help_jobs", database="shard_002")[0]
    assert [j["job_name"] for j in jobs] == ["cdc.shard_002_capture", "cdc.shard_002_cleanup"]
    msim.call("sim.set_job", database="shard_002", pollinginterval=60)
    assert msim.call("sys.sp_cdc_help_jobs", database="shard_002")[0][0]["pollinginterval"] == 60
    assert msim.call("sys.sp_cdc_help_jobs", database="shard_001")[0][0]["pollinginterval"] == 5
    before = {db: state(msim, db)["capture_cycles"] for db in ("demo", "shard_002")}
    msim.call("sim.advance", seconds=120)
    after = {db: state(msim, db)["capture_cycles"] for db in ("demo", "shard_002")}
    assert after["demo"] - before["demo"] == 24 and after["shard_002"] - before["shard_002"] == 2
    assert state(msim, "shard_001")["capture_running"] is False


def test_a_fault_limited_to_one_database_fires_only_there(msim):
    msim.call("sim.fault_error", database="shard_001", number=1205, message="deadlocked", count=-1,
              pattern="change_tables")
    for db in ("demo", "shard_002", "shard_001", "demo"):
        c = msim.connect(database=db)
        cur = c.cursor()
        if db == "shard_001":
            with pytest.raises(pymssql.Error) as e:
                cur.execute("SELECT COUNT(*) FROM cdc.change_tables")
            assert e.value.args[0] == 1205
        else:
            cur.execute("SELECT COUNT(*) FROM cdc.change_tables")
            assert cur.fetchone() == (1,)
        c.close()
    # a session that moves into the database meets the fault there
    c = msim.connect(database="demo")
    cur = c.cursor()
    cur.execute("USE shard_001")
    with pytest.raises(pymssql.Error) as e:
        cur.execute("SELECT COUNT(*) FROM cdc.change_tables")
    assert e.value.args[0] == 1205
    c.close()
    assert msim.call("sim.fault_clear")[0][0]["cleared"] == 1
    with pytest.raises(pymssql.Error) as e:
        msim.execute("EXEC sim.fault_error @database = N'nope'")
    assert e.value.args[0] == 911


def test_refused_logins_for_one_database(msim):
    msim.call("sim.fault_refuse_logins", database="shard_002", count=-1)
    with pytest.raises(pymssql.Error):
        msim.connect(database="shard_002")
    msim.connect(database="shard_001").close()
    msim.call("sim.fault_clear")
    msim.connect(database="shard_002").close()


def test_a_login_that_is_never_answered_holds_only_its_database(msim):
    msim.call("sim.fault_hang_login", database="shard_001", count=-1)
    open_before = state(msim)["sessions"]
    held = Raw(msim.port)
    held.prelogin()
    held.sock.settimeout(1.0)
    with pytest.raises(socket.timeout):
        held.login(database="shard_001")                # LOGIN7 sent; nothing comes back
    # meanwhile other databases serve logins and queries
    for db in ("shard_002", "demo"):
        c = msim.connect(database=db)
        cur = c.cursor()
        cur.execute("SELECT DB_NAME()")
        assert cur.fetchone() == (db,)
        c.close()
    # a second held login, then the client gives up: its session ends
    gone = Raw(msim.port)
    gone.prelogin()
    gone.sock.settimeout(0.5)
    with pytest.raises(socket.timeout):
        gone.login(database="shard_001")
    # the two closed sessions end when the simulator reads their close: waited for, not assumed
    wait_for(lambda: state(msim)["sessions"] == open_before + 2, what="two held sessions and no other")
    gone.close()
    wait_for(lambda: state(msim)["sessions"] == open_before + 1, what="the abandoned held session to end")
    # sim.fault_clear releases the held login: it is answered as usual
    held.sock.settimeout(10)
    msim.call("sim.fault_clear")
    _, payload = held.message()
    assert b"\xad" in payload and tokens(payload)[-1] == (0xFD, 0)
    held.batch("SELECT DB_NAME()")
    _, payload = held.message()
    assert "shard_001".encode("utf-16-le") in payload
    held.close()


def test_a_held_login_is_answered_after_its_seconds(msim):
    msim.call("sim.fault_hang_login", database="shard_002", seconds=0.5)
    c = msim.connect(database="shard_002")          # held, then answered
    cur = c.cursor()
    cur.execute("SELECT DB_NAME()")
    assert cur.fetchone() == ("shard_002",)
    c.close()


def test_a_statement_that_is_never_answered_in_one_database(msim):
    msim.call("sim.fault_stall", database="shard_001", seconds=600, count=-1)
    r = Raw(msim.port)
    r.prelogin()
    r.login(database="shard_001")
    r.batch("SELECT sys.fn_cdc_get_max_lsn()")
    r.sock.settimeout(1.0)
    with pytest.raises(socket.timeout):
        r.message()
    for db in ("shard_002", "demo"):
        assert msim.query("SELECT DB_NAME() AS d", database=db) == [{"d": db}]
    r.sock.settimeout(10)
    msim.call("sim.fault_clear")                        # releases the stalled statement
    _, payload = r.message()
    assert payload[0] == 0x81 and payload[-13] == 0xFD        # COLMETADATA ... DONE: the answer came
    r.close()


def test_kill_sessions_of_one_database(msim):
    a = msim.connect(database="shard_001")
    b = msim.connect(database="shard_002")
    assert msim.call("sim.kill_sessions", database="shard_001")[0][0]["killed"] == 1
    with pytest.raises(pymssql.Error):
        a.cursor().execute("SELECT 1")
    cur = b.cursor()
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)
    b.close()


def test_tls_handshake_stall_for_the_instance(make_sim, tmp_path):
    pki = make_test_pki(str(tmp_path / "pki"))
    sim = make_sim(tls_cert=pki.good.cert, tls_key=pki.good.key, extra_databases="shard_001")
    sim.call("sim.fault_stall_tls")
    r = Raw(sim.port)
    r.prelogin(encryption=0x01)                          # ON: the server answers ON, TLS follows
    done = []
    t = threading.Thread(target=lambda: done.append(r.start_tls(cafile=pki.ca, hostname="127.0.0.1")))
    t.start()
    t.join(1.0)
    assert t.is_alive() and not done                     # no ServerHello
    sim.call("sim.fault_clear")
    t.join(10)
    assert done and done[0][0] == "TLSv1.2"
    _, payload = r.login(database="shard_001")
    assert tokens(payload)[-1] == (0xFD, 0)
    r.close()


def test_tsql_in_another_database(make_sim):
    sim = make_sim(extra_databases="shard_%03d:2")
    sim.call("sim.commit", database="shard_002", inserts=2)
    sim.call("sim.advance", seconds=5)
    p = subprocess.run(["tsql", "-H", "127.0.0.1", "-p", str(sim.port), "-U", "sa", "-P", "Passw0rd!",
                        "-D", "shard_002"],
                       input="SELECT DB_NAME() AS d, COUNT(*) AS n FROM cdc.dbo_orders_CT\ngo\n"
                             "USE shard_001\ngo\nSELECT DB_NAME() AS d, COUNT(*) AS n FROM cdc.dbo_orders_CT\ngo\n",
                       capture_output=True, text=True, timeout=30)
    out = p.stdout + p.stderr
    assert "shard_002\t2" in out and "shard_001\t0" in out, out
    p = subprocess.run(["tsql", "-H", "127.0.0.1", "-p", str(sim.port), "-U", "sa", "-P", "Passw0rd!",
                        "-D", "shard_404"], input="SELECT 1\ngo\n", capture_output=True, text=True, timeout=30)
    assert 'Cannot open database "shard_404" requested by the login' in p.stdout + p.stderr


def test_a_thousand_databases(make_sim):
    sim = make_sim(extra_databases="shard_%04d:999")
    names = sim.databases()
    assert len(names) == 1000 and names[0] == "demo" and names[1] == "shard_0001" and names[-1] == "shard_0999"
    assert sim.query("SELECT COUNT(*) AS n, SUM(CONVERT(int, is_cdc_enabled)) AS c FROM sys.databases "
                     "WHERE database_id > 4") == [{"n": 1000, "c": 1000}]
    sim.call("sim.commit", database="shard_0999", inserts=1)
    sim.call("sim.commit", database="shard_0500", inserts=7, at="2026-03-01 00:02:00")
    # one hour on an idle instance: every database's capture job runs its 720 cycles and writes its
    # dummy rows (one every 300 s of silence), exactly as a single database would
    sim.call("sim.advance", to="2026-03-01 01:00:00")
    for db in ("demo", "shard_0001", "shard_0500", "shard_0999"):
        st = state(sim, db)
        assert st["capture_cycles"] == 721 and st["pending_records"] == 0, (db, st)
    rows = {db: sim.query("SELECT COUNT(*) AS ct, (SELECT COUNT(*) FROM cdc.lsn_time_mapping WHERE tran_id = 0x00) "
                          "AS dummies FROM cdc.dbo_orders_CT", database=db)[0]
            for db in ("demo", "shard_0500", "shard_0999", "shard_0002")}
    assert rows["shard_0500"]["ct"] == 7 and rows["shard_0999"]["ct"] == 1
    assert rows["demo"]["ct"] == 0 and rows["shard_0002"]["ct"] == 0
    assert rows["demo"]["dummies"] == 12 and rows["shard_0002"]["dummies"] == 12
    assert rows["shard_0500"]["dummies"] == 11 and rows["shard_0999"]["dummies"] == 12   # 00:02 moved them
    scans = sim.query("SELECT COUNT(*) AS n, MAX(session_id) AS last FROM sys.dm_cdc_log_scan_sessions "
                      "WHERE session_id > 0", database="shard_0002")[0]
    assert scans == {"n": 721, "last": 721}
    assert sim.create_database("shard_1000")["database_id"] == 1005


def test_bad_database_specs_stop_the_start():
    for spec in ("shard_%03d", "a,a", "master", "x_%q:3"):
        p = subprocess.run([sys.executable, SIM, "--port", "0", "--extra-databases", spec], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 2 and "mssql-sim:" in p.stderr, (spec, p.stderr)
