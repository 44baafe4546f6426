"""Azure Blob Storage as a store (issue 45): the release gate, its errors and a publication's
_SUCCESS markers against Azurite, Microsoft's emulator (test/lib/azurite.py: HTTPS with a test CA,
--oauth basic), with each kind of credentials a finalize_azure user mapping holds: Shared Key
(Azurite checks the signature), a SAS token made by azure-storage-blob (Azurite checks it), and
Entra ID client credentials exchanged for a bearer token at a token endpoint served here.

The blobs are written and read back with azure-storage-blob, Microsoft's own client. The gate must
pass only on exactly the manifest's files (a directory placeholder of a hierarchical namespace is
no file), and refuse a missing blob or a wrong size; Azure's error codes reach the user, the
secrets never appear in an error or the server's log. A streamed manifest is a blob named by any of
its URL forms; a busy (503 ServerBusy) or stalled store is an error within finalize.s3_timeout; a
success_marker publication writes its _SUCCESS with Put Blob."""

import base64
import datetime
import hashlib
import http.server
import json
import os
import shutil
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse

import psycopg2
import pytest
from azure.storage.blob import BlobServiceClient, ContainerSasPermissions, generate_container_sas

from peerlib import TOP, Warehouse

sys.path.insert(0, os.path.join(TOP, "test", "lib"))
from azurite import Azurite  # noqa: E402

UTC = datetime.timezone.utc
TABLE = "lake.orders"
P08 = "2026-11-27 08:00+00"
PART = "day=27/hour=08"
CLIENT_ID = "finalize-gate"
CLIENT_SECRET = "cl13nt-s3cret-of-the-test"
OLD_CLIENT = "finalize-expired"
V1_CLIENT = "finalize-v1"      # answered as Entra ID's v1 endpoint does: expires_in a string


@pytest.fixture(scope="module")
def az():
    with Azurite() as server:
        yield server


@pytest.fixture(scope="module")
def blobs(az):
    """The container "lake" as azure-storage-blob writes and reads it."""
    service = BlobServiceClient.from_connection_string(az.connection_string(), connection_verify=az.ca)
    container = service.get_container_client("lake")
    container.create_container()
    return container


