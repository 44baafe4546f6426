"""A pyiceberg writer as a service: JSON commands on stdin, one JSON answer per line on stdout.

    $(test/peers/setup-venv iceberg)/bin/python writer.py '{"uri": "http://127.0.0.1:PORT", "warehouse": "..."}'

The argument is the catalog's properties for pyiceberg's load_catalog("rest", **props): uri, warehouse,
and token, credential, scope, oauth2-server-uri, header.* ... when given. Each input line is
{"cmd": NAME, ...arguments}; the answer is {"result": ...} or {"error": "the exception's text",
"type": "its class"}. The process ends at end of input. Nothing else is written to stdout (pyiceberg's
warnings go to stderr).

Commands (a table is "ns.t"; a snapshot is {snapshot_id, parent_id, sequence_number, timestamp_ms,
operation, summary}):
  create_namespace(ns)                          -> ns
  create_table(name, columns=None, properties={}, partition=None, location=None) -> {location, metadata_location}
      columns: [[name, type], ...], types long int string double boolean date timestamp timestamptz;
      default SCHEMA below (id long, op string, lsn string, commit_time timestamptz), all optional;
      partition: [[source column, transform, field name], ...], transforms as Iceberg writes them
      (identity, year, month, day, hour, bucket[N], truncate[W]); location: the table's (default: the
      catalog's choice under its warehouse)
  update_spec(table, add=[], remove=[])         -> [{spec_id, fields: [[name, transform, source_id]]}]
      partition spec evolution: adds [[source column, transform, field name], ...], removes fields by name
  append(table, rows, properties={}, branch=None) -> snapshot (of the branch's new head)
      rows: [{column: value}], a timestamptz as ISO 8601 text (e.g. "2024-05-01T10:00:00+00:00");
      properties go into the snapshot summary (pyiceberg's snapshot_properties)
  compact(table, branch=None, mode="replace")   -> snapshot
      rewrites every live data file of the branch's head into one file with the same rows, no custom
      property. mode "replace": one snapshot with operation=replace (pyiceberg 0.12 has no public API
      for it: an _OverwriteFiles producer with Operation.REPLACE, see ReplaceFiles). mode "overwrite":
      the public API, table.overwrite(same rows) -- which commits TWO snapshots, a delete then an append
      (the answer is the last one; "snapshots" has both).
  delete(table, filter, branch=None)            -> snapshot, or null when no row matched
      filter: pyiceberg's row filter text, e.g. "id >= 10". operation=delete when whole data files
      match; when only part of a file does, pyiceberg rewrites it: operation=overwrite.
  overwrite(table, rows, filter="true", properties={}, branch=None) -> snapshot (public table.overwrite)
  create_branch(table, name, snapshot_id=None)  -> refs   (default: main's current snapshot)
  create_tag(table, name, snapshot_id=None)     -> refs
  set_ref(table, name, snapshot_id, type="branch") -> refs  (move an existing branch or tag)
  remove_ref(table, name)                       -> refs
  rollback(table, snapshot_id)                  -> snapshot (main moved back to an ancestor)
  set_current_snapshot(table, snapshot_id)      -> snapshot (main moved to any snapshot)
  expire_snapshots(table, snapshot_ids)         -> [remaining snapshot ids]
  set_properties(table, properties)             -> table properties
  snapshots(table)                              -> [snapshot], oldest first
  current(table, ref="main")                    -> snapshot or null
  refs(table)                                   -> {name: {type, snapshot_id}}
  scan(table, ref=None, snapshot_id=None, filter=None) -> rows (sorted by id when there is one)
  metadata_location(table)                      -> the current metadata file
  data_files(table, ref="main")                 -> [{file_path, record_count, file_size_in_bytes,
      partition, deletes: [file_path, ...]}] of the ref's head (pyiceberg's plan_files)
  position_delete(table, positions, branch=None, reference=True) -> snapshot: one position-delete
      file of positions [[data file path, row position], ...] (all in one data file), committed in a
      delete manifest (content=deletes), as Iceberg's merge-on-read writers commit them; with
      reference, its entry names the data file (referenced_data_file, field 143, optional in v2, as
      Java's writers set it for a file-scoped delete)
  duplicate_file(table, file_path, branch=None)  -> snapshot: a new snapshot that references the data
      file file_path (already live) once more -- a broken writer's snapshot
  bench_files(table, count, partition, size=64, branch=None, per_commit=10000) -> snapshot: count
      placeholder files of size bytes (not Parquet) under data/, referenced as data files of one
      record each in the partition (a tuple of ints, e.g. [hours since 1970]), per_commit per
      fast append (one manifest each): for benchmarks of manifest reading only
  plan_files(table, snapshot_id, filter)        -> {files, seconds}: pyiceberg's own planning of the
      snapshot's files matching the row filter (manifest list and manifests read, filtered)
  make_container(location)                      -> null: creates the container (bucket) of an abfss://
      location with pyiceberg's FileIO for it (adlfs), nothing when it exists
  read_file(table, path)                        -> the file's bytes (base64), read with the table's FileIO
  write_file(table, path, data)                 -> null: writes data (base64) over the file with the
      table's FileIO, or deletes it when data is null (on Azure: adlfs, the Blob API)
  ping                                          -> "pong"
"""
import base64
import datetime
import json
import os
import sys
import traceback

