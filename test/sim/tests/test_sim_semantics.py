"""SQL Server semantics the simulator must not be more lenient about: least privilege and the T-SQL
security statements, scope/batch abortion, faults inside sp_executesql, case-sensitive collations,
commit times stamped in another zone, and the statement shapes the C worker sends."""
import struct
import time

import pymssql
import pytest

from simtest_util import one
from tdsraw import Raw

ZERO = bytes(10)


def commit(sim, **kw):
    """sim.commit -> its single row."""
    return sim.call("sim.commit", **kw)[0][0]


def advance(sim, seconds):
    """Move the simulated clock (capture cycles run)."""
    return sim.call("sim.advance", seconds=seconds)[0][0]


def error_of(fn):
    """Run ``fn`` expecting a pymssql error; return its text."""
    with pytest.raises(pymssql.Error) as e:
        fn()
    return str(e.value)


def run(conn, sql):
    """Execute a batch on ``conn`` and fetch every result set (lists of tuples)."""
    cur = conn.cursor()
    cur.execute(sql)
    out = []
    while True:
        if cur.description:
            out.append(cur.fetchall())
        if not cur.nextset():
            break
    return out


# --- raw token stream ---------------------------------------------------------------------

def events(payload):
    """Walk a response of simple int results: -> [('row', ints) | ('error', number) | ('info', number)
    | ('done', token, status)]."""
    out, i, widths = [], 0, []
    while i < len(payload):
        t = payload[i]
        if t == 0x81:
            n = struct.unpack_from("<H", payload, i + 1)[0]
            i += 3
            widths = []
            for _ in range(n):
                typ = payload[i + 6]
                i += 7
                if typ == 0x26:                      # INTN: max length byte
                    i += 1
                    widths.append(None)
                else:
                    widths.append({0x38: 4, 0x7F: 8, 0x34: 2, 0x30: 1}[typ])
                i += 1 + payload[i] * 2              # column name
        elif t == 0xD1:
            i += 1
            vals = []
            for w in widths:
                if w is None:
                    w = payload[i]
                    i += 1
                vals.append(int.from_bytes(payload[i:i + w], "little", signed=True) if w else None)
                i += w
            out.append(("row", vals))
        elif t in (0xAA, 0xAB):
            n = struct.unpack_from("<H", payload, i + 1)[0]
            out.append(("error" if t == 0xAA else "info", struct.unpack_from("<i", payload, i + 3)[0]))
            i += 3 + n
        elif t in (0xE3, 0xA9):
            i += 3 + struct.unpack_from("<H", payload, i + 1)[0]
        elif t == 0x79:
            i += 5
        elif t in (0xFD, 0xFE, 0xFF):
            out.append(("done", t, struct.unpack_from("<H", payload, i + 1)[0]))
            i += 13
        else:
            raise ValueError("cannot walk token 0x%02x" % t)
    return out


def raw_batch(sim, sql, login="sa", password="Passw0rd!"):
    """Send one batch over raw TDS -> events()."""
    r = Raw(sim.port)
    r.prelogin()
    r.login(user=login, password=password)
    r.batch(sql)
    _, payload = r.message()
    r.close()
    return events(payload)


def login_errors(sim, login, password):
    """Error numbers a raw LOGIN7 for database demo gets (empty list: logged in)."""
    r = Raw(sim.port)
    r.prelogin()
    _, payload = r.login(user=login, password=password)
    r.close()
    if payload[:1] != b"\xAA":
        return []
    return [e[1] for e in events(payload) if e[0] == "error"]