class TokenEndpoint(http.server.BaseHTTPRequestHandler):
    """An Entra ID token endpoint (client credentials): a token for the right client and secret
    and the storage scope, invalid_client otherwise; each form it got is kept in `forms`."""

    def do_POST(self):
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        self.server.forms.append(form)
        good = (form.get("grant_type") == ["client_credentials"] and form.get("client_id") in ([CLIENT_ID], [OLD_CLIENT], [V1_CLIENT])
                and form.get("client_secret") == [CLIENT_SECRET]
                and form.get("scope") == ["https://storage.azure.com/.default"])
        # OLD_CLIENT's tokens have expired already (a clock gone wrong): Azure refuses them.
        lifetime = -600 if form.get("client_id") == [OLD_CLIENT] else 3600
        # A refusal that echoes the secret it got (as a proxy might), where a cut of the message
        # falls: at 600 and 1,024 characters. No part of it may reach the user.
        sent = form.get("client_secret", [""])[0]
        echo = "AADSTS7000215: Invalid client secret provided. " + "lorem " * 90
        echo = (echo[:590] + sent + " " + "ipsum " * 60)[:960] + sent + " the end"
        expires_in = "1" if form.get("client_id") == [V1_CLIENT] else 3599
        body = ({"token_type": "Bearer", "expires_in": expires_in, "access_token": self.server.azurite.token(lifetime)}
                if good else {"error": "invalid_client", "error_description": echo})
        data = json.dumps(body).encode()
        self.send_response(200 if good else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def token_endpoint(az):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    server.forms, server.azurite = [], az
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def container_sas(az, permission):
    return generate_container_sas(az.account, "lake", account_key=az.key, permission=permission,
                                  expiry=datetime.datetime.now(UTC) + datetime.timedelta(hours=2))


@pytest.fixture(scope="module")
def wh(az, token_endpoint):
    """The cluster (its delivery worker serves the warehouse) with one finalize_azure server per kind
    of credentials, all on the container "lake"."""
    w = Warehouse(conf={"finalize.database": "warehouse", "finalize.poll_interval": "200ms",
                        "finalize.max_retry_interval": "1s", "finalize.alert_after": "2s"})
    opts = "account 'devstoreaccount1', container 'lake', endpoint %s, ca_file %s"
    mappings = {"az_key": ("account_key %s", az.key),
                "az_sas": ("sas_token %s", container_sas(az, ContainerSasPermissions(read=True, list=True))),
                "az_oauth": ("tenant_id 'contoso.onmicrosoft.com', client_id %s, client_secret %s",
                             CLIENT_ID, CLIENT_SECRET)}
    for name, (mapping, *values) in mappings.items():
        extra = ", token_endpoint %s" if name == "az_oauth" else ""
        args = (az.endpoint, az.ca) + ((f"http://127.0.0.1:{token_endpoint.server_port}/tenant/token",)
                                       if extra else ())
        w.sql(f"CREATE SERVER {name} FOREIGN DATA WRAPPER finalize_azure OPTIONS ({opts}{extra})", args)
        w.sql(f"CREATE USER MAPPING FOR postgres SERVER {name} OPTIONS ({mapping})", tuple(values))
    yield w
    w.cleanup()


@pytest.fixture
def table(wh, blobs):
    """A tracked table whose 08:00 period is final; the container starts empty."""
    wh.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (TABLE,))
    wh.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-27 06:00+00')", (TABLE,))
    wh.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
           "'2026-11-27 09:00+00', 3, 0, 0, '2026-11-27 08:01+00', '2026-11-27 08:59+00')", (TABLE,))
    for b in blobs.list_blobs():
        blobs.delete_blob(b.name)
    yield TABLE
    wh.sql("DELETE FROM finalize.tracked_table")


def upload(blobs, generation, names):
    """Writes blobs with azure-storage-blob; the manifest's files with sizes and MD5s."""
    files = {}
    for i, name in enumerate(names):
        key = f"{PART}/{generation}/{name}"
        data = (f"{generation}/{name}/" * (i + 2)).encode()
        blobs.upload_blob(key, data)
        files[key] = {"size": len(data), "etag": hashlib.md5(data).hexdigest()}
    return files


class OneBackend:
    """Statements in one backend of the warehouse, as gate() and refused() make them: what a backend
    keeps (its bearer tokens) is seen by the next statement (wh.sql() uses a new backend each)."""

    def __init__(self, wh):
        self.conn = wh.pg.connect(dbname="warehouse")

    def sql(self, query, args=None):
        with self.conn.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchall() if cur.description else None


def gate(wh, generation, files, store, **extra):
    wh.sql("SELECT finalize.register_partition(%s, %s, %s)", (TABLE, PART, f"{PART}/{generation}/"))
    m = {"table": TABLE, "partition": PART, "generation": generation, "store": store,
         "prefix": f"{PART}/{generation}/", "period_start": P08, "files": files, **extra}
    if files is None:
        del m["files"]
    (row,) = wh.sql("SELECT released, generation, problems FROM finalize.release_gate(%s)", (json.dumps(m),))
    return row


def refused(wh, generation, files, store, **extra):
    with pytest.raises(psycopg2.Error) as e:
        gate(wh, generation, files, store, **extra)
    d = e.value.diag
    return e.value, "\n".join(x for x in (d.message_primary, d.message_detail, d.message_hint) if x)


