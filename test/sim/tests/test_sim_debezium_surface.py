"""What Debezium's SQL Server connector (3.6, test/peers/debezium) sends, as SQL Server defines it: common table
expressions with ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...), three-part names, TODATETIMEOFFSET with
DATEPART(TZOFFSET, SYSDATETIMEOFFSET()) in a non-UTC --timezone across DST, sys.dm_server_services and
sys.dm_cdc_log_scan_sessions with their permission errors, direct change-table reads and sp_cdc_help_jobs."""
import struct

import pymssql
import pytest

from tdsraw import Raw

CHANGE_TABLES_CTE = (
    "WITH ordered_change_tables AS (SELECT ROW_NUMBER() OVER (PARTITION BY ct.source_object_id, ct.start_lsn "
    "ORDER BY ct.create_date DESC) AS ct_sequence, ct.* FROM [demo].cdc.change_tables AS ct) "
    "SELECT OBJECT_SCHEMA_NAME(source_object_id, DB_ID('demo')), OBJECT_NAME(source_object_id, DB_ID('demo')), "
    "capture_instance, object_id, start_lsn FROM ordered_change_tables WHERE ct_sequence = 1")


def error_of(sim, sql, conn=None):
    """The error number pymssql reports for ``sql``."""
    cur = (conn or sim.connect()).cursor()
    with pytest.raises(pymssql.Error) as e:
        cur.execute(sql)
        while cur.nextset():
            pass
    return e.value.args[0]


def raw_errors(sim, sql, user="sa", password="Passw0rd!"):
    """[(number, class, state, message)] of every ERROR token the batch ``sql`` gets (raw TDS)."""
    r = Raw(sim.port)
    r.prelogin()
    r.login(user=user, password=password)
    r.batch(sql)
    _, payload = r.message()
    r.close()
    out, i = [], 0
    while i < len(payload):
        t = payload[i]
        if t in (0xFD, 0xFE, 0xFF):
            i += 13
        elif t == 0xAA:
            n = struct.unpack_from("<H", payload, i + 1)[0]
            number, state, cls = struct.unpack_from("<iBB", payload, i + 3)
            mlen = struct.unpack_from("<H", payload, i + 9)[0]
            msg = payload[i + 11:i + 11 + 2 * mlen].decode("utf-16-le")
            out.append((number, cls, state, msg))
            i += 3 + n
        else:
            raise ValueError("unexpected token 0x%02x" % t)
    return out


@pytest.fixture
def captured(make_sim):
    """A simulator with three captured inserts."""
    sim = make_sim()
    sim.call("sim.commit", table="dbo.orders", inserts=3)
    sim.call("sim.advance", seconds=10)
    return sim


# --- common table expressions ------------------------------------------------------------------------------

def test_debezium_change_tables_cte(captured):
    cur = captured.connect().cursor()
    cur.execute(CHANGE_TABLES_CTE)
    rows = cur.fetchall()
    assert len(rows) == 1
    assert rows[0][:3] == ("dbo", "orders", "dbo_orders")


def test_cte_row_number_partition_keeps_newest_per_group(sim):
    rows = sim.query("WITH t AS (SELECT order_id % 2 AS g, order_id, ROW_NUMBER() OVER (PARTITION BY order_id % 2 "
                     "ORDER BY order_id DESC) AS rn FROM dbo.orders) SELECT g, order_id FROM t WHERE rn = 1 ORDER BY g")
    top = sim.query("SELECT order_id % 2 AS g, MAX(order_id) AS m FROM dbo.orders GROUP BY order_id % 2 ORDER BY g")
    assert [(r["g"], r["order_id"]) for r in rows] == [(r["g"], r["m"]) for r in top]


