"""cdc.lsn_time_mapping as the C worker reads it to resolve a pipeline's reported LSN: the greatest
mapping row at or below an LSN through sp_executesql with a binary(10) parameter, no row once cleanup
removed them, and exactly SQL Server's permission rule for a direct read of a cdc system table (SELECT
on the object or on SCHEMA::cdc; the gating role and the query-function rights give nothing), with
Msg 229 in SQL Server's words."""
import pymssql
import pytest

from test_sim_semantics import raw_batch, rows_and_errors

# The worker's statement (src/mssql/tsql.c, tsql_append_lsn_mapping), LSN left to fill in.
MAPPING = ("EXEC sys.sp_executesql N'SELECT TOP (1) m.start_lsn, m.tran_end_time "
           "FROM [cdc].[lsn_time_mapping] AS m WHERE m.start_lsn <= @lsn "
           "ORDER BY m.start_lsn DESC', N'@lsn binary(10)', @lsn = %s;")
PASSWORD = "Str0ng!pw"
LOGIN = "svc_finalize"   # the SQL Server login of docs/sql-server.md's script
GATING_ROLE = "cdc_gate"  # the gating role (@role_name) that script adds it to
DENIED = "The SELECT permission was denied on the object 'lsn_time_mapping', database 'demo', schema 'cdc'."


def lit(lsn):
    return "0x" + bytes(lsn).hex().upper()


def plus(lsn, n):
    return (int.from_bytes(lsn, "big") + n).to_bytes(10, "big")


def mapping(conn, lsn):
    """Runs the worker's statement on a connection -> list of (start_lsn, tran_end_time)."""
    cur = conn.cursor()
    cur.execute(MAPPING % lit(lsn))
    return cur.fetchall()


@pytest.fixture
def three(make_sim):
    """Three commits at :00, :03 and :07 of 2026-03-01 00:00 (UTC clock), all captured, no dummy rows."""
    sim = make_sim(dummy_interval=0)
    rows = [sim.call("sim.commit", inserts=1, at="2026-03-01 00:00:%02d" % s)[0][0] for s in (0, 3, 7)]
    sim.call("sim.advance", seconds=10)
    return sim, rows


def login(sim, name=LOGIN):
    """The least-privilege login of docs/sql-server.md (a user in demo, SELECT on dbo.orders) -> a connection."""
    sim.execute("CREATE LOGIN [%s] WITH PASSWORD = N'%s', CHECK_POLICY = OFF; USE [demo]; "
                "CREATE USER [%s] FOR LOGIN [%s]; GRANT SELECT ON [dbo].[orders] TO [%s];"
                % (name, PASSWORD, name, name, name))
    return sim.connect(login=name, password=PASSWORD)


def test_greatest_row_at_or_below_the_lsn(three):
    sim, (a, b, c) = three
    conn = sim.connect()
    assert [r[0] for r in mapping(conn, a["start_lsn"])] == [a["start_lsn"]], "a commit LSN maps to itself"
    # Between two commits (their begin and row records lie in between): the lower commit.
    between = plus(a["start_lsn"], 1)
    assert between < b["start_lsn"]
    (lsn, when), = mapping(conn, between)
    assert lsn == a["start_lsn"] and str(when).startswith("2026-03-01 00:00:00")
    (lsn, when), = mapping(conn, plus(b["start_lsn"], 1))
    assert lsn == b["start_lsn"] and str(when).startswith("2026-03-01 00:00:03")
    # Beyond max LSN: the max row; below every row: no row, not an error.
    assert mapping(conn, plus(c["start_lsn"], 1000))[0][0] == c["start_lsn"]
    assert mapping(conn, plus(a["start_lsn"], -1)) == []
    conn.close()


def test_no_row_once_cleanup_removed_the_rows_below(three):
    sim, (a, b, _) = three
    conn = sim.connect()
    sim.call("sim.cleanup", low_lsn=b["start_lsn"])
    assert mapping(conn, plus(a["start_lsn"], 1)) == []
    assert mapping(conn, plus(b["start_lsn"], 1))[0][0] == b["start_lsn"]
    conn.close()


def test_least_privilege_login_is_refused_with_sql_servers_229(three):
    sim, (a, _, _) = three
    conn = login(sim)
    with pytest.raises(pymssql.Error) as e:
        mapping(conn, a["start_lsn"])
    assert e.value.args[0] == 229 and DENIED in str(e.value)
    # The rights of the query functions (SELECT on the source table, membership in the gating role)
    # do not open a cdc table: the login reads the change data and still not the mapping table.
    sim.call("sim.disable_table", name="orders")
    sim.call("sim.enable_table", name="orders", role_name=GATING_ROLE)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    sim.execute("ALTER ROLE [%s] ADD MEMBER [%s]" % (GATING_ROLE, LOGIN))
    cur = conn.cursor()
    cur.execute("SELECT COUNT_BIG(*) FROM cdc.fn_cdc_get_all_changes_dbo_orders("
                "sys.fn_cdc_get_min_lsn(N'dbo_orders'), sys.fn_cdc_get_max_lsn(), N'all')")
    assert cur.fetchall() == [(1,)]
    with pytest.raises(pymssql.Error, match="229"):
        mapping(conn, a["start_lsn"])
    conn.close()


def test_grant_on_the_table_or_the_schema_allows_it(three):
    sim, (a, _, _) = three
    conn = login(sim)
    sim.execute("GRANT SELECT ON cdc.lsn_time_mapping TO [%s]" % LOGIN)
    assert mapping(conn, a["start_lsn"])[0][0] == a["start_lsn"]
    # It opens that table only, not the change tables.
    with pytest.raises(pymssql.Error, match="dbo_orders_CT"):
        conn.cursor().execute("SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT")
    sim.execute("REVOKE SELECT ON cdc.lsn_time_mapping FROM [%s]" % LOGIN)
    with pytest.raises(pymssql.Error, match="229"):
        mapping(conn, a["start_lsn"])
    sim.execute("GRANT SELECT ON SCHEMA::[cdc] TO [%s]" % LOGIN)
    assert mapping(conn, a["start_lsn"])[0][0] == a["start_lsn"]
    conn.close()


def test_229_ends_only_its_statement_inside_a_marked_batch(three):
    # The worker's batch: a marker before each statement; a refused one must not cost the next.
    sim, (a, _, _) = three
    login(sim).close()
    one_int = ("EXEC sys.sp_executesql N'SELECT TOP (1) DATALENGTH(m.start_lsn) FROM [cdc].[lsn_time_mapping] "
               "AS m WHERE m.start_lsn <= @lsn ORDER BY m.start_lsn DESC', N'@lsn binary(10)', @lsn = %s;"
               % lit(a["start_lsn"]))
    batch = "SELECT 0 AS finalize_statement; %s SELECT 1 AS finalize_statement; %s" % (one_int, one_int)
    assert rows_and_errors(raw_batch(sim, batch, login=LOGIN, password=PASSWORD)) == [
        ("row", [0]), ("error", 229), ("row", [1]), ("error", 229)]
    assert rows_and_errors(raw_batch(sim, batch)) == [("row", [0]), ("row", [10]), ("row", [1]), ("row", [10])]
