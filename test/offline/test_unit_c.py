"""Runs the C unit tests of the pure modules (test/unit/*.c, `make unitcheck`):
each is built by the Makefile against the extension's sources and
PostgreSQL's headers, and every TAP line it prints becomes a pytest case."""

import atexit
import fcntl
import glob
import json
import os
import shutil
import subprocess
import tempfile

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def build_and_run(name):
    """Builds test/unit/<name> with the Makefile's rule (PGXS flags, no
    hard-coded paths) and runs it. Every pytest-xdist worker collects this
    file, so the build and the run hold a lock: one worker's link must not
    replace a program another is running. The first worker of a session
    keeps what the program printed for the others (session_output): six
    workers ran every program six times."""
    target = os.path.join("test", "unit", name[:-2])
    make = ["make", "-s", "-C", TOP, target]
    if os.environ.get("PG_CONFIG"):
        make.append("PG_CONFIG=" + os.environ["PG_CONFIG"])
    with open(os.path.join(TOP, "test", "unit", ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(make, check=True)
        return session_output(os.path.join(TOP, target))


def session_output(program):
    """What the program prints (stdout, stderr), run once per pytest-xdist
    session (PYTEST_XDIST_TESTRUNUID, the same in each of its workers) and
    per build of it (its mtime and size): kept in a folder of the session
    under TMPDIR, which the worker that ran it removes when it ends (every
    worker collects at its start). Called with the build lock held."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not uid:
        run = subprocess.run([program], capture_output=True, text=True)
        return run.stdout, run.stderr
    folder = os.path.join(tempfile.gettempdir(), "finalize-unit-" + uid)
    st = os.stat(program)
    kept = os.path.join(folder, "%s.%d.%d.json" % (os.path.basename(program), st.st_mtime_ns, st.st_size))
    try:
        with open(kept) as f:
            return tuple(json.load(f))
    except (OSError, ValueError):
        pass
    run = subprocess.run([program], capture_output=True, text=True)
    os.makedirs(folder, exist_ok=True)
    with open(kept + ".part", "w") as f:
        json.dump([run.stdout, run.stderr], f)
    os.replace(kept + ".part", kept)
    atexit.register(shutil.rmtree, folder, True)
    return run.stdout, run.stderr


def cases():
    for path in sorted(glob.glob(os.path.join(TOP, "test", "unit", "test_*.c"))):
        name = os.path.basename(path)
        stdout, stderr = build_and_run(name)
        lines = [l for l in stdout.splitlines() if l.startswith(("ok ", "not ok "))]
        assert lines, f"{name} printed no results: {stdout}{stderr}"
        for line in lines:
            yield pytest.param(line, id=f"{name}:{line.split(' - ', 1)[-1]}")


# On every major (test/run-tests lane): the pure modules build against each one's headers.
@pytest.mark.every_major
@pytest.mark.parametrize("line", list(cases()))
def test_unit(line):
    assert line.startswith("ok "), line
