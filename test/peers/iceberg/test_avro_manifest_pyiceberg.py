"""finalize's manifest reader (src/lake/avro_manifest.c through libavro) on manifests and manifest lists
written by pyiceberg itself (its own Avro writer, v1 and v2, the null, deflate and zstandard codecs),
checked field by field against pyiceberg's own reading of the same files, the data files' column
bounds (lower_bounds, upper_bounds) and null counts (null_value_counts) included.

pyiceberg runs in the venv of test/peers/setup-venv iceberg (the venv_python fixture); the C side is
test/unit/test_avro_manifest run as `test_avro_manifest list|manifest|meta FILE`, which prints what the
reader makes of a file as JSON lines. No catalog is started: these are the files a snapshot's
manifest-list points to, written with pyiceberg's write_manifest and write_manifest_list."""
import fcntl
import json
import os
import subprocess

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BINARY = os.path.join(TOP, "test", "unit", "test_avro_manifest")

# Runs in the venv: writes the files into argv[1], prints pyiceberg's reading of them as one JSON document.
WRITE = r'''
import json, os, sys
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus,
                                read_manifest_list, write_manifest, write_manifest_list)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.conversions import to_bytes
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType, TimestampType

out, n = sys.argv[1], int(sys.argv[2])
io = PyArrowFileIO()
schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "region", StringType(), required=False),
                NestedField(3, "ts", TimestampType(), required=False))
spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"),
                     PartitionField(source_id=3, field_id=1001, transform=DayTransform(), name="ts_day"), spec_id=0)


def bounds(i, upper):
    """Column bounds as pyiceberg serializes them (ts: 8-byte little-endian microseconds), none for some files."""
    if i % 4 == 0:
        return None
    ts = 1700000000000000 + i * 1000 + (999 if upper else 0)
    out = {3: to_bytes(TimestampType(), ts)}
    if i % 4 != 1:
        out[2] = to_bytes(StringType(), "eu-%d" % (i % 3))
    return out


def data_file(i):
    return DataFile.from_args(content=DataFileContent.DATA, file_path="file:///w/t/data/%06d.parquet" % i,
                              file_format=FileFormat.PARQUET,
                              partition=Record(None if i % 7 == 3 else "eu-%d" % (i % 3), 19700 + i % 30),
                              record_count=100 + i, file_size_in_bytes=4000 + 3 * i,
                              lower_bounds=bounds(i, False), upper_bounds=bounds(i, True),
                              null_value_counts=None if i % 4 == 0 else {3: i % 3, 2: 5000000000 + i})


def bound_list(b):
    return sorted([k, v.hex()] for k, v in (b or {}).items())


def manifest(path, version, codec, snapshot_id, start):
    with write_manifest(version, spec, schema, io.new_output(path), snapshot_id=snapshot_id,
                        avro_compression=codec) as w:
        for i in range(start, start + n):
            if i % 5 == 1:    # a file of an earlier snapshot, carried over
                w.existing(ManifestEntry.from_args(status=ManifestEntryStatus.EXISTING, snapshot_id=99,
                                                   sequence_number=3, file_sequence_number=4, data_file=data_file(i)))
            elif i % 5 == 2:  # one this snapshot removed
                w.delete(ManifestEntry.from_args(status=ManifestEntryStatus.DELETED, snapshot_id=snapshot_id,
                                                 sequence_number=3, file_sequence_number=4, data_file=data_file(i)))
            else:
                w.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                              data_file=data_file(i)))
    return w.to_manifest_file()


def opt(v):
    return None if v is None else int(v)


result = {}
for version in (1, 2):
    for codec in ("null", "deflate", "zstandard"):
        tag = "v%d-%s" % (version, codec)
        mfs = [manifest(os.path.join(out, "m-%s-%d.avro" % (tag, k)), version, codec, 1001, k * n) for k in (0, 1)]
        lpath = os.path.join(out, "l-%s.avro" % tag)
        with write_manifest_list(version, io.new_output(lpath), 1001, 1000, 7 if version == 2 else None, codec) as lw:
            lw.add_manifests(mfs)
        listed, entries = [], {}
        for m in read_manifest_list(io.new_input(lpath)):
            listed.append({"manifest_path": m.manifest_path, "manifest_length": m.manifest_length,
                           "partition_spec_id": m.partition_spec_id, "content": int(m.content),
                           "sequence_number": opt(m.sequence_number), "min_sequence_number": opt(m.min_sequence_number),
                           "added_snapshot_id": opt(m.added_snapshot_id),
                           "added_files_count": opt(m.added_files_count),
                           "existing_files_count": opt(m.existing_files_count),
                           "deleted_files_count": opt(m.deleted_files_count),
                           "added_rows_count": opt(m.added_rows_count),
                           "existing_rows_count": opt(m.existing_rows_count),
                           "deleted_rows_count": opt(m.deleted_rows_count)})
            entries[m.manifest_path] = [
                {"status": int(e.status), "snapshot_id": opt(e.snapshot_id), "sequence_number": opt(e.sequence_number),
                 "file_sequence_number": opt(e.file_sequence_number), "content": int(e.data_file.content),
                 "file_path": e.data_file.file_path, "file_format": e.data_file.file_format.value,
                 "record_count": e.data_file.record_count, "file_size_in_bytes": e.data_file.file_size_in_bytes,
                 "partition": [None if v is None else str(v) for v in e.data_file.partition],
                 "lower_bounds": bound_list(e.data_file.lower_bounds),
                 "upper_bounds": bound_list(e.data_file.upper_bounds),
                 "null_value_counts": sorted([k, v] for k, v in (e.data_file.null_value_counts or {}).items())}
                for e in m.fetch_manifest_entry(io, discard_deleted=False)]
        result[tag] = {"list": lpath, "manifests": listed, "entries": entries}
print(json.dumps(result))
'''

