#!/usr/bin/python3
"""Benchmarks of the release gate's comparison, each against a plain Python
set-difference reference of the same checks, run on the same inputs in the
same run (ratio = reference time / finalize time; above 1 means finalize is
faster):

  memory   finalize.compare_inventories(manifest_files, listing, prefix) on
           jsonb inputs stored in a table (STORAGE EXTERNAL, as a large
           manifest would be), versus the reference on the same Python dicts
  files    finalize.release_gate(manifest) on a file:// store (walk, sizes,
           catalog view, facts, storing the attempt with its manifest and
           listing), versus the reference parsing the same manifest text,
           walking the same directory with os.scandir and comparing

Every input holds a few planted problems (missing, stray, size and checksum
mismatches, a path outside the prefix); both sides must find exactly the
same ones, or the benchmark fails. Time per file at each size shows the
growth (O(F): the per-file time stays flat); --large N adds a size where
only the gate runs (the reference would need gigabytes), and the ratio of
its per-file time to the smallest size's is printed.

Two floors are measured on the same inputs, since the gate cannot go below
them: PostgreSQL parsing the manifest's text into jsonb (the argument, before
the gate runs) and `find -printf %s` walking the store (one stat per file,
the kernel's name lookup). Peak backend memory is the largest private
memory (RssAnon of /proc/<pid>/status, sampled every 10 ms) of the backend
during one gate call, on a fresh connection, and its VmHWM (which also
counts the shared buffers it touched).

Stores are made of sparse files on a tmpfs: /dev/shm when it has the
inodes, else one the benchmark mounts (as root) for the run.

  streamed release_gate with "files_location": the manifest's files as a JSON
           Lines object in the same file:// store (read streamed; each side
           spooled while it comes in path order, sorted by tuplesort within
           work_mem once it does not; merged), versus the reference reading
           the same JSON Lines file and walking the store; --large N adds a
           size where only the gate runs (10,000,000 works: nothing is passed
           as one value). The walk floor (find) is measured here too: the
           kernel's name lookup per file grows with the number of dentries
           (a dentry hash of 131,072 buckets on the 2-vCPU test VM holds
           chains of ~80 at 10M files), so growth is also given above it

Run as root after the extension is installed (test/bench/gate.sh does both):
    test/bench/gate_bench.py [memory] [files] [streamed] [--streamed-sizes 10000,100000,1000000] [--memory-sizes 10000,100000,1000000]
                             [--file-sizes 10000,100000,1000000] [--large 3000000] [--trials 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from pgcluster import cluster_with_source  # noqa: E402

PREFIX = "day=27/hour=08/gen-1/"


def reference(manifest, listing, prefix):
    """The same checks as the gate's comparison, written the obvious way with
    sets: (code, path) pairs, sorted like the gate's problems."""
    problems = []
    expected = {p for p in manifest if p.startswith(prefix)}
    problems += [("wrong_prefix", p) for p in manifest if not p.startswith(prefix)]
    problems += [("missing_object", p) for p in expected - listing.keys()]
    problems += [("stray_object", p) for p in listing.keys() - expected]
    for p in expected & listing.keys():
        m, o = manifest[p], listing[p]
        msize, metag = (m["size"], m.get("etag")) if isinstance(m, dict) else (m, None)
        osize, oetag = (o["size"], o.get("etag")) if isinstance(o, dict) else (o, None)
        if msize != osize:
            problems.append(("size_mismatch", p))
        elif metag is not None and oetag is not None and metag.strip('"').lower() != oetag.strip('"').lower():
            problems.append(("checksum_mismatch", p))
    problems.sort(key=lambda x: (x[1], x[0]))
    return problems


