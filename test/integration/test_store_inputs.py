"""What an object store answers cannot take the database down (issue 41), against the real
S3-compatible server of test_gate_s3.py (s3rver behind the signature-checking proxy, whose faults
answer a listing with a body of the test's choosing).

An S3 answer that declares a document type: the listing's key refers 15,000 times to an entity of
50 kB (a 95 kB page). libxml2 expands an entity each time a text is read, so the key read as 750 MB
(and a 64 MB page, the most a page may be, could take the host's memory); S3 never sends a DTD, and
such an answer is now refused unread, as a malformed one."""
import psycopg2
import pytest

from test_gate_s3 import gate, manifest, pg, register, s3, table, upload

assert pg and s3 and table          # fixtures, imported for this module

MIB = 1 << 20


def entity_page(key, size, refs, entity_bytes):
    """A ListObjectsV2 page whose one key ends with refs references to an entity of entity_bytes."""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<!DOCTYPE ListBucketResult [<!ENTITY e "%s">]>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            '<Name>lake</Name><Prefix>day=27/hour=08/gen-1/</Prefix><KeyCount>1</KeyCount>'
            '<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>'
            '<Contents><Key>%s%s</Key><Size>%d</Size></Contents></ListBucketResult>'
            % ("x" * entity_bytes, key, "&e;" * refs, size))


def test_a_listing_page_that_does_not_say_whether_more_follows_is_refused(pg, s3, table):
    """S3 always sends IsTruncated, and CommonPrefixes only to a delimited listing: a page without
    the one, or with the other, would hide objects if read as the last page or as nothing."""
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    (key, entry), = files.items()
    page = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            '<Name>lake</Name><Prefix>day=27/hour=08/gen-1/</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>'
            '%s<Contents><Key>' + key + '</Key><Size>' + str(entry["size"]) + '</Size></Contents>%s</ListBucketResult>')
    conn = pg.connect()
    try:
        for body, what in ((page % ("", ""), "<IsTruncated>"),
                           (page % ("<IsTruncated>false</IsTruncated>",
                                    "<CommonPrefixes><Prefix>day=27/hour=08/gen-1/more/</Prefix></CommonPrefixes>"),
                            "<CommonPrefixes>")):
            s3.fault(kind="malformed", count=-1, match="list-type=2", body=body)
            with pytest.raises(psycopg2.Error) as e:
                gate(conn, manifest("gen-1", files))
            assert e.value.diag.message_primary.endswith('"lake": MalformedResponse'), e.value.pgerror
            assert what in e.value.diag.message_detail, e.value.diag.message_detail
            s3.clear(what="faults")
        assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
    finally:
        conn.close()
        s3.clear(what="faults")


def peak_memory(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM for %d" % pid)


def test_a_listing_that_declares_a_document_type_is_refused_unread(pg, s3, table):
    files = upload(s3, "gen-1", ["a.parquet"])
    register(pg, "gen-1")
    (key, entry), = files.items()
    body = entity_page(key, entry["size"], 15000, 50000)
    assert len(body) < 100000
    s3.fault(kind="malformed", count=-1, match="list-type=2", body=body)
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        with pytest.raises(psycopg2.Error) as e:
            gate(conn, manifest("gen-1", files))
        err = e.value
        assert err.pgcode == "38000", (err.pgcode, err.pgerror)
        assert err.diag.message_primary == ('could not list "day=27/hour=08/gen-1/" in bucket "lake" of server '
                                            '"lake": MalformedResponse'), err.diag.message_primary
        assert "declares a document type (S3 sends none)" in err.diag.message_detail, err.diag.message_detail
        assert peak_memory(pid) < 256 * MIB, peak_memory(pid)
        assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
        # The same backend, once the store answers as S3 does, releases.
        s3.clear(what="faults")
        assert gate(conn, manifest("gen-1", files)) == (True, "gen-1", [])
    finally:
        conn.close()
        s3.clear(what="faults")
