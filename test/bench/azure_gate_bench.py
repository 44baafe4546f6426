"""The release gate on Azure Blob Storage (Azurite, test/lib/azurite.py) at N blobs, against a
Python reference of the same check run on the same container in the same run: azure-storage-blob's
own listing (list_blobs, flat, with metadata, leaving out hdi_isfolder placeholders) and a set
comparison of names and sizes with the manifest. ratio = reference time / gate time (above 1:
finalize is faster). Both sides must find exactly the same problems (a missing blob, a stray one, a
size mismatch are planted), or the benchmark fails.

Run with the lake environment's interpreter, the extension installed:
    $(test/peers/setup-venv lake)/bin/python test/bench/azure_gate_bench.py [--files 100000] [--trials 3]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time

from azure.storage.blob import BlobServiceClient

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from azurite import Azurite  # noqa: E402
from pgcluster import cluster_with_source  # noqa: E402

TABLE = "lake.orders"
PART = "day=27/hour=08"
PREFIX = f"{PART}/gen-1/"


def reference(container, manifest):
    """The check written the obvious way: the SDK's listing into a dict, then sets."""
    listing = {b.name: b.size for b in container.list_blobs(name_starts_with=PREFIX, include=["metadata"])
               if (b.metadata or {}).get("hdi_isfolder") != "true"}
    problems = [("missing_object", p) for p in manifest.keys() - listing.keys()]
    problems += [("stray_object", p) for p in listing.keys() - manifest.keys()]
    problems += [("size_mismatch", p) for p in manifest.keys() & listing.keys() if manifest[p] != listing[p]]
    return sorted(problems)


def upload(container, n):
    """n blobs of a few bytes under PREFIX (16 writers at once), a placeholder, and the manifest
    with three planted problems: one blob missing, one stray, one of another size."""
    names = [f"{PREFIX}d{i // 1000:03d}/part-{i:07d}.parquet" for i in range(n)]
    sizes = {name: 1 + i % 13 for i, name in enumerate(names)}
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda nm: container.upload_blob(nm, b"x" * sizes[nm]), names))
    container.upload_blob(f"{PREFIX}d000", b"", metadata={"hdi_isfolder": "true"})
    manifest = dict(sizes)
    manifest[f"{PREFIX}never-written.parquet"] = 5
    del manifest[names[n // 2]]
    manifest[names[-1]] += 1
    return manifest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100000)
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    with Azurite() as az:
        service = BlobServiceClient.from_connection_string(az.connection_string(), connection_verify=az.ca)
        container = service.get_container_client("lake")
        container.create_container()
        t0 = time.monotonic()
        manifest = upload(container, args.files)
        print(f"uploaded {args.files} blobs in {time.monotonic() - t0:.1f} s", flush=True)
        pg = cluster_with_source({"finalize.enabled": "off"})
        try:
            pg.sql("CREATE SERVER az FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
                   "container 'lake', endpoint %s, ca_file %s)", (az.endpoint, az.ca))
            pg.sql("CREATE USER MAPPING FOR postgres SERVER az OPTIONS (account_key %s)", (az.key,))
            pg.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (TABLE,))
            pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-27 06:00+00')",
                   (TABLE,))
            pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
                   "'2026-11-27 09:00+00', 3, 0, 0, '2026-11-27 08:01+00', '2026-11-27 08:59+00')", (TABLE,))
            pg.sql("SELECT finalize.register_partition(%s, %s, %s)", (TABLE, PART, PREFIX))
            m = json.dumps({"table": TABLE, "partition": PART, "generation": "gen-1", "store": "az",
                            "prefix": PREFIX, "period_start": "2026-11-27 08:00+00", "files": manifest})
            gate_times, ref_times = [], []
            for _ in range(args.trials):
                t0 = time.monotonic()
                (row,) = pg.sql("SELECT released, problems FROM finalize.release_gate(%s)", (m,))
                gate_times.append(time.monotonic() - t0)
                t0 = time.monotonic()
                want = reference(container, manifest)
                ref_times.append(time.monotonic() - t0)
                got = sorted((p["code"], p["path"]) for p in row[1])
                assert row[0] is False and got == want, (got[:5], want[:5])
            g, r = statistics.median(gate_times), statistics.median(ref_times)
            print(f"azure gate, {args.files} blobs: finalize {g:.2f} s, reference (azure-storage-blob "
                  f"list_blobs + sets) {r:.2f} s, ratio {r / g:.1f}x (median of {args.trials}; "
                  f"the same {len(want)} problems found)")
        finally:
            pg.cleanup()


if __name__ == "__main__":
    main()
