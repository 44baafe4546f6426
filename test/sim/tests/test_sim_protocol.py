"""Wire-level conformance: PRELOGIN, LOGIN7, packet splitting, DONE statuses, ATTENTION, disconnects."""
import struct
import threading
import time

import pymssql
import pytest

from tdsraw import Raw, tokens


def login_ok(port, **kw):
    r = Raw(port, **kw)
    r.prelogin()
    pkts, payload = r.login()
    return r, pkts, payload


def test_prelogin_reply_is_type_4_with_encryption_not_supported(sim):
    r = Raw(sim.port)
    typ, status, length, spid, payload = r.prelogin()
    assert typ == 0x04 and status & 1
    # walk the option table to the ENCRYPTION option (token 1)
    i, opts = 0, {}
    while payload[i] != 0xFF:
        tok, off, ln = payload[i], *struct.unpack(">HH", payload[i + 1:i + 5])
        opts[tok] = payload[off:off + ln]
        i += 5
    assert opts[1] == b"\x02"
    assert opts[0][:1] == bytes([15])          # VERSION major of SQL Server 2019
    r.close()


def test_login_ack_tds74_spid_and_environment(sim):
    r, pkts, payload = login_ok(sim.port)
    assert all(p[0] == 0x04 for p in pkts)
    assert pkts[-1][3] >= 51                   # non-zero SPID in the header
    i = payload.index(b"\xad")                 # LOGINACK
    assert payload[i + 4:i + 8] == bytes([0x74, 0x00, 0x00, 0x04])
    assert "demo".encode("utf-16-le") in payload                     # ENVCHANGE database
    assert b"\xe3\x08\x00\x07\x05\x09\x04\xd0\x00\x34\x00" in payload   # ENVCHANGE collation
    assert "4096".encode("utf-16-le") in payload                     # ENVCHANGE packet size
    assert tokens(payload)[-1] == (0xFD, 0)
    r.close()


def test_wrong_password_18456_then_close(sim):
    r = Raw(sim.port)
    r.prelogin()
    pkts, payload = r.login(password="wrong")
    toks = tokens(payload)
    assert toks[0][0] == 0xAA
    number, state, cls = struct.unpack_from("<iBB", payload, 3)
    assert (number, cls) == (18456, 14)
    assert toks[-1] == (0xFD, 0x02)
    with pytest.raises((EOFError, ConnectionError)):
        r.packet()


def test_unknown_database_4060(sim):
    r = Raw(sim.port)
    r.prelogin()
    pkts, payload = r.login(database="nosuchdb")
    number = struct.unpack_from("<i", payload, 3)[0]
    assert number == 4060
    assert tokens(payload)[-1] == (0xFD, 0x02)


def test_response_split_at_negotiated_packet_size(sim):
    r, _, _ = login_ok(sim.port, packet_size=512)
    r.batch("EXEC sim.stream_constant @rows = 200")
    pkts, payload = r.message()
    assert len(pkts) > 5
    assert all(p[2] == 512 for p in pkts[:-1])           # full packets up to the last
    assert all(not (p[1] & 1) for p in pkts[:-1]) and pkts[-1][1] & 1
    assert payload.count(b"\xd1") >= 200
    r.close()


def test_done_more_bits_and_error_in_middle_of_batch(sim):
    r, _, _ = login_ok(sim.port)
    # 313 ends only its statement (statement-termination); the batch goes on.
    r.batch("SET ANSI_NULLS ON; SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(NULL, NULL, N'all'); "
            "PRINT 'still running'")
    _, payload = r.message()
    toks = tokens(payload)
    assert toks[0] == (0xFD, 0x01)                  # SET: DONE(MORE)
    assert toks[1][0] == 0xAA                       # ERROR 313
    assert struct.unpack_from("<i", payload, 13 + 3)[0] == 313
    assert toks[2] == (0xFD, 0x03)                  # DONE(MORE|ERROR)
    assert toks[3][0] == 0xAB                       # INFO from PRINT
    assert toks[4] == (0xFD, 0x00)                  # last DONE without MORE
    r.close()


def test_invalid_object_aborts_the_batch_scope(sim):
    """208 (deferred name resolution) aborts the scope: at top level nothing after it runs."""
    r, _, _ = login_ok(sim.port)
    r.batch("SET ANSI_NULLS ON; SELECT * FROM nosuch_table; PRINT 'not reached'")
    _, payload = r.message()
    toks = tokens(payload)
    assert toks[0] == (0xFD, 0x01)
    assert toks[1][0] == 0xAA
    assert struct.unpack_from("<i", payload, 13 + 3)[0] == 208
    assert toks[2:] == [(0xFD, 0x02)]               # DONE(ERROR) ends the response; no PRINT
    r.close()