def test_cte_column_list_chaining_and_name_hiding(sim):
    rows = sim.query("WITH a (x, y) AS (SELECT 1, 2), b AS (SELECT x + y AS s FROM a), orders AS (SELECT 42 AS z) "
                     "SELECT s, (SELECT z FROM orders) AS z, (SELECT COUNT(*) FROM dbo.orders) - "
                     "(SELECT COUNT(*) FROM dbo.orders) AS d FROM b")
    assert rows == [{"s": 3, "z": 42, "d": 0}]
    # visible in subqueries and in both branches of a UNION; a CTE read twice
    rows = sim.query("WITH c AS (SELECT 5 AS v) SELECT v FROM c UNION ALL SELECT v + 1 FROM c WHERE v IN (SELECT v FROM c)")
    assert sorted(r["v"] for r in rows) == [5, 6]
    assert sim.query(";WITH c AS (SELECT 1 AS v) SELECT * FROM c") == [{"v": 1}]


@pytest.mark.parametrize("sql,number", [
    ("WITH c AS (SELECT 1) SELECT * FROM c", 8155),
    ("WITH c AS (SELECT 1 AS a, 2 AS a) SELECT * FROM c", 8156),
    ("WITH c (a) AS (SELECT 1, 2) SELECT * FROM c", 8158),
    ("WITH c (a, b) AS (SELECT 1) SELECT * FROM c", 8159),
    ("WITH c AS (SELECT 1 AS a), c AS (SELECT 2 AS a) SELECT * FROM c", 239),
    ("WITH c AS (SELECT order_id FROM dbo.orders ORDER BY order_id) SELECT * FROM c", 1033),
    ("WITH c AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM c WHERE n < 3) SELECT * FROM c", 50000),
    ("WITH c AS (SELECT 1 AS a) DELETE FROM dbo.orders", 50000),
    ("WITH c AS (SELECT 1 AS a)", 102),
])
def test_cte_errors(sim, sql, number):
    assert error_of(sim, sql) == number


def test_cte_order_by_with_top_is_allowed(sim):
    rows = sim.query("WITH c AS (SELECT TOP (2) order_id FROM dbo.orders ORDER BY order_id DESC) "
                     "SELECT MIN(order_id) AS m FROM c")
    assert rows[0]["m"] == sim.query("SELECT MAX(order_id) - 1 AS m FROM dbo.orders")[0]["m"]


# --- three-part names ----------------------------------------------------------------------------------------

def test_three_part_names_of_the_current_database(captured):
    s = captured
    assert s.query("SELECT [demo].sys.fn_cdc_get_max_lsn() AS m")[0]["m"] == s.query(
        "SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"]
    assert s.query("SELECT MAX(start_lsn) AS m FROM [demo].cdc.lsn_time_mapping WHERE tran_id <> 0x00")[0]["m"]
    n = s.query("SELECT MAX(start_lsn) AS m FROM (SELECT TOP (1 + 1) start_lsn FROM [demo].cdc.lsn_time_mapping "
                "WHERE tran_id <> 0x00 ORDER BY start_lsn) AS next_lsns")[0]["m"]
    assert n is not None
    assert len(s.query("SELECT TOP(0) * FROM [demo].[dbo].[orders] WITH (TABLOCKX)")) == 0


@pytest.mark.parametrize("sql", ["SELECT * FROM [nodb].dbo.orders", "SELECT * FROM master.cdc.change_tables"])
def test_three_part_name_of_another_database_is_208(sim, sql):
    assert error_of(sim, sql) == 208


# --- TODATETIMEOFFSET(fn_cdc_map_lsn_to_time(x), DATEPART(TZOFFSET, SYSDATETIMEOFFSET())) ------------------

