"""TDS version negotiation (7.1-7.4) and the encodings each version gets, TEXTSIZE, and SQL Server's
type names in conversion errors."""
import datetime
import os
import struct
import subprocess

import pymssql
import pytest

from tdsraw import Raw, loginack_version, tokens

BIG = 10000                  # characters of the nvarchar(max) test value
BIG_SQL = "CAST(N'%s' AS nvarchar(max))" % ("x" * BIG)
ROW_SQL = ("SELECT CAST('2026-11-02 09:00' AS datetime2(7)) AS d2, "
           "CAST('2026-11-02 09:00 +01:00' AS datetimeoffset(7)) AS dto, CAST('2026-11-02' AS date) AS d, "
           "CAST('2026-11-02 09:00:00.003' AS datetime) AS dt, CAST(0x0102 AS binary(10)) AS b, "
           "CAST(9000000000 AS bigint) AS bi, %s AS big" % BIG_SQL)


def connect(sim, version):
    """pymssql (DB-Library) asking for ``version``; 7.4 comes from the tests' freetds.conf
    (pymssql 2.2 has no '7.4' argument)."""
    kw = {} if version == "7.4" else {"tds_version": version}
    return sim.connect(**kw)


@pytest.mark.parametrize("version", ["7.1", "7.2", "7.3", "7.4"])
def test_freetds_negotiates_each_version_and_decodes_every_type(sim, version):
    conn = connect(sim, version)
    try:
        assert "%.1f" % conn._conn.tds_version == version        # what FreeTDS took from LOGINACK
        cur = conn.cursor()
        cur.execute(ROW_SQL)
        d2, dto, d, dt, b, bi, big = cur.fetchone()
        if version < "7.3":
            assert d2 == "2026-11-02 09:00:00.0000000"
            assert dto == "2026-11-02 09:00:00.0000000 +01:00"
            assert d == "2026-11-02"
        else:
            assert d2 == datetime.datetime(2026, 11, 2, 9, 0)
            assert d == datetime.date(2026, 11, 2)
        assert dt == datetime.datetime(2026, 11, 2, 9, 0, 0, 3000)
        assert b == b"\x01\x02" + bytes(8)
        assert bi == 9000000000
        assert big == "x" * BIG                # pymssql sets TEXTSIZE 2147483647 at connect
        cur.execute("SELECT COUNT(*) AS n FROM cdc.lsn_time_mapping")
        assert cur.fetchall() == [(0,)]
    finally:
        conn.close()


@pytest.mark.parametrize("client, acked", [
    (0x71000001, 0x71000001), (0x72090002, 0x72090002), (0x730A0003, 0x730A0003),
    (0x730B0003, 0x730B0003), (0x74000004, 0x74000004), (0x75000000, 0x74000004)])
def test_loginack_announces_the_highest_version_not_above_the_clients(sim, client, acked):
    r = Raw(sim.port, tds=client)
    r.prelogin()
    _, payload = r.login()
    assert loginack_version(payload) == acked
    done = payload[-9:] if acked < 0x72000000 else payload[-13:]
    assert done[0] == 0xFD and struct.unpack_from("<H", done, 1)[0] == 0
    r.close()


def test_client_below_tds71_is_refused(sim):
    r = Raw(sim.port, tds=0x70000000)
    r.prelogin()
    _, payload = r.login()
    assert payload[0] == 0xAA and loginack_version(payload) is None
    r.close()


def _result(raw):
    """One whole response message of ``raw``."""
    return raw.message()[1]