def test_syntax_error_fails_whole_batch(sim):
    r, _, _ = login_ok(sim.port)
    r.batch("PRINT 'a'; SELECT FROM WHERE")
    _, payload = r.message()
    toks = tokens(payload)
    assert [t for t, _ in toks] == [0xAA, 0xFD]     # nothing ran, no INFO from PRINT
    number, state, cls = struct.unpack_from("<iBB", payload, 3)
    assert (number, cls) == (102, 15)
    assert "Incorrect syntax near".encode("utf-16-le") in payload
    assert toks[-1] == (0xFD, 0x02)
    r.close()


def test_attention_stops_waitfor_and_is_acknowledged(sim):
    r, _, _ = login_ok(sim.port)
    r.batch("WAITFOR DELAY '00:01:00'")
    time.sleep(0.3)
    t0 = time.monotonic()
    r.attention()
    seen = []
    while not any(t == 0xFD and s is not None and s & 0x20 for t, s in seen):
        _, payload = r.message()
        seen += tokens(payload)
    assert time.monotonic() - t0 < 20          # stopped, not run to its end
    r.batch("PRINT 'alive'")
    _, payload = r.message()
    assert tokens(payload)[-1] == (0xFD, 0)
    r.close()


def test_a_full_packet_is_sent_while_the_batch_still_runs(sim):
    """SQL Server sends a response packet as it fills: a client's timeout (DB-Library's dbsettime) waits
    for the next packet, not for the whole batch. The first result here fills more than a packet; the
    batch then waits 3 s: the first packet arrives that long before the last (on a machine however
    loaded: held back, they came together)."""
    r, _, _ = login_ok(sim.port)
    r.batch("SELECT REPLICATE(CAST('x' AS varchar(max)), 20000) AS big; WAITFOR DELAY '00:00:03'; SELECT 1")
    typ, status, _, _, _ = r.packet()
    first = time.monotonic()
    assert typ == 0x04 and not status & 1          # a packet of the reply, not its last
    while not status & 1:
        typ, status, _, _, _ = r.packet()
    assert time.monotonic() - first >= 2.5, time.monotonic() - first
    r.close()


def test_attention_when_idle_gets_done_attn(sim):
    r, _, _ = login_ok(sim.port)
    r.attention()
    _, payload = r.message()
    assert tokens(payload) == [(0xFD, 0x20)]
    r.close()


def test_attention_stops_a_streaming_result(sim):
    r, _, _ = login_ok(sim.port)
    r.batch("EXEC sim.stream_constant @rows = 3000000")
    r.packet()
    r.attention()
    total = 0
    t0 = time.monotonic()
    done_attn = False
    while not done_attn:
        typ, status, length, spid, payload = r.packet()
        total += length
        if status & 1 and payload.endswith(b"\xfd\x20\x00" + b"\x00" * 10):
            done_attn = True
    assert time.monotonic() - t0 < 20
    assert total < 3000000 * 20                  # far less than the whole result was sent
    r.close()


def test_vanished_client_mid_result_does_not_disturb_others(sim):
    r, _, _ = login_ok(sim.port)
    r.batch("EXEC sim.stream_constant @rows = 2000000")
    r.packet()
    r.sock.close()                               # vanish mid-result
    c = sim.connect()
    cur = c.cursor()
    cur.execute("SELECT COUNT_BIG(*) FROM cdc.change_tables")
    assert cur.fetchone()[0] == 1
    c.close()


def test_many_concurrent_connections_have_distinct_spids(sim):
    results, errors = [], []

    def worker():
        try:
            c = sim.connect()
            cur = c.cursor()
            cur.execute("SELECT @@SPID, sys.fn_cdc_get_min_lsn(N'dbo_orders')")
            results.append(cur.fetchone())
            cur.execute("WAITFOR DELAY '00:00:00.2'")
            c.close()
        except Exception as e:           # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(results) == 24
    assert len({spid for spid, _ in results}) == 24
    assert all(len(lsn) == 10 for _, lsn in results)


def test_sql_batch_with_all_headers_trace_activity(sim):
    """ALL_HEADERS is skipped by its TotalLength, whatever headers it holds."""
    r, _, _ = login_ok(sim.port)
    trace = struct.pack("<IH", 4 + 2 + 20, 3) + b"\x11" * 20
    txn = struct.pack("<IHQI", 18, 2, 0, 1)
    body = txn + trace
    r.send(0x01, struct.pack("<I", 4 + len(body)) + body + "PRINT 'ok'".encode("utf-16-le"))
    _, payload = r.message()
    assert "ok".encode("utf-16-le") in payload and tokens(payload)[-1] == (0xFD, 0)
    r.close()


def test_wrong_password_via_pymssql(sim):
    with pytest.raises(pymssql.OperationalError) as e:
        sim.connect(password="nope")
    assert "18456" in str(e.value) or "Login failed" in str(e.value)
