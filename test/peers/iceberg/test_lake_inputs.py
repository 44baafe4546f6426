"""Nothing a lake writer, a catalog or its token endpoint sends can take the database down (issue 41),
against Apache Iceberg's real REST catalog, pyiceberg writers and finalize's real lake worker.

Whoever can write a table's files can replace the audited snapshot's manifest list (or add a manifest
to it) with bytes of their choosing; these tests do, in the warehouse of a table pyiceberg wrote, and
call finalize.release_iceberg on that snapshot:

* a decompression bomb (deflate: 1.5 MB that inflate to 1.5 GiB) in the second block of the manifest
  list, then in the first: before, the backend died of SIGSEGV in libavro's inflate (second block) or
  inflated it all with no cap (first block); now an ordinary ERROR naming the file, the same backend
  and every other session alive, its memory bounded;
* a manifest list of five million empty records (15 MB): before, each was kept (about 750 MB); now the
  read ends at the first, whose path is no object of the store;
* a manifest list larger than finalize.iceberg_max_manifest_size is not read;
* a manifest whose entries each carry 300,000 empty strings (an extra field, which readers skip): a
  minute and more of work, which before could not be cancelled (libavro decoded each entry with no
  interrupt check, and freeing its strings took minutes); now pg_cancel_backend ends it.

And a token endpoint that answers a one-character access_token ("e", inside "[redacted]"): before,
redacting the catalog's next error never ended, allocating ever longer copies, in a publisher's
backend and in the lake worker alike, deaf to cancels and terminations; now the token is refused as
malformed, naming the catalog, in both."""
import os
import sys
import threading
import zlib

import psycopg2
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from fault_proxy import LOAD_TABLE, FaultProxy  # noqa: E402
from test_lake_consumer import add_catalog, add_consumer, track, wait_consumer  # noqa: E402
from test_release_iceberg import catalog, env, lake, pg, sim  # noqa: E402

assert catalog and env and lake and pg and sim     # fixtures, imported for this module

MIB = 1 << 20
SECRET = "s3cret-client-value"
LIMIT = 128 * MIB                   # finalize.iceberg_max_manifest_size's default
MEMORY_BOUND = 512 * MIB            # twice the largest the setting allows: the backend's peak stays below


# ---- Avro object container files, read and written here as a hostile writer would ----

