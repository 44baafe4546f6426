"""Fault injection: errors, stalls (with cancel), dropped connections, purge during a read, refused logins."""
import threading
import time

import pymssql
import pytest
from pymssql import _mssql

from simtest_util import one


@pytest.fixture
def fsim(make_sim):
    sim = make_sim(dummy_interval=0)
    sim.call("sim.commit", inserts=2000, at="2026-03-01 00:00:10")
    sim.call("sim.commit", inserts=10, at="2026-03-01 01:00:10")
    sim.call("sim.advance", seconds=5)
    return sim


def test_error_fault_matches_pattern_and_count(fsim):
    fsim.call("sim.fault_error", number=1205, message="Transaction was deadlocked", **{"class": 13},
              pattern="fn_cdc_get_max_lsn", count=2)
    c = fsim.connect()
    cur = c.cursor()
    cur.execute("SELECT 1")                       # does not match
    assert cur.fetchone() == (1,)
    for _ in range(2):
        with pytest.raises(pymssql.Error) as e:
            cur.execute("SELECT sys.fn_cdc_get_max_lsn()")
        assert e.value.args[0] == 1205 and b"deadlocked" in e.value.args[1]
    cur.execute("SELECT sys.fn_cdc_get_max_lsn()")
    assert len(cur.fetchone()[0]) == 10
    c.close()


def test_stall_fault_is_cancellable(fsim):
    fsim.call("sim.fault_stall", seconds=60, pattern="lsn_time_mapping")
    c = _mssql.connect(server=fsim.server, user="sa", password="Passw0rd!", database="demo")
    threading.Timer(0.5, c.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(_mssql.MSSQLDatabaseException):
        c.execute_query("SELECT COUNT(*) FROM cdc.lsn_time_mapping")
        list(c)
    assert time.monotonic() - t0 < 20
    assert c.execute_scalar("SELECT COUNT(*) FROM cdc.lsn_time_mapping") == 2
    c.close()


def test_drop_fault_cuts_the_result_and_closes_only_that_connection(fsim):
    fsim.call("sim.fault_drop", after_rows=100, pattern="dbo_orders_CT")
    c = fsim.connect()
    cur = c.cursor()
    got = []
    with pytest.raises(pymssql.Error):
        cur.execute("SELECT order_id FROM cdc.dbo_orders_CT")
        for row in cur:
            got.append(row)
    assert len(got) <= 100
    assert one(fsim, "SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT") == 2010    # control connection unharmed
    c2 = fsim.connect()
    cur2 = c2.cursor()
    cur2.execute("SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT")                  # fault was consumed
    assert cur2.fetchone()[0] == 2010
    c2.close()


def test_purge_during_read_raises_min_lsn_after_the_rows_were_read(fsim):
    mx = one(fsim, "SELECT sys.fn_cdc_get_max_lsn()")
    mn_before = one(fsim, "SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders')")
    fsim.call("sim.fault_purge")
    c = fsim.connect()
    cur = c.cursor()
    cur.execute("SELECT COUNT_BIG(*) FROM [cdc].[dbo_orders_CT] AS c WHERE c.[__$start_lsn] > %s "
                "AND c.[__$start_lsn] <= %s" % ("0x" + mn_before.hex(), "0x" + mx.hex()))
    assert cur.fetchone()[0] == 2010                   # the read saw its snapshot
    cur.execute("SELECT sys.fn_cdc_get_min_lsn(N'dbo_orders')")
    assert cur.fetchone()[0] == mx                     # ... but cleanup ran meanwhile
    cur.execute("SELECT COUNT_BIG(*) FROM [cdc].[dbo_orders_CT]")
    assert cur.fetchone()[0] == 10
    c.close()


def test_refused_logins_then_accepted(fsim):
    fsim.call("sim.fault_refuse_logins", count=2)
    for _ in range(2):
        with pytest.raises(pymssql.OperationalError) as e:
            fsim.connect()
        assert e.value.args[0][0] == 18456
    c = fsim.connect()
    c.close()


def test_kill_sessions_drops_other_connections(fsim):
    victim = fsim.connect()
    cur = victim.cursor()
    cur.execute("SELECT 1")
    cur.fetchall()
    killed = fsim.call("sim.kill_sessions")[0][0]["killed"]
    assert killed == 1
    with pytest.raises(pymssql.Error):
        cur.execute("SELECT 1")
        cur.fetchall()
    assert one(fsim, "SELECT 2") == 2
