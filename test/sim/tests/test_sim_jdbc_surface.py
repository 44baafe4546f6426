"""What Microsoft's JDBC driver relies on (test/peers/jdbc runs the driver itself): LOGIN7 FeatureExt and
FEATUREEXTACK, prepared statements and OUTPUT parameters, IF / BEGIN...END, transactions, savepoints and implicit
transactions, session settings, table variables with INSERT ... EXEC, and the ODBC catalog procedures."""
import struct

import pymssql
import pytest

from simtest_util import one
from tdsraw import Raw


def sets(sim, sql):
    return sim.execute(sql)


def error_of(sim, sql):
    with pytest.raises(pymssql.Error) as e:
        sim.execute(sql)
    return e.value.args[0]


def login_tokens(payload):
    """Token types of a login response, with FEATUREEXTACK's (id, data) list."""
    i, out, acks = 0, [], None
    while i < len(payload):
        t = payload[i]
        out.append(t)
        if t in (0xAA, 0xAB, 0xAD, 0xE3):
            i += 3 + struct.unpack_from("<H", payload, i + 1)[0]
        elif t == 0xAE:
            acks, i = [], i + 1
            while payload[i] != 0xFF:
                n = struct.unpack_from("<I", payload, i + 1)[0]
                acks.append((payload[i], payload[i + 5:i + 5 + n]))
                i += 5 + n
            i += 1
        elif t == 0xFD:
            i += 13
        else:
            raise ValueError("token 0x%02x" % t)
    return out, acks


# --- LOGIN7 ------------------------------------------------------------------------------------------------

def test_featureext_utf8_support_is_acknowledged_after_loginack(sim):
    r = Raw(sim.port)
    r.prelogin()
    _, payload = r.login(features=[(0x01, b""), (0x04, b"\x01"), (0x09, b"\x02"), (0x0A, b""),
                                   (0x10, "agent".encode("utf-16-le"))])
    toks, acks = login_tokens(payload)
    assert toks.index(0xAE) == toks.index(0xAD) + 1          # FEATUREEXTACK goes with LOGINACK
    assert acks == [(0x0A, b"\x01")]                         # no SESSIONRECOVERY, COLUMNENCRYPTION, ... ack
    r.close()


def test_no_featureextack_without_a_requested_feature_it_supports(sim):
    r = Raw(sim.port)
    r.prelogin()
    _, payload = r.login(features=[(0x01, b""), (0x0D, b"\x01")])
    toks, acks = login_tokens(payload)
    assert 0xAD in toks and 0xAE not in toks and acks is None
    r.close()


def test_a_featureext_without_terminator_closes_the_connection(sim):
    r = Raw(sim.port)
    r.prelogin()
    with pytest.raises((EOFError, ConnectionError)):
        r.login(feature_ext=b"\x0a\x01\x00\x00\x00\x01")
    r.close()


# --- control of flow, transactions, savepoints ---------------------------------------------------------------

def test_if_else_and_begin_end(sim):
    assert sets(sim, "IF 1 = 0 SELECT 1 AS a ELSE BEGIN SELECT 2 AS a; SELECT 3 AS b END") == [[{"a": 2}], [{"b": 3}]]
    assert one(sim, "DECLARE @r int; IF EXISTS (SELECT 1 FROM sys.tables WHERE name = N'orders') SET @r = 1 "
                    "ELSE SET @r = 0; SELECT @r") == 1
    assert sets(sim, "IF @@TRANCOUNT > 0 COMMIT TRAN") == []           # nothing ran: no error


def test_savepoints_and_their_errors(sim):
    conn = sim.connect()
    try:
        cur = conn.cursor()
        with pytest.raises(pymssql.Error) as e:
            cur.execute("SAVE TRANSACTION x")
        assert e.value.args[0] == 628
        cur.execute("BEGIN TRAN t1; SAVE TRAN s1; SAVE TRAN s2; ROLLBACK TRAN s1; SELECT @@TRANCOUNT")
        assert cur.fetchall() == [(1,)]
        with pytest.raises(pymssql.Error) as e:
            cur.execute("ROLLBACK TRAN s2")                 # gone with the rollback to s1
        assert e.value.args[0] == 6401
        cur.execute("ROLLBACK TRAN t1; SELECT @@TRANCOUNT")
        assert cur.fetchall() == [(0,)]
    finally:
        conn.close()