def inputs(n):
    """A manifest and a listing of n files with one problem of each kind."""
    manifest = {}
    for i in range(n):
        path = f"{PREFIX}part-{i:07d}.parquet"
        manifest[path] = {"size": 1000 + i % 5000, "etag": "%032x" % (i * 7919)} if i % 10 == 0 else 1000 + i % 5000
    listing = {p: (dict(v, etag='"%s"' % v["etag"]) if isinstance(v, dict) else v) for p, v in manifest.items()}
    del listing[f"{PREFIX}part-{n // 2:07d}.parquet"]                        # missing
    listing[f"{PREFIX}part-{n // 3:07d}.parquet (copy)"] = 17                 # stray
    listing[f"{PREFIX}part-{n // 5 + 1:07d}.parquet"] = 1                     # size
    listing[f"{PREFIX}part-{(n // 70) * 10:07d}.parquet"]["etag"] = '"%032x"' % 1   # checksum
    manifest["day=27/hour=09/gen-1/part-0000000.parquet"] = 5                 # wrong prefix
    return manifest, listing


def best(fn, trials):
    times = []
    result = None
    for _ in range(trials):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times), result


def bench_memory(pg, sizes, trials):
    print("== compare_inventories: in-memory listing (jsonb in a table, STORAGE EXTERNAL) ==")
    print(f"{'files':>10} {'finalize s':>11} {'reference s':>12} {'ratio':>7} {'finalize us/file':>17}")
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS bench_inputs")
    cur.execute("CREATE TABLE bench_inputs (manifest jsonb, listing jsonb)")
    cur.execute("ALTER TABLE bench_inputs ALTER manifest SET STORAGE EXTERNAL, ALTER listing SET STORAGE EXTERNAL")
    per_file = []
    for n in sizes:
        manifest, listing = inputs(n)
        cur.execute("TRUNCATE bench_inputs")
        cur.execute("INSERT INTO bench_inputs VALUES (%s, %s)", (json.dumps(manifest), json.dumps(listing)))

        def run_c():
            cur.execute("SELECT finalize.compare_inventories(manifest, listing, %s) FROM bench_inputs", (PREFIX,))
            return sorted(((p["code"], p["path"]) for p in cur.fetchone()[0]), key=lambda x: (x[1], x[0]))

        c_best, c_med, c_result = best(run_c, trials)
        r_best, r_med, r_result = best(lambda: reference(manifest, listing, PREFIX), trials)
        if c_result != r_result:
            raise SystemExit(f"finalize and the reference disagree at {n} files:\n{c_result}\n{r_result}")
        assert len(c_result) == 5, c_result
        per_file.append(c_best / n * 1e6)
        print(f"{n:>10} {c_best:>11.4f} {r_best:>12.4f} {r_best / c_best:>7.2f} {per_file[-1]:>17.3f}"
              f"   (medians {c_med:.4f} / {r_med:.4f}, {len(c_result)} problems agree)")
    if len(per_file) > 1:
        print(f"growth: time per file at {sizes[-1]} / at {sizes[0]} = {per_file[-1] / per_file[0]:.2f} "
              f"(1.00 is linear)")
    cur.execute("DROP TABLE bench_inputs")
    conn.close()


