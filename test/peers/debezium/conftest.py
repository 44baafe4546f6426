"""Hooks of the Debezium pipeline test."""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Remembers on the test item whether its call failed (the fixture keeps the work directory then)."""
    outcome = yield
    if call.when == "call":
        item.failed_call = outcome.get_result().failed
