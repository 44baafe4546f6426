"""NOTIFY on channel "finalize": one JSON payload per advance of a verdict,
delivered at commit, none for a range that does not advance it or for a
rolled-back one."""

import json
import select
import time

import pytest


def drain(conn, timeout=2.0):
    """Collects the notifications a listening connection receives within timeout."""
    deadline = time.monotonic() + timeout
    got = []
    while time.monotonic() < deadline:
        if select.select([conn], [], [], 0.1)[0]:
            conn.poll()
        while conn.notifies:
            got.append(conn.notifies.pop(0))
        if got and not select.select([conn], [], [], 0.2)[0]:
            break
    return got


@pytest.fixture
def tracked(pg):
    pg.sql("CREATE SERVER IF NOT EXISTS notify_src FOREIGN DATA WRAPPER finalize_mssql "
           "OPTIONS (host '127.0.0.1', database 'demo')")
    pg.sql("SELECT finalize.track_table('n.orders', 'notify_src', 'dbo.orders')")
    yield "n.orders"
    pg.sql("SELECT finalize.untrack_table('n.orders', false)")


def record(conn, start, end, commit_time, *counts):
    with conn.cursor() as cur:
        cur.execute("SELECT finalize.record_range('n.orders', %s, %s, %s::timestamptz)",
                    (start, end, commit_time))
        return cur.fetchone()[0]


def test_payload_of_each_advance(pg, tracked):
    listener = pg.connect()
    listener.cursor().execute("LISTEN finalize")
    writer = pg.connect()

    record(writer, None, "0x00000000000000000100", "2026-11-29 13:20:00+00")
    record(writer, "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 14:00:00.003+00")
    notes = drain(listener)
    assert [n.channel for n in notes] == ["finalize", "finalize"]
    assert [json.loads(n.payload) for n in notes] == [
        {"table": "n.orders", "old": None, "new": "2026-11-29T13:00:00Z",
         "lsn": "0x00000000000000000100", "commit_time": "2026-11-29T13:20:00Z"},
        {"table": "n.orders", "old": "2026-11-29T13:00:00Z", "new": "2026-11-29T14:00:00Z",
         "lsn": "0x00000000000000000200", "commit_time": "2026-11-29T14:00:00.003000Z"},
    ]
    assert all(n.pid == writer.get_backend_pid() for n in notes)


def test_no_payload_without_advance(pg, tracked):
    listener = pg.connect()
    listener.cursor().execute("LISTEN finalize")
    writer = pg.connect()
    record(writer, None, "0x00000000000000000100", "2026-11-29 13:20:00+00")
    assert len(drain(listener)) == 1
    # Same period: the verdict stays, so nothing is sent.
    record(writer, "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 13:59:59.997+00")
    # A repeat of a recorded range changes nothing either.
    record(writer, "0x00000000000000000100", "0x00000000000000000200", "2026-11-29 13:59:59.997+00")
    assert drain(listener, timeout=1.0) == []


def test_delivered_at_commit_only(pg, tracked):
    listener = pg.connect()
    listener.cursor().execute("LISTEN finalize")
    writer = pg.connect(autocommit=False)
    record(writer, None, "0x00000000000000000100", "2026-11-29 13:20:00+00")
    assert drain(listener, timeout=0.5) == [], "notification before commit"
    writer.rollback()
    assert drain(listener, timeout=0.5) == [], "notification of a rolled-back range"
    record(writer, None, "0x00000000000000000100", "2026-11-29 13:20:00+00")
    writer.commit()
    notes = drain(listener)
    assert len(notes) == 1 and json.loads(notes[0].payload)["new"] == "2026-11-29T13:00:00Z"


@pytest.mark.parametrize("detail", [
    "x" * 9000,                                    # one long value
    "é" * 3000,                                    # long in bytes, not in characters
    {"ddl": ["ALTER TABLE t ADD c%d int" % i for i in range(600)]},   # a long object
])
def test_alerts_fit_in_a_notify_payload_and_keep_their_names(pg, detail):
    """An alert never fails for its size (NOTIFY refuses 8000 bytes): long
    values are cut and "truncated" says so, while what names the alert (a
    table name of 255 characters, multi-byte ones included) is kept whole."""
    table = "€" * 255
    listener = pg.connect()
    try:
        listener.cursor().execute("LISTEN finalize_alert")
        pg.sql("SELECT finalize._alert(jsonb_build_object('alert', 'schema_blocked', 'table', %s::text, "
               "'start_lsn', '0x00000000000000000100', 'detail', %s::jsonb, 'extra', repeat('y', 2000)))",
               (table, json.dumps(detail)))
        (n,) = drain(listener)
    finally:
        listener.close()
    assert len(n.payload.encode()) < 8000
    payload = json.loads(n.payload)
    assert payload["table"] == table and payload["alert"] == "schema_blocked"
    assert payload["start_lsn"] == "0x00000000000000000100"
    assert payload["truncated"] is True
    assert len(str(payload["detail"])) <= 504