def test_tds71_wire_format_usertype_ntext_and_short_done(sim):
    r = Raw(sim.port, tds=0x71000001)
    r.prelogin()
    r.login()
    r.batch("SELECT CAST(N'abc' AS nvarchar(max)) AS t, CAST(NULL AS varbinary(max)) AS i")
    p = _result(r)
    assert p[:3] == b"\x81\x02\x00"
    # column 1: UserType u16, Flags u16, NTEXT LONGLEN, collation, TableName US_VARCHAR (empty), name
    assert p[3:7] == b"\x00\x00\x01\x00" and p[7] == 0x63
    assert p[12:17] == bytes([0x09, 0x04, 0xD0, 0x00, 0x34]) and p[17:19] == b"\x00\x00"
    col2 = p.index(b"\x22", 19)                      # IMAGE, no collation
    assert p[col2 + 5:col2 + 7] == b"\x00\x00"
    row = p.index(b"\xd1", col2)
    assert p[row + 1] == 16 and p[row + 2:row + 18] == b"dummy textptr\x00\x00\x00"
    assert struct.unpack_from("<i", p, row + 26)[0] == 6 and p[row + 30:row + 36] == "abc".encode("utf-16-le")
    assert p[row + 36] == 0                          # NULL image: TextPtr length 0
    done = p[row + 37:]
    assert len(done) == 9 and done[0] == 0xFD and struct.unpack_from("<i", done, 5)[0] == 1
    r.close()


def test_tds72_dates_are_nvarchar_of_the_string_length(sim):
    r = Raw(sim.port, tds=0x72090002)
    r.prelogin()
    r.login()
    r.batch("SELECT CAST('2026-11-02 09:00' AS datetime2(3)) AS a")
    p = _result(r)
    # UserType u32, Flags, NVARCHAR(23 chars = 46 bytes) + collation
    assert p[3:9] == b"\x00\x00\x00\x00\x01\x00" and p[9] == 0xE7 and struct.unpack_from("<H", p, 10)[0] == 46
    row = p.index(b"\xd1")
    assert p[row + 3:row + 3 + 46].decode("utf-16-le") == "2026-11-02 09:00:00.000"
    assert tokens(p[row + 49:]) == [(0xFD, 0x10)]
    r.close()


def tsql(sim, script):
    """The tsql command line (FreeTDS without a 'text size' setting: no SET TEXTSIZE at login; its LOGIN7 sets
    fODBC in OptionFlags2, like the ODBC driver and the JDBC driver)."""
    p = subprocess.run(["tsql", "-H", "127.0.0.1", "-p", str(sim.port), "-U", "sa", "-P", "Passw0rd!"],
                       input=script, capture_output=True, text=True, timeout=30, env=dict(os.environ))
    return p.stdout + p.stderr


def test_textsize_of_an_odbc_login_is_infinite_and_set_textsize_changes_it(sim):
    """MS-TDS 2.2.6.4 LOGIN7 fODBC: the server sets the ODBC defaults, TEXTSIZE infinite (2 GB up to TDS 7.2);
    SET TEXTSIZE 0 restores SQL Server's default of 4,096 bytes."""
    out = tsql(sim, "SELECT @@TEXTSIZE AS ts, %s AS big\ngo\nSET TEXTSIZE 0\nSELECT @@TEXTSIZE AS ts, "
                    "%s AS big\ngo\nSET TEXTSIZE 2147483647\nSELECT @@TEXTSIZE AS ts\ngo\n" % (BIG_SQL, BIG_SQL))
    lines = [ln for ln in out.splitlines() if ln.startswith(("4096\t", "2147483647\t"))]
    assert lines[0] == "2147483647\t" + "x" * BIG
    assert lines[1] == "4096\t" + "x" * 2048                      # 4096 bytes of UTF-16: 2,048 characters
    assert "\n2147483647\n" in out


def test_textsize_without_fodbc_defaults_to_4096_bytes(sim):
    """A LOGIN7 without fODBC gets SQL Server's default TEXTSIZE (SET TEXTSIZE: 4,096 bytes)."""
    r = Raw(sim.port)
    r.prelogin()
    r.login(flags2=0x01)
    r.batch("SELECT @@TEXTSIZE AS ts")
    p = _result(r)
    row = p.index(b"\xd1")
    assert p[row + 1] == 4 and struct.unpack_from("<i", p, row + 2)[0] == 4096         # INTN, length 4
    r.close()


