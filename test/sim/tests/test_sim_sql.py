"""The T-SQL subset: identifiers, literals, TOP, CASE, joins, grouping, subqueries, variables, EXEC."""
import pymssql
import pytest

from simtest_util import one


@pytest.fixture(scope="module")
def db(sim):
    sim.call("sim.commit", inserts=5)
    sim.call("sim.commit", updates=2, deletes=1)
    sim.call("sim.advance", seconds=5)
    return sim


def test_bracket_identifiers_literals_and_top(db):
    rows = db.query("SELECT TOP (2) c.[__$operation] AS [op ]]x], N'ü' AS [n], 0x00FF AS [b] "
                    "FROM [cdc].[dbo_orders_CT] AS [c] ORDER BY c.[__$seqval] DESC, c.[__$operation] DESC")
    assert rows == [{"op ]x": 1, "n": "ü", "b": b"\x00\xff"}, {"op ]x": 4, "n": "ü", "b": b"\x00\xff"}]
    assert one(db, "SELECT TOP 1 'it''s' FROM cdc.change_tables") == "it's"


def test_lsn_comparison_is_unsigned_bytewise(db):
    assert one(db, "SELECT CASE WHEN 0xFF00000000000000000A > 0x0100000000000000000B THEN 1 ELSE 0 END") == 1
    n = one(db, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT WHERE [__$start_lsn] > 0x00000000000000000000 "
                "AND [__$start_lsn] <= 0xFFFFFFFFFFFFFFFFFFFF")
    assert n == 5 + 2 * 2 + 1


def test_several_statements_each_with_its_result_set(db):
    sets = db.execute("SELECT 1 AS a; SELECT 2 AS b SELECT N'x' AS c")
    assert sets == [[{"a": 1}], [{"b": 2}], [{"c": "x"}]]


def test_aggregate_subquery_join_group_order(db):
    rows = db.query("SELECT s.op, s.n, sys.fn_cdc_map_lsn_to_time(s.last_lsn) AS t FROM (SELECT c.[__$operation] AS op, "
                    "COUNT_BIG(*) AS n, MAX(c.[__$start_lsn]) AS last_lsn FROM [cdc].[dbo_orders_CT] AS c "
                    "GROUP BY c.[__$operation]) AS s ORDER BY s.op")
    assert [(r["op"], r["n"]) for r in rows] == [(1, 1), (2, 5), (3, 2), (4, 2)]
    assert all(r["t"] is not None for r in rows)
    rows = db.query("SELECT m.tran_id, COUNT(*) AS n FROM cdc.lsn_time_mapping AS m JOIN cdc.dbo_orders_CT AS c "
                    "ON c.[__$start_lsn] = m.start_lsn GROUP BY m.tran_id HAVING COUNT(*) > 4 ORDER BY n DESC")
    assert [r["n"] for r in rows] == [5, 5]
    assert one(db, "SELECT COUNT(*) FROM cdc.lsn_time_mapping WHERE start_lsn IN (SELECT [__$start_lsn] FROM "
                   "cdc.dbo_orders_CT WHERE [__$operation] = 1)") == 1


def test_declare_set_and_variables(db):
    rows = db.query("DECLARE @x binary(10) = sys.fn_cdc_get_max_lsn(), @n int; SET @n = 3; "
                    "SELECT @x AS x, sys.fn_cdc_increment_lsn(@x) AS nx, @n + 1 AS n")
    r = rows[0]
    assert int.from_bytes(r["nx"], "big") == int.from_bytes(r["x"], "big") + 1 and r["n"] == 4
    rows = db.query("DECLARE @m binary(10); SELECT @m = MAX([__$start_lsn]) FROM cdc.dbo_orders_CT; "
                    "SELECT CASE WHEN @m = sys.fn_cdc_get_max_lsn() THEN N'same' ELSE N'diff' END AS v")
    assert rows == [{"v": "same"}]


def test_exec_with_positional_and_named_arguments(db):
    a = db.execute("EXEC sys.sp_cdc_help_change_data_capture N'dbo', N'orders'")[0]
    b = db.execute("EXEC sys.sp_cdc_help_change_data_capture @source_name = N'orders', @source_schema = N'dbo'")[0]
    assert a == b and a[0]["capture_instance"] == "dbo_orders"
    with pytest.raises(pymssql.Error) as e:
        db.execute("EXEC sys.sp_cdc_help_change_data_capture @nope = 1")
    assert "8145" in str(e.value)


def test_sp_executesql_in_a_batch(db):
    rows = db.query("EXEC sp_executesql N'SELECT @a + @b AS s, @l AS l', N'@a int, @b int, @l binary(10)', "
                    "@a = 40, @b = 2, @l = 0x01")
    assert rows == [{"s": 42, "l": b"\x01" + bytes(9)}]