def test_the_gate_passes_and_refuses_with_each_kind_of_credentials(wh, az, blobs, table, token_endpoint):
    files = upload(blobs, "gen-1", ["part 0.parquet", "Grüße/ü.parquet", "c+d=e.parquet"])
    # A hierarchical namespace's directory, as ADLS Gen2 lists it through the Blob endpoint: a
    # zero-length blob whose metadata says hdi_isfolder. Counted as a file, it would be a stray object.
    blobs.upload_blob(f"{PART}/gen-1/Grüße", b"", metadata={"hdi_isfolder": "true"})
    listed = {b.name: b.size for b in blobs.list_blobs(name_starts_with=f"{PART}/gen-1/")}
    assert listed[f"{PART}/gen-1/Grüße"] == 0 and len(listed) == 4
    for store in ("az_key", "az_sas", "az_oauth"):
        assert gate(wh, "gen-1", files, store) == (True, "gen-1", []), store
    # One token served every request of the OAuth store: it is kept until shortly before it expires.
    assert len(token_endpoint.forms) == 1
    # A blob with content is a file whatever its metadata says: not a directory to leave out.
    disguised = f"{PART}/gen-1/Grüße/disguised.parquet"
    blobs.upload_blob(disguised, b"not a directory", metadata={"hdi_isfolder": "true"})
    released, _, problems = gate(wh, "gen-1", files, "az_key")
    assert (released, [(p["code"], p["path"]) for p in problems]) == (False, [("stray_object", disguised)])
    blobs.delete_blob(disguised)
    # A blob missing, a blob of another size: refused, with the problems named.
    a, b, c = sorted(files)
    blobs.upload_blob(b, b"rewritten, longer than before" * 3, overwrite=True)
    blobs.delete_blob(c)
    for store in ("az_key", "az_sas", "az_oauth"):
        released, _, problems = gate(wh, "gen-1", files, store)
        assert released is False
        assert [(p["code"], p["path"]) for p in problems] == [("size_mismatch", b), ("missing_object", c)], store
    # Same size, other bytes: the MD5 Azure keeps (Content-MD5) is what the manifest's ETag is checked against.
    blobs.upload_blob(a, b"x" * files[a]["size"], overwrite=True)
    released, _, problems = gate(wh, "gen-1", {a: files[a]}, "az_key")
    assert (released, [(p["code"], p["path"]) for p in problems]) == (False, [("checksum_mismatch", a),
                                                                                ("stray_object", b)])


def test_a_streamed_manifest_is_a_blob_read_in_any_of_its_url_forms(wh, az, blobs, table):
    """files_location names a blob (Get Blob to a temporary file, read back a chunk at a time) by
    its abfss://, wasbs:// or https:// URL; another container's is refused unread, a missing one is
    Azure's BlobNotFound."""
    files = upload(blobs, "gen-1", ["a.parquet", "b c.parquet"])
    lines = "".join(json.dumps({"path": p, **v}) + "\n" for p, v in files.items()).encode()
    blobs.upload_blob(f"{PART}/gen-1.files.jsonl", lines)
    key = f"{PART}/gen-1.files.jsonl"
    for url in (f"abfss://lake@devstoreaccount1.dfs.core.windows.net/{key}",
                f"wasbs://lake@devstoreaccount1.blob.core.windows.net/{key}",
                f"https://devstoreaccount1.blob.core.windows.net/lake/{key}", f"{az.endpoint}/lake/{key}"):
        assert gate(wh, "gen-1", None, "az_sas", files_location=url) == (True, "gen-1", []), url
    err, text = refused(wh, "gen-1", None, "az_key",
                        files_location=f"abfss://other@devstoreaccount1.dfs.core.windows.net/{key}")
    assert err.pgcode == "22023" and "not an object of the partition's store" in text, text
    # A URL with a query (a SAS token pasted with it) is refused, the query never echoed.
    err, text = refused(wh, "gen-1", None, "az_key", files_location=f"https://devstoreaccount1.blob.core.windows."
                        f"net/lake/{key}?sv=2021-12-02&sig=Zm9vYmFyLXNpZ25hdHVyZQ%3D")
    assert err.pgcode == "22023" and "a URL with a query" in text and "sig=" not in text, text
    err, text = refused(wh, "gen-1", None, "az_oauth",
                        files_location="abfss://lake@devstoreaccount1.dfs.core.windows.net/no/such.jsonl")
    assert err.diag.message_primary.endswith(": BlobNotFound") and "HTTP 404" in text, text
    assert "files_location" in err.diag.message_hint