import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.types import (BooleanType, DateType, DoubleType, IntegerType, LongType, NestedField, StringType,
                             TimestampType, TimestamptzType)

TYPES = {
    "long": (LongType, pa.int64()),
    "int": (IntegerType, pa.int32()),
    "string": (StringType, pa.string()),
    "double": (DoubleType, pa.float64()),
    "boolean": (BooleanType, pa.bool_()),
    "date": (DateType, pa.date32()),
    "timestamp": (TimestampType, pa.timestamp("us")),
    "timestamptz": (TimestamptzType, pa.timestamp("us", tz="UTC")),
}
SCHEMA = [["id", "long"], ["op", "string"], ["lsn", "string"], ["commit_time", "timestamptz"]]


def iceberg_schema(columns):
    return Schema(*[NestedField(field_id=i, name=name, field_type=TYPES[typ][0](), required=False)
                    for i, (name, typ) in enumerate(columns, 1)])


def arrow_schema(table):
    """The Arrow schema matching the table's Iceberg schema (nullable fields, microsecond timestamps)."""
    fields = []
    for f in table.schema().fields:
        for _, (itype, atype) in TYPES.items():
            if isinstance(f.field_type, itype):
                fields.append(pa.field(f.name, atype, nullable=not f.required))
                break
        else:
            raise ValueError("column %s: type %s is not one the writer knows" % (f.name, f.field_type))
    return pa.schema(fields)


def to_value(atype, v):
    if v is None:
        return None
    if pa.types.is_timestamp(atype):
        if isinstance(v, (int, float)):        # epoch microseconds
            return datetime.datetime.fromtimestamp(v / 1e6, datetime.timezone.utc)
        d = datetime.datetime.fromisoformat(str(v).replace("Z", "+00:00"))
        if atype.tz is not None and d.tzinfo is None:
            d = d.replace(tzinfo=datetime.timezone.utc)
        if atype.tz is None and d.tzinfo is not None:
            d = d.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return d
    if pa.types.is_date(atype):
        return datetime.date.fromisoformat(v)
    return v


def arrow_rows(table, rows):
    schema = arrow_schema(table)
    names = set(schema.names)
    for r in rows:
        extra = set(r) - names
        if extra:
            raise ValueError("no column %s in %s (columns: %s)" % (", ".join(sorted(extra)), table.name(),
                                                                  ", ".join(schema.names)))
    cols = {f.name: [to_value(f.type, r.get(f.name)) for r in rows] for f in schema}
    return pa.Table.from_pydict(cols, schema=schema)


def json_value(v):
    if isinstance(v, datetime.datetime):
        return v.isoformat()
    if isinstance(v, datetime.date):
        return v.isoformat()
    return v