def test_lsn_time_with_current_offset_across_dst(make_sim):
    """The commit's local datetime gets the server's offset *now* (SQL Server converts nothing): committed at
    01:00 CEST (+02:00), read after the fall-back the same wall time carries +01:00."""
    sim = make_sim(timezone="Europe/Berlin", start_time="2026-10-24T23:00:00Z")
    sim.call("sim.commit", table="dbo.orders", inserts=1)
    sim.call("sim.advance", seconds=10)
    dto = ("TODATETIMEOFFSET([demo].sys.fn_cdc_map_lsn_to_time([__$start_lsn]), DATEPART(TZOFFSET, "
           "SYSDATETIMEOFFSET()))")
    q = ("SELECT TOP 1 DATEPART(TZOFFSET, %s) AS t_off, CONVERT(varchar(19), CONVERT(datetime2(0), %s), 120) AS t_local, "
         "DATEPART(TZOFFSET, SYSDATETIMEOFFSET()) AS o FROM "
         "[demo].cdc.[fn_cdc_get_all_changes_dbo_orders](sys.fn_cdc_get_min_lsn('dbo_orders'), "
         "sys.fn_cdc_get_max_lsn(), N'all update old') ORDER BY [__$start_lsn] DESC" % (dto, dto))
    assert sim.query(q)[0] == {"t_off": 120, "t_local": "2026-10-25 01:00:00", "o": 120}
    sim.call("sim.advance", to="2026-10-25T01:30:00Z")
    assert sim.query(q)[0] == {"t_off": 60, "t_local": "2026-10-25 01:00:00", "o": 60}
    # the direct-mode form over cdc.lsn_time_mapping gives the same value
    dto = "TODATETIMEOFFSET(ltm.tran_begin_time, DATEPART(TZOFFSET, SYSDATETIMEOFFSET()))"
    direct = sim.query("SELECT TOP 1 DATEPART(TZOFFSET, %s) AS t_off, CONVERT(varchar(19), CONVERT(datetime2(0), %s), "
                       "120) AS t_local FROM [demo].cdc.[dbo_orders_CT] AS cdc_data LEFT JOIN "
                       "[demo].cdc.lsn_time_mapping ltm ON ltm.start_lsn = cdc_data.[__$start_lsn] "
                       "ORDER BY cdc_data.[__$start_lsn] DESC" % (dto, dto))
    assert direct == [{"t_off": 60, "t_local": "2026-10-25 01:00:00"}]


# --- dynamic management views -------------------------------------------------------------------------------

def test_dm_server_services_agent_running_for_sysadmin(sim):
    rows = sim.query("SELECT CASE WHEN dss.[status]=4 THEN 1 ELSE 0 END AS isRunning FROM [demo].sys.dm_server_services "
                     "dss WHERE dss.[servicename] LIKE N'SQL Server Agent (%';")
    assert rows == [{"isRunning": 1}]


def test_dm_views_refuse_a_login_without_server_or_database_state(make_sim):
    sim = make_sim()
    sim.call("sim.create_login", login="plainuser", password="Pl4in!pw", cdc_select=1)
    errs = raw_errors(sim, "SELECT * FROM sys.dm_server_services", "plainuser", "Pl4in!pw")
    assert errs == [(300, 14, 1, "VIEW SERVER STATE permission was denied on object 'server', database 'master'."),
                    (297, 16, 1, "The user does not have permission to perform this action.")]
    errs = raw_errors(sim, "SELECT TOP 1 start_lsn from sys.dm_cdc_log_scan_sessions ORDER BY session_id DESC",
                      "plainuser", "Pl4in!pw")
    assert errs == [(262, 14, 1, "VIEW DATABASE STATE permission denied in database 'demo'."),
                    (297, 16, 1, "The user does not have permission to perform this action.")]
    # GRANT VIEW DATABASE STATE opens the database-scoped view, not the server-scoped one
    sim.execute("GRANT VIEW DATABASE STATE TO plainuser")
    conn = sim.connect("plainuser", "Pl4in!pw")
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM sys.dm_cdc_log_scan_sessions")
    assert cur.fetchone()[0] >= 0
    assert error_of(sim, "SELECT * FROM sys.dm_server_services", conn) in (297, 300)


def test_dm_cdc_log_scan_sessions_rows(make_sim):
    sim = make_sim()
    sim.call("sim.commit", table="dbo.orders", inserts=2)
    sim.call("sim.advance", seconds=6)
    sim.call("sim.advance", seconds=6)            # a cycle that finds nothing: an empty session
    rows = sim.query("SELECT session_id, scan_phase, start_lsn, tran_count, command_count, empty_scan_count "
                     "FROM sys.dm_cdc_log_scan_sessions ORDER BY session_id")
    assert rows[0]["session_id"] == 0 and rows[0]["scan_phase"] == "Aggregate"
    assert sum(r["command_count"] for r in rows[1:]) == rows[0]["command_count"] >= 2
    last = rows[-1]
    assert last["start_lsn"] == "00000000:00000000:0000\x00" and last["tran_count"] == 0
    assert last["empty_scan_count"] >= 1
    busy = [r for r in rows[1:] if r["tran_count"]]
    assert busy and len(busy[0]["start_lsn"]) == 23 and busy[0]["start_lsn"].endswith("\x00")
    top = sim.query("SELECT TOP 1 start_lsn from sys.dm_cdc_log_scan_sessions ORDER BY session_id DESC")
    assert top == [{"start_lsn": "00000000:00000000:0000\x00"}]


