"""FreeTDS clients against the simulator: DB-Library (pymssql) and the tsql command line."""
import os
import re
import subprocess
import threading
import time
from decimal import Decimal

import pymssql
import pytest
from pymssql import _mssql

from simtest_util import one


def tsql(sim, script, password="Passw0rd!", conf=None):
    env = dict(os.environ)
    if conf:
        env["FREETDSCONF"] = conf
    p = subprocess.run(["tsql", "-H", "127.0.0.1", "-p", str(sim.port), "-U", "sa", "-P", password],
                       input=script, capture_output=True, text=True, timeout=30, env=env)
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def loaded(sim):
    sim.call("sim.commit", inserts=3, updates=1, deletes=1)
    sim.call("sim.advance", seconds=5)
    sim.call("sim.create_table", name="big", columns="id int")
    sim.call("sim.enable_table", name="big")
    sim.call("sim.advance", seconds=5)
    sim.call("sim.commit", table="dbo.big", inserts=30000)
    sim.call("sim.advance", seconds=5)
    return sim


def test_tsql_reads_max_lsn_as_10_bytes(loaded):
    out = tsql(loaded, "SELECT sys.fn_cdc_get_max_lsn() AS max_lsn\ngo\n"
                       "SELECT CONVERT(varchar(22), sys.fn_cdc_get_max_lsn(), 1) AS hex\ngo\n")
    assert re.search(r"^[0-9a-f]{20}$", out, re.M), out
    assert re.search(r"^0x[0-9A-F]{20}$", out, re.M), out


def test_tsql_typed_values_and_errors(loaded):
    out = tsql(loaded, "SELECT COUNT_BIG(*) AS n, N'Zürich' AS s, NULL AS z FROM cdc.dbo_orders_CT\ngo\n"
                       "SELECT * FROM dbo.nosuch\ngo\nSELECT FROM\ngo\n")
    assert re.search(r"^6\tZürich\tNULL$", out, re.M), out
    assert "Msg 208" in out and "Invalid object name 'dbo.nosuch'" in out
    assert "Msg 102" in out and "Incorrect syntax near" in out


def test_tsql_wrong_password_is_refused(loaded):
    out = tsql(loaded, "SELECT 1\ngo\n", password="bad")
    assert "Login failed for user 'sa'" in out or "18456" in out


def test_tsql_query_timeout_leaves_server_serving(loaded, tmp_path):
    conf = tmp_path / "freetds.conf"
    conf.write_text("[global]\n\ttds version = 7.4\n\tencryption = off\n\tclient charset = UTF-8\n\ttimeout = 1\n")
    t0 = time.monotonic()
    out = tsql(loaded, "WAITFOR DELAY '00:01:00'\ngo\n", conf=str(conf))
    assert time.monotonic() - t0 < 25
    assert "20003" in out or "timed out" in out
    assert one(loaded, "SELECT 7") == 7


def test_dblib_typed_values(loaded):
    c = loaded.connect()
    cur = c.cursor()
    cur.execute("SELECT sys.fn_cdc_get_max_lsn(), sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_max_lsn()), "
                "COUNT_BIG(*), CAST(12.5 AS decimal(12,2)), N'Łódź ]', CAST(NULL AS int), CAST(1 AS bit), "
                "CAST('2026-01-02 03:04:05.997' AS datetime) FROM cdc.lsn_time_mapping")
    lsn, t, n, d, s, z, b, dt = cur.fetchone()
    assert isinstance(lsn, bytes) and len(lsn) == 10
    assert t.year == 2026 and n == 2 and d == Decimal("12.50") and s == "Łódź ]" and z is None and b is True
    assert dt.microsecond == 997000
    cur.execute("SELECT __$start_lsn, __$operation, order_id, amount, created_at FROM cdc.dbo_orders_CT "
                "ORDER BY __$start_lsn, __$seqval, __$operation")
    rows = cur.fetchall()
    assert [r[1] for r in rows] == [2, 2, 2, 3, 4, 1]
    c.close()


def test_dblib_rpc_by_name(loaded):
    c = loaded.connect()
    cur = c.cursor(as_dict=True)
    # pymssql's callproc reads no header: nextset() moves to the first result set (client behaviour)
    cur.callproc("sys.sp_cdc_help_change_data_capture", ("dbo", "orders"))
    assert cur.nextset()
    rows = cur.fetchall()
    assert [r["capture_instance"] for r in rows] == ["dbo_orders"]
    assert rows[0]["index_column_list"] == "[order_id]" and len(rows[0]["start_lsn"]) == 10
    cur.callproc("sys.sp_cdc_get_captured_columns", ("dbo_orders",))
    assert cur.nextset()
    cols = cur.fetchall()
    assert [(r["column_name"], r["column_ordinal"], r["data_type"]) for r in cols][:3] == [
        ("order_id", 1, "int"), ("customer", 2, "nvarchar"), ("amount", 3, "decimal")]
    c.close()


def test_dblib_cancel_mid_result_and_waitfor(loaded):
    c = _mssql.connect(server=loaded.server, user="sa", password="Passw0rd!", database="demo")
    c.execute_query("SELECT [__$start_lsn], id FROM cdc.dbo_big_CT")
    n = 0
    for _ in c:
        n += 1
        if n == 500:
            break
    c.cancel()                                            # dbcancel: ATTENTION + wait for DONE_ATTN
    assert c.execute_scalar("SELECT COUNT_BIG(*) FROM cdc.dbo_big_CT") == 30000
    threading.Timer(0.3, c.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(_mssql.MSSQLDatabaseException):
        c.execute_non_query("WAITFOR DELAY '00:01:00'")
    assert time.monotonic() - t0 < 20
    assert c.execute_scalar("SELECT 42") == 42
    c.close()


def test_dblib_errors_have_sql_server_shape(loaded):
    c = loaded.connect()
    cur = c.cursor()
    for sql, number, text in [("SELECT * FROM cdc.nope", 208, "Invalid object name 'cdc.nope'."),
                              ("SELECT c.nope FROM cdc.dbo_orders_CT AS c", 207, "Invalid column name 'nope'."),
                              ("SELECT x.a FROM cdc.dbo_orders_CT AS c", 4104, "could not be bound"),
                              ("SELECT FROM x", 102, "Incorrect syntax near 'FROM'."),
                              ("SELECT nosuchfn(1)", 195, "is not a recognized built-in function name"),
                              ("SELECT @x", 137, 'Must declare the scalar variable "@x".'),
                              ("EXEC dbo.nosuch", 2812, "Could not find stored procedure 'dbo.nosuch'.")]:
        with pytest.raises(pymssql.Error) as e:
            cur.execute(sql)
            cur.fetchall()
        assert e.value.args[0] == number, (sql, e.value.args)
        assert text in e.value.args[1].decode(), (sql, e.value.args)
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)
    c.close()


def test_wrong_database_4060(loaded):
    with pytest.raises(pymssql.OperationalError) as e:
        loaded.connect(database="nodb")
    assert "Login failed" in str(e.value)
    p = subprocess.run(["tsql", "-H", "127.0.0.1", "-p", str(loaded.port), "-U", "sa", "-P", "Passw0rd!",
                        "-D", "nodb"], input="SELECT 1\ngo\n", capture_output=True, text=True, timeout=30)
    assert "Cannot open database \"nodb\" requested by the login" in p.stdout + p.stderr