def test_implicit_transactions_as_the_jdbc_driver_uses_them(sim):
    conn = sim.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET IMPLICIT_TRANSACTIONS ON; SELECT @@TRANCOUNT, @@OPTIONS & 2")
        assert cur.fetchall() == [(0, 2)]                   # SELECT without a table opens nothing
        cur.execute("SELECT COUNT(*) FROM dbo.orders; SELECT @@TRANCOUNT")
        cur.fetchall()
        cur.nextset()
        assert cur.fetchall() == [(1,)]
        cur.execute("IF @@TRANCOUNT > 0 COMMIT TRAN; SELECT @@TRANCOUNT")
        assert cur.fetchall() == [(0,)]
        # the driver's setSavepoint(): BEGIN TRAN at @@TRANCOUNT 0 opens two nested transactions
        cur.execute("IF @@TRANCOUNT = 0 BEGIN BEGIN TRAN IF @@TRANCOUNT = 2 COMMIT TRAN END SAVE TRAN [sp1]; "
                    "SELECT @@TRANCOUNT")
        assert cur.fetchall() == [(1,)]
        cur.execute("IF @@TRANCOUNT > 0 ROLLBACK TRAN [sp1]; SELECT @@TRANCOUNT")
        assert cur.fetchall() == [(1,)]
        cur.execute("set implicit_transactions off IF @@TRANCOUNT > 0 COMMIT TRAN; SELECT @@TRANCOUNT, @@OPTIONS & 2")
        assert cur.fetchall() == [(0, 0)]
    finally:
        conn.close()


# --- session settings ----------------------------------------------------------------------------------------

def test_lock_timeout_and_isolation_level_per_session(sim):
    conn = sim.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET LOCK_TIMEOUT 2500; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; "
                    "SELECT @@LOCK_TIMEOUT, transaction_isolation_level, lock_timeout FROM sys.dm_exec_sessions "
                    "WHERE session_id = @@SPID")
        assert cur.fetchall() == [(2500, 3, 2500)]
        other = sim.connect()
        try:
            oc = other.cursor()
            oc.execute("SELECT @@LOCK_TIMEOUT, transaction_isolation_level FROM sys.dm_exec_sessions WHERE "
                       "session_id = @@SPID")
            assert oc.fetchall() == [(-1, 2)]
        finally:
            other.close()
        with pytest.raises(pymssql.Error) as e:
            cur.execute("SET LOCK_TIMEOUT abc")
        assert e.value.args[0] == 102
    finally:
        conn.close()


def test_dm_exec_sessions_shows_a_login_without_view_server_state_only_its_own_session(make_sim):
    s = make_sim()
    s.call("sim.create_login", login="dmv", password="pw")
    assert one(s, "SELECT COUNT(*) FROM sys.dm_exec_sessions") >= 1
    conn = s.connect(login="dmv", password="pw")
    try:
        cur = conn.cursor()
        cur.execute("SELECT session_id, login_name FROM sys.dm_exec_sessions")
        rows = cur.fetchall()
        cur.execute("SELECT @@SPID")
        assert rows == [(cur.fetchall()[0][0], "dmv")]
    finally:
        conn.close()


def test_snapshot_isolation_needs_allow_snapshot_isolation(make_sim):
    s = make_sim()
    conn = s.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET TRANSACTION ISOLATION LEVEL SNAPSHOT; SELECT 1")          # no data access: fine
        with pytest.raises(pymssql.Error) as e:
            cur.execute("SELECT COUNT(*) FROM cdc.lsn_time_mapping")
        assert e.value.args[0] == 3952
        cur.execute("ALTER DATABASE [demo] SET ALLOW_SNAPSHOT_ISOLATION ON")
        cur.execute("SELECT snapshot_isolation_state, snapshot_isolation_state_desc FROM sys.databases "
                    "WHERE name = N'demo'")
        assert cur.fetchall() == [(1, "ON")]
        cur.execute("SELECT COUNT(*) FROM cdc.lsn_time_mapping")
        cur.fetchall()
    finally:
        conn.close()


# --- prepared statements and OUTPUT parameters in T-SQL -----------------------------------------------------

