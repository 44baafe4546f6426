"""NOTIFY payloads that must fit: alerts on channel finalize_alert.

What channel "finalize" sends (one JSON payload per advance of a verdict,
delivered at commit, from the writer's backend, none for a range that does
not advance it or for a rolled-back one) is the isolation test
specs/notify_commit.spec (make installcheck), which sees each notification
as the listener receives it, without waiting for more."""

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
        pg.sql("SELECT finalize_internal.alert(jsonb_build_object('alert', 'schema_blocked', 'table', %s::text, "
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