def snap(s):
    if s is None:
        return None
    summary = s.summary
    props = dict(summary.additional_properties) if summary is not None else {}
    if summary is not None:
        props["operation"] = summary.operation.value
    return {"snapshot_id": s.snapshot_id, "parent_id": s.parent_snapshot_id,
            "sequence_number": s.sequence_number, "timestamp_ms": s.timestamp_ms,
            "operation": summary.operation.value if summary is not None else None, "summary": props}


def refs_of(table):
    return {name: {"type": ref.snapshot_ref_type.value, "snapshot_id": ref.snapshot_id}
            for name, ref in table.metadata.refs.items()}


def head(table, branch):
    return table.metadata.snapshot_by_name(branch or "main")


class Writer:
    def __init__(self, props):
        props = dict(props)
        self.catalog = load_catalog(props.pop("name", "rest"), **dict(props, type="rest"))

    def table(self, name):
        return self.catalog.load_table(name)

    # -- namespaces and tables
    def create_namespace(self, ns, properties=None):
        self.catalog.create_namespace(ns, properties or {})
        return ns

    def create_table(self, name, columns=None, properties=None, partition=None, location=None):
        schema = iceberg_schema(columns or SCHEMA)
        kw = {}
        if partition:
            from pyiceberg.partitioning import PartitionField, PartitionSpec
            from pyiceberg.transforms import parse_transform
            kw["partition_spec"] = PartitionSpec(*[
                PartitionField(source_id=schema.find_field(col).field_id, field_id=1000 + i,
                               transform=parse_transform(transform), name=field)
                for i, (col, transform, field) in enumerate(partition)])
        if location:
            kw["location"] = location
        t = self.catalog.create_table(name, schema=schema, properties=properties or {}, **kw)
        return {"location": t.location(), "metadata_location": t.metadata_location}

    def drop_table(self, name):
        self.catalog.drop_table(name)
        return name

    def set_properties(self, table, properties):
        t = self.table(table)
        with t.transaction() as tx:
            tx.set_properties(properties)
        return dict(self.table(table).properties)

    def update_spec(self, table, add=(), remove=()):
        """Evolves the partition spec: adds [[source column, transform, field name], ...], removes fields
        by name; returns the table's specs as [{spec_id, fields: [[name, transform, source_id]]}]."""
        from pyiceberg.transforms import parse_transform
        t = self.table(table)
        with t.update_spec() as u:
            for name in remove:
                u.remove_field(name)
            for col, transform, field in add:
                u.add_field(col, parse_transform(transform), field)
        t = self.table(table)
        return [{"spec_id": s.spec_id, "fields": [[f.name, str(f.transform), f.source_id] for f in s.fields]}
                for s in t.metadata.partition_specs]

    # -- commits
    def append(self, table, rows, properties=None, branch=None):
        t = self.table(table)
        t.append(arrow_rows(t, rows), snapshot_properties=properties or {}, branch=branch or "main")
        return snap(head(t, branch))

    def overwrite(self, table, rows, filter="true", properties=None, branch=None):
        t = self.table(table)
        t.overwrite(arrow_rows(t, rows), overwrite_filter=filter if filter != "true" else _always_true(),
                    snapshot_properties=properties or {}, branch=branch or "main")
        return snap(head(t, branch))

    def delete(self, table, filter, branch=None):
        t = self.table(table)
        before = head(t, branch)
        t.delete(delete_filter=filter, branch=branch or "main")
        after = head(t, branch)
        if before is not None and after is not None and before.snapshot_id == after.snapshot_id:
            return None
        return snap(after)

    def compact(self, table, branch=None, mode="replace"):
        t = self.table(table)
        branch = branch or "main"
        start = head(t, branch)
        if start is None:
            raise ValueError("%s has no snapshot on %s: nothing to compact" % (table, branch))
        rows = t.scan(snapshot_id=start.snapshot_id).to_arrow()
        if mode == "overwrite":
            t.overwrite(rows, branch=branch)
            return snap(head(t, branch))
        if mode != "replace":
            raise ValueError("compact: mode %r is neither replace nor overwrite" % mode)
        files = [task.file for task in t.scan(snapshot_id=start.snapshot_id).plan_files()]
        with t.transaction() as tx:
            producer = ReplaceFiles(operation=Operation.REPLACE, transaction=tx, io=t.io, branch=branch)
            for f in files:
                producer.delete_data_file(f)
            if rows.num_rows:
                from pyiceberg.io.pyarrow import _dataframe_to_data_files
                for f in _dataframe_to_data_files(table_metadata=tx.table_metadata,
                                                  write_uuid=producer.commit_uuid, df=rows, io=t.io):
                    producer.append_data_file(f)
            producer.commit()
        return snap(head(t, branch))

    # -- refs
    def create_branch(self, table, name, snapshot_id=None):
        t = self.table(table)
        sid = snapshot_id if snapshot_id is not None else t.metadata.current_snapshot_id
        t.manage_snapshots().create_branch(snapshot_id=sid, branch_name=name).commit()
        return refs_of(t)

    def create_tag(self, table, name, snapshot_id=None):
        t = self.table(table)
        sid = snapshot_id if snapshot_id is not None else t.metadata.current_snapshot_id
        t.manage_snapshots().create_tag(snapshot_id=sid, tag_name=name).commit()
        return refs_of(t)

    def set_ref(self, table, name, snapshot_id, type="branch"):
        # create_branch/create_tag on an existing name moves it (SetSnapshotRef with an
        # AssertRefSnapshotId of its current snapshot).
        if type == "tag":
            return self.create_tag(table, name, snapshot_id)
        if name == "main":
            self.set_current_snapshot(table, snapshot_id)
            return refs_of(self.table(table))
        return self.create_branch(table, name, snapshot_id)

    def remove_ref(self, table, name):
        t = self.table(table)
        ref = t.metadata.refs.get(name)
        if ref is None:
            raise ValueError("%s has no ref %s" % (table, name))
        ms = t.manage_snapshots()
        (ms.remove_tag(name) if ref.snapshot_ref_type.value == "tag" else ms.remove_branch(name)).commit()
        return refs_of(t)

    def rollback(self, table, snapshot_id):
        t = self.table(table)
        t.manage_snapshots().rollback_to_snapshot(snapshot_id).commit()
        return snap(t.current_snapshot())

    def set_current_snapshot(self, table, snapshot_id):
        t = self.table(table)
        t.manage_snapshots().set_current_snapshot(snapshot_id=snapshot_id).commit()
        return snap(t.current_snapshot())

    def expire_snapshots(self, table, snapshot_ids):
        t = self.table(table)
        t.maintenance.expire_snapshots().by_ids(list(snapshot_ids)).commit()
        return [s.snapshot_id for s in self.table(table).snapshots()]

    # -- reading
    def snapshots(self, table):
        return [snap(s) for s in self.table(table).snapshots()]

    def current(self, table, ref="main"):
        return snap(self.table(table).snapshot_by_name(ref))

    def refs(self, table):
        return refs_of(self.table(table))

    def metadata_location(self, table):
        return self.table(table).metadata_location

    def properties(self, table):
        """The table's properties as pyiceberg reads them (loaded afresh through the catalog)."""
        return dict(self.table(table).properties)

    def scan(self, table, ref=None, snapshot_id=None, filter=None):
        t = self.table(table)
        if ref is not None:
            s = t.snapshot_by_name(ref)
            if s is None:
                raise ValueError("%s has no ref %s" % (table, ref))
            snapshot_id = s.snapshot_id
        kw = {"snapshot_id": snapshot_id} if snapshot_id is not None else {}
        if filter:
            kw["row_filter"] = filter
        rows = t.scan(**kw).to_arrow().to_pylist()
        if rows and "id" in rows[0]:
            rows.sort(key=lambda r: (r["id"] is None, r["id"]))
        return [{k: json_value(v) for k, v in r.items()} for r in rows]

    def data_files(self, table, ref="main"):
        t = self.table(table)
        s = t.snapshot_by_name(ref)
        if s is None:
            return []
        out = []
        for task in t.scan(snapshot_id=s.snapshot_id).plan_files():
            f = task.file
            out.append({"file_path": f.file_path, "record_count": f.record_count,
                        "file_size_in_bytes": f.file_size_in_bytes,
                        "partition": [json_value(v) for v in f.partition],
                        "deletes": sorted(d.file_path for d in task.delete_files)})
        return sorted(out, key=lambda f: f["file_path"])

    def _live_file(self, t, branch, file_path):
        s = t.snapshot_by_name(branch or "main")
        for task in t.scan(snapshot_id=s.snapshot_id).plan_files():
            if task.file.file_path == file_path:
                return task.file
        raise ValueError("%s has no live data file %s on %s" % (t.name(), file_path, branch or "main"))

    def position_delete(self, table, positions, branch=None, reference=True):
        import uuid
        import pyarrow.parquet as pq
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        t = self.table(table)
        ref = self._live_file(t, branch, positions[0][0])
        path = "%s/data/delete-%s.parquet" % (t.location(), uuid.uuid4())
        schema = pa.schema([pa.field("file_path", pa.string(), nullable=False,
                                     metadata={b"PARQUET:field_id": b"2147483546"}),
                            pa.field("pos", pa.int64(), nullable=False,
                                     metadata={b"PARQUET:field_id": b"2147483545"})])
        rows = pa.Table.from_pydict({"file_path": [p[0] for p in positions], "pos": [p[1] for p in positions]},
                                    schema=schema)
        with t.io.new_output(path).create() as out:
            pq.write_table(rows, out)
        size = len(t.io.new_input(path).open().read())
        # Bound to the v3 struct (v2's fields, then 142-145), whose 143 is referenced_data_file.
        df = DataFile.from_args(_table_format_version=3, content=DataFileContent.POSITION_DELETES, file_path=path,
                                file_format=FileFormat.PARQUET, partition=ref.partition,
                                record_count=len(positions), file_size_in_bytes=size,
                                referenced_data_file=positions[0][0] if reference else None)
        df.spec_id = ref.spec_id
        with t.transaction() as tx:
            producer = DeleteAppend(operation=Operation.OVERWRITE, transaction=tx, io=t.io, branch=branch or "main")
            producer.append_data_file(df)
            producer.commit()
        return snap(head(self.table(table), branch))

    def duplicate_file(self, table, file_path, branch=None):
        t = self.table(table)
        f = self._live_file(t, branch, file_path)
        with t.transaction() as tx:
            with tx.update_snapshot(branch=branch or "main").fast_append() as fa:
                fa.append_data_file(f)
        return snap(head(self.table(table), branch))

    def bench_files(self, table, count, partition, size=64, branch=None, per_commit=10000):
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record
        t = self.table(table)
        folder = "%s/data/bench" % t.location()
        local = folder[len("file://"):] if folder.startswith("file://") else folder
        os.makedirs(local, exist_ok=True)
        blob = b"x" * size
        done = 0
        while done < count:
            n = min(per_commit, count - done)
            files = []
            for i in range(done, done + n):
                with open("%s/f-%07d.parquet" % (local, i), "wb") as fh:
                    fh.write(blob)
                files.append(DataFile.from_args(content=DataFileContent.DATA,
                                                file_path="%s/f-%07d.parquet" % (folder, i),
                                                file_format=FileFormat.PARQUET, partition=Record(*partition),
                                                record_count=1, file_size_in_bytes=size, spec_id=0))
            with t.transaction() as tx:
                with tx.update_snapshot(branch=branch or "main").fast_append() as fa:
                    for f in files:
                        fa.append_data_file(f)
            t = self.table(table)
            done += n
        return snap(head(t, branch))

    def plan_files(self, table, snapshot_id, filter):
        import time
        t = self.table(table)
        t0 = time.perf_counter()
        files = list(t.scan(snapshot_id=snapshot_id, row_filter=filter).plan_files())
        return {"files": len(files), "seconds": time.perf_counter() - t0}

    def make_container(self, location):
        from urllib.parse import urlparse

        from pyiceberg.io import load_file_io
        uri = urlparse(location)
        fs = load_file_io(self.catalog.properties, location).get_fs(uri.scheme, uri.hostname)
        container = uri.netloc.split("@", 1)[0]
        if not fs.exists(container):
            fs.mkdir(container)
        return None

    def read_file(self, table, path):
        with self.table(table).io.new_input(path).open() as f:
            return base64.b64encode(f.read()).decode()

    def write_file(self, table, path, data):
        io = self.table(table).io
        if data is None:
            io.delete(path)
        else:
            with io.new_output(path).create(overwrite=True) as f:
                f.write(base64.b64decode(data))
        return None

    def ping(self):
        return "pong"