def test_sp_prepare_execute_unprepare_in_tsql(sim):
    conn = sim.connect()
    try:
        cur = conn.cursor()
        cur.execute("DECLARE @h int; EXEC sp_prepare @h OUTPUT, N'@a int', N'SELECT @a * 2 AS v', 1; SELECT @h")
        rows = []
        while True:
            if cur.description:
                rows.append((cur.description[0][0], cur.fetchall()))
            if not cur.nextset():
                break
        assert rows[0] == ("v", [])                    # @options = 1: the result set's metadata, no rows
        h = rows[-1][1][0][0]
        cur.execute("EXEC sp_execute %d, 21" % h)
        assert cur.fetchall() == [(42,)]
        cur.execute("EXEC sp_unprepare %d" % h)
        with pytest.raises(pymssql.Error) as e:
            cur.execute("EXEC sp_execute %d, 1" % h)
        assert e.value.args[0] == 8179
    finally:
        conn.close()


def test_sp_executesql_output_parameters_and_exec_return_status(sim):
    got = sim.execute("DECLARE @n int, @rc int; EXEC sp_executesql N'SET @x = @y + 1', N'@x int OUTPUT, @y int', "
                      "@x = @n OUTPUT, @y = 41; EXEC @rc = sys.sp_cdc_help_jobs; SELECT @n + @rc AS v")
    assert len(got[0]) == 2 and got[-1] == [{"v": 42}]
    assert error_of(sim, "DECLARE @n int; EXEC sp_executesql N'SET @x = 1', N'@x int', @x = @n OUTPUT") == 8162


# --- table variables, INSERT ... EXEC ---------------------------------------------------------------------------

def test_table_variable_insert_exec_select(sim):
    rows = sim.query("DECLARE @t TABLE(job_id nvarchar(36), job_type nvarchar(20) NOT NULL, job_name sysname, "
                     "maxtrans int, maxscans int, continuous bit, pollinginterval bigint, retention bigint, "
                     "threshold bigint); INSERT INTO @t (job_type) VALUES (N'x'), (N'y'); "
                     "INSERT INTO @t EXEC sys.sp_cdc_help_jobs; SELECT job_type, retention FROM @t ORDER BY job_type")
    assert [r["job_type"] for r in rows] == ["capture", "cleanup", "x", "y"]
    assert rows[1]["retention"] == 4320
    assert error_of(sim, "DECLARE @t TABLE(a int); INSERT INTO @t EXEC sys.sp_cdc_help_jobs") == 213
    assert error_of(sim, "SELECT * FROM @nope") == 1087
    got = sim.query("DECLARE @t TABLE(job_type nvarchar(20), k int); "
                    "INSERT INTO @t SELECT N'a', 1 UNION ALL SELECT N'b', 2; "
                    "SELECT job_type, k FROM @t WHERE k > 1")
    assert got == [{"job_type": "b", "k": 2}]


# --- catalog procedures -----------------------------------------------------------------------------------------

def test_sp_tables(sim):
    rows = sim.query("EXEC sp_tables @table_name = N'ord_rs', @table_owner = N'dbo', @table_type = N'''TABLE'''")
    assert rows == [{"TABLE_QUALIFIER": "demo", "TABLE_OWNER": "dbo", "TABLE_NAME": "orders", "TABLE_TYPE": "TABLE",
                     "REMARKS": None}]
    assert sim.query("EXEC sp_tables N'ord[_]rs', N'dbo'") == []
    assert any(r["TABLE_NAME"] == "lsn_time_mapping" for r in sim.query("EXEC sp_tables N'%', N'cdc'"))
    assert error_of(sim, "EXEC sp_tables N'orders', N'dbo', N'master'") == 15250


def test_sp_columns_100_shape_and_odbc_values(sim):
    rows = sim.query("EXEC sp_columns_100 N'orders', N'dbo', NULL, NULL, 2, 3")
    assert [r["COLUMN_NAME"] for r in rows] == ["order_id", "customer", "amount", "status", "created_at"]
    assert len(rows[0]) == 29
    oid, cust, amt, _, ts = rows
    assert (oid["DATA_TYPE"], oid["TYPE_NAME"], oid["PRECISION"], oid["LENGTH"], oid["NULLABLE"],
            oid["IS_NULLABLE"], oid["SS_DATA_TYPE"]) == (4, "int", 10, 4, 0, "NO", 56)
    assert (cust["DATA_TYPE"], cust["PRECISION"], cust["LENGTH"], cust["CHAR_OCTET_LENGTH"]) == (-9, 40, 80, 80)
    assert (amt["DATA_TYPE"], amt["PRECISION"], amt["SCALE"], amt["RADIX"]) == (3, 12, 2, 10)
    assert (ts["DATA_TYPE"], ts["PRECISION"], ts["LENGTH"], ts["SCALE"], ts["SQL_DATA_TYPE"],
            ts["SQL_DATETIME_SUB"]) == (93, 27, 16, 7, 9, 3)
    assert len(sim.query("EXEC sp_columns N'orders'")[0]) == 19
    assert error_of(sim, "EXEC sp_columns_170 N'orders'") == 2812     # SQL Server 2025 only


