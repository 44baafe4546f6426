"""_SUCCESS markers (issue 44, docs/publishing.md "_SUCCESS markers"): a
success_marker publication writes each final period's _SUCCESS into the S3
server the tests run (test/s3: s3rver behind a proxy that checks every
SigV4 signature) and into a local directory, and Luigi's S3FlagTarget (the
recipe, run by luigi itself) waits on it.

The verdict is moved by hand with finalize.record_range; between two moves
it stands still, so "nothing early" is checked exactly (`settle`): once
every event recorded up to the verdict is delivered, no marker may say a
period that ends after the verdict, and the markers are exactly those of
the final periods. The markers are read back with boto3, a real S3 client."""

import datetime
import json
import os
import pwd
import stat
import subprocess
import sys
import time

import boto3
import pytest

from peerlib import TOP, Warehouse, recipe, write_recipe

sys.path.insert(0, os.path.join(TOP, "test", "lib"))
from s3proc import S3Server  # noqa: E402

UTC = datetime.timezone.utc
HOUR = datetime.timedelta(hours=1)
DAY0 = datetime.datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    server.create_bucket("lake")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def wh(s3):
    """The cluster with its delivery worker, and the recipe's server lake_s3 on the S3 server."""
    w = Warehouse(conf={"finalize.database": "warehouse", "finalize.poll_interval": "200ms",
                        "finalize.max_retry_interval": "1s", "finalize.alert_after": "2s"})
    w.sql("CREATE SERVER lake_s3 FOREIGN DATA WRAPPER finalize_s3 OPTIONS (endpoint %s, region %s, bucket 'lake')",
          (s3.endpoint, s3.region))
    w.sql("CREATE USER MAPPING FOR postgres SERVER lake_s3 OPTIONS (access_key_id %s, secret_access_key %s)",
          (s3.access_key, s3.secret_key))
    yield w
    w.cleanup()


@pytest.fixture(scope="module")
def bucket(s3):
    """The bucket as boto3 reads it."""
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name=s3.region,
                          aws_access_key_id=s3.access_key, aws_secret_access_key=s3.secret_key)
    return client


def server_dir(path):
    """Makes a directory the server may write to (it runs as postgres when the tests run as root)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(path, pw.pw_uid, pw.pw_gid)
    for parent in list(path.parents)[:-1]:
        if parent.stat().st_uid == os.geteuid():
            parent.chmod(parent.stat().st_mode | 0o755)
    return path


def iso(ts):
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def s3_markers(bucket, prefix):
    """{key: body} of every _SUCCESS under prefix, read with boto3."""
    keys = [o["Key"] for page in bucket.get_paginator("list_objects_v2").paginate(Bucket="lake", Prefix=prefix)
            for o in page.get("Contents", []) if o["Key"].endswith("/_SUCCESS")]
    return {k: bucket.get_object(Bucket="lake", Key=k)["Body"].read() for k in keys}


def file_markers(root):
    """{relative path: body} of every _SUCCESS below root."""
    found = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f == "_SUCCESS":
                with open(os.path.join(d, f), "rb") as fh:
                    found[os.path.relpath(os.path.join(d, f), root)] = fh.read()
    return found


def events(wh, table, publication):
    return wh.sql("SELECT e.state, e.outcome, e.period_start, e.period_end, e.last_error, e.attempts "
                  "FROM finalize.publication_event e JOIN finalize.publication p USING (publication_id) "
                  "JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = %s AND p.name = %s "
                  "ORDER BY e.event_seq", (table, publication))


def settle(wh, table, publication, markers):
    """Waits until every event of the publication recorded so far is delivered, then checks that no
    marker runs ahead of the verdict: each one's period ends at or before it. Returns the markers."""
    wh.pg.wait_for(lambda: events(wh, table, publication) and
                   all(e[0] == "delivered" for e in events(wh, table, publication)), timeout=60,
                   what=lambda: f"the events of {publication} delivered: {events(wh, table, publication)}")
    verdict = wh.finalized_until(table)
    found = markers()
    for key, body in found.items():
        if "finalize" not in json.loads(body):
            continue  # not written by finalize (a marker the test put there)
        end = json.loads(body)["finalize"]["period_end"]
        # The assert that catches a marker written early: its period ends after the verdict.
        assert end <= iso(verdict), f"{key} says {end}, after the verdict {iso(verdict)}"
    return found