def test_a_flat_listing_follows_its_markers_over_pages(wh, az, blobs, table):
    wh.sql("CREATE SERVER az_paged FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
           "container 'lake', endpoint %s, ca_file %s, page_size '2')", (az.endpoint, az.ca))
    wh.sql("CREATE USER MAPPING FOR postgres SERVER az_paged OPTIONS (account_key %s)", (az.key,))
    files = upload(blobs, "gen-1", [f"d{i // 2}/part-{i}.parquet" for i in range(7)])
    blobs.upload_blob(f"{PART}/gen-1/d0", b"", metadata={"hdi_isfolder": "true"})
    # Eight blobs, two a page: four pages, each after the last one's NextMarker.
    assert gate(wh, "gen-1", files, "az_paged") == (True, "gen-1", [])
    missing = sorted(files)[-1]
    blobs.delete_blob(missing)
    released, _, problems = gate(wh, "gen-1", files, "az_paged")
    assert (released, [(p["code"], p["path"]) for p in problems]) == (False, [("missing_object", missing)])
    wh.sql("ALTER SYSTEM SET finalize.s3_max_pages = 3")
    wh.sql("SELECT pg_reload_conf()")
    try:
        err, text = refused(wh, "gen-1", files, "az_paged")
        assert err.diag.message_primary.endswith(": TooManyPages"), text
        assert "finalize.s3_max_pages (3)" in text
    finally:
        wh.sql("ALTER SYSTEM RESET finalize.s3_max_pages")
        wh.sql("SELECT pg_reload_conf()")