def test_time_functions_are_typed_and_consistent(db):
    r = db.query("SELECT SYSUTCDATETIME() AS u, SYSDATETIME() AS l, GETDATE() AS g, GETUTCDATE() AS gu, "
                 "DATEPART(TZOFFSET, SYSDATETIMEOFFSET()) AS tz, DATEADD(minute, 90, '2026-03-01') AS d, "
                 "DATEDIFF(second, '2026-03-01 00:00:00', '2026-03-01 01:00:00') AS dd")[0]
    assert r["u"] == r["l"] and r["tz"] == 0 and r["dd"] == 3600
    assert str(r["d"]) == "2026-03-01 01:30:00"
    assert abs((r["g"] - r["u"]).total_seconds()) < 0.01


def test_metadata_functions(db):
    r = db.query("SELECT DB_NAME() AS d, OBJECT_ID(N'dbo.orders') AS o, OBJECT_NAME(OBJECT_ID(N'dbo.orders')) AS n, "
                 "OBJECT_SCHEMA_NAME(OBJECT_ID(N'[cdc].[dbo_orders_CT]')) AS s, @@VERSION AS v")[0]
    assert r["d"] == "demo" and r["o"] > 0 and r["n"] == "orders" and r["s"] == "cdc"
    assert r["v"].startswith("Microsoft SQL Server 2019")
    assert one(db, "SELECT name FROM sys.databases WHERE is_cdc_enabled = 1") == "demo"


def test_use_and_unsupported_statements(db):
    sets = db.execute("USE [master]; SELECT DB_NAME() AS d; USE demo; SELECT DB_NAME() AS d")
    assert sets == [[{"d": "master"}], [{"d": "demo"}]]
    with pytest.raises(pymssql.Error) as e:
        db.execute("USE nodb")
    assert "911" in str(e.value)
    with pytest.raises(pymssql.Error) as e:
        db.execute("INSERT INTO dbo.orders (order_id) VALUES (1)")
    assert "sim.commit" in str(e.value)
    with pytest.raises(pymssql.Error) as e:
        db.execute("SET NOSUCH_OPTION ON")
    assert "195" in str(e.value)


def test_aggregate_of_many_tables_in_one_batch(db):
    stmt = ("SELECT COUNT_BIG(CASE WHEN c.[__$operation] = 2 THEN 1 END) AS ins, "
            "COUNT_BIG(CASE WHEN c.[__$operation] = 4 THEN 1 END) AS upd, "
            "COUNT_BIG(CASE WHEN c.[__$operation] = 1 THEN 1 END) AS del, MIN(c.[__$start_lsn]) AS first_lsn, "
            "MAX(c.[__$start_lsn]) AS last_lsn FROM [cdc].[dbo_orders_CT] AS c "
            "WHERE c.[__$start_lsn] > 0x00000000000000000000 AND c.[__$start_lsn] <= 0xFFFFFFFFFFFFFFFFFFFF;\n")
    sets = db.execute(stmt * 300)
    assert len(sets) == 300
    assert all(s == [dict(sets[0][0])] for s in sets) and sets[0][0]["ins"] == 5 and sets[0][0]["upd"] == 2
    empty = db.query(stmt.replace("> 0x00000000000000000000", "> 0xFFFFFFFFFFFFFFFFFFFF"))
    assert empty == [{"ins": 0, "upd": 0, "del": 0, "first_lsn": None, "last_lsn": None}]


def test_scalar_subqueries_need_no_names(db):
    r = db.query("SELECT (SELECT COUNT(*) FROM cdc.dbo_orders_CT) AS n, "
                 "(SELECT MAX(start_lsn) FROM cdc.lsn_time_mapping) AS m")[0]
    assert r["n"] == 10 and r["m"] == one(db, "SELECT sys.fn_cdc_get_max_lsn()")
    with pytest.raises(pymssql.Error) as e:
        db.query("SELECT * FROM (SELECT COUNT(*) FROM cdc.dbo_orders_CT) AS s")
    assert "8155" in str(e.value)


def test_log_and_ceiling_bucket_lateness_as_sql_server_does(db):
    """LOG(x [, base]) is float; the event-time sketch's bucket CEILING(LOG(x) / LOG(g)) groups rows; an
    invalid argument is SQL Server's Msg 3623."""
    import math
    assert abs(one(db, "SELECT LOG(10.0)") - math.log(10)) < 1e-12
    assert abs(one(db, "SELECT LOG(8, 2)") - 3.0) < 1e-12
    gamma = 1.01 / 0.99
    rows = db.query("SELECT CEILING(LOG(CAST(x AS float)) / LOG(%r)) AS b, COUNT_BIG(*) AS n "
                    "FROM (SELECT 60000 AS x UNION ALL SELECT 60001 UNION ALL SELECT 1000) AS t "
                    "GROUP BY CEILING(LOG(CAST(x AS float)) / LOG(%r)) ORDER BY b" % (gamma, gamma))
    assert [(int(r["b"]), r["n"]) for r in rows] == sorted(
        [(math.ceil(math.log(1000) / math.log(gamma)), 1), (math.ceil(math.log(60000) / math.log(gamma)), 2)])
    for bad in ("SELECT LOG(0)", "SELECT LOG(-1.0)", "SELECT LOG(8, 1)"):
        with pytest.raises(pymssql.Error) as e:
            db.execute(bad)
        assert "3623" in str(e.value) and "invalid floating point operation" in str(e.value), bad