def drop_login_once_logged_out(sim, login, timeout=10):
    """DROP LOGIN, as SQL Server refuses it (15434) while a session of the login
    still exists: a client that just closed its socket may not have been
    noticed yet, so retry until the server has ended that session."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sim.execute("DROP LOGIN [%s]" % login)
            return
        except Exception as e:
            if "15434" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def rows_and_errors(ev):
    """Only rows and errors, in order."""
    return [e for e in ev if e[0] in ("row", "error")]


# --- 1. least privilege and security statements -----------------------------------------------

DBA_SCRIPT = """CREATE LOGIN [finalize_reader] WITH PASSWORD = N'Str0ng!pw', CHECK_POLICY = OFF;
USE [demo];
CREATE USER [finalize_reader] FOR LOGIN [finalize_reader];
GRANT SELECT ON [dbo].[orders] TO [finalize_reader];
ALTER ROLE [cdc_reader] ADD MEMBER [finalize_reader];"""


@pytest.fixture
def gated(make_sim):
    """dbo.orders (no role) plus dbo.pay gated by role cdc_reader, one commit each, captured."""
    sim = make_sim(dummy_interval=0)
    sim.call("sim.create_table", name="pay", columns="id int, v int")
    sim.call("sim.enable_table", name="pay", role_name="cdc_reader")
    commit(sim, inserts=2)
    commit(sim, table="dbo.pay", inserts=1)
    advance(sim, 5)
    return sim


def test_new_logins_get_no_cdc_select(gated):
    sim = gated
    sim.call("sim.create_login", login="plain", password="pw")
    c = sim.connect(login="plain", password="pw")
    msg = error_of(lambda: run(c, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT"))
    assert "The SELECT permission was denied on the object 'dbo_orders_CT', database 'demo', schema 'cdc'." in msg
    assert run(c, "SELECT OBJECT_ID(N'[dbo].[orders]'), OBJECT_ID(N'cdc.dbo_orders_CT')") == [[(None, None)]]
    sim.call("sim.grant", login="plain", object="SCHEMA::cdc")
    assert run(c, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT") == [[(2,)]]
    # A direct read ignores the gating role, as on SQL Server; the query function does not.
    assert run(c, "SELECT COUNT_BIG(*) FROM cdc.dbo_pay_CT") == [[(1,)]]
    msg = error_of(lambda: run(c, "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_pay("
                                  "sys.fn_cdc_get_min_lsn(N'dbo_pay'), sys.fn_cdc_get_max_lsn(), N'all')"))
    assert "229" in msg
    c.close()


def test_what_a_login_learns_of_a_table_it_may_not_read(gated):
    """What finalize's check of a source table (mssql/table_probe.c) relies on, as SQL Server
    answers: a table that does not exist is Msg 208 and one the login has no permission on is Msg
    229 (not 208) to a SELECT; OBJECT_ID and sys.tables hide both alike (metadata visibility:
    before the fix sys.tables listed every table to every login); with SELECT on the table, the
    login sees it in sys.tables with is_tracked_by_cdc, and the help procedure lists its capture
    instance only without a gating role or as a member of it."""
    sim = gated
    sim.call("sim.create_table", name="plain", columns="id int, v int")
    sim.call("sim.create_login", login="nosel", password="N0sel!pw")
    c = sim.connect(login="nosel", password="N0sel!pw")
    missing = error_of(lambda: run(c, "SELECT TOP (0) 1 AS finalize_probe FROM [dbo].[nope];"))
    assert "208" in missing and "Invalid object name 'dbo.nope'." in missing, missing
    denied = error_of(lambda: run(c, "SELECT TOP (0) 1 AS finalize_probe FROM [dbo].[orders];"))
    assert "229" in denied and \
        "The SELECT permission was denied on the object 'orders', database 'demo', schema 'dbo'." in denied
    assert run(c, "SELECT OBJECT_ID(N'[dbo].[orders]'), OBJECT_ID(N'[dbo].[nope]')") == [[(None, None)]]
    assert run(c, "SELECT t.name FROM sys.tables AS t") == [[]], "no table is visible without a permission"
    assert run(c, "SELECT c.name FROM sys.columns AS c") == [[]]
    assert run(c, "EXEC sys.sp_cdc_help_change_data_capture") == [[]]
    c.close()

    sim.execute("GRANT SELECT ON [dbo].[plain] TO [nosel]; GRANT SELECT ON [dbo].[pay] TO [nosel]")
    c = sim.connect(login="nosel", password="N0sel!pw")
    assert run(c, "SELECT TOP (0) 1 AS finalize_probe FROM [dbo].[plain];") == [[]]
    assert run(c, "SELECT t.name, CONVERT(int, t.is_tracked_by_cdc) FROM sys.tables AS t ORDER BY t.name") == \
        [[("pay", 1), ("plain", 0)]]
    # dbo.pay has CDC, gated by cdc_reader: not listed until the login's user is a member.
    assert run(c, "EXEC sys.sp_cdc_help_change_data_capture") == [[]]
    sim.execute("ALTER ROLE [cdc_reader] ADD MEMBER [nosel]")
    assert [r[2] for r in run(c, "EXEC sys.sp_cdc_help_change_data_capture")[0]] == ["dbo_pay"]
    assert [r[0] for r in run(sim.connect(), "SELECT t.name FROM sys.tables AS t WHERE t.name IN "
                                              "(N'orders', N'pay', N'plain') ORDER BY t.name")[0]] == \
        ["orders", "pay", "plain"], "sa sees every table"
    c.close()


def test_dba_script_runs_verbatim_and_grants_least_privilege(gated):
    sim = gated
    # Before the script: no login.
    assert login_errors(sim, "finalize_reader", "Str0ng!pw") == [18456]
    sim.execute(DBA_SCRIPT.split("USE")[0])          # CREATE LOGIN only: no user in demo yet
    assert login_errors(sim, "finalize_reader", "Str0ng!pw") == [4060, 18456]
    sim.execute("DROP LOGIN [finalize_reader]")
    sim.execute(DBA_SCRIPT)
    c = sim.connect(login="finalize_reader", password="Str0ng!pw")
    oid = one(sim, "SELECT OBJECT_ID(N'dbo.orders')")
    assert run(c, "SELECT OBJECT_ID(N'[dbo].[orders]'), OBJECT_ID(N'[dbo].[pay]')") == [[(oid, None)]]
    [[(n,)]] = run(c, "SELECT COUNT_BIG(*) FROM cdc.fn_cdc_get_all_changes_dbo_orders("
                      "sys.fn_cdc_get_min_lsn(N'dbo_orders'), sys.fn_cdc_get_max_lsn(), N'all')")
    assert n == 2
    help_rows = run(c, "EXEC sys.sp_cdc_help_change_data_capture")[0]
    assert [r[2] for r in help_rows] == ["dbo_orders"]            # dbo.pay: no SELECT on the source
    msg = error_of(lambda: run(c, "SELECT COUNT_BIG(*) FROM [cdc].[dbo_orders_CT]"))
    assert "The SELECT permission was denied on the object 'dbo_orders_CT', database 'demo', schema 'cdc'." in msg
    # Not a sysadmin: security statements fail with SQL Server's errors.
    assert "15247" in error_of(lambda: run(c, "CREATE LOGIN [x] WITH PASSWORD = N'x'"))
    assert "15247" in error_of(lambda: run(c, "CREATE USER [x] FOR LOGIN [x]"))
    msg = error_of(lambda: run(c, "ALTER ROLE [cdc_reader] ADD MEMBER [finalize_reader]"))
    assert "Cannot alter the role 'cdc_reader', because it does not exist or you do not have permission." in msg
    # GRANT SELECT ON SCHEMA::cdc opens the change tables; REVOKE closes them again.
    sim.execute("GRANT SELECT ON SCHEMA::[cdc] TO [finalize_reader]")
    assert run(c, "SELECT COUNT_BIG(*) FROM [cdc].[dbo_orders_CT]") == [[(2,)]]
    sim.execute("REVOKE SELECT ON SCHEMA::[cdc] FROM [finalize_reader]")
    assert "229" in error_of(lambda: run(c, "SELECT COUNT_BIG(*) FROM [cdc].[dbo_orders_CT]"))
    # Gating role membership (added by the script) opens dbo_pay once SELECT on dbo.pay is granted.
    sim.execute("GRANT SELECT ON dbo.pay TO finalize_reader")
    assert run(c, "SELECT COUNT_BIG(*) FROM cdc.fn_cdc_get_all_changes_dbo_pay("
                  "sys.fn_cdc_get_min_lsn(N'dbo_pay'), sys.fn_cdc_get_max_lsn(), N'all')") == [[(1,)]]
    sim.execute("ALTER ROLE [cdc_reader] DROP MEMBER [finalize_reader]")
    assert run(c, "SELECT sys.fn_cdc_get_min_lsn(N'dbo_pay')") == [[(ZERO,)]]
    c.close()
    sim.execute("DROP USER [finalize_reader]")
    assert login_errors(sim, "finalize_reader", "Str0ng!pw") == [4060, 18456]
    drop_login_once_logged_out(sim, "finalize_reader")
    assert login_errors(sim, "finalize_reader", "Str0ng!pw") == [18456]


def test_security_statement_errors(gated):
    sim = gated
    msg = error_of(lambda: sim.execute("ALTER ROLE [nope] ADD MEMBER [dbo]"))
    assert "Cannot alter the role 'nope', because it does not exist or you do not have permission." in msg
    sim.execute("CREATE ROLE [r]; CREATE LOGIN l1 WITH PASSWORD = 'pw'; CREATE USER u1 FOR LOGIN l1; "
                "ALTER ROLE [r] ADD MEMBER [u1]; GRANT SELECT ON dbo.orders TO [r]")
    c = sim.connect(login="l1", password="pw")
    assert run(c, "SELECT COUNT_BIG(*) FROM dbo.orders") == [[(2,)]]      # through the role
    assert "15151" in error_of(lambda: sim.execute("GRANT SELECT ON dbo.nope TO u1"))
    assert "15151" in error_of(lambda: sim.execute("GRANT SELECT ON dbo.orders TO nobody"))
    assert "15007" in error_of(lambda: sim.execute("CREATE USER u2 FOR LOGIN nobody"))
    assert "15023" in error_of(lambda: sim.execute("CREATE ROLE [r]"))
    assert "15144" in error_of(lambda: sim.execute("DROP ROLE [r]"))
    sim.execute("ALTER ROLE [r] DROP MEMBER [u1]")
    assert "229" in error_of(lambda: run(c, "SELECT COUNT_BIG(*) FROM dbo.orders"))
    c.close()
    sim.execute("CREATE LOGIN l2 WITH PASSWORD = 'pw'")          # no user in demo: master only
    c = sim.connect(login="l2", password="pw", database="master")
    assert run(c, "SELECT DB_NAME()") == [[("master",)]]
    msg = error_of(lambda: run(c, "USE demo"))
    assert 'The server principal "l2" is not able to access the database "demo"' in msg
    c.close()


# --- 2. statement, scope and batch abortion ----------------------------------------------------

def test_208_aborts_the_batch_scope(sim):
    ev = raw_batch(sim, "SELECT 1 AS a; SELECT * FROM dbo.nope; SELECT 2 AS a;")
    assert rows_and_errors(ev) == [("row", [1]), ("error", 208)]
    assert ev[-1] == ("done", 0xFD, 0x02)


def test_208_inside_sp_executesql_aborts_only_its_scope(sim):
    ev = raw_batch(sim, "SELECT 1 AS a; EXEC sp_executesql N'SELECT * FROM dbo.nope; SELECT 3 AS a'; "
                        "SELECT 2 AS a;")
    assert rows_and_errors(ev) == [("row", [1]), ("error", 208), ("row", [2])]
    assert ("done", 0xFF, 0x03) in ev                # the inner statement's DONEINPROC(MORE|ERROR)
    assert ev[-1] == ("done", 0xFD, 0x10)            # final DONE(COUNT) of SELECT 2
    ev = raw_batch(sim, "SELECT 1 AS a; EXEC ('SELECT * FROM dbo.nope'); SELECT 2 AS a;")
    assert rows_and_errors(ev) == [("row", [1]), ("error", 208), ("row", [2])]


def test_a_variable_whose_initializer_fails_is_still_declared(sim):
    # Declarations are compile-time: after the failed initializer (a statement
    # error) the variable exists and is NULL, as on SQL Server (no Msg 137).
    ev = raw_batch(sim, "DECLARE @x int = 1 / 0; SELECT ISNULL(@x, -1) AS a;")
    assert rows_and_errors(ev) == [("error", 8134), ("row", [-1])]


def test_conversion_error_inside_sp_executesql_aborts_the_batch(sim):
    ev = raw_batch(sim, "SELECT 1 AS a; EXEC sp_executesql N'SELECT CONVERT(int, N''abc'') AS a; SELECT 3 AS a'; "
                        "SELECT 2 AS a;")
    assert rows_and_errors(ev) == [("row", [1]), ("error", 245)]
    assert ev[-2:] == [("done", 0xFF, 0x03), ("done", 0xFD, 0x02)]


def test_statement_errors_only_end_their_statement(sim):
    ev = raw_batch(sim, "SELECT 1 AS a; SELECT 1 / 0 AS a; "
                        "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(NULL, NULL, N'all'); SELECT 2 AS a")
    errs = [e for e in rows_and_errors(ev) if e[0] == "error"]
    assert [e for e in rows_and_errors(ev) if e[0] == "row"][-1] == ("row", [2])
    assert ("error", 313) in errs


# --- 3. faults inside sp_executesql ------------------------------------------------------------

def test_fault_fires_on_a_statement_inside_sp_executesql(make_sim):
    sim = make_sim(dummy_interval=0)
    commit(sim, inserts=3)
    advance(sim, 5)
    sim.call("sim.fault_error", number=601, **{"class": 12},
             message="Could not continue scan with NOLOCK due to data movement.",
             pattern="fn_cdc_get_all_changes_dbo_orders", count=1)
    # The outer statements never contain the pattern: it is assembled at run time.
    sql = ("DECLARE @s nvarchar(max) = N'SELECT COUNT_BIG(*) AS n FROM cdc.fn_cdc_get_' + N'all_changes_dbo_orders"
           "(sys.fn_cdc_get_min_lsn(N''dbo_orders''), sys.fn_cdc_get_max_lsn(), N''all'')'; "
           "EXEC sys.sp_executesql @s; SELECT 7 AS a")
    ev = raw_batch(sim, sql)
    assert rows_and_errors(ev) == [("error", 601)]      # 601 aborts the batch: SELECT 7 never runs
    c = sim.connect()
    assert run(c, sql) == [[(3,)], [(7,)]]             # fired once
    c.close()


# --- 4. collations -------------------------------------------------------------------------

def test_case_insensitive_default_collation(sim):
    assert one(sim, "SELECT CASE WHEN OBJECT_ID(N'dbo.ORDERS') = OBJECT_ID(N'dbo.orders') THEN 1 ELSE 0 END") == 1
    assert one(sim, "SELECT DATABASEPROPERTYEX(DB_NAME(), 'Collation')") == "SQL_Latin1_General_CP1_CI_AS"
    assert one(sim, "SELECT CASE WHEN N'abc' = N'ABC' THEN 1 ELSE 0 END") == 1


def test_case_sensitive_collation_keeps_names_apart(make_sim):
    sim = make_sim(dummy_interval=0, collation="SQL_Latin1_General_CP1_CS_AS")
    assert one(sim, "SELECT DATABASEPROPERTYEX(DB_NAME(), 'Collation')") == "SQL_Latin1_General_CP1_CS_AS"
    assert one(sim, "SELECT CASE WHEN N'abc' = N'ABC' THEN 1 ELSE 0 END") == 0
    sim.call("sim.create_table", name="Orders", columns="[Id] int NOT NULL, [v] nvarchar(10)")
    sim.call("sim.enable_table", name="Orders")
    commit(sim, table="dbo.Orders", inserts=2)
    commit(sim, table="dbo.orders", inserts=1)
    advance(sim, 5)
    lo, up = one(sim, "SELECT OBJECT_ID(N'dbo.orders')"), one(sim, "SELECT OBJECT_ID(N'[dbo].[Orders]')")
    assert lo and up and lo != up
    assert one(sim, "SELECT OBJECT_ID(N'dbo.ORDERS')") is None
    rows = sim.query("EXEC sys.sp_cdc_help_change_data_capture")
    got = {r["capture_instance"]: r["source_object_id"] for r in rows}
    assert got == {"dbo_orders": lo, "dbo_Orders": up}
    rows = sim.query("EXEC sys.sp_cdc_help_change_data_capture @source_schema = N'dbo', @source_name = N'Orders'")
    assert [r["capture_instance"] for r in rows] == ["dbo_Orders"]
    assert one(sim, "SELECT COUNT_BIG(*) FROM cdc.dbo_Orders_CT") == 2
    assert one(sim, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT") == 1
    q = ("SELECT COUNT_BIG(*) FROM cdc.fn_cdc_get_all_changes_%s(sys.fn_cdc_get_min_lsn(N'%s'), "
         "sys.fn_cdc_get_max_lsn(), N'all')")
    assert one(sim, q % ("dbo_Orders", "dbo_Orders")) == 2
    assert one(sim, q % ("dbo_orders", "dbo_orders")) == 1
    assert "208" in error_of(lambda: sim.query("SELECT COUNT_BIG(*) FROM dbo.ORDERS"))
    assert "207" in error_of(lambda: sim.query("SELECT ID FROM dbo.Orders"))


def test_login_envchange_reports_the_database_collation(make_sim):
    sim = make_sim(collation="Latin1_General_CS_AS")
    r = Raw(sim.port)
    r.prelogin()
    _, payload = r.login()
    r.close()
    assert b"\xE3\x08\x00\x07\x05" + bytes([0x09, 0x04, 0xC0, 0x00, 0x00]) + b"\x00" in payload


# --- 5. commit times stamped in another zone --------------------------------------------------

def test_commit_time_offset_moves_mapping_times_not_the_clock(make_sim):
    sim = make_sim(dummy_interval=0, commit_time_offset=120)
    c = commit(sim, inserts=1)
    advance(sim, 5)
    assert one(sim, "SELECT CONVERT(varchar(23), sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_max_lsn()), 121)") \
        == "2026-03-01 02:00:00.000"
    assert one(sim, "SELECT CONVERT(varchar(19), SYSDATETIME(), 121)") == "2026-03-01 00:00:05"
    assert one(sim, "SELECT CONVERT(varchar(19), SYSUTCDATETIME(), 121)") == "2026-03-01 00:00:05"
    assert str(c["commit_time_local"]).startswith("2026-03-01 02:00:00")
    # At run time: back to the clock for new commits.
    assert sim.call("sim.set_clock_quirk", commit_time_offset_minutes=0)[0][0]["commit_time_offset_minutes"] == 0
    commit(sim, inserts=1)
    advance(sim, 5)
    assert one(sim, "SELECT CONVERT(varchar(19), sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_max_lsn()), 121)") \
        == "2026-03-01 00:00:05"


def test_step_clock_moves_stamps_and_sysdatetime_not_lsns(make_sim):
    """A clock 60 s fast, then stepped back (NTP, a VM moved to another host): SQL Server stamps commits
    (and dummy rows) with its wall clock and SYSDATETIME() reads it, while LSNs keep increasing; so after
    the step a later commit carries an earlier time. The truth counts commits by those stamps, and its
    watermark is no later than the stepped-back clock: a commit may still be stamped there."""
    sim = make_sim(dummy_interval=0)
    step = sim.call("sim.step_clock", seconds=60)[0][0]
    assert str(step["clock_utc"]).startswith("2026-03-01 00:00:00")
    assert str(step["wall_clock_utc"]).startswith("2026-03-01 00:01:00") and step["step_seconds"] == 60
    assert one(sim, "SELECT CONVERT(varchar(19), SYSUTCDATETIME(), 121)") == "2026-03-01 00:01:00"
    fast = commit(sim, inserts=1, at="2026-03-01 00:00:10")
    assert str(fast["commit_time_utc"]).startswith("2026-03-01 00:00:10")        # the simulator's clock
    assert str(fast["commit_time_local"]).startswith("2026-03-01 00:01:10")      # the server's stamp
    advance(sim, 5)
    assert sim.call("sim.step_clock", seconds=-60)[0][0]["step_seconds"] == 0
    assert one(sim, "SELECT CONVERT(varchar(19), SYSDATETIME(), 121)") == "2026-03-01 00:00:15"
    sim.call("sim.capture_stop")
    back = commit(sim, inserts=2, at="2026-03-01 00:00:20")
    assert back["start_lsn"] > fast["start_lsn"]
    advance(sim, 5)
    w = sim.call("sim.truth_watermark")[0][0]
    assert str(w["watermark_utc"]).startswith("2026-03-01 00:00:20") and w["pending_transactions"] == 1
    sim.call("sim.capture_start")
    advance(sim, 5)
    assert one(sim, "SELECT sys.fn_cdc_get_max_lsn()") == back["start_lsn"]
    times = [r["t"] for r in sim.query("SELECT CONVERT(varchar(23), tran_end_time, 121) AS t "
                                       "FROM cdc.lsn_time_mapping ORDER BY start_lsn")]
    assert times == ["2026-03-01 00:01:10.000", "2026-03-01 00:00:20.000"], times
    w = sim.call("sim.truth_watermark")[0][0]
    assert str(w["watermark_utc"]).startswith("2026-03-01 00:00:30") and w["pending_transactions"] == 0
    counts = sim.call("sim.truth_counts", capture_instance="dbo_orders", granularity_seconds=60,
                      **{"from": "2026-03-01 00:00:00", "to": "2026-03-01 00:02:00"})[0]
    assert [r["inserts"] for r in counts] == [2, 1], counts
    stamps = [str(r["commit_time_utc"])[:19] for r in sim.call("sim.truth_commits", table="dbo.orders")[0]]
    assert stamps == ["2026-03-01 00:01:10", "2026-03-01 00:00:20"], stamps
    # dummy rows are stamped by the wall clock too
    sim.call("sim.set_job", dummy_interval=10)
    sim.call("sim.step_clock", seconds=-30)
    advance(sim, 15)
    assert one(sim, "SELECT CONVERT(varchar(19), sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_max_lsn()), 121)") \
        < "2026-03-01 00:00:20"


# --- 6. statement shapes of the C worker -------------------------------------------------------

def test_worker_statement_shapes(make_sim):
    sim = make_sim(dummy_interval=0, timezone="Europe/Berlin")
    commit(sim, inserts=3)
    commit(sim, inserts=1, updates=2, deletes=1)
    advance(sim, 5)
    c = sim.connect()
    mn = one(sim, "SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders')")
    mx = one(sim, "SELECT sys.fn_cdc_get_max_lsn()")
    sets = run(c, """DECLARE @now datetimeoffset(7) = SYSDATETIMEOFFSET();
