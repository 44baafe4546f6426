"""Fixtures: simulators on free ports (test/lib/simproc.py) and raw TDS access."""
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(TESTS, "..", "..", "lib"))
sys.path.insert(0, TESTS)

from simproc import Simulator, freetds_conf  # noqa: E402

START = "2026-03-01T00:00:00Z"


@pytest.fixture(scope="session", autouse=True)
def _freetds(tmp_path_factory):
    """A private freetds.conf (TDS 7.4, no encryption, UTF-8) for every FreeTDS client."""
    os.environ["FREETDSCONF"] = freetds_conf(str(tmp_path_factory.mktemp("freetds")))
    yield


@pytest.fixture
def make_sim():
    """Factory: make_sim(**options) -> started Simulator; all are stopped after the test."""
    started = []

    def make(**options):
        options.setdefault("clock", "sim")
        options.setdefault("start_time", START)
        options.setdefault("cleanup_time", "")
        s = Simulator(**options).start()
        started.append(s)
        return s
    yield make
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def sim():
    """A shared simulated-clock simulator for read-mostly tests of one module."""
    s = Simulator(clock="sim", start_time=START, cleanup_time="").start()
    yield s
    s.stop()

