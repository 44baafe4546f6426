"""CDC semantics: capture lag, dummy rows, cleanup order, DDL, instances, permissions, 313, DST, mapping."""
import pymssql
import pytest

from simtest_util import one

ZERO = bytes(10)


def commit(sim, **kw):
    """sim.commit -> its single row (start_lsn, commit times, counts)."""
    return sim.call("sim.commit", **kw)[0][0]


def max_lsn(sim):
    return one(sim, "SELECT sys.fn_cdc_get_max_lsn() AS m")


def advance(sim, seconds):
    return sim.call("sim.advance", seconds=seconds)[0][0]


def test_max_lsn_null_until_capture_then_lags_the_log(make_sim):
    sim = make_sim(dummy_interval=0)
    assert max_lsn(sim) is None
    c = commit(sim, inserts=2)
    assert max_lsn(sim) is None                  # committed, not yet captured
    advance(sim, 5)
    assert max_lsn(sim) == c["start_lsn"]
    assert len(c["start_lsn"]) == 10
    rows = sim.query("SELECT start_lsn, tran_id, tran_begin_lsn FROM cdc.lsn_time_mapping")
    assert [r["start_lsn"] for r in rows] == [c["start_lsn"]]
    assert rows[0]["tran_id"] != b"\x00" and rows[0]["tran_begin_lsn"] == c["tran_begin_lsn"]