N = 2000  # entries per manifest: pyiceberg writes one block each, so thousands of blocks


@pytest.fixture(scope="module")
def binary():
    """test/unit/test_avro_manifest, built by the Makefile (under the lock test_unit_c.py takes)."""
    make = ["make", "-s", "-C", TOP, "test/unit/test_avro_manifest"]
    if os.environ.get("PG_CONFIG"):
        make.append("PG_CONFIG=" + os.environ["PG_CONFIG"])
    with open(os.path.join(TOP, "test", "unit", ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(make, check=True)
    return BINARY


@pytest.fixture(scope="module")
def files(venv_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("manifests")
    r = subprocess.run([venv_python, "-c", WRITE, str(out), str(N)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout)


def read(binary, mode, path):
    """What the C reader makes of a file: its JSON lines, or the error it ended with."""
    r = subprocess.run([binary, mode, path], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [json.loads(line) for line in r.stdout.splitlines()], None


@pytest.mark.parametrize("tag", ["v1-null", "v1-deflate", "v2-null", "v2-deflate"])
def test_manifest_list_as_pyiceberg_reads_it(binary, files, tag):
    got, err = read(binary, "list", files[tag]["list"])
    assert err is None, err
    want = files[tag]["manifests"]
    if tag.startswith("v1"):
        # pyiceberg reads a v1 list's absent content and sequence numbers as 0; the reader says absent
        # (content: 0), which is what the spec's "use 0 when reading v1" is applied to by the caller.
        for m in want:
            m["sequence_number"] = m["min_sequence_number"] = None
    assert got == want


@pytest.mark.parametrize("tag", ["v1-null", "v1-deflate", "v2-null", "v2-deflate"])
def test_manifests_as_pyiceberg_reads_them(binary, files, tag):
    version = 1 if tag.startswith("v1") else 2
    listed = {m["manifest_path"]: m for m in files[tag]["manifests"]}
    for path, want in files[tag]["entries"].items():
        got, err = read(binary, "manifest", path)
        assert err is None, err
        assert len(got) == len(want) == N
        assert sum(1 for w in want if w["lower_bounds"]) == N * 3 // 4, "pyiceberg wrote the bounds"
        assert sum(1 for w in want if w["null_value_counts"]) == N * 3 // 4, "pyiceberg wrote the null counts"
        for g, w in zip(got, want):
            assert [p[0] for p in g["partition"]] == ["region", "ts_day"]
            assert [p[1] for p in g["partition"]] == ["string", "int"]  # identity string; day: a date, int days
            assert [p[2] for p in g["partition"]] == w["partition"]
            for key in ("status", "content", "file_path", "file_format", "record_count", "file_size_in_bytes"):
                assert g[key] == w[key], (key, g, w)
            # The bounds (maps of column id to bytes) as written, for the files that have them.
            for key in ("lower_bounds", "upper_bounds", "null_value_counts"):
                assert sorted(g[key]) == w[key], (key, g, w)
            assert g["referenced_data_file"] is None
            # pyiceberg inherits what the file leaves null from the manifest list; the reader hands on
            # the file's own values, so a null must be what inheritance filled in.
            for key, inherited in (("snapshot_id", listed[path]["added_snapshot_id"]),
                                   ("sequence_number", listed[path]["sequence_number"]),
                                   ("file_sequence_number", listed[path]["sequence_number"])):
                if version == 1 and key != "snapshot_id":
                    assert g[key] is None  # no such field in v1
                elif g[key] is None:
                    assert w[key] == inherited and g["status"] == 1, (key, g, w)
                else:
                    assert g[key] == w[key], (key, g, w)


def test_iceberg_metadata_of_a_manifest(binary, files):
    path = sorted(files["v2-deflate"]["entries"])[0]
    got, err = read(binary, "meta", path)
    assert err is None, err
    meta = {m["key"]: m["value"] for m in got}
    assert meta["format-version"] == "2" and meta["content"] == "data" and meta["partition-spec-id"] == "0"
    assert meta["avro.codec"] == "deflate"
    assert [f["transform"] for f in json.loads(meta["partition-spec"])] == ["identity", "day"]
    assert [f["name"] for f in json.loads(meta["schema"])["fields"]] == ["id", "region", "ts"]


def test_zstandard_is_refused_by_name(binary, files):
    """finalize reads no zstandard codec (Debian's libavro 1.11 had none; Iceberg's write.avro.compression-codec=zstd)."""
    for path in [files["v2-zstandard"]["list"]] + sorted(files["v2-zstandard"]["entries"]):
        got, err = read(binary, "manifest", path)
        assert got is None and 'its Avro codec "zstandard" is not one finalize reads' in err, err
