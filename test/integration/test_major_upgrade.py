"""pg_upgrade of a cluster with finalize in use, as an operator runs it: the new major's package
(finalize built and installed for it too) and a new cluster initdb'ed with it that preloads
finalize, pg_upgrade --check and then pg_upgrade --link with both clusters stopped, the new one
started. Every tracked table, fact, verdict, consumer, loss, release, incident, webhook target and
user mapping is there; the worker resumes from the offsets recorded before and the verdict goes on
from where it stood. pg_upgrade's own servers run no finalize process.

FINALIZE_PG_UPGRADE_FROM and FINALIZE_PG_UPGRADE_TO name the pg_config of the old and the new
PostgreSQL (default for the old one: the suite's, PG_CONFIG or PG_BIN's). Without
FINALIZE_PG_UPGRADE_TO the test is skipped: it needs a newer major than the suite's."""

import os
import re
import subprocess

import pytest

from metadata_scenario import (ORDERS, check_continues, check_sequences, diff, populate, sequences, snapshot,
                               tools, worker_conf)
from pgcluster import PG_BIN, Cluster, _as_postgres
from worker_env import Env, sim_clock

FROM = os.environ.get("FINALIZE_PG_UPGRADE_FROM") or os.environ.get("PG_CONFIG") or os.path.join(PG_BIN, "pg_config")
TO = os.environ.get("FINALIZE_PG_UPGRADE_TO")

pytestmark = pytest.mark.skipif(not TO, reason="no newer PostgreSQL to upgrade to (FINALIZE_PG_UPGRADE_TO)")


def bindir(pg_config):
    return subprocess.run([pg_config, "--bindir"], check=True, capture_output=True, text=True).stdout.strip()


def major(pg_config):
    version = subprocess.run([pg_config, "--version"], check=True, capture_output=True, text=True).stdout
    return int(re.search(r"PostgreSQL (\d+)", version).group(1))


@pytest.fixture
def sim():
    s = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    yield s
    s.stop()


def fresh_cluster(old, new_bin):
    """A cluster of the new PostgreSQL, initdb'ed like the old one (pg_upgrade wants the same
    encoding, locale and data checksums; PostgreSQL 18's initdb turns checksums on by default),
    preloading finalize with the old one's settings, not started."""
    new = Cluster(conf=worker_conf(), bindir=new_bin)
    control = _as_postgres([f"{old.bin}/pg_controldata", old.data]).stdout
    checksums = re.search(r"Data page checksum version:\s+(\d+)", control).group(1) != "0"
    helps = subprocess.run([f"{new_bin}/initdb", "--help"], capture_output=True, text=True).stdout
    args = ["--data-checksums"] if checksums else (["--no-data-checksums"] if "--no-data-checksums" in helps else [])
    _as_postgres(["rm", "-rf", new.data])
    _as_postgres([f"{new_bin}/initdb", "-D", new.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--locale=C.UTF-8", "--no-sync"] + args)
    new.write_conf()
    return new


def pg_upgrade(old, new, *options):
    """pg_upgrade from old to new (both stopped), run in the new cluster's directory; the
    CompletedProcess."""
    run = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run(run + [f"{new.bin}/pg_upgrade", "-b", old.bin, "-B", new.bin, "-d", old.data,
                                 "-D", new.data, "-p", str(old.port), "-P", str(new.port), "-U", "postgres",
                                 "-s", new.dir] + list(options),
                          cwd=new.dir, capture_output=True, text=True)


def server_logs(new):
    """What pg_upgrade's own servers logged (pg_upgrade_output.d, kept with --retain)."""
    out = []
    for root, _, files in os.walk(os.path.join(new.data, "pg_upgrade_output.d")):
        out += [open(os.path.join(root, f), errors="replace").read() for f in files if f.endswith("server.log")]
    return "\n".join(out)


def test_pg_upgrade_keeps_every_object_and_the_worker_resumes_from_its_offsets(sim, store):
    old_bin, new_bin = bindir(FROM), bindir(TO)
    old = Cluster(conf=worker_conf(), bindir=old_bin)
    new = None
    try:
        old.start()
        old.sql("CREATE EXTENSION finalize")
        populate(old, sim, store)
        before, ids = snapshot(old), sequences(old)
        version = old.sql("SELECT extversion FROM pg_extension WHERE extname = 'finalize'")
        last_fact = before["facts"][-1][0]
        old.stop()

        new = fresh_cluster(old, new_bin)
        # pg_upgrade's servers log every background process they start (DEBUG1).
        for cluster in (old, new):
            cluster.set(log_min_messages="debug1")
        checked = pg_upgrade(old, new, "--check")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        done = pg_upgrade(old, new, "--link", "--retain")
        logs = server_logs(new)
        if done.returncode != 0 and 'unrecognized parameter "pg_attver"' in logs:
            pytest.skip(f"pg_upgrade from {FROM} to {TO} fails for any table, with or without finalize: the old "
                        "server stamps every column with a pg_attver option the new one rejects (docs/upgrading.md)")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "starting background worker process" in logs or "database system is ready" in logs, logs
        assert not re.search(r'background worker process "finalize', logs), \
            "finalize's processes ran in pg_upgrade's servers:\n" + "\n".join(
                line for line in logs.splitlines() if "finalize" in line)
        del new.conf["log_min_messages"]
        new.write_conf()
        new.start()
        env = Env(new)
        env.wait_caught_up(ORDERS, sim)
        after = snapshot(new)
        assert after == before, diff(before, after)
        check_sequences(ids, sequences(new))
        assert new.sql("SELECT extversion FROM pg_extension WHERE extname = 'finalize'") == version
        check_continues(env, sim, last_fact)
    finally:
        old.cleanup()
        if new is not None:
            new.cleanup()
