"""Fixtures shared by the integration tests: a PostgreSQL cluster that
preloads finalize, with the extension created in database postgres."""

import os
import sys

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
