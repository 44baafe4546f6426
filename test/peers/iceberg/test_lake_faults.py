"""An Iceberg catalog that misbehaves, between finalize and Apache Iceberg's real REST catalog (a
fault proxy in front of it): 401, 500, a stall, malformed metadata, a malformed LSN property, a table
that is not there. Each shows as the consumer's condition with the catalog's own words, opens an
incident after finalize.alert_after, never moves the verdict, and clears when the catalog is well
again; meanwhile a consumer on a healthy catalog and the SQL Server cycles go on undelayed. Then the
credentials: OAuth2 client credentials with tokens that expire (refreshed before, and at once after
a 401), a static bearer token, wrong secrets (which never appear anywhere), and ETags."""
import datetime
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from test_lake_consumer import (START, Pipeline, add_catalog, add_consumer, check_truth, commit,  # noqa: E402
                                consumer, env, pg, polls, sim, track, until, wait_consumer)

assert env and pg and sim          # fixtures, imported for this module

SECRET = "s3cret-client-value"


def condition(env, table, name, cond, timeout=20):
    return wait_consumer(env, table, name, lambda r: r["condition"] == cond, "condition %s" % cond, timeout)


def open_alerts(env, kind):
    return env.sql("SELECT subject, message FROM finalize.alerts WHERE kind = %s AND state <> 'resolved'", (kind,))


def new_table(writer, name):
    writer.call("create_table", name=name)
    return name


def test_faults_show_as_conditions_and_isolate(env, sim, catalog, writer, table, proxy):
    track(env, sim, "sales.faulty", "erp")
    env.track("sales.healthy", "erp", granularity="1 minute")
    env.wait_caught_up("sales.healthy", sim)
    healthy_table = new_table(writer, table + "_healthy")
    add_catalog(env, "flaky", proxy.uri)
    add_catalog(env, "lake", catalog.uri)
    add_consumer(env, "sales.faulty", "spark", "flaky", table)
    add_consumer(env, "sales.healthy", "spark", "lake", healthy_table)
    faulty, healthy = Pipeline(writer, table), Pipeline(writer, healthy_table)
    c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(10)]
    sim.call("sim.advance", seconds=600)
    env.wait_caught_up("sales.faulty", sim)
    faulty.apply(c[:1])
    healthy.apply(c[:1])
    for t in ("sales.faulty", "sales.healthy"):
        wait_consumer(env, t, "spark", lambda r: r["reported_lsn"] == c[0]["lsn"], "the first append of " + t)

    # Each fault: its condition and the catalog's words, an incident after alert_after (2 s), no move.
    faults = [
        (lambda: proxy.set_status(401), "catalog_auth_failed", "HTTP 401"),
        (lambda: proxy.set_status(500), "catalog_unreachable", "HTTP 500"),
        (lambda: proxy.set_malformed("no_metadata"), "metadata_malformed", "no \"metadata\" object"),
        (lambda: proxy.set_malformed("not_json"), "metadata_malformed", "not JSON"),
        (lambda: proxy.set_malformed("snapshot_id_string"), "metadata_malformed", "snapshot-id"),
        (lambda: proxy.set_malformed("no_snapshots"), "metadata_malformed", "neither"),
        (lambda: proxy.set_stall(), "catalog_unreachable", "no answer from the catalog"),
    ]
    for i, (fault, cond, words) in enumerate(faults, 1):
        fault()
        row = condition(env, "sales.faulty", "spark", cond)
        assert words in row["resolve_error"], row
        assert env.one("SELECT consumer_conditions FROM finalize.status WHERE table_name = 'sales.faulty'") \
            == "spark: " + cond
        # Meanwhile both lakes commit one more: the healthy one is followed, the faulty one is not.
        last_success = env.source_status("erp")["last_success"]
        faulty.apply(c[i:i + 1])
        healthy.apply(c[i:i + 1])
        wait_consumer(env, "sales.healthy", "spark", lambda r, i=i: r["reported_lsn"] == c[i]["lsn"],
                      "the healthy consumer during %s" % cond, timeout=10)
        env.pg.wait_for(lambda: open_alerts(env, cond), timeout=15, what="an incident %s" % cond)
        assert consumer(env, "sales.faulty", "spark")["reported_lsn"] == c[i - 1]["lsn"], cond
        # The SQL Server cycles went on (every 200 ms) while the catalog failed.
        env.pg.wait_for(lambda: env.source_status("erp")["last_success"] > last_success, timeout=20,
                        what="a SQL Server cycle during %s" % cond)
        check_truth(env, sim, writer, "sales.faulty", table)
        check_truth(env, sim, writer, "sales.healthy", healthy_table)
        proxy.set_pass()
        wait_consumer(env, "sales.faulty", "spark", lambda r, i=i: r["condition"] is None
                      and r["reported_lsn"] == c[i]["lsn"], "recovery from %s" % cond)
        env.pg.wait_for(lambda: not open_alerts(env, cond), timeout=10, what="the %s incident resolved" % cond)

    # A stalled catalog holds only its own worker: the other catalog's consumer follows a commit made
    # while every request of the stalled one hangs (how long that takes is the benchmark's to measure).
    proxy.set_stall()
    condition(env, "sales.faulty", "spark", "catalog_unreachable")
    n = len(faults) + 1
    healthy.apply(c[n:n + 1])
    wait_consumer(env, "sales.healthy", "spark", lambda r: r["reported_lsn"] == c[n]["lsn"], "healthy")
    assert consumer(env, "sales.faulty", "spark")["condition"] == "catalog_unreachable"
    proxy.set_pass()
    wait_consumer(env, "sales.faulty", "spark", lambda r: r["condition"] is None, "the stall's end")