def make_store(root, n):
    """n sparse files under the prefix (1,000 per directory), one of each
    problem; the manifest (sizes only: the walk needs no checksums)."""
    manifest = {}
    for i in range(n):
        rel = f"{PREFIX}b={i // 1000:04d}/part-{i:07d}.parquet"
        manifest[rel] = 1000 + i % 5000
    for b in range((n + 999) // 1000):
        d = os.path.join(root, f"{PREFIX}b={b:04d}")
        os.makedirs(d, exist_ok=True)
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(b * 1000, min(n, b * 1000 + 1000)):
                fd = os.open(f"part-{i:07d}.parquet", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)
                os.ftruncate(fd, 1000 + i % 5000)
                os.close(fd)
        finally:
            os.close(dfd)
    keys = sorted(manifest)
    os.unlink(os.path.join(root, keys[n // 2]))                               # missing
    with open(os.path.join(root, keys[n // 3] + " (copy)"), "wb") as f:       # stray
        f.write(b"x" * 17)
    os.truncate(os.path.join(root, keys[n // 5 + 1]), 1)                      # size
    manifest["day=27/hour=09/gen-1/part-0000000.parquet"] = 5                 # wrong prefix
    for dirpath, dirnames, _ in os.walk(root):
        os.chmod(dirpath, 0o755)
    return manifest


def walk(root, prefix):
    """The reference's listing: every file under the prefix with its size."""
    out = {}
    base = os.path.join(root, prefix)
    stack = [base]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    out[os.path.relpath(e.path, root)] = e.stat(follow_symlinks=False).st_size
    return out


class PeakMemory:
    """The peak private memory (RssAnon, sampled) and VmHWM of a backend
    during a block, in MB."""

    def __init__(self, pid):
        self.pid, self.peak_anon, self.hwm = pid, 0, 0
        self._stop = threading.Event()

    def _read(self):
        out = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("RssAnon", "VmHWM"):
                    out[k] = int(v.split()[0]) // 1024
        return out

    def _sample(self):
        while not self._stop.wait(0.01):
            self.peak_anon = max(self.peak_anon, self._read().get("RssAnon", 0))

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        last = self._read()
        self.peak_anon = max(self.peak_anon, last.get("RssAnon", 0))
        self.hwm = last.get("VmHWM", 0)


def store_base(n):
    """A tmpfs with room for n files: /dev/shm, or one mounted for the run
    (root only; returns the mount point to unmount, or None)."""
    st = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    if st is not None and st.f_favail > n + n // 500 + 1000:
        return "/dev/shm", None
    if os.geteuid() != 0:
        raise SystemExit(f"{n} files need a tmpfs with more inodes than /dev/shm has: run as root")
    mnt = tempfile.mkdtemp(prefix="finalize-bench-tmpfs.")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=32g,nr_inodes={n + n // 100 + 10000},mode=755",
                    "finalize-bench", mnt], check=True)
    return mnt, mnt


# The partition's period: final, so that the gate's finality check passes and
# what it reports is the comparison measured.
PERIOD = "2026-11-27T08:00:00Z"


def final_until(pg, table):
    """Records the facts that make the partition's hour final."""
    pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-27 06:00+00')", (table,))
    pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
           "'2026-11-27 10:00+00')", (table,))


def bench_files(pg, sizes, large, trials):
    print("== release_gate on a file:// store (walk + compare + catalog + stored attempt) ==")
    print("   floors: parse = the manifest text into jsonb (PostgreSQL, before the gate runs); "
          "walk = find -printf %s on the store")
    print(f"{'files':>10} {'finalize s':>11} {'reference s':>12} {'ratio':>7} {'us/file':>8} "
          f"{'parse us/f':>11} {'walk us/f':>10} {'rest us/f':>10} {'peak MB':>8} {'VmHWM MB':>9}")
    pg.sql("SELECT finalize.track_table('bench.orders', 'src', 'dbo.orders')")
    final_until(pg, 'bench.orders')
    pg.sql("SELECT finalize.register_partition('bench.orders', 'day=27/hour=08', %s)", (PREFIX,))
    per_file = {}
    for n in sizes + ([large] if large else []):
        base, mounted = store_base(n)
        root = tempfile.mkdtemp(prefix="finalize-bench-store.", dir=base)
        os.chmod(root, 0o755)
        try:
            t = time.perf_counter()
            manifest = make_store(root, n)
            setup = time.perf_counter() - t
            text = json.dumps({"table": "bench.orders", "partition": "day=27/hour=08", "generation": "gen-1",
                               "period_start": PERIOD,
                               "store": "file://" + root, "prefix": PREFIX, "files": manifest})
            del manifest
            peak = [0, 0]

            def run_c():
                conn = pg.connect()
                cur = conn.cursor()
                cur.execute("SELECT pg_backend_pid()")
                with PeakMemory(cur.fetchone()[0]) as mem:
                    cur.execute("SELECT problems FROM finalize.release_gate(%s)", (text,))
                    problems = cur.fetchone()[0]
                peak[:] = [max(peak[0], mem.peak_anon), max(peak[1], mem.hwm)]
                conn.close()
                return sorted(((p["code"], p["path"]) for p in problems if p["code"] != "catalog_mismatch"),
                              key=lambda x: (x[1], x[0]))

            def run_ref():
                m = json.loads(text)["files"]
                return reference(m, walk(root, PREFIX), PREFIX)

            conn = pg.connect()
            cur = conn.cursor()
            parse, _, _ = best(lambda: cur.execute("SELECT jsonb_typeof(%s::jsonb)", (text,)), trials)
            conn.close()
            find, _, _ = best(lambda: subprocess.run(["find", root, "-type", "f", "-printf", "%s\n"],
                                                     stdout=subprocess.DEVNULL, check=True), trials)
            c_best, c_med, c_result = best(run_c, trials)
            assert len(c_result) == 4, c_result
            if n != large:
                r_best, r_med, r_result = best(run_ref, trials)
                if c_result != r_result:
                    raise SystemExit(f"finalize and the reference disagree at {n} files:\n{c_result}\n{r_result}")
                ref = f"{r_best:>12.3f} {r_best / c_best:>7.2f}"
            else:
                ref = f"{'-':>12} {'-':>7}"
            per_file[n] = c_best / n * 1e6
            print(f"{n:>10} {c_best:>11.3f} {ref} {per_file[n]:>8.3f} {parse / n * 1e6:>11.3f} "
                  f"{find / n * 1e6:>10.3f} {(c_best - parse - find) / n * 1e6:>10.3f} {peak[0]:>8} {peak[1]:>9}"
                  f"   (medians {c_med:.3f}; store built in {setup:.1f} s)")
        finally:
            shutil.rmtree(root, ignore_errors=True)
            if mounted:
                subprocess.run(["umount", mounted], check=False)
                os.rmdir(mounted)
    first = min(per_file)
    for n in sorted(per_file)[1:]:
        print(f"growth: time per file at {n} / at {first} = {per_file[n] / per_file[first]:.2f} (1.00 is linear)")
    (attempts, stored) = pg.sql("SELECT count(*), pg_size_pretty(sum(pg_column_size(manifest) + "
                                "pg_column_size(listing_delta) + pg_column_size(report))) FROM finalize.release")[0]
    print(f"({attempts} attempts stored: {stored} with their manifests, listings and reports)")


def bench_streamed(pg, sizes, large, trials):
    print("== release_gate with files_location on a file:// store (JSON Lines manifest, spooled or sorted, merged) ==")
    (wm,), = pg.sql("SHOW work_mem")
    print(f"   work_mem = {wm} (each side's spool or sort); --large runs once, the other sizes --trials times")
    print("   floor: walk = find -printf %s on the same store (one stat per file: the kernel's name lookup, "
          "which grows with the dentry cache); above = finalize's own time per file above it")
    print(f"{'files':>10} {'finalize s':>11} {'reference s':>12} {'ratio':>7} {'us/file':>8} "
          f"{'walk us/f':>10} {'above us/f':>11} {'peak MB':>8} {'VmHWM MB':>9}")
    above = {}
    pg.sql("SELECT finalize.track_table('bench.streamed', 'src', 'dbo.orders')")
    final_until(pg, 'bench.streamed')
    pg.sql("SELECT finalize.register_partition('bench.streamed', 'day=27/hour=08', %s)", (PREFIX,))
    per_file = {}
    for n in sizes + ([large] if large else []):
        base, mounted = store_base(n)
        root = tempfile.mkdtemp(prefix="finalize-bench-store.", dir=base)
        os.chmod(root, 0o755)
        try:
            t = time.perf_counter()
            manifest = make_store(root, n)
            key = "day=27/hour=08/gen-1.files.jsonl"
            with open(os.path.join(root, key), "w") as f:
                for path, size in manifest.items():
                    f.write('{"path": "%s", "size": %d}\n' % (path, size))
            os.chmod(os.path.join(root, key), 0o644)
            del manifest
            setup = time.perf_counter() - t
            text = json.dumps({"table": "bench.streamed", "partition": "day=27/hour=08", "generation": "gen-1",
                               "period_start": PERIOD,
                               "store": "file://" + root, "prefix": PREFIX,
                               "files_location": f"file://{root}/{key}"})
            peak = [0, 0]

            def run_c():
                conn = pg.connect()
                cur = conn.cursor()
                cur.execute("SELECT pg_backend_pid()")
                with PeakMemory(cur.fetchone()[0]) as mem:
                    cur.execute("SELECT problems FROM finalize.release_gate(%s)", (text,))
                    problems = cur.fetchone()[0]
                peak[:] = [max(peak[0], mem.peak_anon), max(peak[1], mem.hwm)]
                conn.close()
                return sorted(((p["code"], p["path"]) for p in problems if p["code"] != "catalog_mismatch"),
                              key=lambda x: (x[1], x[0]))

            def run_ref():
                m = {}
                with open(os.path.join(root, key)) as f:
                    for line in f:
                        e = json.loads(line)
                        m[e["path"]] = e["size"] if "etag" not in e else {"size": e["size"], "etag": e["etag"]}
                return reference(m, walk(root, PREFIX), PREFIX)

            # The large size runs once (minutes): --trials is for the small ones, whose fixed cost varies.
            t_n = 1 if n == large else trials
            find, _, _ = best(lambda: subprocess.run(["find", root, "-type", "f", "-printf", "%s\n"],
                                                     stdout=subprocess.DEVNULL, check=True), t_n)
            c_best, c_med, c_result = best(run_c, t_n)
            assert len(c_result) == 4, c_result
            if n != large or n <= 1000000:
                r_best, r_med, r_result = best(run_ref, t_n)
                if c_result != r_result:
                    raise SystemExit(f"finalize and the reference disagree at {n} files:\n{c_result}\n{r_result}")
                ref = f"{r_best:>12.3f} {r_best / c_best:>7.2f}"
            else:
                ref = f"{'-':>12} {'-':>7}"
            per_file[n] = c_best / n * 1e6
            above[n] = (c_best - find) / n * 1e6
            print(f"{n:>10} {c_best:>11.3f} {ref} {per_file[n]:>8.3f} {find / n * 1e6:>10.3f} {above[n]:>11.3f} "
                  f"{peak[0]:>8} {peak[1]:>9}   (medians {c_med:.3f}; store built in {setup:.1f} s)", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
            if mounted:
                subprocess.run(["umount", mounted], check=False)
                os.rmdir(mounted)
    first = min(per_file)
    for n in sorted(per_file)[1:]:
        print(f"growth: time per file at {n} / at {first} = {per_file[n] / per_file[first]:.2f} (1.00 is linear); "
              f"above the walk floor {above[n] / above[first]:.2f}")
    (size,), = pg.sql("SELECT pg_size_pretty(max(pg_column_size(manifest) + pg_column_size(listing_delta) + "
                      "pg_column_size(report))::bigint) FROM finalize.release r JOIN finalize.tracked_table t USING (table_id) "
                      "WHERE t.table_name = 'bench.streamed'")
    print(f"(largest stored streamed attempt: {size})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="*", help="memory, files (default: both)")
    ap.add_argument("--memory-sizes", default="10000,100000,1000000")
    ap.add_argument("--file-sizes", default="10000,100000,1000000")
    ap.add_argument("--large", type=int, default=0,
                    help="add a file:// size where only the gate runs, e.g. 3000000 (slow to build; a jsonb "
                         "manifest holds at most about 4 million such files: 10 million cannot be passed)")
    ap.add_argument("--streamed-sizes", default="10000,100000,1000000")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    what = args.what or ["memory", "files"]
    for w in what:
        if w not in ("memory", "files", "streamed"):
            ap.error(f"unknown benchmark {w!r}: choose memory, files or streamed")
    pg = cluster_with_source({"finalize.enabled": "off", "shared_buffers": "512MB", "work_mem": "64MB"})
    try:
        if "memory" in what:
            bench_memory(pg, [int(x) for x in args.memory_sizes.split(",")], args.trials)
        if "files" in what:
            bench_files(pg, [int(x) for x in args.file_sizes.split(",")], args.large, args.trials)
        if "streamed" in what:
            bench_streamed(pg, [int(x) for x in args.streamed_sizes.split(",")], args.large, args.trials)
    finally:
        pg.cleanup()


if __name__ == "__main__":
    main()