def _always_true():
    from pyiceberg.expressions import AlwaysTrue
    return AlwaysTrue()


def _replace_files_class():
    from pyiceberg.table.snapshots import update_snapshot_summaries
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class ReplaceFiles(_OverwriteFiles):
        """An _OverwriteFiles producer (the delete_data_file/append_data_file one pyiceberg's copy-on-write
        delete uses) committing operation=replace: pyiceberg 0.12's update_snapshot_summaries refuses
        REPLACE ("Operation not implemented"), so the totals are computed as for an overwrite and the
        operation set to replace afterwards. Data and totals are unchanged, as Iceberg's spec says of
        replace ("data and delete files were added and removed without changing table data")."""

        def _summary(self, snapshot_properties=None):
            op = self._operation
            self._operation = Operation.OVERWRITE
            try:
                s = super()._summary(snapshot_properties or {})
            finally:
                self._operation = op
            return Summary(Operation.REPLACE, **s.additional_properties)

    assert update_snapshot_summaries  # what the override works around
    return ReplaceFiles


ReplaceFiles = _replace_files_class()


def _delete_append_class():
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    class DeleteManifestWriter(ManifestWriterV2):
        """A v2 manifest writer of delete files (content=deletes), which pyiceberg 0.12 has not, whose
        data_file struct also has v2's optional referenced_data_file (pyiceberg writes it in v3 only):
        its entries' struct is v3's, which extends v2's (first_row_id and the DV fields stay null)."""

        def content(self):
            return ManifestContent.DELETES

        def new_writer(self):
            from pyiceberg.avro.file import AvroOutputFile
            from pyiceberg.manifest import ManifestEntry
            return AvroOutputFile[ManifestEntry](output_file=self._output_file, file_schema=self._with_partition(3),
                                                 record_schema=self._with_partition(3), schema_name="manifest_entry",
                                                 metadata=self._meta)

        @property
        def _meta(self):
            return dict(super()._meta, content="deletes")

    class DeleteAppend(_FastAppendFiles):
        """A fast append whose added files go into a delete manifest: a row delta adding position
        deletes, as Iceberg's merge-on-read writers commit one (pyiceberg 0.12 writes none)."""

        def new_manifest_writer(self, spec):
            return DeleteManifestWriter(spec=spec, schema=self.schema(), output_file=self.new_manifest_output(),
                                        snapshot_id=self._snapshot_id, avro_compression=self._compression)

    return DeleteAppend


DeleteAppend = _delete_append_class()


def main():
    props = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    out = sys.stdout
    sys.stdout = sys.stderr          # anything printed by a library goes to stderr, not into the protocol
    try:
        w = Writer(props)
        ready = {"result": "ready"}
    except Exception as e:
        w, ready = None, {"error": "%s: %s" % (type(e).__name__, e), "type": type(e).__name__}
    out.write(json.dumps(ready) + "\n")
    out.flush()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            cmd = req.pop("cmd")
            if w is None:
                raise RuntimeError("the catalog could not be loaded: " + ready["error"])
            fn = getattr(w, cmd, None)
            if cmd.startswith("_") or fn is None or not callable(fn) or cmd in ("table", "catalog"):
                raise ValueError("unknown command %r" % cmd)
            answer = {"result": fn(**req)}
        except Exception as e:  # noqa: BLE001 -- every error is an answer
            answer = {"error": "%s: %s" % (type(e).__name__, e), "type": type(e).__name__,
                      "traceback": traceback.format_exc(limit=6)}
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
