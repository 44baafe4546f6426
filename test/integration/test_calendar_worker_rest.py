"""Calendar verdicts never lead the simulator's truth (calendar_worker.py), in the other zones."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from calendar_worker import check_zone  # noqa: E402
from worker_env import new_cluster  # noqa: E402


@pytest.fixture(scope="module")
def worker_pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


# Europe/London on every major (both DST transitions through the worker).
@pytest.mark.parametrize("zone", ['Asia/Kathmandu', 'Asia/Seoul', 'Australia/Lord_Howe',
                                  pytest.param('Europe/London', marks=pytest.mark.every_major)])
def test_calendar_verdicts_never_lead_the_simulators_truth(worker_pg, zone):
    check_zone(worker_pg, zone)