def test_azure_errors_reach_the_user_and_no_secret_does(wh, az, blobs, table, token_endpoint):
    files = upload(blobs, "gen-1", ["a.parquet"])
    wrong_key = base64.b64encode(b"w" * 64).decode()
    wh.sql("CREATE SERVER az_wrong FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
           "container 'lake', endpoint %s, ca_file %s)", (az.endpoint, az.ca))
    wh.sql("CREATE USER MAPPING FOR postgres SERVER az_wrong OPTIONS (account_key %s)", (wrong_key,))
    texts = []
    err, text = refused(wh, "gen-1", files, "az_wrong")
    texts.append(text)
    # Azure says AuthenticationFailed (403) to a wrong signature, Azurite InvalidAuthenticationInfo (400).
    assert err.diag.message_primary == (f'could not list "{PART}/gen-1/" in container "lake" of server '
                                        '"az_wrong": InvalidAuthenticationInfo'), text
    assert "HTTP 400" in text and "account_key" in err.diag.message_hint
    # An expired bearer token: Azure's AuthenticationFailed, its message as Azure gave it.
    wh.sql("CREATE SERVER az_old FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
           "container 'lake', endpoint %s, ca_file %s, token_endpoint %s)",
           (az.endpoint, az.ca, f"http://127.0.0.1:{token_endpoint.server_port}/tenant/token"))
    wh.sql("CREATE USER MAPPING FOR postgres SERVER az_old OPTIONS (client_id %s, client_secret %s)",
           (OLD_CLIENT, CLIENT_SECRET))
    one = OneBackend(wh)
    gate(one, "gen-1", files, "az_oauth")      # its token kept by this backend
    forms = lambda client: sum(f.get("client_id") == [client] for f in token_endpoint.forms)  # noqa: E731
    good = forms(CLIENT_ID)
    for attempt in (1, 2):
        err, text = refused(one, "gen-1", files, "az_old")
        texts.append(text)
        assert err.diag.message_primary.endswith('"az_old": AuthenticationFailed'), text
        assert "HTTP 403" in text and "token is expired" in text and "credentials" in err.diag.message_hint, text
        # The refused token is not sent again: each attempt asks for a new one.
        assert forms(OLD_CLIENT) == attempt
    # Tokens of several clients are kept side by side: az_oauth's outlived az_old's.
    gate(one, "gen-1", files, "az_oauth")
    assert forms(CLIENT_ID) == good
    # expires_in as a string ("1": a second) is the token's lifetime, not an hour's default.
    wh.sql("CREATE SERVER az_v1 FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
           "container 'lake', endpoint %s, ca_file %s, token_endpoint %s)",
           (az.endpoint, az.ca, f"http://127.0.0.1:{token_endpoint.server_port}/tenant/token"))
    wh.sql("CREATE USER MAPPING FOR postgres SERVER az_v1 OPTIONS (client_id %s, client_secret %s)",
           (V1_CLIENT, CLIENT_SECRET))
    gate(one, "gen-1", files, "az_v1")
    time.sleep(1.1)     # past its lifetime: the next request must ask again
    gate(one, "gen-1", files, "az_v1")
    assert forms(V1_CLIENT) == 2
    one.conn.close()
    wh.sql("CREATE SERVER az_nope FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
           "container 'nope', endpoint %s, ca_file %s)", (az.endpoint, az.ca))
    wh.sql("CREATE USER MAPPING FOR postgres SERVER az_nope OPTIONS (account_key %s)", (az.key,))
    err, text = refused(wh, "gen-1", files, "az_nope")
    texts.append(text)
    assert err.diag.message_primary.endswith(": ContainerNotFound") and "HTTP 404" in text, text
    assert "container and account options" in err.diag.message_hint
    # A refused client secret: the token endpoint's own words.
    wh.sql("ALTER USER MAPPING FOR postgres SERVER az_oauth OPTIONS (SET client_secret 'wr0ng-s3cret-value')")
    try:
        wh.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'client backend' "
               "AND pid <> pg_backend_pid()")     # no backend keeps the token of the good secret
        err, text = refused(wh, "gen-1", files, "az_oauth")
        texts.append(text)
        assert err.diag.message_primary.endswith(": AuthorizationFailure"), text
        assert "invalid_client" in text and "AADSTS7000215" in text
    finally:
        wh.sql("ALTER USER MAPPING FOR postgres SERVER az_oauth OPTIONS (SET client_secret %s)", (CLIENT_SECRET,))
    # A read-only SAS token may not write: Azure's refusal, a SAS signature never shown.
    sas = container_sas(az, ContainerSasPermissions(read=True))
    wh.sql("CREATE SERVER az_ro FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
           "container 'lake', endpoint %s, ca_file %s)", (az.endpoint, az.ca))
    wh.sql("CREATE USER MAPPING FOR postgres SERVER az_ro OPTIONS (sas_token %s)", (sas,))
    err, text = refused(wh, "gen-1", files, "az_ro")
    texts.append(text)
    assert err.diag.message_primary.startswith("could not list"), text
    secrets = [az.key, wrong_key, CLIENT_SECRET, "wr0ng-s3cret-value", sas, urllib.parse.parse_qs(sas)["sig"][0]]
    log = wh.pg.log()
    for s in secrets:
        assert not any(s in t for t in texts) and s not in log, "a secret in an error or the server's log"
    # Nor any part of one: a message cut inside a secret would leave its first letters unredacted.
    assert not any("wr0ng-s3c" in t for t in texts) and "wr0ng-s3c" not in log, texts


DAY0 = datetime.datetime(2026, 3, 1, tzinfo=UTC)
HOUR = datetime.timedelta(hours=1)


def marker_events(wh, publication):
    return wh.sql("SELECT e.state, e.period_end, e.last_error FROM finalize.publication_event e "
                  "JOIN finalize.publication p USING (publication_id) WHERE p.name = %s ORDER BY e.event_seq",
                  (publication,))