def test_capture_advances_one_scan_boundary_at_a_time(make_sim):
    sim = make_sim(dummy_interval=0, maxtrans=2, maxscans=1)
    lsns = [r["start_lsn"] for r in sim.call("sim.commit", inserts=1, transactions=5)[0]]
    assert lsns == sorted(lsns)
    seen = []
    for _ in range(3):
        advance(sim, 5)
        seen.append(max_lsn(sim))
    assert seen == [lsns[1], lsns[3], lsns[4]]
    assert one(sim, "SELECT COUNT_BIG(*) FROM cdc.lsn_time_mapping") == 5
    assert one(sim, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT") == 5


def test_dummy_rows_mark_idle_periods(make_sim):
    sim = make_sim(dummy_interval=300)
    advance(sim, 299)
    assert max_lsn(sim) is None
    advance(sim, 601)                               # cycles every 5 s up to t=900
    rows = sim.query("SELECT start_lsn, tran_id, CONVERT(varchar(23), tran_end_time, 121) AS t "
                     "FROM cdc.lsn_time_mapping ORDER BY start_lsn")
    assert [r["tran_id"] for r in rows] == [b"\x00"] * 3
    assert [r["t"] for r in rows] == ["2026-03-01 00:05:00.000", "2026-03-01 00:10:00.000",
                                      "2026-03-01 00:15:00.000"]
    assert max_lsn(sim) == rows[-1]["start_lsn"]
    assert one(sim, "SELECT MAX(start_lsn) FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00") is None


def test_no_dummy_rows_when_disabled_or_log_idle(make_sim):
    off = make_sim(dummy_interval=0)
    advance(off, 3600)
    assert max_lsn(off) is None
    idle = make_sim(dummy_interval=300, dummy_on_idle_log="no")
    advance(idle, 900)
    assert max_lsn(idle) is None
    idle.call("sim.create_table", name="plain", columns="id int")
    commit(idle, table="dbo.plain", inserts=1)           # log activity without CDC
    advance(idle, 5)
    rows = idle.query("SELECT tran_id FROM cdc.lsn_time_mapping")
    assert [r["tran_id"] for r in rows] == [b"\x00"]


def test_commits_without_cdc_consume_lsns_but_add_no_mapping_rows(make_sim):
    sim = make_sim(dummy_interval=0)
    sim.call("sim.create_table", name="plain", columns="id int")
    a = commit(sim, inserts=1)
    p = commit(sim, table="dbo.plain", inserts=3)
    b = commit(sim, inserts=1)
    advance(sim, 5)
    mapped = [r["start_lsn"] for r in sim.query("SELECT start_lsn FROM cdc.lsn_time_mapping ORDER BY 1")]
    assert mapped == [a["start_lsn"], b["start_lsn"]]
    assert a["start_lsn"] < p["start_lsn"] < b["start_lsn"]
    truth = sim.call("sim.truth_commits", table="dbo.plain")[0]
    assert truth[0]["captured"] is False and truth[0]["inserts"] == 3


def test_cleanup_raises_min_lsn_before_deleting_and_can_hold(make_sim):
    sim = make_sim(dummy_interval=0)
    a = commit(sim, inserts=2, at="2026-03-01 00:00:10.5")
    b = commit(sim, inserts=1, updates=1, at="2026-03-01 01:00:10.5")
    c = commit(sim, inserts=1, at="2026-03-01 02:00:10.5")
    advance(sim, 5)
    assert max_lsn(sim) == c["start_lsn"]
    before = one(sim, "SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders')")
    assert before < a["start_lsn"]
    res = sim.call("sim.cleanup", retention_minutes=60, hold=1)[0][0]
    assert res["low_lsn"] == b["start_lsn"] and res["held"] is True
    # step 1 done: min LSN raised, rows still there
    assert one(sim, "SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders')") == b["start_lsn"]
    counts = sim.query("SELECT COUNT_BIG(*) AS n FROM cdc.dbo_orders_CT WHERE [__$start_lsn] < %s"
                       % ("0x" + b["start_lsn"].hex()))
    assert counts[0]["n"] == 2
    # the TVF already refuses the old range
    with pytest.raises(pymssql.Error) as e:
        sim.query("SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(%s, sys.fn_cdc_get_max_lsn(), N'all')"
                  % ("0x" + a["start_lsn"].hex()))
    assert "313" in str(e.value)
    rel = sim.call("sim.cleanup_release")[0][0]
    assert rel["change_rows_deleted"] == 2 and rel["mapping_rows_deleted"] == 1
    assert one(sim, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT") == 4      # b: insert + update(3,4); c: insert
    assert one(sim, "SELECT MIN(start_lsn) FROM cdc.lsn_time_mapping") == b["start_lsn"]


def test_ddl_is_recorded_in_ddl_history_when_captured(sim):
    d = sim.call("sim.ddl", table="dbo.orders", command="ALTER TABLE dbo.orders ADD note nvarchar(50) NULL")[0][0]
    assert sim.call("sys.sp_cdc_get_ddl_history", capture_instance="dbo_orders")[0] == []
    advance(sim, 5)
    hist = sim.call("sys.sp_cdc_get_ddl_history", capture_instance="dbo_orders")[0]
    assert len(hist) == 1
    h = hist[0]
    assert h["ddl_lsn"] == d["ddl_lsn"] and h["ddl_command"].startswith("ALTER TABLE dbo.orders ADD note")
    assert h["source_schema"] == "dbo" and h["required_column_update"] is False
    lo, hi = "0x" + bytes(10).hex(), "0x" + ("ff" * 10)
    rows = sim.query("SELECT d.ddl_command, d.ddl_lsn, d.ddl_time FROM cdc.ddl_history AS d JOIN cdc.change_tables "
                     "AS ct ON ct.object_id = d.object_id WHERE ct.capture_instance = N'dbo_orders' AND "
                     "d.ddl_lsn > %s AND d.ddl_lsn <= %s" % (lo, hi))
    assert [r["ddl_lsn"] for r in rows] == [d["ddl_lsn"]]
    # the new column is not captured by the existing instance
    cols = [r["column_name"] for r in sim.call("sys.sp_cdc_get_captured_columns", capture_instance="dbo_orders")[0]]
    assert "note" not in cols and cols[0] == "order_id"


def test_at_most_two_capture_instances_each_with_its_own_start(make_sim):
    sim = make_sim(dummy_interval=0)
    advance(sim, 5)
    commit(sim, inserts=1)
    sim.call("sim.enable_table", name="orders", capture_instance="dbo_orders_v2",
             captured_columns="order_id, amount")
    with pytest.raises(pymssql.Error) as e:
        sim.call("sim.enable_table", name="orders", capture_instance="dbo_orders_v3")
    assert "22962" in str(e.value)
    advance(sim, 5)
    later = commit(sim, inserts=1)
    advance(sim, 5)
    help_rows = sim.call("sys.sp_cdc_help_change_data_capture", source_schema="dbo", source_name="orders")[0]
    assert [r["capture_instance"] for r in help_rows] == ["dbo_orders", "dbo_orders_v2"]
    v1, v2 = (r["start_lsn"] for r in help_rows)
    assert v1 < v2 < later["start_lsn"]
    assert help_rows[1]["captured_column_list"] == "[order_id], [amount]"
    assert one(sim, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT") == 2
    assert one(sim, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_v2_CT") == 1


def test_least_privilege_login_sees_zeros_and_gets_229(make_sim):
    sim = make_sim(dummy_interval=0)
    commit(sim, inserts=1)
    advance(sim, 5)
    sim.call("sim.create_login", login="reader", password="R3ader!", cdc_select=1)
    c = sim.connect(login="reader", password="R3ader!")
    cur = c.cursor()
    cur.execute("SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders'), sys.fn_cdc_get_min_lsn(N'nope'), "
                "sys.fn_cdc_get_max_lsn()")
    mn, unknown, mx = cur.fetchone()
    assert mn == ZERO and unknown == ZERO and len(mx) == 10
    cur.execute("EXEC sys.sp_cdc_help_change_data_capture")
    assert cur.fetchall() == []
    # SELECT on SCHEMA::cdc is all a direct read of the change table needs (as on SQL Server) ...
    cur.execute("SELECT COUNT_BIG(*) FROM [cdc].[dbo_orders_CT]")
    assert cur.fetchone()[0] == 1
    # ... but the query function needs SELECT on the source table's captured columns.
    with pytest.raises(pymssql.Error) as e:
        cur.execute("SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(0x00, 0x00, N'all')")
        cur.fetchall()
    assert "229" in str(e.value) and "fn_cdc_get_all_changes_dbo_orders" in str(e.value)
    with pytest.raises(pymssql.Error) as e:
        cur.execute("EXEC sim.state")
    assert "229" in str(e.value)
    # SELECT on the source table opens the instance (no gating role)
    sim.call("sim.grant", login="reader", object="dbo.orders")
    cur.execute("SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders')")
    assert cur.fetchone()[0] != ZERO
    c.close()


def test_gating_role_controls_access(make_sim):
    sim = make_sim(dummy_interval=0)
    sim.call("sim.create_table", name="pay", columns="id int, v int")
    sim.call("sim.enable_table", name="pay", role_name="cdc_pay")
    advance(sim, 5)
    sim.call("sim.create_login", login="r2", password="pw", tables="dbo.pay")
    c = sim.connect(login="r2", password="pw")
    cur = c.cursor()
    cur.execute("SELECT sys.fn_cdc_get_min_lsn(N'dbo_pay')")
    assert cur.fetchone()[0] == ZERO
    sim.call("sim.add_role_member", role="cdc_pay", login="r2")
    cur.execute("SELECT sys.fn_cdc_get_min_lsn(N'dbo_pay')")
    assert cur.fetchone()[0] != ZERO
    c.close()


def test_error_313_for_bounds_outside_the_validity_interval(make_sim):
    sim = make_sim(dummy_interval=0)
    commit(sim, inserts=1)
    commit(sim, inserts=1, updates=1)
    advance(sim, 5)
    q = "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(%s, %s, N'%s')"
    mn, mx = "sys.fn_cdc_get_min_lsn(N'dbo_orders')", "sys.fn_cdc_get_max_lsn()"
    assert len(sim.query(q % (mn, mx, "all"))) == 3
    rows = sim.query(q % (mn, mx, "all update old"))
    assert [r["__$operation"] for r in rows] == [2, 2, 3, 4]
    assert rows[2]["__$seqval"] == rows[3]["__$seqval"]
    for args in [("0x00", mx, "all"), (mn, "sys.fn_cdc_increment_lsn(%s)" % mx, "all"), (mx, mn, "all"),
                 (mn, mx, "everything"), ("NULL", mx, "all")]:
        with pytest.raises(pymssql.Error) as e:
            sim.query(q % args)
        assert "313" in str(e.value) and "fn_cdc_get_all_changes_" in str(e.value)
    with pytest.raises(pymssql.Error) as e:
        sim.query(q.replace("dbo_orders", "nope") % (mn, mx, "all"))
    assert "208" in str(e.value) and "cdc.fn_cdc_get_all_changes_nope" in str(e.value)


def test_dst_fall_back_commit_maps_to_local_time(make_sim):
    sim = make_sim(timezone="America/New_York", start_time="2026-11-01T05:00:00Z", dummy_interval=0)
    tz0 = one(sim, "SELECT DATEPART(TZOFFSET, SYSDATETIMEOFFSET())")
    a = commit(sim, inserts=1, at="2026-11-01 05:30:00")      # 01:30 EDT
    b = commit(sim, inserts=1, at="2026-11-01 06:30:00")      # 01:30 EST, an hour later
    advance(sim, 5)
    tz1 = one(sim, "SELECT DATEPART(TZOFFSET, SYSDATETIMEOFFSET())")
    assert (tz0, tz1) == (-240, -300)
    t = sim.query("SELECT CONVERT(varchar(23), sys.fn_cdc_map_lsn_to_time(%s), 121) AS a, "
                  "CONVERT(varchar(23), sys.fn_cdc_map_lsn_to_time(%s), 121) AS b"
                  % ("0x" + a["start_lsn"].hex(), "0x" + b["start_lsn"].hex()))[0]
    assert t == {"a": "2026-11-01 01:30:00.000", "b": "2026-11-01 01:30:00.000"}
    assert str(a["commit_time_utc"]).startswith("2026-11-01 05:30") and str(b["commit_time_utc"]).startswith(
        "2026-11-01 06:30")
    local = one(sim, "SELECT CONVERT(varchar(27), SYSDATETIME(), 121)")
    assert local.startswith("2026-11-01 01:30:05")


def test_map_time_to_lsn_operators_and_ties(make_sim):
    sim = make_sim(dummy_interval=0)
    a = commit(sim, inserts=1, at="2026-03-01 00:00:01")
    b = commit(sim, inserts=1, at="2026-03-01 00:00:02")
    c = commit(sim, inserts=1, at="2026-03-01 00:00:02")     # same tick as b
    d = commit(sim, inserts=1, at="2026-03-01 00:00:03")
    advance(sim, 5)

    def m(op, t):
        return one(sim, "SELECT sys.fn_cdc_map_time_to_lsn(N'%s', '%s')" % (op, t))
    t2 = "2026-03-01 00:00:02"
    assert m("largest less than", t2) == a["start_lsn"]
    assert m("largest less than or equal", t2) == c["start_lsn"]
    assert m("smallest greater than", t2) == d["start_lsn"]
    assert m("smallest greater than or equal", t2) == b["start_lsn"]
    assert m("largest less than", "2026-03-01 00:00:01") is None
    assert m("smallest greater than", "2026-03-01 00:00:03") is None
    with pytest.raises(pymssql.Error) as e:
        m("nearest", t2)
    assert "313" in str(e.value)


def test_cdc_disabled_and_capture_stopped(make_sim):
    sim = make_sim(dummy_interval=0)
    a = commit(sim, inserts=1)
    advance(sim, 5)
    sim.call("sim.capture_stop")
    b = commit(sim, inserts=1, at="2026-03-01 00:01:00")
    advance(sim, 60)
    assert max_lsn(sim) == a["start_lsn"]                      # frozen while commits continue
    w = sim.call("sim.truth_watermark")[0][0]
    assert str(w["watermark_utc"]).startswith("2026-03-01 00:01:00") and w["pending_transactions"] == 1
    sim.call("sim.capture_start")
    advance(sim, 5)
    assert max_lsn(sim) == b["start_lsn"]
    sim.call("sys.sp_cdc_disable_db")
    assert max_lsn(sim) is None
    assert one(sim, "SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders')") == ZERO
    with pytest.raises(pymssql.Error) as e:
        sim.query("SELECT * FROM cdc.lsn_time_mapping")
    assert "208" in str(e.value)


def test_truth_counts_per_period_and_watermark(make_sim):
    sim = make_sim(dummy_interval=0)
    commit(sim, inserts=3, at="2026-03-01 00:10:00")
    commit(sim, updates=1, deletes=1, at="2026-03-01 00:20:00")
    commit(sim, inserts=2, at="2026-03-01 02:05:00")
    w = sim.call("sim.truth_watermark")[0][0]
    # moving the clock to each @at ran the capture cycles in between: only the last commit waits
    assert str(w["watermark_utc"]).startswith("2026-03-01 02:05:00") and w["pending_transactions"] == 1
    counts = sim.call("sim.truth_counts", capture_instance="dbo_orders", **{"from": "2026-03-01 00:00:00",
                                                                            "to": "2026-03-01 03:00:00"})[0]
    assert [(r["inserts"], r["updates"], r["deletes"]) for r in counts] == [(3, 1, 1), (0, 0, 0), (2, 0, 0)]
    assert str(counts[1]["period_start_utc"]).startswith("2026-03-01 01:00:00")
    advance(sim, 5)
    w = sim.call("sim.truth_watermark")[0][0]
    assert str(w["watermark_utc"]).startswith("2026-03-01 02:05:05") and w["pending_transactions"] == 0
    # the worker's own aggregate over the same change table agrees
    agg = sim.query("SELECT COUNT_BIG(CASE WHEN c.[__$operation] = 2 THEN 1 END) AS ins, "
                    "COUNT_BIG(CASE WHEN c.[__$operation] = 4 THEN 1 END) AS upd, "
                    "COUNT_BIG(CASE WHEN c.[__$operation] = 1 THEN 1 END) AS del FROM [cdc].[dbo_orders_CT] AS c")[0]
    assert agg == {"ins": 5, "upd": 1, "del": 1}


def test_commit_times_round_to_datetime_ticks(make_sim):
    sim = make_sim(dummy_interval=0)
    a = commit(sim, inserts=1, at="2026-03-01 00:00:10.0015")
    b = commit(sim, inserts=1, at="2026-03-01 00:00:10.0020")
    c = commit(sim, inserts=1, at="2026-03-01 00:00:10.9990")
    advance(sim, 5)
    got = [one(sim, "SELECT CONVERT(varchar(23), tran_end_time, 121) FROM cdc.lsn_time_mapping WHERE start_lsn = %s"
               % ("0x" + x["start_lsn"].hex())) for x in (a, b, c)]
    assert got == ["2026-03-01 00:00:10.000", "2026-03-01 00:00:10.003", "2026-03-01 00:00:11.000"]


def test_awkward_names_round_trip(make_sim):
    sim = make_sim(dummy_interval=0)
    sim.call("sim.create_table", schema="sales data", name="order]s \"ü\"", columns="[id] int, [amount ]] x] int")
    sim.call("sim.enable_table", schema="sales data", name="order]s \"ü\"", capture_instance="s]ci ü")
    commit(sim, table="[sales data].[order]]s \"ü\"]", inserts=4)
    advance(sim, 5)
    n = one(sim, "SELECT COUNT_BIG(CASE WHEN c.[__$operation] = 2 THEN 1 END) FROM [cdc].[s]]ci ü_CT] AS c")
    assert n == 4
    assert one(sim, "SELECT sys.fn_cdc_get_min_lsn(N's]ci ü')") != ZERO
    rows = sim.query("SELECT c.[amount ]] x] FROM cdc.[fn_cdc_get_all_changes_s]]ci ü](sys.fn_cdc_get_min_lsn("
                     "N's]ci ü'), sys.fn_cdc_get_max_lsn(), N'all') AS c")
    assert len(rows) == 4 and "amount ] x" in rows[0]
    meta = sim.query("SELECT ct.capture_instance, OBJECT_SCHEMA_NAME(ct.source_object_id) AS s, "
                     "OBJECT_NAME(ct.source_object_id) AS t FROM cdc.change_tables AS ct "
                     "WHERE ct.capture_instance = N's]ci ü'")
    assert meta == [{"capture_instance": "s]ci ü", "s": "sales data", "t": "order]s \"ü\""}]


def test_explicit_rows_and_net_changes(make_sim):
    sim = make_sim(dummy_interval=0)
    sim.call("sim.enable_table", name="orders", capture_instance="net", supports_net_changes=1)
    advance(sim, 5)
    commit(sim, rows='[{"op":"insert","order_id":100,"amount":1.5,"status":"a"},'
                     '{"op":"update","order_id":100,"status":"b"},{"op":"insert","order_id":101},'
                     '{"op":"delete","order_id":101}]')
    commit(sim, rows='[{"op":"insert","order_id":200,"amount":2}]')
    advance(sim, 5)
    commit(sim, rows='[{"op":"update","order_id":200,"amount":3},{"op":"delete","order_id":100}]')
    advance(sim, 5)
    q = ("SELECT [__$operation] AS op, order_id, amount FROM cdc.fn_cdc_get_net_changes_net("
         "sys.fn_cdc_get_min_lsn(N'net'), sys.fn_cdc_get_max_lsn(), N'%s')")
    assert [tuple(r.values()) for r in sim.query(q % "all")] == [(2, 200, 3)]
    assert [r["op"] for r in sim.query(q % "all with merge")] == [5]
    ops = [r["op"] for r in sim.query("SELECT [__$operation] AS op FROM cdc.fn_cdc_get_all_changes_net("
                                      "sys.fn_cdc_get_min_lsn(N'net'), sys.fn_cdc_get_max_lsn(), N'all update old')")]
    assert ops == [2, 3, 4, 2, 1, 2, 3, 4, 1]
    with pytest.raises(pymssql.Error) as e:
        sim.query("SELECT * FROM cdc.fn_cdc_get_net_changes_dbo_orders(0x00, 0x00, N'all')")
    assert "208" in str(e.value)
