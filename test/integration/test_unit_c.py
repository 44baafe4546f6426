"""Runs the C unit tests of the pure modules (test/unit/*.c): each is built
against the extension's sources and PostgreSQL's headers, and every TAP line
it prints becomes a pytest case."""

import glob
import os
import subprocess
import tempfile

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PG_CONFIG = os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")

# Which extension sources each unit test links with.
SOURCES = {"test_plan.c": ["src/worker/plan.c", "src/common/lsn.c"]}


def build_and_run(name):
    includedir = subprocess.run([PG_CONFIG, "--includedir-server"], capture_output=True, text=True,
                                check=True).stdout.strip()
    libdir = subprocess.run([PG_CONFIG, "--libdir"], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, name[:-2])
        subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-I", os.path.join(TOP, "src"), "-I", includedir,
                        "-o", exe, os.path.join(TOP, "test", "unit", name)]
                       + [os.path.join(TOP, s) for s in SOURCES[name]]
                       + ["-L" + libdir, "-L/usr/lib/postgresql/15/lib", "-lpgport"],
                       check=True)
        return subprocess.run([exe], capture_output=True, text=True)


def cases():
    for path in sorted(glob.glob(os.path.join(TOP, "test", "unit", "test_*.c"))):
        name = os.path.basename(path)
        run = build_and_run(name)
        lines = [l for l in run.stdout.splitlines() if l.startswith(("ok ", "not ok "))]
        assert lines, f"{name} printed no results: {run.stdout}{run.stderr}"
        for line in lines:
            yield pytest.param(line, id=f"{name}:{line.split(' - ', 1)[-1]}")


@pytest.mark.parametrize("line", list(cases()))
def test_unit(line):
    assert line.startswith("ok "), line
