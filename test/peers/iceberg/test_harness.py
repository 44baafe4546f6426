"""The Iceberg harness itself, for real: RESTCatalogServer, the pyiceberg writer and the fault proxy.

    /usr/bin/python3 -m pytest -p no:cacheprovider -q test/peers/iceberg/test_harness.py

What finalize will read is GET /v1/namespaces/NS/tables/T (loadTable): metadata.refs, metadata.snapshots
with snapshot-id, parent-snapshot-id, sequence-number, timestamp-ms and the summary's custom properties.
These tests read it with plain urllib, as finalize's C code will over HTTP."""
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from fault_proxy import MALFORMED
from writer_client import Writer, WriterError

WATERMARK = "finalize.watermark"


def http(uri, path, headers=None, data=None, method=None, timeout=10):
    """One request -> (status, headers, parsed JSON, or the raw bytes when it is not JSON)."""
    req = urllib.request.Request(uri + path, headers=headers or {}, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, hdrs, body = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, body = e.code, e.headers, e.read()
    try:
        return status, hdrs, json.loads(body) if body else None
    except ValueError:
        return status, hdrs, body


def load(uri, ident, headers=None):
    ns, t = ident.split(".")
    status, _, body = http(uri, "/v1/namespaces/%s/tables/%s" % (ns, t), headers)
    assert status == 200, (status, body)
    return body["metadata"]


def path_of(ident):
    ns, t = ident.split(".")
    return "/v1/namespaces/%s/tables/%s" % (ns, t)


def by_id(md):
    return {s["snapshot-id"]: s for s in md["snapshots"]}


def row(i, hour=0, op="c"):
    return {"id": i, "op": op, "lsn": "0/%X" % (0x1000 + i), "commit_time": "2024-05-01T%02d:00:00+00:00" % hour}


def custom(summary):
    """The summary's properties that are not Iceberg's own."""
    return {k: v for k, v in summary.items()
            if k != "operation" and not k.startswith(("added-", "deleted-", "removed-", "total-", "changed-"))}


# -- the catalog and the writer

def test_catalog_answers_config_on_loopback(catalog):
    assert catalog.uri.startswith("http://127.0.0.1:")
    status, _, body = http(catalog.uri, "/v1/config")
    assert status == 200 and body["defaults"] == {} and body["overrides"] == {}
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in body["endpoints"]
    assert catalog.warehouse.startswith("file:///")


def test_append_property_is_in_load_table_summary(catalog, writer, table):
    s1 = writer.call("append", table=table, rows=[row(1, 10)], properties={WATERMARK: "2024-05-01T10:00:00Z"})
    s2 = writer.call("append", table=table, rows=[row(2, 11), row(3, 11)],
                     properties={WATERMARK: "2024-05-01T11:00:00Z", "finalize.lsn": "0/1003"})
    md = load(catalog.uri, table)
    assert md["current-snapshot-id"] == s2["snapshot_id"]
    assert md["refs"] == {"main": {"snapshot-id": s2["snapshot_id"], "type": "branch"}}
    snaps = by_id(md)
    first, second = snaps[s1["snapshot_id"]], snaps[s2["snapshot_id"]]
    assert "parent-snapshot-id" not in first                  # absent, not null, on the first snapshot
    assert second["parent-snapshot-id"] == s1["snapshot_id"]
    assert (first["sequence-number"], second["sequence-number"]) == (1, 2)
    assert md["last-sequence-number"] == 2
    assert first["summary"]["operation"] == second["summary"]["operation"] == "append"
    assert custom(first["summary"]) == {WATERMARK: "2024-05-01T10:00:00Z"}
    assert custom(second["summary"]) == {WATERMARK: "2024-05-01T11:00:00Z", "finalize.lsn": "0/1003"}
    assert second["summary"]["added-records"] == "2" and second["summary"]["total-records"] == "3"
    assert isinstance(second["timestamp-ms"], int) and second["timestamp-ms"] >= first["timestamp-ms"]
    # Summary values are strings (the spec's map<string,string>), snapshot ids JSON integers (64-bit).
    assert all(isinstance(v, str) for v in second["summary"].values())
    assert s2["summary"][WATERMARK] == "2024-05-01T11:00:00Z"       # what the writer answers matches
    assert [r["id"] for r in writer.call("scan", table=table)] == [1, 2, 3]
    assert md["snapshot-log"][-1] == {"timestamp-ms": second["timestamp-ms"], "snapshot-id": s2["snapshot_id"]}


def test_compact_is_a_replace_without_custom_properties(catalog, writer, table):
    writer.call("append", table=table, rows=[row(1, 1)], properties={WATERMARK: "2024-05-01T01:00:00Z"})
    s2 = writer.call("append", table=table, rows=[row(2, 2)], properties={WATERMARK: "2024-05-01T02:00:00Z"})
    before = writer.call("scan", table=table)
    c = writer.call("compact", table=table)
    assert c["operation"] == "replace" and c["parent_id"] == s2["snapshot_id"]
    md = load(catalog.uri, table)
    snap = by_id(md)[c["snapshot_id"]]
    assert md["current-snapshot-id"] == c["snapshot_id"]
    assert snap["summary"]["operation"] == "replace"
    assert custom(snap["summary"]) == {}
    assert snap["summary"]["deleted-data-files"] == "2" and snap["summary"]["added-data-files"] == "1"
    assert snap["summary"]["total-records"] == "2" and snap["summary"]["total-data-files"] == "1"
    assert writer.call("scan", table=table) == before


def test_compact_by_public_overwrite_is_two_snapshots(catalog, writer, table):
    s1 = writer.call("append", table=table, rows=[row(1), row(2)], properties={WATERMARK: "w1"})
    last = writer.call("compact", table=table, mode="overwrite")
    snaps = writer.call("snapshots", table=table)
    assert [s["operation"] for s in snaps] == ["append", "delete", "append"]
    assert snaps[1]["parent_id"] == s1["snapshot_id"] and last["parent_id"] == snaps[1]["snapshot_id"]
    assert custom(snaps[1]["summary"]) == custom(snaps[2]["summary"]) == {}
    assert [r["id"] for r in writer.call("scan", table=table)] == [1, 2]


def test_delete_commits_without_properties(catalog, writer, table):
    writer.call("append", table=table, rows=[row(1)], properties={WATERMARK: "w1"})
    writer.call("append", table=table, rows=[row(2)], properties={WATERMARK: "w2"})
    d = writer.call("delete", table=table, filter="id == 1")        # one whole data file: a delete
    assert d["operation"] == "delete" and custom(d["summary"]) == {}
    assert d["summary"]["deleted-records"] == "1" and d["summary"]["total-records"] == "1"
    assert writer.call("delete", table=table, filter="id == 99") is None   # nothing matched: no commit
    writer.call("append", table=table, rows=[row(3), row(4)])
    o = writer.call("delete", table=table, filter="id == 3")        # part of a file: copy-on-write
    assert o["operation"] == "overwrite" and custom(o["summary"]) == {}
    assert [r["id"] for r in writer.call("scan", table=table)] == [2, 4]
    assert load(catalog.uri, table)["current-snapshot-id"] == o["snapshot_id"]


def test_branch_append_does_not_move_main(catalog, writer, table):
    m = writer.call("append", table=table, rows=[row(1)], properties={WATERMARK: "main-1"})
    refs = writer.call("create_branch", table=table, name="audit")
    assert refs["audit"] == {"type": "branch", "snapshot_id": m["snapshot_id"]}
    b = writer.call("append", table=table, rows=[row(2)], properties={WATERMARK: "audit-2"}, branch="audit")
    assert b["parent_id"] == m["snapshot_id"]
    md = load(catalog.uri, table)
    assert md["current-snapshot-id"] == m["snapshot_id"]
    assert md["refs"]["main"] == {"snapshot-id": m["snapshot_id"], "type": "branch"}
    assert md["refs"]["audit"] == {"snapshot-id": b["snapshot_id"], "type": "branch"}
    assert by_id(md)[b["snapshot_id"]]["summary"][WATERMARK] == "audit-2"
    assert by_id(md)[b["snapshot_id"]]["sequence-number"] == 2
    assert [r["id"] for r in writer.call("scan", table=table)] == [1]
    assert [r["id"] for r in writer.call("scan", table=table, ref="audit")] == [1, 2]
    # A tag, and moving the branch back (set_ref); main still where it was.
    writer.call("create_tag", table=table, name="v1", snapshot_id=b["snapshot_id"])
    refs = writer.call("set_ref", table=table, name="audit", snapshot_id=m["snapshot_id"])
    assert refs["audit"]["snapshot_id"] == m["snapshot_id"] and refs["v1"] == {"type": "tag",
                                                                               "snapshot_id": b["snapshot_id"]}
    md = load(catalog.uri, table)
    assert md["refs"]["v1"] == {"snapshot-id": b["snapshot_id"], "type": "tag"}
    assert md["refs"]["main"]["snapshot-id"] == m["snapshot_id"]


def test_rollback_moves_main_back(catalog, writer, table):
    s1 = writer.call("append", table=table, rows=[row(1)], properties={WATERMARK: "w1"})
    s2 = writer.call("append", table=table, rows=[row(2)], properties={WATERMARK: "w2"})
    r = writer.call("rollback", table=table, snapshot_id=s1["snapshot_id"])
    assert r["snapshot_id"] == s1["snapshot_id"]
    md = load(catalog.uri, table)
    assert md["current-snapshot-id"] == s1["snapshot_id"]
    assert md["refs"]["main"]["snapshot-id"] == s1["snapshot_id"]
    assert s2["snapshot_id"] in by_id(md)                      # still listed, no longer an ancestor of main
    assert md["snapshot-log"][-1]["snapshot-id"] == s1["snapshot_id"]
    assert [r["id"] for r in writer.call("scan", table=table)] == [1]
    # The next append's parent is the rolled-back-to snapshot; its sequence number still grows.
    s3 = writer.call("append", table=table, rows=[row(3)], properties={WATERMARK: "w3"})
    assert s3["parent_id"] == s1["snapshot_id"] and s3["sequence_number"] == 3
    # Only an ancestor: s2 is not one any more (set_current_snapshot moves main anywhere).
    with pytest.raises(WriterError, match="not an ancestor"):
        writer.call("rollback", table=table, snapshot_id=s2["snapshot_id"])
    assert writer.call("set_current_snapshot", table=table, snapshot_id=s2["snapshot_id"])["snapshot_id"] \
        == s2["snapshot_id"]
    assert load(catalog.uri, table)["current-snapshot-id"] == s2["snapshot_id"]


def test_writer_reports_errors(writer, table):
    with pytest.raises(WriterError) as e:
        writer.call("append", table="ns.no_such_table", rows=[row(1)])
    assert e.value.type == "NoSuchTableError"
    with pytest.raises(WriterError, match="unknown command"):
        writer.call("no_such_command")
    with pytest.raises(WriterError, match="no column nope"):
        writer.call("append", table=table, rows=[{"id": 1, "nope": 2}])
    assert writer.call("ping") == "pong"                       # still serving


def test_load_table_of_50_snapshots(catalog, writer, table):
    for i in range(50):
        writer.call("append", table=table, rows=[row(i, i % 24)], properties={WATERMARK: "w%02d" % i})
    times = []
    for _ in range(20):
        t = time.monotonic()
        md = load(catalog.uri, table)
        times.append(time.monotonic() - t)
    assert len(md["snapshots"]) == 50
    times.sort()
    # Measured, not asserted (test/bench/lake.sh compares it with finalize's lag).
    print("\n# loadTable, 50 snapshots: median %.1f ms, max %.1f ms" % (times[10] * 1000, times[-1] * 1000))


# -- what the real server does not do (the fault proxy emulates it)

def test_real_server_has_no_etag_and_ignores_snapshots_refs(catalog, writer, table):
    s1 = writer.call("append", table=table, rows=[row(1)])
    writer.call("create_branch", table=table, name="b")
    writer.call("append", table=table, rows=[row(2)])
    status, hdrs, _ = http(catalog.uri, path_of(table))
    assert status == 200 and hdrs.get("ETag") is None
    status, _, _ = http(catalog.uri, path_of(table), headers={"If-None-Match": "*"})
    assert status == 200
    # snapshots=refs (the spec: only the snapshots refs point at) is ignored: every snapshot comes back.
    status, _, body = http(catalog.uri, path_of(table) + "?snapshots=refs")
    assert status == 200 and len(body["metadata"]["snapshots"]) == 2
    assert s1["snapshot_id"] in by_id(body["metadata"])
    # Errors: the ErrorModel, plus a non-standard "stack"; a missing namespace is a NoSuchTableException.
    status, _, body = http(catalog.uri, "/v1/namespaces/nope/tables/t")
    assert status == 404 and body["error"]["type"] == "NoSuchTableException" and body["error"]["code"] == 404
    assert "stack" in body["error"]


def test_proxy_etag_emulation(proxy, writer, table):
    writer.call("append", table=table, rows=[row(1)])
    proxy.set_etag(True)
    status, hdrs, _ = http(proxy.uri, path_of(table))
    tag = hdrs["ETag"]
    assert status == 200 and tag.startswith('"')
    status, hdrs, body = http(proxy.uri, path_of(table), headers={"If-None-Match": tag})
    assert status == 304 and hdrs["ETag"] == tag
    assert proxy.last_headers["If-None-Match"] == tag
    writer.call("append", table=table, rows=[row(2)])            # straight to the catalog: a new body
    status, hdrs, _ = http(proxy.uri, path_of(table), headers={"If-None-Match": tag})
    assert status == 200 and hdrs["ETag"] != tag
    assert proxy.count(path_of(table)) == 3


# -- the fault proxy

def test_proxy_passes_and_counts(proxy, writer, table):
    writer.call("append", table=table, rows=[row(1)], properties={WATERMARK: "w1"})
    md = load(proxy.uri, table, headers={"X-Test": "1"})
    assert custom(md["snapshots"][0]["summary"]) == {WATERMARK: "w1"}
    assert proxy.count(path_of(table)) == 1 and proxy.counts == {path_of(table): 1}
    assert proxy.last_headers["X-Test"] == "1"
    status, _, _ = http(proxy.uri, "/v1/config")
    assert status == 200 and proxy.count("/v1/config", method="GET") == 1
    proxy.reset()
    assert proxy.count() == 0


@pytest.mark.parametrize("code", [401, 403, 404, 419, 500, 503])
def test_proxy_status(proxy, table, code):
    proxy.set_status(code, match=r"/tables/")
    status, _, body = http(proxy.uri, path_of(table))
    assert status == code
    assert body["error"]["code"] == code and body["error"]["type"] and body["error"]["message"]
    assert http(proxy.uri, "/v1/config")[0] == 200                # not matched: passed
    proxy.set_status(503, body=b"<html>busy</html>", headers={"Retry-After": "1"})
    status, hdrs, body = http(proxy.uri, path_of(table))
    assert (status, body, hdrs["Retry-After"]) == (503, b"<html>busy</html>", "1")
    proxy.set_pass()
    assert http(proxy.uri, path_of(table))[0] == 200


def test_proxy_stall_until_the_mode_changes(proxy, table):
    proxy.set_stall()
    with pytest.raises(OSError):                                  # socket.timeout, a subclass
        http(proxy.uri, path_of(table), timeout=0.5)
    answers = []
    t = threading.Thread(target=lambda: answers.append(http(proxy.uri, path_of(table), timeout=10)))
    t.start()
    deadline = time.monotonic() + 5
    while proxy.stalled < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not answers and proxy.stalled >= 1
    proxy.set_pass()                                              # the held request is answered now
    t.join(10)
    assert answers and answers[0][0] == 200 and "metadata" in answers[0][2]
    assert proxy.count(path_of(table)) == 2


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_proxy_malformed_load_table(proxy, writer, table, kind):
    writer.call("append", table=table, rows=[row(1)], properties={WATERMARK: "w1"})
    proxy.set_malformed(kind)
    status, _, body = http(proxy.uri, path_of(table))
    assert status == 200
    check = {
        "not_json": lambda b: isinstance(b, bytes) and b.startswith(b"<html>"),
        "truncated": lambda b: isinstance(b, bytes) and b.startswith(b"{"),
        "empty": lambda b: b is None,
        "no_metadata": lambda b: "metadata" not in b and "metadata-location" in b,
        "metadata_not_object": lambda b: isinstance(b["metadata"], str),
        "snapshots_not_list": lambda b: isinstance(b["metadata"]["snapshots"], dict),
        "snapshot_not_object": lambda b: b["metadata"]["snapshots"] == [1],
        "summary_not_object": lambda b: b["metadata"]["snapshots"][0]["summary"] == "operation=append",
        "snapshot_id_string": lambda b: isinstance(b["metadata"]["snapshots"][0]["snapshot-id"], str),
        "refs_not_object": lambda b: isinstance(b["metadata"]["refs"], list),
        "no_snapshots": lambda b: "snapshots" not in b["metadata"] and "refs" not in b["metadata"],
        "json_array": lambda b: isinstance(b, list),
    }[kind]
    assert check(body), body
    assert http(proxy.uri, "/v1/config")[0] == 200               # only loadTable is spoiled


def test_proxy_static_token(proxy, table):
    proxy.require_token("s3cr3t")
    status, hdrs, body = http(proxy.uri, path_of(table))
    assert status == 401 and body["error"]["type"] == "NotAuthorizedException"
    assert hdrs["WWW-Authenticate"].startswith("Bearer")
    assert http(proxy.uri, path_of(table), headers={"Authorization": "Bearer wrong"})[0] == 401
    assert http(proxy.uri, path_of(table), headers={"Authorization": "Bearer s3cr3t"})[0] == 200
    assert proxy.last_headers["Authorization"] == "Bearer s3cr3t"


def test_proxy_oauth2_client_credentials_and_expiry(proxy, writer, table, venv_python):
    writer.call("append", table=table, rows=[row(1)], properties={WATERMARK: "w1"})
    proxy.require_oauth("finalize", "hunter2", expires_in=2)
    assert http(proxy.uri, path_of(table))[0] == 401
    form = lambda **kw: "&".join("%s=%s" % kv for kv in kw.items()).encode()   # noqa: E731
    bad = http(proxy.uri, "/v1/oauth/tokens", data=form(grant_type="client_credentials", client_id="finalize",
                                                        client_secret="nope", scope="catalog"))
    assert bad[0] == 401 and bad[2]["error"] == "invalid_client"
    assert http(proxy.uri, "/v1/oauth/tokens", data=form(grant_type="password"))[2]["error"] \
        == "unsupported_grant_type"
    status, _, tok = http(proxy.uri, "/v1/oauth/tokens",
                          data=form(grant_type="client_credentials", client_id="finalize", client_secret="hunter2",
                                    scope="catalog"),
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200 and tok["token_type"] == "bearer" and tok["expires_in"] == 2
    assert tok["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token" and tok["access_token"]
    bearer = {"Authorization": "Bearer " + tok["access_token"]}
    md = load(proxy.uri, table, headers=bearer)
    assert md["snapshots"][0]["summary"][WATERMARK] == "w1"
    time.sleep(2.2)
    status, _, body = http(proxy.uri, path_of(table), headers=bearer)
    assert status == 401 and body["error"]["message"] == "token expired"
    assert proxy.count("/v1/oauth/tokens", method="POST") == 3
    # pyiceberg through the proxy with the same client credentials (its legacy OAuth2 flow).
    proxy.require_oauth("finalize", "hunter2", expires_in=3600)
    with Writer(venv_python, proxy.uri, credential="finalize:hunter2", scope="catalog") as w:
        assert [r["id"] for r in w.call("scan", table=table)] == [1]
    sent = [r for r in proxy.requests if r["path"] == "/v1/oauth/tokens"][-1]
    assert sent["method"] == "POST"
    assert [r for r in proxy.requests if r["path"] == path_of(table)][-1]["headers"]["Authorization"] \
        .startswith("Bearer ")