def test_textsize_applies_to_procedure_results_and_odd_sizes_keep_whole_characters(sim):
    sim.call("sim.ddl", table="dbo.orders", command="ALTER TABLE dbo.orders ADD note2 nvarchar(50) NULL")
    sim.call("sim.advance", seconds=10)
    conn = sim.connect()
    try:
        cur = conn.cursor(as_dict=True)
        cur.execute("SET TEXTSIZE 21")
        cur.execute("SELECT @@TEXTSIZE AS ts, CAST(N'Zürich, Genève' AS nvarchar(max)) AS s, "
                    "CAST(0x0102030405 AS varbinary(max)) AS v")
        row = cur.fetchone()
        assert row["ts"] == 21 and row["s"] == "Zürich, Ge" and row["v"] == b"\x01\x02\x03\x04\x05"
        cur.execute("EXEC sys.sp_cdc_get_ddl_history @capture_instance = N'dbo_orders'")
        cmds = [r["ddl_command"] for r in cur.fetchall()]
        assert "ALTER TABLE dbo.orders ADD note2"[:10] in cmds
        cur.execute("SET TEXTSIZE -1")
        cur.execute("EXEC sys.sp_cdc_get_ddl_history @capture_instance = N'dbo_orders'")
        assert any(r["ddl_command"].startswith("ALTER TABLE dbo.orders ADD note2") for r in cur.fetchall())
    finally:
        conn.close()


def test_msg_257_names_sql_server_types(sim):
    conn = sim.connect()
    try:
        cur = conn.cursor()
        for sql in ("SELECT sys.fn_cdc_map_lsn_to_time(N'abc')", "SELECT sys.fn_cdc_increment_lsn(N'abc')"):
            with pytest.raises(pymssql.Error) as e:
                cur.execute(sql)
            number, text = e.value.args[0], e.value.args[1].decode()
            assert number == 257
            assert text.startswith("Implicit conversion from data type nvarchar to binary is not allowed. Use the "
                                   "CONVERT function to run this query.")
        with pytest.raises(pymssql.Error) as e:
            cur.execute("SELECT sys.fn_cdc_map_lsn_to_time('abc')")
        assert e.value.args[1].decode().startswith("Implicit conversion from data type varchar to binary ")
    finally:
        conn.close()


def test_tds71_error_token_has_a_two_byte_line_number(sim):
    r = Raw(sim.port, tds=0x71000001)
    r.prelogin()
    r.login()
    r.batch("SELECT * FROM nope")
    p = _result(r)
    assert p[0] == 0xAA
    n = struct.unpack_from("<H", p, 1)[0]
    number, state, cls = struct.unpack_from("<iBB", p, 3)
    assert (number, cls) == (208, 16)
    assert struct.unpack_from("<H", p, 3 + n - 2)[0] == 1                # LineNumber USHORT
    assert tokens(p[3 + n:], done_size=9) == [(0xFD, 0x02)]
    r.close()


def error_text(cur, sql):
    """(number, message) of the error ``sql`` raises."""
    with pytest.raises(pymssql.Error) as e:
        cur.execute(sql)
    return e.value.args[0], e.value.args[1].decode().split("DB-Lib error")[0]


def test_implicit_conversions_to_binary_and_failed_conversions_name_sql_server_types(sim):
    conn = sim.connect()
    try:
        cur = conn.cursor()
        msg = "Implicit conversion from data type nvarchar to binary is not allowed. Use the CONVERT function to run " \
              "this query."
        assert error_text(cur, "DECLARE @b binary(10) = N'abc'") == (257, msg)
        assert error_text(cur, "EXEC sp_executesql N'SELECT @l AS l', N'@l binary(10)', @l = N'abc'") == (257, msg)
        assert error_text(cur, "DECLARE @v varbinary(max); SET @v = 'abc'")[1].startswith(
            "Implicit conversion from data type varchar to varbinary(max) is not allowed.")
        assert error_text(cur, "SELECT CAST(N'abc' AS int)") == (
            245, "Conversion failed when converting the nvarchar value 'abc' to data type int.")
        assert error_text(cur, "SELECT CAST('abc' AS decimal(12,2))") == (
            8114, "Error converting data type varchar to numeric.")
        cur.execute("SELECT CAST(N'abc' AS varbinary(10)) AS ok")        # explicit conversion is allowed
        assert cur.fetchone()[0] == "abc".encode("utf-16-le")
    finally:
        conn.close()
