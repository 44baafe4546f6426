"""A CDC pipeline from SQL Server into an Iceberg table that never calls finalize: the docs' pyiceberg
recipe (docs/lake.md, "Writing the LSN with each commit") as a real process.

    $(test/peers/setup-venv iceberg)/bin/python cdc_pipeline.py CONFIG.json

CONFIG: {"mssql": {"server", "port", "user", "password", "database"}, "capture_instance": "dbo_orders",
"start_lsn": "0x...", "catalog": {"uri", "warehouse"}, "table": "ns.orders", "interval": 0.3,
"heartbeat": 1.0}.

Each round reads SQL Server's max LSN and the changes after the last LSN the lake holds
(cdc.fn_cdc_get_all_changes_<instance>, through pymssql and its FreeTDS), and commits them to the
Iceberg table's main branch in one append whose snapshot summary carries finalize.lsn = that max LSN:
the commit and the property are one atomic metadata swap, and every change with a commit LSN at or
below max LSN has been read (a transaction's changes share one commit LSN, and the range is read to
max LSN inclusive). A round without changes commits an empty append at most every heartbeat seconds,
so that idle time becomes final too. The pipeline keeps no offset of its own: on start it reads the
newest finalize.lsn on main's ancestry, so a crash between two commits loses and repeats nothing.
One row per change: id, op (i, u, d), lsn (its commit LSN), seqval. It prints one JSON line per commit
on stdout and runs until killed."""
import json
import sys
import time

import pyarrow as pa
import pymssql
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

PROPERTY = "finalize.lsn"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "op", StringType(), required=False),
                NestedField(3, "lsn", StringType(), required=False),
                NestedField(4, "seqval", StringType(), required=False))
ARROW = pa.schema([pa.field("id", pa.int64()), pa.field("op", pa.string()), pa.field("lsn", pa.string()),
                   pa.field("seqval", pa.string())])
OPS = {1: "d", 2: "i", 4: "u"}


def hexlsn(b):
    return "0x" + bytes(b).hex().upper()


def lake_lsn(table):
    """The newest finalize.lsn on the ancestry of main's head, or None."""
    snap = table.current_snapshot()
    while snap is not None:
        props = snap.summary.additional_properties if snap.summary is not None else {}
        if PROPERTY in props:
            return props[PROPERTY]
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return None


def open_table(cfg):
    cat = load_catalog("rest", **cfg["catalog"])
    try:
        return cat.load_table(cfg["table"])
    except NoSuchTableError:
        ns = cfg["table"].rsplit(".", 1)[0]
        if (ns,) not in cat.list_namespaces():
            cat.create_namespace(ns)
        return cat.create_table(cfg["table"], schema=SCHEMA)


def read_changes(conn, instance, after_hex):
    """(max LSN, [rows]) of the changes with commit LSN in (after, max LSN]."""
    cur = conn.cursor()
    cur.execute("SELECT sys.fn_cdc_get_max_lsn()")
    to = cur.fetchone()[0]
    if to is None or hexlsn(to) <= after_hex:
        return None, []
    cur.execute("SELECT sys.fn_cdc_increment_lsn(%s)", (bytes.fromhex(after_hex[2:]),))
    frm = cur.fetchone()[0]
    cur.execute("SELECT __$start_lsn, __$seqval, __$operation, order_id FROM cdc.fn_cdc_get_all_changes_%s(%%s, %%s, "
                "N'all') ORDER BY __$start_lsn, __$seqval" % instance, (frm, to))
    rows = [{"id": r[3], "op": OPS[r[2]], "lsn": hexlsn(r[0]), "seqval": hexlsn(r[1])} for r in cur.fetchall()]
    return hexlsn(to), rows


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    m = cfg["mssql"]
    conn = pymssql.connect(server=m["server"], port=m["port"], user=m["user"], password=m["password"],
                           database=m["database"], autocommit=True)
    table = open_table(cfg)
    last = lake_lsn(table) or cfg["start_lsn"]
    print(json.dumps({"started_from": last}), flush=True)
    committed = time.monotonic()
    while True:
        to, rows = read_changes(conn, cfg["capture_instance"], last)
        if to is not None and (rows or time.monotonic() - committed >= cfg.get("heartbeat", 1.0)):
            batch = pa.Table.from_pylist(rows, schema=ARROW)
            table.append(batch, snapshot_properties={PROPERTY: to})
            last, committed = to, time.monotonic()
            print(json.dumps({"lsn": to, "rows": len(rows), "snapshot": table.current_snapshot().snapshot_id}),
                  flush=True)
        time.sleep(cfg.get("interval", 0.3))


if __name__ == "__main__":
    main()