def test_a_malformed_property_and_a_missing_table(env, sim, catalog, writer, table):
    track(env, sim, "sales.props", "erp")
    add_catalog(env, "lake", catalog.uri)
    add_consumer(env, "sales.props", "spark", "lake", table)
    add_consumer(env, "sales.props", "ghost", "lake", "ns.no_such_table")
    c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(3)]
    sim.call("sim.advance", seconds=200)
    env.wait_caught_up("sales.props", sim)
    row = condition(env, "sales.props", "ghost", "table_not_found")
    assert "HTTP 404" in row["resolve_error"] and "no_such_table" in row["resolve_error"], row
    env.sql("SELECT finalize.drop_consumer('sales.props', 'ghost')")

    lake = Pipeline(writer, table)
    lake.apply(c[:1])
    wait_consumer(env, "sales.props", "spark", lambda r: r["reported_lsn"] == c[0]["lsn"], "a valid LSN")
    lake.apply(c[1:2], lsn="14:00 yesterday")
    row = condition(env, "sales.props", "spark", "property_malformed")
    assert '"14:00 yesterday"' in row["resolve_error"] and "is not an LSN" in row["resolve_error"], row
    polls(2)
    assert consumer(env, "sales.props", "spark")["reported_lsn"] == c[0]["lsn"]
    check_truth(env, sim, writer, "sales.props", table)
    lake.apply(c[2:3])
    wait_consumer(env, "sales.props", "spark", lambda r: r["condition"] is None
                  and r["reported_lsn"] == c[2]["lsn"], "a valid LSN again")
    env.pg.wait_for(lambda: until(env, "sales.props") == START + 2 * 60 * datetime.timedelta(seconds=1),
                    timeout=20, what="verdict 09:02")
    check_truth(env, sim, writer, "sales.props", table)


def test_oauth2_tokens_expire_and_are_refreshed(env, sim, writer, table, proxy):
    track(env, sim, "sales.oauth", "erp")
    proxy.require_oauth("finalize", SECRET, expires_in=3)
    add_catalog(env, "oauth", proxy.uri, mapping={"client_id": "finalize", "client_secret": SECRET})
    add_catalog(env, "wrong", proxy.uri, mapping={"client_id": "finalize", "client_secret": "not-the-secret"})
    add_consumer(env, "sales.oauth", "spark", "oauth", table)
    add_consumer(env, "sales.oauth", "intruder", "wrong", table, )
    c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(4)]
    sim.call("sim.advance", seconds=300)
    env.wait_caught_up("sales.oauth", sim)
    lake = Pipeline(writer, table)
    row = condition(env, "sales.oauth", "intruder", "catalog_auth_failed")
    assert "invalid_client" in row["resolve_error"] and "not-the-secret" not in row["resolve_error"], row
    env.sql("SELECT finalize.drop_consumer('sales.oauth', 'intruder')")
    for i in range(3):
        lake.apply(c[i:i + 1])
        wait_consumer(env, "sales.oauth", "spark", lambda r, i=i: r["reported_lsn"] == c[i]["lsn"], "append %d" % i)
        time.sleep(2.5)          # most of a token's life
    tokens = proxy.count("/v1/oauth/tokens")
    assert tokens >= 3, "tokens of 3 s were fetched %d times over 8 s" % tokens
    # A token revoked early: the catalog answers 401, finalize gets a new one at once.
    proxy.expire_tokens()
    lake.apply(c[3:4])
    wait_consumer(env, "sales.oauth", "spark", lambda r: r["reported_lsn"] == c[3]["lsn"], "after revocation")
    assert consumer(env, "sales.oauth", "spark")["condition"] is None
    assert not any(SECRET in line or "not-the-secret" in line for line in env.pg.log().splitlines())
    check_truth(env, sim, writer, "sales.oauth", table)


