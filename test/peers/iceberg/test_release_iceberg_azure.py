"""finalize.release_iceberg on Azure Blob Storage: an Iceberg table whose manifest lists, manifests and
data files are blobs of Azurite (Microsoft's storage emulator), written by pyiceberg through its fsspec
FileIO (adlfs, the Blob API) at abfss://lake@devstoreaccount1.dfs.core.windows.net/..., committed through
Apache Iceberg's real REST catalog, and read by finalize through a finalize_azure server (Shared Key,
HTTPS with the test CA).

Where the catalog keeps metadata.json: in its JVM (Iceberg's InMemoryFileIO as the JdbcCatalog's
io-impl), not on Azurite. Iceberg's ADLSFileIO writes through the Data Lake (DFS) endpoint, which Azurite
does not serve (Azurite issue #409), and hadoop-azure's wasb driver reaches the emulator only at
127.0.0.1:10000 (CloudStorageAccount.getDevelopmentStorageAccount), never at a free port. release_iceberg
reads the table's metadata from the catalog's answers, never from metadata.json, so every object it
reads from the store is on Azurite. Needs test/node_modules (Azurite), as test/run-tests links it."""
import base64
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "lib"))

import catalog as catalog_lib  # noqa: E402
import writer_client  # noqa: E402
from azurite import Azurite  # noqa: E402
from test_release_iceberg import FIELD, Lake, codes, env, pg, sim  # noqa: E402,F401 (fixtures)
from worker_env import at, lsn_text  # noqa: E402

IN_MEMORY_IO = "org.apache.iceberg.inmemory.InMemoryFileIO"
LOCATION = "abfss://lake@devstoreaccount1.dfs.core.windows.net/warehouse/%s"


@pytest.fixture(scope="module")
def az():
    with Azurite() as server:
        yield server


@pytest.fixture(scope="module")
def catalog(request, tmp_path_factory):
    cat = catalog_lib.start_catalog(str(tmp_path_factory.mktemp("iceberg")), env={"CATALOG_IO__IMPL": IN_MEMORY_IO})
    yield cat
    alive = cat.alive()
    cat.stop()
    if getattr(request.module, "iceberg_failed", False) or not alive:
        sys.stderr.write("\n# %s ends:\n%s\n" % (cat.log_path, catalog_lib.tail(cat.log_path)))


@pytest.fixture(scope="module")
def writer(catalog, venv_python, az):
    """pyiceberg with adlfs on Azurite's Blob endpoint (its account key; its test CA for OpenSSL's
    default paths, which aiohttp's context loads, and for requests)."""
    w = writer_client.Writer(venv_python, catalog.uri, catalog.warehouse,
                             env={"SSL_CERT_FILE": az.ca, "REQUESTS_CA_BUNDLE": az.ca},
                             **{"adls.connection-string": az.connection_string()})
    yield w
    w.close()


@pytest.fixture
def lake(env, sim, catalog, writer, az):
    """The Iceberg table ns.orders on Azurite, hour 09 final in finalize, the finalize_azure server
    az_lake (the container "lake") as the release's store."""
    name, location = "ns.orders", LOCATION % "ns/orders"
    writer.call("make_container", location=location)
    writer.call("create_namespace", ns="ns")
    writer.call("create_table", name=name, location=location,
                partition=[["commit_time", "hour", FIELD]])
    first = sim.call("sim.commit", inserts=1)[0][0]
    sim.call("sim.advance", seconds=70)
    env.add_source("db", sim)
    env.track("orders", "db", granularity="1 hour")
    env.wait_caught_up("orders", sim)
    lk = Lake(env, sim, writer, catalog, name)
    lk.pipeline.apply([{"lsn": lsn_text(first["start_lsn"]), "at": at(8, 59), "inserts": 1}])
    writer.call("create_branch", table=name, name="audit")
    env.sql("CREATE SERVER lake_catalog FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri %s, timeout '3s')",
            (catalog.uri,))
    env.sql("CREATE SERVER az_lake FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'devstoreaccount1', "
            "container 'lake', endpoint %s, ca_file %s)", (az.endpoint, az.ca))
    env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER az_lake OPTIONS (account_key %s)", (az.key,))
    lk.store = "az_lake"
    yield lk
    env.sql("DROP SERVER az_lake CASCADE")


def test_a_release_on_azurite_checks_the_blobs_and_publishes_once_they_are_whole(lake, writer):
    """Two data files of hour 09 on Azurite: one truncated is size_mismatch, one deleted is
    missing_object (main stays where it was, checked through the catalog); put back byte for byte
    through adlfs, the same snapshot is released and main fast-forwarded to it."""
    commits = lake.hour_09()
    lake.pipeline.apply(commits[:1], branch="audit")
    lake.pipeline.apply(commits[1:], branch="audit")
    files = lake.partition_files()
    assert len(files) == 2 and all(f["file_path"].startswith(LOCATION % "ns/orders/data/") for f in files), files
    audited, before = lake.audit_head(), lake.main()
    path = files[0]["file_path"]
    whole = writer.call("read_file", table=lake.table, path=path)
    data = base64.b64decode(whole)
    assert len(data) == files[0]["file_size_in_bytes"]

    writer.call("write_file", table=lake.table, path=path, data=base64.b64encode(data[:-10]).decode())
    r = lake.release()
    assert not r["released"] and codes(r) == ["size_mismatch"], r
    assert lake.main() == before, "a refused release moved main"

    writer.call("write_file", table=lake.table, path=path, data=None)
    r = lake.release()
    assert not r["released"] and codes(r) == ["missing_object"], r
    assert r["problems"][0]["path"].endswith(os.path.basename(path)), r
    assert lake.main() == before, "a refused release moved main"

    writer.call("write_file", table=lake.table, path=path, data=whole)
    r = lake.release()
    assert r == {"released": True, "generation": str(audited), "problems": []}, r
    assert lake.main() == audited != before
    report = lake.env.one("SELECT r.report FROM finalize.release r ORDER BY r.release_id DESC LIMIT 1")
    assert report["catalog"]["records"] == 6 and report["catalog"]["data_files"] == 2, report["catalog"]
    assert [a[0] for a in lake.attempts()] == [False, False, True]