def test_a_success_marker_publication_writes_to_azure(wh, az, blobs):
    """The publication's _SUCCESS markers go into the container with Put Blob (Shared Key of the
    server owner's user mapping), exactly for the final hours, read back with azure-storage-blob."""
    table, prefix = "sales.orders", "sales/orders/"
    wh.track(table)
    wh.capture(table, DAY0 + 9.5 * HOUR)
    wh.sql("SELECT finalize.add_publication(%s, 'orders_azure', 'az_key', %s)",
           (table, json.dumps({"location": "abfss://lake@devstoreaccount1.dfs.core.windows.net/"
                                           "sales/orders/dt={date}/hour={hour}/"})))
    wh.capture(table, DAY0 + 11.5 * HOUR)
    wh.pg.wait_for(lambda: marker_events(wh, "orders_azure") and
                   all(e[0] == "delivered" for e in marker_events(wh, "orders_azure")), timeout=60,
                   what=lambda: f"the markers delivered: {marker_events(wh, 'orders_azure')}")
    verdict = wh.finalized_until(table)
    found = {b.name: json.loads(blobs.download_blob(b.name).readall())
             for b in blobs.list_blobs(name_starts_with=prefix) if b.name.endswith("/_SUCCESS")}
    assert sorted(found) == [f"{prefix}dt=2026-03-01/hour={h:02d}/_SUCCESS" for h in (9, 10)]
    for name, body in found.items():
        # The assert that catches a marker written early: its period ends after the verdict.
        assert datetime.datetime.fromisoformat(body["finalize"]["period_end"].replace("Z", "+00:00")) <= verdict, name
    # A location outside the server's container is refused when the publication is added.
    with pytest.raises(psycopg2.Error) as e:
        wh.sql("SELECT finalize.add_publication(%s, 'elsewhere', 'az_key', %s)",
               (table, json.dumps({"location": "abfss://other@devstoreaccount1.dfs.core.windows.net/o/{date}/"})))
    assert "abfss://lake@devstoreaccount1.dfs.core.windows.net/" in e.value.diag.message_detail


class FaultyBlobService(http.server.BaseHTTPRequestHandler):
    """A Blob endpoint in trouble, over HTTPS with the test CA: every request answered 503 ServerBusy
    with Retry-After (Azure's error document), or, stalled, read and never answered, or answered
    200 with the List Blobs page the test set (server.page)."""

    def do_GET(self):
        if self.server.page is not None:
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(self.server.page)))
            self.end_headers()
            self.wfile.write(self.server.page)
            return
        if self.server.stall:
            self.server.stalled.wait(30)
            return
        body = (b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>The server is '
                b'currently unable to receive requests. Please retry your request.</Message></Error>')
        self.send_response(503)
        self.send_header("Retry-After", "10")
        self.send_header("x-ms-error-code", "ServerBusy")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def unblock_fifo(path, done):
    """Until done, opens the FIFO for writing and closes it every few seconds, so that a reader
    blocked on it (the code before the ca_file check) gets end-of-file: the test then fails
    instead of hanging."""
    while not done.wait(5):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_a_ca_file_that_is_not_a_regular_file_is_never_read(wh, az, blobs, table):
    """libcurl reads the CA file whole and uncancellably: a FIFO would hang the backend, /dev/zero
    exhaust its memory. The validator refuses them; a file replaced by one after validation is
    refused before each request (InvalidCaFile), nothing read."""
    where = tempfile.mkdtemp(prefix="finalize-ca.")
    os.chmod(where, 0o755)     # the server runs as postgres
    try:
        fifo, ca = os.path.join(where, "ca.fifo"), os.path.join(where, "ca.pem")
        os.mkfifo(fifo, 0o644)
        for bad in ("/dev/zero", fifo):
            with pytest.raises(psycopg2.Error) as e:
                wh.sql("CREATE SERVER az_badca FOREIGN DATA WRAPPER finalize_azure OPTIONS (account "
                       "'devstoreaccount1', container 'lake', endpoint %s, ca_file %s)", (az.endpoint, bad))
            assert 'option "ca_file"' in e.value.diag.message_primary and "regular file of at most 1 MB" in \
                e.value.diag.message_detail, e.value
        shutil.copy(az.ca, ca)
        os.chmod(ca, 0o644)
        wh.sql("CREATE SERVER az_swapped FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
               "container 'lake', endpoint %s, ca_file %s)", (az.endpoint, ca))
        wh.sql("CREATE USER MAPPING FOR postgres SERVER az_swapped OPTIONS (account_key %s)", (az.key,))
        files = upload(blobs, "gen-1", ["a.parquet"])
        assert gate(wh, "gen-1", files, "az_swapped") == (True, "gen-1", [])
        for replace in (lambda: os.mkfifo(ca, 0o644), lambda: os.symlink("/dev/zero", ca)):
            os.remove(ca)
            replace()
            done = threading.Event()
            threading.Thread(target=unblock_fifo, args=(ca, done), daemon=True).start()
            try:
                err, text = refused(wh, "gen-1", files, "az_swapped")
            finally:
                done.set()
            assert err.diag.message_primary.endswith('"az_swapped": InvalidCaFile'), text
            assert f'the ca_file "{ca}" is not a regular file of at most 1 MB' in text, text
            assert "ca_file" in err.diag.message_hint
    finally:
        shutil.rmtree(where)