def test_a_static_token_and_etags(env, sim, writer, table, proxy):
    track(env, sim, "sales.token", "erp")
    proxy.require_token("static-token-123")
    proxy.set_etag(True)
    add_catalog(env, "tok", proxy.uri, mapping={"token": "static-token-123"})
    add_consumer(env, "sales.token", "spark", "tok", table)
    c = [commit(sim, START + datetime.timedelta(minutes=m, seconds=10)) for m in range(2)]
    sim.call("sim.advance", seconds=200)
    env.wait_caught_up("sales.token", sim)
    lake = Pipeline(writer, table)
    lake.apply(c[:1])
    wait_consumer(env, "sales.token", "spark", lambda r: r["reported_lsn"] == c[0]["lsn"], "the first append")
    env.pg.wait_for(lambda: any(r["status"] == 304 for r in proxy.requests if "/tables/" in r["path"]), timeout=30,
                    what=lambda: "a 304: %s" % [(r["status"], r["headers"].get("If-None-Match"))
                                                for r in proxy.requests if "/tables/" in r["path"]])
    loads = [r for r in proxy.requests if "/tables/" in r["path"]]
    assert all(r["headers"].get("Authorization") == "Bearer static-token-123" for r in loads)
    lake.apply(c[1:2])
    wait_consumer(env, "sales.token", "spark", lambda r: r["reported_lsn"] == c[1]["lsn"], "an append after 304s")
    check_truth(env, sim, writer, "sales.token", table)
    env.sql("ALTER USER MAPPING FOR CURRENT_USER SERVER tok OPTIONS (SET token 'another-token-456')")
    row = condition(env, "sales.token", "spark", "catalog_auth_failed")
    assert "HTTP 401" in row["resolve_error"] and "another-token-456" not in row["resolve_error"], row


@pytest.mark.parametrize("service", ["s3tables"])
def test_aws_sigv4(env, sim, writer, table, proxy, service):
    track(env, sim, "sales.aws", "erp")
    proxy.require_sigv4("AKIDFINALIZE", "aws-secret-key-1", "eu-west-1", service, session_token="session-token-1")
    add_catalog(env, "aws", proxy.uri, mapping={"access_key_id": "AKIDFINALIZE", "secret_access_key": "aws-secret-key-1",
                                                "session_token": "session-token-1"},
                region="eu-west-1", signing_name=service)
    add_catalog(env, "aws_wrong", proxy.uri, mapping={"access_key_id": "AKIDFINALIZE",
                                                      "secret_access_key": "not-the-key-9",
                                                      "session_token": "session-token-1"},
                region="eu-west-1", signing_name=service)
    add_consumer(env, "sales.aws", "spark", "aws", table)
    add_consumer(env, "sales.aws", "wrong", "aws_wrong", table)
    c = [commit(sim, START + datetime.timedelta(seconds=10))]
    sim.call("sim.advance", seconds=100)
    env.wait_caught_up("sales.aws", sim)
    Pipeline(writer, table).apply(c)
    row = condition(env, "sales.aws", "wrong", "catalog_auth_failed")
    assert "HTTP 403" in row["resolve_error"] and "signature" in row["resolve_error"], row
    assert "not-the-key-9" not in row["resolve_error"]
    wait_consumer(env, "sales.aws", "spark", lambda r: r["reported_lsn"] == c[0]["lsn"], "a signed load")
    signed = [r for r in proxy.requests if "/tables/" in r["path"] and r["status"] == 200]
    assert signed and all(r["headers"]["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDFINALIZE/")
                          and "/eu-west-1/%s/aws4_request" % service in r["headers"]["Authorization"]
                          for r in signed)


def test_secrets_are_never_echoed(env):
    for bad in ["OPTIONS (token 'short')", "OPTIONS (client_id 'x')",
                "OPTIONS (token 'long-enough-1', client_id 'x', client_secret 'long-enough-2')"]:
        env.sql("CREATE SERVER s FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'https://c.example.com')")
        try:
            with pytest.raises(Exception) as e:
                env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER s " + bad)
            assert "short" not in str(e.value) and "long-enough" not in str(e.value), str(e.value)
        finally:
            env.sql("DROP SERVER s CASCADE")