def hour_key(prefix, start):
    return start.strftime(prefix + "dt=%Y-%m-%d/hour=%H/_SUCCESS")


def luigi_waiter(s3, tmp_path, hour):
    """Starts the Luigi recipe for one hour (its luigi.cfg as printed, the S3 server's address in a
    second configuration file): it waits on the hour's _SUCCESS, then runs OrdersReport."""
    write_recipe("luigi-success-marker", str(tmp_path / "orders.py"), "python")
    write_recipe("luigi-success-marker-cfg", str(tmp_path / "luigi.cfg"), "ini")
    (tmp_path / "s3.cfg").write_text("[s3]\nendpoint_url = %s\nregion_name = %s\n" % (s3.endpoint, s3.region))
    env = dict(os.environ, LUIGI_CONFIG_PATH=str(tmp_path / "s3.cfg"), PYTHONPATH=str(tmp_path),
               AWS_ACCESS_KEY_ID=s3.access_key, AWS_SECRET_ACCESS_KEY=s3.secret_key)
    return subprocess.Popen([sys.executable, "-m", "luigi", "--module", "orders", "OrdersReport",
                             "--hour", hour.strftime("%Y-%m-%dT%H"), "--local-scheduler"],
                            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_each_final_hour_gets_its_marker_and_luigi_waits_for_it(wh, s3, bucket, tmp_path):
    """The recipe's publication marks exactly the final hours, each once, signed; Luigi's
    S3FlagTarget on hour 12 still waits when every event up to 12:00 is delivered, and its task runs
    once hour 12 is final."""
    table, prefix = "sales.orders", "sales/orders/"
    wh.track(table)
    wh.capture(table, DAY0 + 9.5 * HOUR)
    wh.sql(recipe("success-marker-publication", "sql"))
    waiter = luigi_waiter(s3, tmp_path, DAY0 + 12 * HOUR)
    try:
        marked = lambda: s3_markers(bucket, prefix)  # noqa: E731
        found = settle(wh, table, "orders_success", marked) if events(wh, table, "orders_success") else marked()
        assert found == {}, "the hours final before the publication was added are not marked"
        for commit, final_until in ((11.5, 11), (12.5, 12)):
            wh.capture(table, DAY0 + commit * HOUR)
            found = settle(wh, table, "orders_success", marked)
            assert sorted(found) == [hour_key(prefix, DAY0 + h * HOUR) for h in range(9, final_until)]
        # Every event up to 12:00 is delivered: hour 12 is not final, and Luigi, which has looked for
        # its marker twice (and found none), still waits.
        flag = "/lake/" + hour_key(prefix, DAY0 + 12 * HOUR).replace("=", "%3D")
        wh.pg.wait_for(lambda: sum(r["method"] == "HEAD" and r["path"] == flag and r["status"] == 404
                                   for r in s3.requests()) >= 2 or waiter.poll() is not None, timeout=60,
                       what="Luigi looking for the marker of hour 12")
        assert waiter.poll() is None, waiter.communicate()[0]
        assert not (tmp_path / "reports").exists()
        wh.capture(table, DAY0 + 13.5 * HOUR)
        out, _ = waiter.communicate(timeout=120)
        assert waiter.returncode == 0, out
        assert (tmp_path / "reports" / "orders-2026-03-01T12.txt").read_text() == \
            "sales.orders 2026-03-01 12:00:00 is complete\n"
        found = settle(wh, table, "orders_success", marked)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert sorted(found) == [hour_key(prefix, DAY0 + h * HOUR) for h in range(9, 13)]
    for h in range(9, 13):
        body = json.loads(found[hour_key(prefix, DAY0 + h * HOUR)])
        assert body["creationTime"] == body["modificationTime"] > 0
        assert body["finalize"]["table"] == table and body["finalize"]["event"] == "final"
        assert body["finalize"]["period_start"] == iso(DAY0 + h * HOUR)
        assert body["finalize"]["period_end"] == iso(DAY0 + (h + 1) * HOUR)
    assert [e[1] for e in events(wh, table, "orders_success")] == ["sent"] * 4
    puts = [r for r in s3.requests() if r["method"] == "PUT" and r["path"].startswith("/lake/sales/orders/")]
    assert len(puts) == 4 and all(r["signature_ok"] and r["status"] == 200 for r in puts)
    assert all(r["signature_ok"] for r in s3.requests())


def test_a_killed_delivery_worker_loses_and_repeats_no_marker(wh, s3, bucket):
    """24 hours become final at once; the delivery worker is terminated again and again while it
    writes their markers (each request to the store held 0.15 s, so that kills land in the middle
    of requests). Every hour gets its marker, and each marker is stored once: an event sent again
    after a kill finds its marker and writes nothing."""
    table, prefix, hours = "sales.kills", "sales/kills/", 24
    wh.track(table)
    wh.capture(table, DAY0)
    wh.sql("SELECT finalize.add_publication(%s, 'kills', 'lake_s3', %s)",
           (table, json.dumps({"location": "s3://lake/%sdt={date}/hour={hour}/" % prefix})))
    s3.fault(kind="stall", seconds=0.1, count=-1, match=prefix)
    wh.capture(table, DAY0 + (hours + 0.5) * HOUR)
    kills = []
    try:
        # Killed twice, a third and two thirds of the way: each restart costs a scheduler round.
        while any(e[0] == "pending" for e in events(wh, table, "kills")):
            delivered = sum(e[0] == "delivered" for e in events(wh, table, "kills"))
            if delivered >= hours * (len(kills) + 1) // 3 and len(kills) < 2:
                killed = wh.pg.sql("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                                   "WHERE backend_type = 'finalize alerts' AND datname = 'warehouse'")[0][0]
                if killed:
                    kills.append(delivered)
            time.sleep(0.05)
    finally:
        s3.clear("faults")
    assert len(kills) == 2 and all(0 < k < hours for k in kills), f"killed mid-stream, after {kills} markers"
    found = settle(wh, table, "kills", lambda: s3_markers(bucket, prefix))
    assert sorted(found) == [hour_key(prefix, DAY0 + h * HOUR) for h in range(hours)]
    stored = {}
    for r in s3.requests():
        if r["method"] == "PUT" and prefix in r["path"] and r["status"] == 200:
            stored[r["path"]] = stored.get(r["path"], 0) + 1
    assert len(stored) == hours and set(stored.values()) == {1}, stored
    assert [e[0] for e in events(wh, table, "kills")] == ["delivered"] * hours


def test_local_day_markers_wait_for_the_last_hour_and_keep_creation_time(wh, tmp_path):
    """An hourly table marked per day on file://: a day's _SUCCESS appears once its last hour is
    final, written atomically (no temporary file left, mode 0644); a Paimon marker already there is
    re-marked keeping its creationTime; an event sent again for a marked day writes nothing; a link
    below the root is not followed."""
    table, root = "sales.days", server_dir(tmp_path / "lake" / "days")
    server_dir(root / "dt=2026-03-02")
    (root / "dt=2026-03-02" / "_SUCCESS").write_text('{"creationTime": 1000, "modificationTime": 1000}')
    location = "file://%s/dt={date}/" % root
    wh.track(table)
    wh.capture(table, DAY0 + 10.5 * HOUR)
    wh.sql("SELECT finalize.add_publication(%s, 'days', NULL, %s)", (table, json.dumps({"location": location})))
    marked = lambda: file_markers(str(root))  # noqa: E731
    wh.capture(table, DAY0 + 23.5 * HOUR)
    # Hour 23 of March 1 is not final: every event up to it is delivered, and the day has no marker.
    assert set(settle(wh, table, "days", marked)) == {"dt=2026-03-02/_SUCCESS"}
    wh.capture(table, DAY0 + 24.5 * HOUR)
    found = settle(wh, table, "days", marked)
    day1 = json.loads(found["dt=2026-03-01/_SUCCESS"])
    assert day1["creationTime"] == day1["modificationTime"]
    assert day1["finalize"]["period_end"] == iso(DAY0 + 24 * HOUR)
    assert stat.S_IMODE(os.stat(root / "dt=2026-03-01" / "_SUCCESS").st_mode) == 0o644
    wh.capture(table, DAY0 + 48.5 * HOUR)
    day2 = json.loads(settle(wh, table, "days", marked)["dt=2026-03-02/_SUCCESS"])
    assert day2["creationTime"] == 1000 < day2["modificationTime"], "re-marking keeps Paimon's creationTime"
    assert day2["finalize"]["period_start"] == iso(DAY0 + 47 * HOUR)
    assert sorted(os.listdir(root / "dt=2026-03-02")) == ["_SUCCESS"], "no temporary file is left"
    outcomes = [e[1] for e in events(wh, table, "days")]
    assert outcomes.count("sent") == 2 and len(outcomes) == 38

    # Published again from March 2: its last hour finds the marker of its period and writes nothing.
    wh.sql("SELECT finalize.drop_publication(%s, 'days')", (table,))
    wh.sql("SELECT finalize.add_publication(%s, 'days', NULL, %s, %s)",
           (table, json.dumps({"location": location}), DAY0 + 24 * HOUR))
    again = json.loads(settle(wh, table, "days", marked)["dt=2026-03-02/_SUCCESS"])
    assert again == day2
    assert [e[1] for e in events(wh, table, "days")] == ["already"] * 24

    # A directory below the root that is a link to elsewhere: refused, nothing written there.
    elsewhere = server_dir(tmp_path / "elsewhere")
    os.symlink(elsewhere, root / "dt=2026-03-03")
    wh.capture(table, DAY0 + 72.5 * HOUR)
    wh.pg.wait_for(lambda: any(e[4] and "NotADirectory" in e[4] for e in events(wh, table, "days")),
                   what=lambda: f"the link refused: {events(wh, table, 'days')}")
    assert os.listdir(elsewhere) == []
    os.unlink(root / "dt=2026-03-03")
    wh.sql("SELECT finalize.retry_publication(%s, 'days')", (table,))
    assert "dt=2026-03-03/_SUCCESS" in settle(wh, table, "days", marked)


def test_the_stores_refusal_reaches_last_error_without_the_key(wh, s3):
    """A wrong secret key: S3's own Code and Message reach last_error, the key does not, and the
    refusal of the credentials opens a publication_failing incident at once."""
    table = "sales.refused"
    wrong = "wr0ng-s3cret-key-xyz"
    wh.sql("CREATE SERVER lake_bad FOREIGN DATA WRAPPER finalize_s3 OPTIONS (endpoint %s, region %s, bucket 'lake')",
           (s3.endpoint, s3.region))
    wh.sql("CREATE USER MAPPING FOR postgres SERVER lake_bad OPTIONS (access_key_id %s, secret_access_key %s)",
           (s3.access_key, wrong))
    wh.track(table)
    wh.capture(table, DAY0)
    wh.sql("SELECT finalize.add_publication(%s, 'refused', 'lake_bad', %s)",
           (table, json.dumps({"location": "s3://lake/sales/refused/dt={date}/hour={hour}/"})))
    wh.capture(table, DAY0 + 1.5 * HOUR)
    error = wh.pg.wait_for(lambda: events(wh, table, "refused") and events(wh, table, "refused")[0][4],
                           what="the refusal recorded")
    assert "SignatureDoesNotMatch" in error and wrong not in error, error
    assert wh.sql("SELECT count(*) FROM finalize.alert WHERE kind = 'publication_failing' AND state = 'open'")[0][0] == 1
    wh.sql("DROP SERVER lake_bad CASCADE")
