"""Fixtures shared by the integration tests: a PostgreSQL cluster that
preloads finalize, with the extension created in database postgres; and for
the worker tests (whose modules define their own pg), an Env on it and a
simulator on a simulated clock starting 2026-11-02 08:59 UTC."""

import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from pgcluster import Cluster  # noqa: E402


@pytest.fixture(scope="session")
def pg():
    """One cluster for the tests that do not restart or crash it."""
    cluster = Cluster()
    cluster.start()
    cluster.sql("CREATE EXTENSION finalize")
    yield cluster
    cluster.cleanup()


@pytest.fixture
def env(pg):
    """Sources and tracked tables on pg, removed after the test."""
    from worker_env import Env
    e = Env(pg)
    yield e
    e.cleanup()


@pytest.fixture
def sim():
    """A simulator whose clock stands still until the test advances it."""
    from worker_env import sim_clock
    s = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    yield s
    s.stop()


@pytest.fixture
def store():
    """A local (file://) store directory the server, running as postgres, can read."""
    root = tempfile.mkdtemp(prefix="finalize-store.")
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)
