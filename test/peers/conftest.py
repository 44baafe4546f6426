"""Fixtures of the peer tests (test/peers/test_*.py), each run by the
interpreter of its tool's virtual environment (test/peers/setup-venv)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peerlib import Warehouse  # noqa: E402


@pytest.fixture(scope="module")
def warehouse():
    """One cluster per test module: finalize in database warehouse, its worker off."""
    w = Warehouse()
    yield w
    w.cleanup()
