"""Runs the C unit tests of the pure modules (test/unit/*.c, `make unitcheck`):
each is built by the Makefile against the extension's sources and
PostgreSQL's headers, and every TAP line it prints becomes a pytest case."""

import fcntl
import glob
import os
import subprocess

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def build_and_run(name):
    """Builds test/unit/<name> with the Makefile's rule (PGXS flags, no
    hard-coded paths) and runs it. Every pytest-xdist worker collects this
    file, so the build and the run hold a lock: one worker's link must not
    replace a program another is running."""
    target = os.path.join("test", "unit", name[:-2])
    make = ["make", "-s", "-C", TOP, target]
    if os.environ.get("PG_CONFIG"):
        make.append("PG_CONFIG=" + os.environ["PG_CONFIG"])
    with open(os.path.join(TOP, "test", "unit", ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(make, check=True)
        return subprocess.run([os.path.join(TOP, target)], capture_output=True, text=True)


def cases():
    for path in sorted(glob.glob(os.path.join(TOP, "test", "unit", "test_*.c"))):
        name = os.path.basename(path)
        run = build_and_run(name)
        lines = [l for l in run.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
        assert lines, f"{name} printed no results: {run.stdout}{run.stderr}"
        for line in lines:
            yield pytest.param(line, id=f"{name}:{line.split(' - ', 1)[-1]}")


# On every major (test/run-tests lane): the pure modules build against each one's headers.
@pytest.mark.every_major
@pytest.mark.parametrize("line", list(cases()))
def test_unit(line):
    assert line.startswith("ok "), line