def test_a_busy_or_stalled_store_is_an_error_that_releases_nothing(wh, az, blobs, table):
    """Azure's 503 ServerBusy reaches the user with its Retry-After ignored (the gate does not wait:
    nothing is released, the caller tries again); a store that never answers is a Timeout within
    finalize.s3_timeout, the backend free again."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FaultyBlobService)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(az.pki.good.cert, az.pki.good.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.stall, server.stalled, server.page = False, threading.Event(), None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        wh.sql("CREATE SERVER az_busy FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
               "container 'lake', endpoint %s, ca_file %s)",
               (f"https://127.0.0.1:{server.server_port}/devstoreaccount1", az.ca))
        wh.sql("CREATE USER MAPPING FOR postgres SERVER az_busy OPTIONS (account_key %s)", (az.key,))
        files = upload(blobs, "gen-1", ["a.parquet"])
        err, text = refused(wh, "gen-1", files, "az_busy")
        assert err.diag.message_primary.endswith('"az_busy": ServerBusy') and "HTTP 503" in text, text
        assert "try again later" in err.diag.message_hint
        # Pages Azure never sends, each of which would hide blobs if read leniently: one without
        # <NextMarker/> (Azure's last page has it, empty: without it, more pages may follow), one
        # with a delimited listing's <BlobPrefix>, one without <Blobs>.
        (key, v), = files.items()
        blob = (f"<Blob><Name>{key}</Name><Properties><Content-Length>{v['size']}</Content-Length><Content-MD5>"
                f"{base64.b64encode(bytes.fromhex(v['etag'])).decode()}</Content-MD5></Properties></Blob>")
        for inner, what in ((f"<Blobs>{blob}</Blobs>", "NextMarker"),
                            (f"<Blobs>{blob}<BlobPrefix><Name>{PART}/gen-1/more/</Name></BlobPrefix></Blobs>"
                             "<NextMarker/>", "BlobPrefix"),
                            ("<NextMarker/>", "Blobs")):
            server.page = ('<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="lake">'
                           f"<Prefix>{PART}/gen-1/</Prefix>{inner}</EnumerationResults>").encode()
            err, text = refused(wh, "gen-1", files, "az_busy")
            assert err.diag.message_primary.endswith('"az_busy": MalformedResponse') and f"<{what}>" in text, text
        server.page = None
        server.stall = True
        wh.sql("ALTER SYSTEM SET finalize.s3_timeout = '1s'")
        wh.sql("SELECT pg_reload_conf()")
        err, text = refused(wh, "gen-1", files, "az_busy")
        assert err.diag.message_primary.endswith('"az_busy": Timeout'), text
        assert "finalize.s3_timeout" in err.diag.message_hint
        assert wh.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
    finally:
        wh.sql("ALTER SYSTEM RESET finalize.s3_timeout")
        wh.sql("SELECT pg_reload_conf()")
        server.stalled.set()
        server.shutdown()