SELECT m.max_lsn, sys.fn_cdc_map_lsn_to_time(m.max_lsn) AS max_time, CONVERT(datetime, SWITCHOFFSET(@now, '+00:00')) AS utc_now, DATEPART(TZOFFSET, @now) AS tz FROM (SELECT sys.fn_cdc_get_max_lsn() AS max_lsn) AS m;
SELECT 1 AS tag, OBJECT_ID(N'[dbo].[orders]') UNION ALL SELECT 2, OBJECT_ID(N'[dbo].[nope]');
EXEC sys.sp_cdc_help_change_data_capture;
EXEC sys.sp_executesql N'SELECT @tag AS tag, COUNT_BIG(CASE WHEN r.op = 2 THEN 1 END) AS ins, COUNT_BIG(CASE WHEN r.op = 4 THEN 1 END) AS upd, COUNT_BIG(CASE WHEN r.op = 1 THEN 1 END) AS del, MIN(t.ct) AS first_time, MAX(t.ct) AS last_time FROM (SELECT a.[__$start_lsn] AS l, a.[__$operation] AS op FROM [cdc].[fn_cdc_get_all_changes_dbo_orders](@from, @to, N''all'') AS a) AS r JOIN (SELECT d.l, sys.fn_cdc_map_lsn_to_time(d.l) AS ct FROM (SELECT DISTINCT f.[__$start_lsn] AS l FROM [cdc].[fn_cdc_get_all_changes_dbo_orders](@from, @to, N''all'') AS f) AS d) AS t ON t.l = r.l', N'@tag int, @from binary(10), @to binary(10)', @tag = 3, @from = 0x%s, @to = 0x%s;
EXEC sys.sp_executesql N'SELECT @tag AS tag, m.min_lsn, sys.fn_cdc_map_lsn_to_time(m.min_lsn) AS min_time FROM (SELECT sys.fn_cdc_get_min_lsn(@ci) AS min_lsn) AS m', N'@tag int, @ci sysname', @tag = 4, @ci = N'dbo_orders';
SELECT 5 AS tag; EXEC sys.sp_cdc_get_ddl_history @capture_instance = N'dbo_orders';""" % (mn.hex(), mx.hex()))
    assert len(sets) == 7, sets
    (max_lsn, max_time, utc_now, tz), = sets[0]
    assert max_lsn == mx and tz == 60 and max_time is not None
    assert str(utc_now).startswith("2026-03-01 00:00:05")
    oid = one(sim, "SELECT OBJECT_ID(N'dbo.orders')")
    assert sets[1] == [(1, oid), (2, None)]
    cur = c.cursor()
    cur.execute("EXEC sys.sp_cdc_help_change_data_capture")
    assert [d[0] for d in cur.description] == [
        "source_schema", "source_table", "capture_instance", "object_id", "source_object_id", "start_lsn",
        "end_lsn", "supports_net_changes", "has_drop_pending", "role_name", "index_name", "filegroup_name",
        "create_date", "index_column_list", "captured_column_list"]
    assert cur.fetchall()[0][4] == oid
    tag, ins, upd, dele, first, last = sets[3][0]
    assert (tag, ins, upd, dele) == (3, 4, 2, 1) and first <= last
    assert sets[4][0][0] == 4 and sets[4][0][1] == mn
    assert sets[5] == [(5,)] and sets[6] == []
    c.close()


def test_all_changes_range_is_from_to_inclusive_and_313_outside(make_sim):
    sim = make_sim(dummy_interval=0)
    a = commit(sim, inserts=2)
    b = commit(sim, inserts=1)
    advance(sim, 5)
    q = "SELECT COUNT_BIG(*) FROM cdc.fn_cdc_get_all_changes_dbo_orders(%s, %s, N'all')"
    mx = "sys.fn_cdc_get_max_lsn()"
    # (from, to] as the worker asks it: from = increment of the last LSN it has seen.
    assert one(sim, q % ("sys.fn_cdc_increment_lsn(0x%s)" % a["start_lsn"].hex(), mx)) == 1
    assert one(sim, q % ("0x" + a["start_lsn"].hex(), mx)) == 2 + 1
    for lo, hi in [(mx, "sys.fn_cdc_get_min_lsn(N'dbo_orders')"),                  # from > to
                   ("sys.fn_cdc_get_min_lsn(N'dbo_orders')", "sys.fn_cdc_increment_lsn(%s)" % mx)]:  # to > max
        msg = error_of(lambda: sim.query(q % (lo, hi)))
        assert ("An insufficient number of arguments were supplied for the procedure or function "
                "cdc.fn_cdc_get_all_changes_ ... .") in msg
    sim.call("sim.cleanup", low_lsn=b["start_lsn"])
    msg = error_of(lambda: sim.query(q % ("0x" + a["start_lsn"].hex(), mx)))     # from < min after cleanup
    assert "313" in msg or "insufficient number of arguments" in msg
