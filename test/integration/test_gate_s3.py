"""The release gate against a real S3-compatible server on loopback (s3rver
behind a proxy that checks every SigV4 signature with the AWS SDK's signer,
test/s3/server.mjs): the listing goes through libcurl with SigV4, pages with
continuation tokens, survives awkward keys, follows the calling user's
mapping, and turns every S3 failure into a clear error that stores nothing.
A stalled store never hangs a backend: timeouts and cancels stop it."""

import hashlib
import json
import threading
import time

import psycopg2
import pytest

from pgcluster import Cluster, cluster_with_source
from s3proc import S3Server

TABLE = "lake.orders"
P08 = "2026-11-27 08:00+00"


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        server.create_bucket("lake")
        yield server


@pytest.fixture(scope="module")
def pg(s3):
    cluster = cluster_with_source({"finalize.enabled": "off"})
    cluster.sql("CREATE SERVER lake FOREIGN DATA WRAPPER finalize_s3 OPTIONS "
                "(endpoint %s, region %s, bucket 'lake', url_style 'path')", (s3.endpoint, s3.region))
    cluster.sql("CREATE USER MAPPING FOR postgres SERVER lake OPTIONS (access_key_id %s, secret_access_key %s)",
                (s3.access_key, s3.secret_key))
    yield cluster
    cluster.cleanup()


@pytest.fixture
def table(pg, s3):
    """A tracked table whose 08:00 period is final; the bucket starts empty."""
    pg.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (TABLE,))
    pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-27 06:00+00')", (TABLE,))
    pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
           "'2026-11-27 09:00+00', 3, 0, 0, '2026-11-27 08:01+00', '2026-11-27 08:59+00')", (TABLE,))
    s3.delete_bucket("lake")
    s3.create_bucket("lake")
    s3.clear()
    yield TABLE
    s3.clear()
    pg.sql("DELETE FROM finalize.tracked_table")


def manifest(generation, files, partition="day=27/hour=08", store="lake", **extra):
    m = {"table": TABLE, "partition": partition, "generation": generation, "store": store,
         "prefix": f"{partition}/{generation}/", "period_start": P08, "files": files}
    m.update(extra)
    return m