def test_getcolumns_batch_of_the_jdbc_driver(sim):
    rows = sim.query(
        "DECLARE @r TABLE(TABLE_QUALIFIER SYSNAME, TABLE_OWNER SYSNAME, TABLE_NAME SYSNAME, COLUMN_NAME SYSNAME, "
        "DATA_TYPE SMALLINT, TYPE_NAME SYSNAME, PRECISION INT, LENGTH INT, SCALE SMALLINT, RADIX SMALLINT, "
        "NULLABLE SMALLINT, REMARKS VARCHAR(254), COLUMN_DEF NVARCHAR(4000), SQL_DATA_TYPE SMALLINT, "
        "SQL_DATETIME_SUB SMALLINT, CHAR_OCTET_LENGTH INT, ORDINAL_POSITION INT, IS_NULLABLE VARCHAR(254), "
        "SS_IS_SPARSE SMALLINT, SS_IS_COLUMN_SET SMALLINT, SS_IS_COMPUTED SMALLINT, SS_IS_IDENTITY SMALLINT, "
        "SS_UDT_CATALOG_NAME NVARCHAR(128), SS_UDT_SCHEMA_NAME NVARCHAR(128), SS_UDT_ASSEMBLY_TYPE_NAME NVARCHAR(max), "
        "SS_XML_SCHEMACOLLECTION_CATALOG_NAME NVARCHAR(128), SS_XML_SCHEMACOLLECTION_SCHEMA_NAME NVARCHAR(128), "
        "SS_XML_SCHEMACOLLECTION_NAME NVARCHAR(128), SS_DATA_TYPE TINYINT);"
        "INSERT INTO @r EXEC sp_columns_100 N'orders', N'dbo', N'demo', N'%', 2, 3;"
        "SELECT TABLE_QUALIFIER AS TABLE_CAT, COLUMN_NAME, CAST(DATA_TYPE AS INT) AS DATA_TYPE, "
        "CAST(REMARKS AS VARCHAR) AS REMARKS, CASE SS_IS_IDENTITY WHEN 0 THEN 'NO' WHEN 1 THEN 'YES' WHEN '' THEN '' "
        "END AS IS_AUTOINCREMENT FROM @r ORDER BY TABLE_CAT, ORDINAL_POSITION;")
    assert [(r["COLUMN_NAME"], r["DATA_TYPE"], r["IS_AUTOINCREMENT"]) for r in rows][:2] == [
        ("order_id", 4, "NO"), ("customer", -9, "NO")]


def test_sp_pkeys_and_sp_statistics(sim):
    assert sim.query("EXEC sp_pkeys N'orders', N'dbo'") == [
        {"TABLE_QUALIFIER": "demo", "TABLE_OWNER": "dbo", "TABLE_NAME": "orders", "COLUMN_NAME": "order_id",
         "KEY_SEQ": 1, "PK_NAME": "PK_orders"}]
    rows = sim.query("EXEC sp_statistics_100 N'orders', N'dbo', NULL, N'%', N'N', N'Q'")
    assert [(r["TYPE"], r["INDEX_NAME"], r["SEQ_IN_INDEX"], r["COLUMN_NAME"], r["NON_UNIQUE"]) for r in rows] == [
        (0, None, None, None, None), (1, "PK_orders", 1, "order_id", 0)]
    assert rows[0]["CARDINALITY"] == one(sim, "SELECT COUNT(*) FROM dbo.orders")
    ct = sim.query("EXEC sp_statistics N'dbo_orders_CT', N'cdc'")
    assert [r["COLUMN_NAME"] for r in ct[1:]] == ["__$start_lsn", "__$command_id", "__$seqval", "__$operation"]
    assert one(sim, "SELECT COUNT(*) FROM sys.indexes i JOIN sys.tables t ON i.object_id = t.object_id "
                    "WHERE t.name = N'orders' AND i.is_primary_key = 1") == 1
