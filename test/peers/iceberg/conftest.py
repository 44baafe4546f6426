"""Fixtures of the Iceberg tests (test/peers/iceberg/test_*.py, run by /usr/bin/python3's pytest).

    catalog      (module)   a real RESTCatalogServer (catalog.py) on 127.0.0.1, stopped after the module
    writer       (module)   a pyiceberg writer (writer.py in the venv of setup-venv iceberg) on that catalog
    venv_python  (session)  that venv's interpreter (installed on first use, cached)
    namespace    (module)   "ns", created once per module's catalog
    table        (function) a new table "ns.<test name>" with writer.py's default schema
    proxy        (function) a FaultProxy in front of the catalog (stopped after the test)

A module's tests share one catalog, so each test makes its own table (the table fixture) rather than
counting on a clean catalog. The catalog's log is kept in pytest's temporary directory and its tail is
printed when a test of the module failed."""
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import catalog as catalog_lib  # noqa: E402
import writer_client  # noqa: E402
from fault_proxy import FaultProxy  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Remembers on the module whether one of its tests failed (the catalog fixture prints its log then)."""
    outcome = yield
    if outcome.get_result().failed:
        item.module.iceberg_failed = True


@pytest.fixture(scope="session")
def venv_python():
    return writer_client.venv_python()


@pytest.fixture(scope="module")
def catalog(request, tmp_path_factory):
    cat = catalog_lib.start_catalog(str(tmp_path_factory.mktemp("iceberg")))
    sys.stderr.write("\n# iceberg catalog %s up in %.2fs (%s)\n" % (cat.uri, cat.start_seconds, cat.log_path))
    yield cat
    alive = cat.alive()
    cat.stop()
    if getattr(request.module, "iceberg_failed", False) or not alive:
        sys.stderr.write("\n# %s%s ends:\n%s\n" % (cat.log_path, "" if alive else " (the server had died)",
                                                  catalog_lib.tail(cat.log_path)))


@pytest.fixture(scope="module")
def writer(catalog, venv_python):
    w = writer_client.Writer(venv_python, catalog.uri, catalog.warehouse)
    yield w
    w.close()


@pytest.fixture(scope="module")
def namespace(writer):
    writer.call("create_namespace", ns="ns")
    return "ns"


@pytest.fixture
def table(request, writer, namespace):
    name = "%s.%s" % (namespace, re.sub(r"\W", "_", request.node.name).strip("_").lower()[:60])
    writer.call("create_table", name=name)
    return name


@pytest.fixture
def proxy(catalog):
    p = FaultProxy(catalog.uri)
    yield p
    p.stop()