def gate(conn_or_pg, m, user="postgres"):
    if isinstance(conn_or_pg, Cluster):
        (row,) = conn_or_pg.sql("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),), user=user)
        return row
    with conn_or_pg.cursor() as cur:
        cur.execute("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),))
        return cur.fetchone()


def upload(s3, generation, names, partition="day=27/hour=08"):
    """Puts objects; the manifest's files map with sizes and (quoted) ETags."""
    files = {}
    for i, name in enumerate(names):
        key = f"{partition}/{generation}/{name}"
        data = (f"{generation}/{name}/" * (i + 2)).encode()
        s3.put("lake", key, data)
        files[key] = {"size": len(data), "etag": '"%s"' % hashlib.md5(data).hexdigest()}
    return files


def register(pg, generation, partition="day=27/hour=08"):
    pg.sql("SELECT finalize.register_partition(%s, %s, %s)", (TABLE, partition, f"{partition}/{generation}/"))


def listings(s3):
    return [r for r in s3.requests() if r["method"] == "GET" and "list-type=2" in (r["query"] or "")]


def test_a_release_lists_through_signed_requests(pg, s3, table):
    names = ["part 0.parquet", "Grüße/ümlaut.parquet", "100% sure+plus=eq.parquet", "日本語.parquet",
             "a~b_c-d.e.parquet"]
    files = upload(s3, "gen-1", names)
    register(pg, "gen-1")
    s3.clear(what="requests")
    assert gate(pg, manifest("gen-1", files)) == (True, "gen-1", [])
    reqs = listings(s3)
    assert len(reqs) == 1 and all(r["signature_ok"] for r in reqs), reqs
    assert reqs[0]["style"] == "path" and reqs[0]["bucket"] == "lake"
    assert "prefix=day%3D27%2Fhour%3D08%2Fgen-1%2F" in reqs[0]["query"]
    # The stored report holds the listing as the store gave it: sizes and ETags.
    (report,) = pg.sql("SELECT finalize.release_report(release_id) FROM finalize.release")[0]
    assert report["listing"] == files


def test_overwritten_objects_are_caught_by_etag_and_size(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet", "b.parquet", "c.parquet"])
    register(pg, "gen-1")
    a, b, c = sorted(files)
    s3.put("lake", a, b"y" * files[a]["size"])          # same size, other bytes
    s3.put("lake", b, b"longer than before" * 9)
    s3.put("lake", "day=27/hour=08/gen-1/d.parquet", b"stray")
    del files[c]["etag"]
    s3.delete("lake", c)
    released, _, problems = gate(pg, manifest("gen-1", files))
    assert released is False
    assert [(p["code"], p["path"]) for p in problems] == [
        ("checksum_mismatch", a), ("size_mismatch", b), ("missing_object", c),
        ("stray_object", "day=27/hour=08/gen-1/d.parquet")]
    assert pg.sql("SELECT released, jsonb_array_length(problems) FROM finalize.release") == [(False, 4)]


def test_thousands_of_keys_are_paged_with_continuation_tokens(pg, s3, table):
    prefix = "day=27/hour=08/gen-1/"
    objects = {f"{prefix}part {i:05d}+é.parquet": 10 + i % 7 for i in range(2600)}
    s3.put_many("lake", objects)
    register(pg, "gen-1")
    s3.clear(what="requests")
    assert gate(pg, manifest("gen-1", objects)) == (True, "gen-1", [])
    reqs = listings(s3)
    assert len(reqs) == 3, [r["query"] for r in reqs]
    assert all(r["signature_ok"] for r in reqs)
    assert sum("continuation-token=" in r["query"] for r in reqs) == 2
    # A stray object on the last page and a missing one on the first are both found.
    s3.put("lake", f"{prefix}zzz-late.parquet", b"late")
    missing = f"{prefix}part 00003+é.parquet"
    s3.delete("lake", missing)
    released, _, problems = gate(pg, manifest("gen-1", objects))
    assert released is False
    assert [(p["code"], p["path"]) for p in problems] == [
        ("missing_object", missing), ("stray_object", f"{prefix}zzz-late.parquet")]


def test_virtual_hosted_style(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    pg.sql("CREATE SERVER lake_virtual FOREIGN DATA WRAPPER finalize_s3 OPTIONS "
           "(endpoint %s, region %s, bucket 'lake', url_style 'virtual')",
           (f"http://localhost:{s3.port}", s3.region))
    try:
        pg.sql("CREATE USER MAPPING FOR postgres SERVER lake_virtual OPTIONS "
               "(access_key_id %s, secret_access_key %s)", (s3.access_key, s3.secret_key))
        s3.clear(what="requests")
        assert gate(pg, manifest("gen-1", files, store="lake_virtual")) == (True, "gen-1", [])
        reqs = listings(s3)
        assert [(r["style"], r["host"], r["signature_ok"]) for r in reqs] == [
            ("virtual", f"lake.localhost:{s3.port}", True)]
    finally:
        pg.sql("DROP SERVER lake_virtual CASCADE")


def release_error(pg, m, user="postgres"):
    with pytest.raises(psycopg2.Error) as e:
        gate(pg, m, user=user)
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0, "a failed listing stored an attempt"
    return e.value


def message(err):
    d = err.diag
    return "\n".join(x for x in [d.message_primary, d.message_detail, d.message_hint] if x)


@pytest.mark.parametrize("status,code", [(500, "InternalError"), (503, "SlowDown"), (403, "AccessDenied")])
def test_http_errors_carry_s3s_code_and_message(pg, s3, table, status, code):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    s3.fault(kind="status", status=status, message=f"injected {status} for the test")
    err = release_error(pg, manifest("gen-1", files))
    text = message(err)
    assert err.pgcode == "38000"
    assert code in err.diag.message_primary and "lake" in err.diag.message_primary
    assert f"HTTP {status}" in text and f"injected {status} for the test" in text
    # The store recovers: the same release now passes.
    assert gate(pg, manifest("gen-1", files))[0]


def test_a_failure_on_a_later_page_stores_nothing(pg, s3, table):
    prefix = "day=27/hour=08/gen-1/"
    objects = {f"{prefix}{i:05d}": 1 for i in range(1500)}
    s3.put_many("lake", objects)
    register(pg, "gen-1")
    s3.fault(kind="status", status=503, match="continuation-token=")
    err = release_error(pg, manifest("gen-1", objects))
    assert "SlowDown" in err.diag.message_primary


def test_no_such_bucket(pg, s3, table):
    pg.sql("ALTER SERVER lake OPTIONS (SET bucket 'no-such-bucket')")
    try:
        err = release_error(pg, manifest("gen-1", {"day=27/hour=08/gen-1/a": 1}))
    finally:
        pg.sql("ALTER SERVER lake OPTIONS (SET bucket 'lake')")
    assert "NoSuchBucket" in err.diag.message_primary and "no-such-bucket" in err.diag.message_primary
    assert "HTTP 404" in err.diag.message_detail
    assert "bucket option" in err.diag.message_hint


def test_malformed_and_truncated_responses(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    s3.fault(kind="malformed")
    err = release_error(pg, manifest("gen-1", files))
    assert "MalformedResponse" in err.diag.message_primary
    s3.fault(kind="truncate")
    err = release_error(pg, manifest("gen-1", files))
    assert "could not list" in err.diag.message_primary
    assert gate(pg, manifest("gen-1", files))[0]


def test_wrong_keys_surface_s3s_error_and_never_echo_the_secret(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    pg.sql("ALTER USER MAPPING FOR postgres SERVER lake OPTIONS (SET secret_access_key 'wrong-secret-value')")
    try:
        err = release_error(pg, manifest("gen-1", files))
    finally:
        pg.sql("ALTER USER MAPPING FOR postgres SERVER lake OPTIONS (SET secret_access_key %s)", (s3.secret_key,))
    assert "SignatureDoesNotMatch" in err.diag.message_primary
    assert "user mapping" in err.diag.message_hint
    assert "wrong-secret-value" not in message(err) and "wrong-secret-value" not in pg.log()


def test_a_publisher_lists_with_its_own_user_mapping(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    pg.sql("DROP ROLE IF EXISTS s3_publisher")
    pg.sql("CREATE ROLE s3_publisher LOGIN IN ROLE finalize_publisher")
    pg.sql("GRANT USAGE ON FOREIGN SERVER lake TO s3_publisher")
    try:
        # The superuser's mapping is not borrowed.
        err = release_error(pg, manifest("gen-1", files), user="s3_publisher")
        assert 'no user mapping for role "s3_publisher"' in err.diag.message_primary
        pg.sql("CREATE USER MAPPING FOR s3_publisher SERVER lake OPTIONS "
               "(access_key_id 'AKIDOTHERPUBLISHER', secret_access_key 'other')")
        err = release_error(pg, manifest("gen-1", files), user="s3_publisher")
        assert "InvalidAccessKeyId" in err.diag.message_primary
        assert any("AKIDOTHERPUBLISHER" in (r.get("error_detail") or json.dumps(r)) for r in s3.requests())
        pg.sql("ALTER USER MAPPING FOR s3_publisher SERVER lake OPTIONS "
               "(SET access_key_id %s, SET secret_access_key %s)", (s3.access_key, s3.secret_key))
        assert gate(pg, manifest("gen-1", files), user="s3_publisher")[0]
        assert pg.sql("SELECT requested_by FROM finalize.releases") == [("s3_publisher",)]
        # The publisher cannot read anyone's keys.
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            pg.sql("SELECT umoptions FROM pg_user_mapping", user="s3_publisher")
    finally:
        pg.sql("DROP OWNED BY s3_publisher")
        pg.sql("DROP ROLE s3_publisher")


def test_a_stalled_store_times_out(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    s3.fault(kind="stall", seconds=30)
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute("SET finalize.s3_timeout = '1s'")
    start = time.monotonic()
    with pytest.raises(psycopg2.Error) as e:
        gate(conn, manifest("gen-1", files))
    assert time.monotonic() - start < 20
    assert "Timeout" in e.value.diag.message_primary
    assert "finalize.s3_timeout" in e.value.diag.message_hint
    conn.close()
    s3.clear(what="faults")


def test_statement_timeout_and_cancel_stop_a_stalled_listing(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    s3.fault(kind="stall", seconds=60, count=-1)
    try:
        conn = pg.connect()
        with conn.cursor() as cur:
            cur.execute("SET statement_timeout = '1s'")
        start = time.monotonic()
        with pytest.raises(psycopg2.errors.QueryCanceled, match="statement timeout"):
            gate(conn, manifest("gen-1", files))
        assert time.monotonic() - start < 20
        with conn.cursor() as cur:
            cur.execute("RESET statement_timeout")
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        killer = threading.Timer(1.0, lambda: pg.sql("SELECT pg_cancel_backend(%s)", (pid,)))
        killer.start()
        start = time.monotonic()
        with pytest.raises(psycopg2.errors.QueryCanceled, match="canceling statement due to user request"):
            gate(conn, manifest("gen-1", files))
        assert time.monotonic() - start < 20
        killer.join()
        # The connection is still usable.
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
        conn.close()
        assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
        assert any(r.get("client_closed") for r in s3.requests())
    finally:
        s3.clear(what="faults")


def test_session_tokens_are_sent_and_signed(pg, table):
    with S3Server(session_token="FQoGZXIvYXdzEXAMPLETOKEN+/=") as tok:
        tok.create_bucket("lake")
        tok.put("lake", "day=27/hour=08/gen-1/a.parquet", b"abc")
        pg.sql("CREATE SERVER lake_sts FOREIGN DATA WRAPPER finalize_s3 OPTIONS "
               "(endpoint %s, region %s, bucket 'lake')", (tok.endpoint, tok.region))
        try:
            pg.sql("CREATE USER MAPPING FOR postgres SERVER lake_sts OPTIONS "
                   "(access_key_id %s, secret_access_key %s)", (tok.access_key, tok.secret_key))
            register(pg, "gen-1")
            m = manifest("gen-1", {"day=27/hour=08/gen-1/a.parquet": 3}, store="lake_sts")
            err = release_error(pg, m)
            assert "lake_sts" in err.diag.message_primary
            pg.sql("ALTER USER MAPPING FOR postgres SERVER lake_sts OPTIONS (ADD session_token %s)",
                   ("FQoGZXIvYXdzEXAMPLETOKEN+/=",))
            assert gate(pg, m) == (True, "gen-1", [])
            assert all(r["signature_ok"] for r in tok.requests() if r["status"] == 200)
        finally:
            pg.sql("DROP SERVER lake_sts CASCADE")


def test_an_untracked_table_is_refused_before_any_request(pg, s3, table):
    s3.clear(what="requests")
    with pytest.raises(psycopg2.errors.UndefinedObject, match='table "no.such" is not tracked'):
        gate(pg, dict(manifest("gen-1", {"day=27/hour=08/gen-1/a": 1}), table="no.such"))
    assert s3.requests() == []


# --- Listings end: repeated continuation tokens and finalize.s3_max_pages ---

def repeating_page(key, size, token="same-token"):
    """A well-formed ListObjectsV2 page that says there is more, always with the same token."""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            '<Name>lake</Name><Prefix>day=27/hour=08/gen-1/</Prefix><KeyCount>1</KeyCount>'
            '<MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>'
            f'<Contents><Key>{key}</Key><Size>{size}</Size></Contents>'
            f'<NextContinuationToken>{token}</NextContinuationToken></ListBucketResult>')


def test_a_repeated_continuation_token_ends_the_listing_with_an_error(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    (key, entry), = files.items()
    s3.clear(what="requests")
    # Every page (forever) claims there is more, at the same token.
    s3.fault(kind="malformed", count=-1, match="list-type=2", body=repeating_page(key, entry["size"]))
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET statement_timeout = '60s'")    # a listing that loops fails the test, not the run
        with pytest.raises(psycopg2.Error) as e:
            gate(conn, manifest("gen-1", files))
        err = e.value
        assert err.pgcode == "38000", (err.pgcode, message(err))
        assert err.diag.message_primary == ('could not list "day=27/hour=08/gen-1/" in bucket "lake" of server '
                                            '"lake": RepeatedContinuationToken')
        assert "continuation token" in err.diag.message_detail
        assert "finalize.s3_max_pages" in err.diag.message_hint
        assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
        assert pg.sql("SELECT count(*) FROM finalize.published")[0][0] == 0
        reqs = listings(s3)
        assert len(reqs) == 2, [r["query"] for r in reqs]
        assert "continuation-token=" not in reqs[0]["query"]
        assert "continuation-token=same-token&" in reqs[1]["query"]
        assert all(r["signature_ok"] and r["fault"] == "malformed" for r in reqs)
        # The backend is fine: it answers, and once the store behaves the release passes.
        s3.clear(what="faults")
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
        assert gate(conn, manifest("gen-1", files)) == (True, "gen-1", [])
    finally:
        conn.close()
        s3.clear(what="faults")


def test_finalize_s3_max_pages_caps_a_listing(pg, s3, table):
    prefix = "day=27/hour=08/gen-1/"
    objects = {f"{prefix}part-{i:05d}.parquet": 1 + i % 5 for i in range(2600)}   # three pages of 1000
    s3.put_many("lake", objects)
    register(pg, "gen-1")
    assert pg.sql("SHOW finalize.s3_max_pages") == [("100000",)]
    assert pg.sql("SELECT context FROM pg_settings WHERE name = 'finalize.s3_max_pages'") == [("superuser",)]
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET finalize.s3_max_pages = 2")
        s3.clear(what="requests")
        with pytest.raises(psycopg2.Error) as e:
            gate(conn, manifest("gen-1", objects))
        err = e.value
        assert err.pgcode == "38000", (err.pgcode, message(err))
        assert err.diag.message_primary == ('could not list "day=27/hour=08/gen-1/" in bucket "lake" of server '
                                            '"lake": TooManyPages')
        assert "finalize.s3_max_pages (2)" in err.diag.message_detail
        assert "finalize.s3_max_pages" in err.diag.message_hint
        assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
        reqs = listings(s3)
        assert len(reqs) == 2, [r["query"] for r in reqs]
        assert ["continuation-token=" in r["query"] for r in reqs] == [False, True]
        # Three pages are allowed: the same listing ends, and the release passes.
        with conn.cursor() as cur:
            cur.execute("SET finalize.s3_max_pages = 3")
        s3.clear(what="requests")
        assert gate(conn, manifest("gen-1", objects)) == (True, "gen-1", [])
        assert len(listings(s3)) == 3
        (listed,) = pg.sql("SELECT count(*) FROM jsonb_object_keys("
                           "(SELECT finalize.release_report(release_id)->'listing' FROM finalize.release))")[0]
        assert listed == 2600
        # Three pages went through the comparison one at a time; the summary counts them all.
        (summary,) = pg.sql("SELECT report->'listing_summary' FROM finalize.release")[0]
        assert summary["objects"] == 2600 and summary["bytes"] == sum(objects.values()), summary
    finally:
        conn.close()


def test_only_a_superuser_sets_finalize_s3_max_pages(pg, s3, table):
    pg.sql("DROP ROLE IF EXISTS pages_publisher")
    pg.sql("CREATE ROLE pages_publisher LOGIN IN ROLE finalize_publisher")
    try:
        for statement in ["SET finalize.s3_max_pages = 1000000000",
                          "SET finalize.s3_max_pages = 1",
                          "SELECT set_config('finalize.s3_max_pages', '1000000000', false)"]:
            with pytest.raises(psycopg2.errors.InsufficientPrivilege) as e:
                pg.sql(statement, user="pages_publisher")
            assert e.value.pgcode == "42501"
            assert "finalize.s3_max_pages" in e.value.diag.message_primary
        assert pg.sql("SHOW finalize.s3_max_pages", user="pages_publisher") == [("100000",)]
    finally:
        pg.sql("DROP ROLE pages_publisher")


# --- Unrelated interrupts do not abort a listing ---

def run_gate_in_thread(pg, m, statement_timeout="60s"):
    """Starts release_gate on its own connection in a thread; returns (thread, pid, outcome),
    outcome filled with "row" or "error" when it returns."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute("SET statement_timeout = %s", (statement_timeout,))
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    outcome = {}

    def run():
        try:
            outcome["row"] = gate(conn, m)
        except Exception as ex:  # noqa: BLE001 - reported by the test
            outcome["error"] = ex
        finally:
            conn.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, pid, outcome


def wait_until_running_gate(pg, pid):
    pg.wait_for(lambda: pg.sql("SELECT state = 'active' AND query LIKE '%%release_gate%%' FROM pg_stat_activity "
                               "WHERE pid = %s", (pid,)) == [(True,)], timeout=30, what="the gate to start")


def test_logging_memory_contexts_does_not_abort_a_listing(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet", "b.parquet"])
    register(pg, "gen-1")
    s3.clear(what="requests")
    s3.fault(kind="stall", seconds=5, match="list-type=2")
    t, pid, outcome = run_gate_in_thread(pg, manifest("gen-1", files))
    try:
        wait_until_running_gate(pg, pid)
        time.sleep(0.3)
        for _ in range(4):
            assert pg.sql("SELECT pg_log_backend_memory_contexts(%s)", (pid,)) == [(True,)]
            time.sleep(0.5)
        # Served while the listing waits (not only once it is over): the gate is still running.
        pg.wait_for(lambda: f"logging memory contexts of PID {pid}" in pg.log(), timeout=30,
                    what="the memory contexts to be logged")
        assert t.is_alive(), f"the gate returned before the stall ended: {outcome}"
        t.join(60)
        assert not t.is_alive(), "the gate did not return"
        assert "error" not in outcome, message(outcome["error"]) if hasattr(outcome["error"], "diag") else outcome
        assert outcome["row"] == (True, "gen-1", [])
        reqs = listings(s3)
        assert [(r["fault"], r["status"], bool(r.get("client_closed"))) for r in reqs] == [("stall", 200, False)]
        assert pg.sql("SELECT generation, released FROM finalize.releases") == [("gen-1", True)]
    finally:
        t.join(60)
        s3.clear(what="faults")


def test_a_procsignal_barrier_is_absorbed_during_a_listing(pg, s3, table):
    """DROP DATABASE waits until every backend absorbed a ProcSignal barrier: a
    backend in a listing absorbs it there and lists on."""
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    pg.sql("DROP DATABASE IF EXISTS barrier_db")
    pg.sql("CREATE DATABASE barrier_db")
    s3.clear(what="requests")
    s3.fault(kind="stall", seconds=8, match="list-type=2")
    t, pid, outcome = run_gate_in_thread(pg, manifest("gen-1", files))
    try:
        wait_until_running_gate(pg, pid)
        time.sleep(0.3)
        pg.sql("DROP DATABASE barrier_db")
        # The barrier did not wait for the listing to end.
        assert t.is_alive(), f"DROP DATABASE waited for the gate: {outcome}"
        t.join(60)
        assert not t.is_alive(), "the gate did not return"
        assert "error" not in outcome, message(outcome["error"]) if hasattr(outcome["error"], "diag") else outcome
        assert outcome["row"] == (True, "gen-1", [])
        assert [(r["fault"], r["status"]) for r in listings(s3)] == [("stall", 200)]
    finally:
        t.join(60)
        s3.clear(what="faults")
        pg.sql("DROP DATABASE IF EXISTS barrier_db")


# --- Header values of the user mapping ---

INJECTED = "abc\r\nX-Injected: 1"


@pytest.mark.parametrize("option", ["access_key_id", "secret_access_key", "session_token"])
@pytest.mark.parametrize("value", [INJECTED, "abc\ndef", "abc\rdef", "tab\there", "del\x7fete", "\x01start"])
def test_user_mapping_keys_refuse_control_characters(pg, s3, table, option, value):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    pg.sql("CREATE SERVER lake_hdr FOREIGN DATA WRAPPER finalize_s3 OPTIONS "
           "(endpoint %s, region %s, bucket 'lake')", (s3.endpoint, s3.region))
    secret = option != "access_key_id"
    try:
        opts = {"access_key_id": s3.access_key, "secret_access_key": s3.secret_key, option: value}
        names = ", ".join(f"{k} %s" for k in opts)
        # CREATE refuses it.
        with pytest.raises(psycopg2.errors.FdwInvalidAttributeValue) as e:
            pg.sql(f"CREATE USER MAPPING FOR postgres SERVER lake_hdr OPTIONS ({names})", tuple(opts.values()))
        err = e.value
        assert err.pgcode == "HV024"
        assert f'invalid value for option "{option}"' in err.diag.message_primary
        assert "control characters" in err.diag.message_detail
        if secret:
            assert value not in message(err) and "X-Injected" not in message(err) and "abc" not in message(err)
        assert pg.sql("SELECT count(*) FROM pg_user_mappings WHERE srvname = 'lake_hdr'") == [(0,)]
        # ALTER refuses it too (SET, or ADD for the optional token), and the mapping is unchanged.
        action = "ADD" if option == "session_token" else "SET"
        with pytest.raises(psycopg2.errors.FdwInvalidAttributeValue) as e:
            pg.sql(f"ALTER USER MAPPING FOR postgres SERVER lake OPTIONS ({action} {option} %s)", (value,))
        err = e.value
        assert err.pgcode == "HV024"
        assert f'invalid value for option "{option}"' in err.diag.message_primary
        if secret:
            assert value not in message(err) and "X-Injected" not in message(err) and "abc" not in message(err)
        (umoptions,) = pg.sql("SELECT umoptions FROM pg_user_mappings "
                              "WHERE srvname = 'lake' AND usename = 'postgres'")[0]
        assert sorted(umoptions) == sorted([f"access_key_id={s3.access_key}", f"secret_access_key={s3.secret_key}"])
        s3.clear(what="requests")
        assert gate(pg, manifest("gen-1", files)) == (True, "gen-1", [])
        # The same options without the control characters are accepted.
        clean = {k: ("clean-value" if k == option else v) for k, v in opts.items()}
        pg.sql(f"CREATE USER MAPPING FOR postgres SERVER lake_hdr OPTIONS ({names})", tuple(clean.values()))
    finally:
        pg.sql("DROP SERVER lake_hdr CASCADE")


def test_an_e_string_with_crlf_is_refused_for_the_secret(pg, s3, table):
    """The same through an E'' literal, as a hand-written statement would send it."""
    pg.sql("CREATE SERVER lake_hdr FOREIGN DATA WRAPPER finalize_s3 OPTIONS (endpoint %s, bucket 'lake')",
           (s3.endpoint,))
    try:
        with pytest.raises(psycopg2.errors.FdwInvalidAttributeValue) as e:
            pg.sql("CREATE USER MAPPING FOR postgres SERVER lake_hdr OPTIONS "
                   "(access_key_id 'AKID', secret_access_key E'topsecret\\r\\nX-Injected: 1')")
        assert "topsecret" not in message(e.value)
        with pytest.raises(psycopg2.errors.FdwInvalidAttributeValue) as e:
            pg.sql("CREATE USER MAPPING FOR postgres SERVER lake_hdr OPTIONS "
                   "(access_key_id E'AKID\\r\\nX-Injected: 1', secret_access_key 'x')")
        assert 'option "access_key_id"' in e.value.diag.message_primary
    finally:
        pg.sql("DROP SERVER lake_hdr CASCADE")


@pytest.mark.parametrize("option", ["access_key_id", "secret_access_key", "session_token"])
def test_a_stored_key_with_control_characters_is_never_sent(pg, s3, table, option):
    """A mapping written before the validator refused them (here: by a
    superuser's catalog update) is refused by the listing itself, before any
    request: a value never splits a header."""
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    pg.sql("CREATE SERVER lake_legacy FOREIGN DATA WRAPPER finalize_s3 OPTIONS "
           "(endpoint %s, region %s, bucket 'lake')", (s3.endpoint, s3.region))
    try:
        pg.sql("CREATE USER MAPPING FOR postgres SERVER lake_legacy OPTIONS (access_key_id %s, secret_access_key %s)",
               (s3.access_key, s3.secret_key))
        assert gate(pg, manifest("gen-1", files, store="lake_legacy"))[0]
        pg.sql("DELETE FROM finalize.published")
        pg.sql("DELETE FROM finalize.release")
        opts = {"access_key_id": s3.access_key, "secret_access_key": s3.secret_key, option: "oldvalue\r\nX-Injected: 1"}
        pg.sql("UPDATE pg_user_mapping SET umoptions = %s "
               "WHERE umserver = (SELECT oid FROM pg_foreign_server WHERE srvname = 'lake_legacy')",
               ([f"{k}={v}" for k, v in opts.items()],))
        s3.clear(what="requests")
        log_before = len(pg.log())
        err = release_error(pg, manifest("gen-1", files, store="lake_legacy"))
        assert err.pgcode == "38000"
        assert err.diag.message_primary.endswith(": InvalidCredentials"), err.diag.message_primary
        assert "control character" in err.diag.message_detail
        assert "ALTER USER MAPPING" in err.diag.message_hint
        assert "X-Injected" not in message(err) and "oldvalue" not in message(err)
        assert "X-Injected" not in pg.log()[log_before:]
        assert s3.requests() == []
    finally:
        pg.sql("DROP SERVER lake_legacy CASCADE")


def test_a_table_tracked_again_during_the_listing_gets_no_release(pg, s3, table):
    """The gate resolves the table before it lists the store: if the name is
    untracked and tracked again meanwhile (as after lsn_regressed), the
    release must not be stored for the old table while its facts are read
    for the new one. It fails with a serialization failure (40001) and
    stores nothing (before, it published for the untracked table)."""
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    s3.fault(kind="stall", seconds=4, match="list-type=2")
    t, pid, outcome = run_gate_in_thread(pg, manifest("gen-1", files))
    try:
        wait_until_running_gate(pg, pid)
        conn = pg.connect(autocommit=False)
        with conn.cursor() as cur:
            cur.execute("SELECT finalize.untrack_table(%s)", (TABLE,))
            cur.execute("SELECT finalize.track_table(%s, 'src', 'dbo.other_orders')", (TABLE,))
        conn.commit()
        conn.close()
        t.join(60)
        assert not t.is_alive()
        err = outcome.get("error")
        assert isinstance(err, psycopg2.errors.SerializationFailure), outcome
        assert "was untracked meanwhile" in str(err)
        assert pg.sql("SELECT count(*) FROM finalize.release") == [(0,)]
        assert pg.sql("SELECT count(*) FROM finalize.published") == [(0,)]
    finally:
        t.join(60)
        s3.clear(what="faults")


def jsonl(files):
    return ("".join(json.dumps({"path": p, **v}) + "\n" for p, v in files.items())).encode()


def test_a_streamed_manifest_is_read_with_a_signed_get_from_the_bucket(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet", "b c.parquet", "ü.parquet"])
    a = sorted(files)[0]
    s3.put("lake", "day=27/hour=08/gen-1/stray.parquet", b"stray")
    s3.put("lake", "day=27/hour=08/gen-1.files.jsonl", jsonl(files))
    register(pg, "gen-1")
    m = manifest("gen-1", None, files_location="s3://lake/day=27/hour=08/gen-1.files.jsonl")
    del m["files"]
    s3.clear(what="requests")
    released, _, problems = gate(pg, m)
    assert released is False
    assert [(p["code"], p["path"]) for p in problems] == [("stray_object", "day=27/hour=08/gen-1/stray.parquet")]
    gets = [r for r in s3.requests() if r["method"] == "GET" and "list-type=2" not in (r["query"] or "")]
    assert len(gets) == 1 and gets[0]["signature_ok"] and gets[0]["path"].endswith("gen-1.files.jsonl")
    (report,) = pg.sql("SELECT finalize.release_report(release_id) FROM finalize.release")[0]
    assert report["manifest"]["files_summary"]["files"] == 3
    assert report["listing_delta"]["absent"] == []
    assert list(report["listing_delta"]["listed"]) == ["day=27/hour=08/gen-1/stray.parquet"]
    # S3's ETags agree with the manifest's, so only the stray object is stored.
    s3.delete("lake", "day=27/hour=08/gen-1/stray.parquet")
    assert gate(pg, m) == (True, "gen-1", [])
    assert a in files


def test_a_streamed_manifest_outside_the_bucket_or_missing_is_refused(pg, s3, table):
    m = manifest("gen-1", None, files_location="s3://other-bucket/m.jsonl")
    del m["files"]
    s3.clear(what="requests")
    err = release_error(pg, m)
    assert err.pgcode == "22023" and "not an object of the partition's store" in err.pgerror
    assert s3.requests() == []
    m["files_location"] = "s3://lake/no/such.jsonl"
    err = release_error(pg, m)
    assert "NoSuchKey" in err.pgerror and "HTTP 404" in err.pgerror
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0


def test_a_streamed_manifest_larger_than_temp_file_limit_is_refused(pg, s3, table):
    # The object is copied to a temporary file by libcurl's writes, which
    # fd.c does not count: the gate stops the body at temp_file_limit.
    files = upload(s3, "gen-1", [f"part-{i:03d}.parquet" for i in range(60)])
    body = jsonl(files)
    assert len(body) > 4096
    s3.put("lake", "day=27/hour=08/gen-1.files.jsonl", body)
    register(pg, "gen-1")
    m = manifest("gen-1", None, files_location="s3://lake/day=27/hour=08/gen-1.files.jsonl")
    del m["files"]
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET temp_file_limit = '4kB'")
            with pytest.raises(psycopg2.Error) as e:
                cur.execute("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),))
            assert e.value.pgcode == "53400"
            assert ('manifest object "s3://lake/day=27/hour=08/gen-1.files.jsonl" of server "lake" is too large'
                    in e.value.pgerror)
            assert "temp_file_limit (4kB)" in e.value.pgerror
            cur.execute("SET temp_file_limit = '64kB'")
            assert gate(conn, m) == (True, "gen-1", [])
    finally:
        conn.close()
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 1
