"""A CDC pipeline from SQL Server into a Delta table that never calls finalize: docs/delta.md's delta-rs
recipe (commit_batch) as a real process, in the lake virtual environment.

    $(test/peers/setup-venv lake)/bin/python delta_pipeline.py CONFIG.json

CONFIG: {"mssql": {"server", "port", "user", "password", "database"}, "capture_instance": "dbo_orders",
"start_lsn": "0x...", "table": "/path/or/uri", "interval": 0.2, "heartbeat": 0.5}.

Each round reads SQL Server's max LSN and the changes after the last LSN the table holds
(cdc.fn_cdc_get_all_changes_<instance>, through pymssql and its FreeTDS) and commits them in one
append whose commit carries finalize.lsn = that max LSN (one commit file: the rows and the LSN are
committed together or not at all). A round without changes commits an empty append at most every
heartbeat seconds, so that idle time becomes final too. The pipeline keeps no offset of its own: on
start it reads the newest finalize.lsn of the table's history, so a crash between two commits loses
and repeats nothing. One row per change: id, op (i, u, d), lsn (its commit LSN), seqval. It prints
one JSON line per commit on stdout and runs until killed."""
import json
import os
import sys
import time

import pyarrow as pa
import pymssql
from deltalake import DeltaTable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from peerlib import recipe  # noqa: E402

RECIPE = {}
exec(compile(recipe("delta-rs-commit", "python"), "docs/delta.md:delta-rs-commit", "exec"), RECIPE)
commit_batch = RECIPE["commit_batch"]
OPS = {1: "d", 2: "i", 4: "u"}
ARROW = pa.schema([pa.field("id", pa.int64()), pa.field("op", pa.string()), pa.field("lsn", pa.string()),
                   pa.field("seqval", pa.string())])


def hexlsn(b):
    return "0x" + bytes(b).hex().upper()


def lake_lsn(uri):
    """The newest finalize.lsn of the table's commits, or None (no table yet)."""
    try:
        history = DeltaTable(uri).history()
    except Exception:                   # no table yet
        return None
    return next((h["finalize.lsn"] for h in history if "finalize.lsn" in h), None)


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
    last = lake_lsn(cfg["table"]) or cfg["start_lsn"]
    print(json.dumps({"started_from": last}), flush=True)
    committed = time.monotonic()
    while True:
        to, rows = read_changes(conn, cfg["capture_instance"], last)
        if to is not None and (rows or time.monotonic() - committed >= cfg.get("heartbeat", 1.0)):
            commit_batch(cfg["table"], pa.Table.from_pylist(rows, schema=ARROW), to)
            last, committed = to, time.monotonic()
            print(json.dumps({"lsn": to, "rows": len(rows)}), flush=True)
        time.sleep(cfg.get("interval", 0.2))


if __name__ == "__main__":
    main()