def zz(n):
    """An Avro long: zig-zag, then 7 bits a byte."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def long_at(buf, off):
    """(value, next offset) of the Avro long at off."""
    shift = value = 0
    while True:
        b = buf[off]
        off += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), off


def string(b):
    b = b.encode() if isinstance(b, str) else b
    return zz(len(b)) + b


def parse(data):
    """(metadata as a list of (key, value bytes), sync marker, [(count, raw block bytes)])."""
    assert data[:4] == b"Obj\x01"
    off, meta = 4, []
    while True:
        count, off = long_at(data, off)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, off = long_at(data, off)
        for _ in range(count):
            n, off = long_at(data, off)
            key = data[off:off + n].decode()
            off += n
            n, off = long_at(data, off)
            meta.append((key, data[off:off + n]))
            off += n
    sync, off = data[off:off + 16], off + 16
    blocks = []
    while off < len(data):
        count, off = long_at(data, off)
        n, off = long_at(data, off)
        blocks.append((count, data[off:off + n]))
        off += n + 16
    return meta, sync, blocks


def container(meta, sync, blocks):
    """An object container file: the metadata map in one block, the blocks (raw bytes) as given."""
    out = b"Obj\x01" + zz(len(meta)) + b"".join(string(k) + string(v) for k, v in meta) + zz(0) + sync
    for count, raw in blocks:
        out += zz(count) + zz(len(raw)) + raw + sync
    return out


def deflate(data):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def plain(codec, raw):
    return raw if codec == b"null" else zlib.decompress(raw, -15)


def deflate_zeros(chunks):
    """Raw deflate of chunks x 16 MiB of zero bytes, in 16 kB a chunk: after the first, every chunk
    flushed to a byte boundary compresses to the same bytes, so the stream is assembled, not computed
    (1.5 GiB in 0.4 s; checked once with zlib: it inflates to exactly that)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = b"\0" * (16 * MIB)
    first = c.compress(zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    again = c.compress(zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    return first + again * (chunks - 1) + c.flush(zlib.Z_FINISH)


def with_codec(meta, codec):
    return [(k, codec if k == "avro.codec" else v) for k, v in meta]


LIST_SCHEMA = ('{"type":"record","name":"manifest_file","fields":['
               '{"name":"manifest_path","type":"string","field-id":500},'
               '{"name":"manifest_length","type":"long","field-id":501},'
               '{"name":"partition_spec_id","type":"int","field-id":502},'
               '{"name":"added_files_count","type":["null","int"],"field-id":504},'
               '{"name":"existing_files_count","type":["null","int"],"field-id":505},'
               '{"name":"deleted_files_count","type":["null","int"],"field-id":506}]}')

# A manifest entry with the fields finalize requires, and one more no reader knows (readers skip it).
ENTRY_SCHEMA = ('{"type":"record","name":"manifest_entry","fields":['
                '{"name":"status","type":"int","field-id":0},'
                '{"name":"snapshot_id","type":["null","long"],"field-id":1},'
                '{"name":"data_file","field-id":2,"type":{"type":"record","name":"r2","fields":['
                '{"name":"file_path","type":"string","field-id":100},'
                '{"name":"file_format","type":"string","field-id":101},'
                '{"name":"partition","field-id":102,"type":{"type":"record","name":"r102","fields":[]}},'
                '{"name":"record_count","type":"long","field-id":103},'
                '{"name":"file_size_in_bytes","type":"long","field-id":104}]}},'
                '{"name":"notes","type":{"type":"array","items":"string"},"field-id":9000}]}')


# ---- the table's files, and the backend reading them ----

def path_of(location):
    return location[len("file://"):] if location.startswith("file://") else \
        location[len("file:"):] if location.startswith("file:") else location


def manifest_list(lake, snapshot_id):
    """The local path of a snapshot's manifest list, as the catalog gives it."""
    for s in lake.catalog.load_table(lake.table)["metadata"]["snapshots"]:
        if s["snapshot-id"] == snapshot_id:
            return path_of(s["manifest-list"])
    raise AssertionError("no snapshot %s" % snapshot_id)


def audited_list(lake):
    """Hour 09 final, its rows on the audit branch: the path of the audited snapshot's manifest list."""
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    return manifest_list(lake, lake.audit_head())


def peak_memory(pid):
    """The backend's peak resident memory (VmHWM), in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM for %d" % pid)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Session:
    """One connection to the cluster, kept across the release so that its backend can be watched."""

    def __init__(self, lake):
        self.lake = lake
        self.conn = lake.env.pg.connect()
        self.pid = self.one("SELECT pg_backend_pid()")

    def one(self, query, args=None):
        with self.conn.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchone()[0] if cur.description else None

    def release(self, **kw):
        """The release's error (psycopg2.Error), or its row when it returned."""
        import json
        try:
            return self.one("SELECT row_to_json(r) FROM finalize.release_iceberg(%s::jsonb) r",
                            (json.dumps(self.lake.request(**kw)),))
        except psycopg2.Error as e:
            return e

    def close(self):
        self.conn.close()


def stuck(lake, s, t):
    """Ends a session; one still busy in another thread (the test failed) is asked to terminate and left
    open (closing a connection in use would wait for it)."""
    if t.is_alive():
        lake.env.pg.sql("SELECT pg_terminate_backend(%s)", (s.pid,))
    else:
        s.close()


def assert_alive(lake, s, other, started):
    """The backend that read the file answers, so does a session opened before, and the postmaster
    reset nothing (it restarts every session when a backend crashes)."""
    assert s.one("SELECT pg_backend_pid()") == s.pid
    assert other.one("SELECT 1") == 1
    assert lake.env.one("SELECT pg_postmaster_start_time()") == started
    assert "terminated by signal" not in lake.env.pg.log()


# ---- decompression bombs ----

def test_a_bomb_in_the_second_block_of_a_manifest_list_is_an_error(lake):
    path = audited_list(lake)
    meta, sync, blocks = parse(open(path, "rb").read())
    codec = dict(meta)["avro.codec"]
    records = b"".join(plain(codec, raw) for _, raw in blocks)
    count = sum(n for n, _ in blocks)
    bomb = deflate_zeros(96)                       # 1.5 GiB of zeros
    data = container(with_codec(meta, b"deflate"), sync, [(count, deflate(records)), (1, bomb)])
    with open(path, "wb") as f:
        f.write(data)
    assert len(data) < 2 * MIB
    before, started = lake.main(), lake.env.one("SELECT pg_postmaster_start_time()")
    s, other = Session(lake), Session(lake)
    try:
        err = s.release()
        assert isinstance(err, psycopg2.Error) and err.pgcode == "54000", err
        msg = err.diag.message_primary
        assert (msg.startswith('could not read manifest list "file:') and
                "manifest list holds more than %d bytes once decompressed (block 2 of 2 passes that)" % LIMIT
                in msg), msg
        assert "finalize.iceberg_max_manifest_size" in err.diag.message_detail, err.diag.message_detail
        assert_alive(lake, s, other, started)
        assert peak_memory(s.pid) < MEMORY_BOUND, peak_memory(s.pid)
        assert lake.main() == before, "a refused release moved main"
    finally:
        s.close()
        other.close()


def test_a_bomb_in_the_first_block_is_refused_the_same_way(lake):
    """libavro's file reader inflated the first block while it opened the file, with no cap."""
    path = audited_list(lake)
    meta, sync, _ = parse(open(path, "rb").read())
    with open(path, "wb") as f:
        f.write(container(with_codec(meta, b"deflate"), sync, [(1, deflate_zeros(24))]))   # 384 MiB
    started = lake.env.one("SELECT pg_postmaster_start_time()")
    s, other = Session(lake), Session(lake)
    try:
        err = s.release()
        assert isinstance(err, psycopg2.Error) and err.pgcode == "54000", err
        assert "(block 1 of 1 passes that)" in err.diag.message_primary, err.diag.message_primary
        assert_alive(lake, s, other, started)
        assert peak_memory(s.pid) < MEMORY_BOUND, peak_memory(s.pid)
    finally:
        s.close()
        other.close()


def test_a_manifest_list_of_millions_of_empty_records_ends_at_the_first(lake):
    """Five million records of zero bytes each (an empty path, 0, 0: 15 MB, valid Avro) were each kept
    before any was checked; the first path that is no object of the store now ends the read."""
    path = audited_list(lake)
    _, sync, _ = parse(open(path, "rb").read())
    n = 5000000
    meta = [("avro.schema", LIST_SCHEMA.encode()), ("avro.codec", b"deflate")]
    with open(path, "wb") as f:
        f.write(container(meta, sync, [(n, deflate(b"\0\0\0\0\0\0" * n))]))
    s = Session(lake)
    try:
        err = s.release()
        assert isinstance(err, psycopg2.Error) and err.pgcode == "22023", err
        assert err.diag.message_primary.startswith('manifest "" is not an object of store'), err.pgerror
        assert peak_memory(s.pid) < MEMORY_BOUND, peak_memory(s.pid)
    finally:
        s.close()


def test_a_manifest_list_over_the_limit_is_not_read(lake):
    """The same manifest list with 2 MB more in its header (a key no reader knows): refused unread under
    a 1 MB limit, released under the default."""
    path = audited_list(lake)
    meta, sync, blocks = parse(open(path, "rb").read())
    with open(path, "wb") as f:
        f.write(container(meta + [("x-padding", b"x" * (2 * MIB))], sync, blocks))
    s = Session(lake)
    try:
        s.one("SET finalize.iceberg_max_manifest_size = '1MB'")
        err = s.release()
        assert isinstance(err, psycopg2.Error) and err.pgcode == "54000", err
        msg = err.diag.message_primary
        assert msg.startswith('manifest list "file:') and msg.endswith(
            "is larger than finalize.iceberg_max_manifest_size (1MB)"), msg
        s.one("RESET finalize.iceberg_max_manifest_size")
        row = s.release()
        assert isinstance(row, dict) and row["released"] is True, row
    finally:
        s.close()


# ---- cancels ----

def test_a_cancel_ends_a_release_reading_a_costly_manifest(lake):
    """The audited snapshot lists one more manifest: 100 entries, each with 300,000 empty strings in a
    field no reader knows (30 MB, 30 kB deflated): over a minute of libavro's decoding, within every
    limit. pg_cancel_backend ends the release with an ordinary cancel."""
    path = audited_list(lake)
    _, sync, _ = parse(open(path, "rb").read())
    strings = 300000
    entry = b"\0\0" + b"\0\0" + b"\0\0" + zz(strings) + b"\0" * strings + b"\0"
    manifest = container([("avro.schema", ENTRY_SCHEMA.encode()), ("avro.codec", b"deflate")], sync,
                         [(100, deflate(entry * 100))])
    mpath = os.path.join(os.path.dirname(path), "costly-manifest.avro")
    with open(mpath, "wb") as f:
        f.write(manifest)
    record = (string("file://" + mpath) + zz(len(manifest)) + zz(0) + b"\x02" + zz(0) + b"\x02" + zz(100)
              + b"\x02" + zz(0))
    with open(path, "wb") as f:
        f.write(container([("avro.schema", LIST_SCHEMA.encode()), ("avro.codec", b"null")], sync,
                          [(1, record)]))
    s = Session(lake)
    out = {}
    t = threading.Thread(target=lambda: out.update(r=s.release()), daemon=True)
    try:
        cpu = cpu_seconds(s.pid)
        t.start()
        # Well into the manifest's entries (a second of the backend's own CPU), then the cancel.
        lake.env.pg.wait_for(lambda: cpu_seconds(s.pid) > cpu + 1.0, timeout=60, what="the release at work")
        assert lake.env.one("SELECT pg_cancel_backend(%s)", (s.pid,))
        t.join(60)
        assert not t.is_alive(), "the cancel did not end the release"
        err = out["r"]
        assert isinstance(err, psycopg2.Error) and err.pgcode == "57014", err
        assert s.one("SELECT pg_backend_pid()") == s.pid
        assert peak_memory(s.pid) < MEMORY_BOUND, peak_memory(s.pid)
    finally:
        stuck(lake, s, t)


# ---- a token endpoint's one-character token ----

def test_a_one_character_token_is_refused_by_a_release(lake):
    """The catalog's token endpoint answers {"access_token": "e"} and loadTable fails: the release
    ends with the catalog's error, the token refused as malformed (it was never sent)."""
    commits = lake.hour_09()
    lake.pipeline.apply(commits, branch="audit")
    proxy = FaultProxy(lake.catalog.uri)
    s = Session(lake)
    out = {}
    t = threading.Thread(target=lambda: out.update(r=s.release()), daemon=True)
    try:
        proxy.require_oauth("finalize", SECRET, token="e")
        proxy.set_status(500, match=LOAD_TABLE)
        lake.env.sql("ALTER SERVER lake_catalog OPTIONS (SET uri %s)", (proxy.uri,))
        lake.env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER lake_catalog "
                     "OPTIONS (client_id 'finalize', client_secret %s)", (SECRET,))
        t.start()
        t.join(60)
        assert not t.is_alive(), "the release never ended"
        err = out["r"]
        assert isinstance(err, psycopg2.Error) and err.pgcode == "38000", err
        assert err.diag.message_primary.endswith('from catalog "lake_catalog"'), err.pgerror
        detail = err.diag.message_detail
        assert 'getting an OAuth2 token for catalog "lake_catalog"' in detail, detail
        assert "is malformed: its access_token is shorter than the 8 characters" in detail, detail
        assert not [r for r in proxy.requests if "Bearer e" in str(r["headers"])], "the token was used"
        assert s.one("SELECT 1") == 1
    finally:
        stuck(lake, s, t)
        proxy.stop()


def test_a_one_character_token_is_a_condition_of_the_lake_worker(env, sim, catalog, writer, namespace):
    """The same endpoint for a consumer: the lake worker shows metadata_malformed with the catalog's
    name and goes on serving the SQL Server source."""
    table = "%s.short_token" % namespace
    writer.call("create_table", name=table)
    track(env, sim, "sales.short_token", "erp")
    proxy = FaultProxy(catalog.uri)
    try:
        proxy.require_oauth("finalize", SECRET, token="e")
        proxy.set_status(500, match=LOAD_TABLE)
        add_catalog(env, "short", proxy.uri, mapping={"client_id": "finalize", "client_secret": SECRET})
        add_consumer(env, "sales.short_token", "spark", "short", table)
        row = wait_consumer(env, "sales.short_token", "spark", lambda r: r["condition"] == "metadata_malformed",
                            "the malformed token's condition")
        assert 'getting an OAuth2 token for catalog "short"' in row["resolve_error"], row
        assert "its access_token is shorter than the 8 characters" in row["resolve_error"], row
        last = env.source_status("erp")["last_success"]
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=70)
        env.pg.wait_for(lambda: env.source_status("erp")["last_success"] > last, timeout=30,
                        what="a SQL Server cycle after the malformed token")
        assert not [r for r in proxy.requests if "Bearer e" in str(r["headers"])], "the token was used"
    finally:
        proxy.stop()


def test_a_secret_inside_redacted_is_replaced_once(env, sim, catalog, writer, namespace):
    """A static token the validator accepts, "redacted", echoed in the catalog's error: "[redacted]"
    holds it again, and a redaction that started over after each replacement never ended. One pass
    replaces it once, and a text redacted again (the catalog's words, then the message holding them)
    stays as it was; the condition shows the catalog's words with the token out of them."""
    table = "%s.redacted_token" % namespace
    writer.call("create_table", name=table)
    track(env, sim, "sales.redacted", "erp")
    proxy = FaultProxy(catalog.uri)
    try:
        proxy.require_token("redacted")
        proxy.set_status(500, message="token redacted is not welcome here", match=LOAD_TABLE)
        add_catalog(env, "echo", proxy.uri, mapping={"token": "redacted"})
        add_consumer(env, "sales.redacted", "spark", "echo", table)
        row = wait_consumer(env, "sales.redacted", "spark", lambda r: r["condition"] == "catalog_unreachable",
                            "the catalog's error")
        assert "token [redacted] is not welcome here" in row["resolve_error"], row
        assert "[[" not in row["resolve_error"], "redacted twice: %s" % row["resolve_error"]
    finally:
        proxy.stop()