# --- direct reads, the query functions and sp_cdc_help_jobs for a least-privilege login ----------------------

@pytest.fixture
def gated(make_sim):
    """dbo.orders captured with gating role cdc_reader; login dbz: the role, SELECT on dbo.orders and on the
    three cdc metadata tables, nothing on cdc.dbo_orders_CT."""
    sim = make_sim()
    sim.execute("EXEC sys.sp_cdc_disable_table @source_schema = N'dbo', @source_name = N'orders', "
                "@capture_instance = N'dbo_orders'")
    sim.execute("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', "
                "@role_name = N'cdc_reader'")
    for stmt in ("CREATE LOGIN dbz WITH PASSWORD = N'Dbz_pass1', CHECK_POLICY = OFF, DEFAULT_DATABASE = demo",
                 "CREATE USER dbz FOR LOGIN dbz", "ALTER ROLE cdc_reader ADD MEMBER dbz",
                 "GRANT SELECT ON dbo.orders TO dbz", "GRANT SELECT ON cdc.change_tables TO dbz",
                 "GRANT SELECT ON cdc.captured_columns TO dbz", "GRANT SELECT ON cdc.lsn_time_mapping TO dbz"):
        sim.execute(stmt)
    sim.call("sim.commit", table="dbo.orders", inserts=2)
    sim.call("sim.advance", seconds=10)
    return sim


def test_least_privilege_login_reads_functions_not_the_change_table(gated):
    conn = gated.connect("dbz", "Dbz_pass1")
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM [demo].cdc.[fn_cdc_get_all_changes_dbo_orders](sys.fn_cdc_get_min_lsn("
                "'dbo_orders'), sys.fn_cdc_get_max_lsn(), N'all update old')")
    assert cur.fetchone()[0] == 2
    cur.execute(CHANGE_TABLES_CTE)
    assert len(cur.fetchall()) == 1
    errs = raw_errors(gated, "SELECT TOP 1 cdc_data.[__$start_lsn] FROM [demo].cdc.[dbo_orders_CT] AS cdc_data LEFT "
                      "JOIN [demo].cdc.lsn_time_mapping ltm ON ltm.start_lsn = cdc_data.[__$start_lsn]",
                      "dbz", "Dbz_pass1")
    assert errs == [(229, 14, 5, "The SELECT permission was denied on the object 'dbo_orders_CT', database 'demo', "
                                 "schema 'cdc'.")]
    gated.execute("REVOKE SELECT ON cdc.change_tables FROM dbz")
    assert error_of(gated, "SELECT * FROM [demo].cdc.change_tables", gated.connect("dbz", "Dbz_pass1")) == 229
    gated.execute("GRANT SELECT ON cdc.dbo_orders_CT TO dbz")
    cur.execute("SELECT COUNT(*) FROM [demo].cdc.[dbo_orders_CT]")
    assert cur.fetchone()[0] == 2


def test_sp_cdc_help_jobs_needs_db_owner(gated):
    errs = raw_errors(gated, "EXEC sys.sp_cdc_help_jobs", "dbz", "Dbz_pass1")
    assert [e[0] for e in errs] == [22904]
    gated.call("sim.create_login", login="owner", password="Own3r!pw", db_owner=1)
    cur = gated.connect("owner", "Own3r!pw").cursor()
    cur.execute("EXEC sys.sp_cdc_help_jobs")
    assert sorted(r[1] for r in cur.fetchall()) == ["capture", "cleanup"]
