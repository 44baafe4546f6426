"""The dagster publication target's requests and what it makes of answers a
real dagster-webserver does not give (test/peers/test_dagster.py reports to
the real one): Dagster+'s token in Dagster-Cloud-Api-Token, the asset key's
segments percent-encoded in the path, a refusal's own words in last_error
with the token redacted and a publication_failing incident at once, the
GraphQL look before a second attempt. The answers are
dagster_webserver/external_assets.py's shapes ({"error": ...} with 401,
{} with 200), sent by a real HTTP server on loopback
(test/lib/webhook_receiver.py) to libcurl."""

import json

import pytest

from webhook_receiver import Respond, WebhookReceiver
from worker_env import new_cluster

TOKEN = "user:d4gster-cl0ud-t0ken"
TABLE = "dg.orders"
REPORT = "/dagster/report_asset_materialization/lake/sales%20orders"


@pytest.fixture(scope="module")
def pg():
    # No source is polled: the verdict moves by record_range; the alerts worker delivers.
    cluster = new_cluster(**{"finalize.enabled": "off", "finalize.alert_after": "1h"})
    yield cluster
    cluster.cleanup()


@pytest.fixture
def rx():
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


def events(pg):
    return pg.sql("SELECT event_id::text, state, attempts, last_status, last_error, outcome "
                  "FROM finalize.publication_event ORDER BY event_seq")


def test_token_path_refusal_and_the_look_before_a_repeat(pg, rx):
    rx.set_default(Respond(401, body={"error": "Not authorized to report runless asset events (token %s)." % TOKEN}),
                   path="/dagster/report_asset_materialization/")
    rx.set_default(Respond(200, body={"data": {"assetOrError": {"__typename": "Asset", "assetMaterializations": [
        {"metadataEntries": [{"label": "event_id", "text": "another-event"}, {"label": "rows"}]}]}}}),
        path="/dagster/graphql")
    pg.sql("CREATE SERVER dg FOREIGN DATA WRAPPER finalize_dagster OPTIONS (url %s, timeout '3 seconds')",
           (rx.url_for("/dagster/"),))
    pg.sql("CREATE USER MAPPING FOR postgres SERVER dg OPTIONS (api_token %s)", (TOKEN,))
    pg.sql("CREATE SERVER src FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo')")
    pg.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (TABLE,))
    pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-29 00:10+00')", (TABLE,))
    pg.sql("SELECT finalize.add_publication(%s, 'to_dg', 'dg', %s)", (TABLE, json.dumps(
        {"asset_key": ["lake", "sales orders"], "partition_key": "{date}-{hour}:{minute}",
         "metadata": {"owner": "sales", "table": "not finalize's"}})))
    pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', "
           "'2026-11-29 01:10+00')", (TABLE,))

    # The report: the key's segments percent-encoded, JSON as Dagster reads it, the token in its header.
    first, = rx.wait_for(lambda r: r.path.startswith("/dagster/report"))
    assert (first.method, first.path) == ("POST", REPORT)
    assert first.header("Content-Type") == "application/json"   # Dagster refuses "; charset=..."
    assert first.header("Dagster-Cloud-Api-Token") == TOKEN
    event_id = events(pg)[0][0]
    body = first.json
    assert body["partition"] == "2026-11-29-00:00" and body["data_version"] == event_id
    assert "2026-11-29-00:00" in body["description"] and TABLE in body["description"]
    meta = body["metadata"]
    # finalize's event over the publication's own metadata: its fields win.
    assert meta["owner"] == "sales" and meta["table"] == TABLE and meta["event_id"] == event_id
    assert meta["schema"] == "finalize.publication/1" and meta["event"] == "final"
    assert meta["period_start"] == "2026-11-29T00:00:00Z" and meta["period_end"] <= meta["finalized_until"]

    # Refused: Dagster's own words, the token redacted; an incident at once.
    pg.wait_for(lambda: events(pg)[0][4], what="the refusal recorded")
    _, state, attempts, status, error, _ = events(pg)[0]
    assert (state, status) == ("pending", 401)
    assert "answered HTTP 401: Not authorized to report runless asset events (token [redacted])." in error, error
    assert TOKEN not in error and "d4gster" not in error
    pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.alerts WHERE kind = 'publication_failing' "
                               "AND state = 'open'")[0][0] == 1, what="a publication_failing incident")
    assert TOKEN not in str(pg.sql("SELECT message FROM finalize.alerts"))

    # Accepted again: the next attempt looks first (GraphQL: no materialization has this event's
    # id), then reports; the event is sent once more and delivered.
    rx.set_default(Respond(200, body={}), path="/dagster/report_asset_materialization/")
    pg.sql("SELECT finalize.retry_publication(%s, 'to_dg')", (TABLE,))
    pg.wait_for(lambda: events(pg)[0][1] == "delivered", what=lambda: f"delivered: {events(pg)}")
    _, _, attempts, status, _, outcome = events(pg)[0]
    assert attempts >= 2 and (status, outcome) == (200, "sent")
    looks = rx.requests("/dagster/graphql")
    assert looks and all(r.header("Dagster-Cloud-Api-Token") == TOKEN for r in looks)
    assert looks[-1].json["variables"] == {"key": {"path": ["lake", "sales orders"]},
                                           "partitions": ["2026-11-29-00:00"]}
    assert "assetOrError" in looks[-1].json["query"]
    # A look came before each report but the first.
    paths = [r.path for r in rx.requests("/dagster/")]
    assert paths[0] == REPORT and all(paths[i] == "/dagster/graphql" for i in range(1, len(paths), 2)), paths
    pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.alerts WHERE kind = 'publication_failing' "
                               "AND state = 'open'")[0][0] == 0, what="the incident resolved")
