"""Webhook delivery of incidents (issue 15): the alerts worker sends each
incident's transitions through libcurl to a real HTTP receiver on loopback
(test/lib/webhook_receiver.py), in finalize's signed json and in the
Slack, PagerDuty Events v2 and Opsgenie formats; retries back off and
honour Retry-After, fail at the retry limit or at once on an answer no
retry can change; a target's circuit breaker opens after five failures in
a row; a receiver that stalls delays no verdict; secrets never reach the
log or the tables."""

import json
import time

import pytest

from worker_env import new_cluster
from webhook_receiver import Reset, Respond, Stall, WebhookReceiver

HMAC_KEY = "hm4c-s3cret-key"
BEARER = "b34rer-t0ken-xyz"
ROUTING = "R0UT1NG-KEY-pd"
GENIE = "g3nie-api-key"
SLACK_PATH = "/slack/T000/B000/sl4ck-s3cret-path"


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster(**{"finalize.alert_after": "1s"})
    yield cluster
    cluster.cleanup()


@pytest.fixture
def rx(pg):
    """A receiver; the targets and incidents a test made are removed after it."""
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()
    for (name,) in pg.sql("SELECT s.srvname FROM pg_foreign_server s JOIN pg_foreign_data_wrapper w "
                          "ON w.oid = s.srvfdw WHERE w.fdwname = 'finalize_webhook'"):
        pg.sql('DROP SERVER "%s" CASCADE' % name)
    pg.sql("DELETE FROM finalize.alert")
    pg.sql("DELETE FROM finalize.alert_target_state")
    pg.sql("ALTER SYSTEM RESET finalize.alert_retry_limit")
    pg.reload()


def target(pg, name, url, fmt="json", min_severity="info", timeout="5 seconds", **secrets):
    pg.sql("CREATE SERVER %s FOREIGN DATA WRAPPER finalize_webhook "
           "OPTIONS (url %%s, format %%s, min_severity %%s, timeout %%s)" % name,
           (url, fmt, min_severity, timeout))
    if secrets:
        pg.sql("CREATE USER MAPPING FOR postgres SERVER %s OPTIONS (%s)"
               % (name, ", ".join("%s %%s" % k for k in secrets)), tuple(secrets.values()))


def raise_alert(pg, kind="unreachable", severity="critical", server="erp", subject="", message="Login failed."):
    return pg.sql("SELECT finalize_internal.raise_alert(%s, %s, NULL, %s, %s, %s)",
                  (kind, severity, server, subject, message))[0][0]


def deliveries(pg, alert_id=None):
    return pg.sql("SELECT target, transition, state, attempts, last_status, last_error "
                  "FROM finalize.alert_deliveries WHERE %s ORDER BY delivery_id"
                  % ("true" if alert_id is None else "alert_id = %d" % alert_id))


@pytest.mark.every_major
def test_an_incident_reaches_a_signed_json_webhook_and_resolves(pg, env, sim, rx):
    """A real condition (SQL Server refusing the worker's login) opens an
    incident that reaches the webhook signed; logins working again resolve
    it, and the resolution follows."""
    rx.set_hmac_key(HMAC_KEY)
    target(pg, "ops", rx.url_for("/hook"), hmac_key=HMAC_KEY, bearer_token=BEARER)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim)
    env.sql("SELECT finalize.track_table('d.orders', 'erp', 'dbo.orders')")
    env.wait_caught_up("d.orders", sim)
    sim.call("sim.kill_sessions")
    sim.call("sim.fault_refuse_logins", count=-1, message="Login failed for user 'sa'.")
    sim.call("sim.advance", seconds=6)
    opened, = rx.wait_for(lambda r: r.json and r.json["event"] == "open", timeout=60)
    assert opened.method == "POST" and opened.path == "/hook"
    assert opened.hmac_ok is True, "the receiver's own HMAC-SHA256 must verify the signature"
    assert opened.header("Authorization") == "Bearer " + BEARER
    assert opened.header("Content-Type") == "application/json"
    body = opened.json
    assert body["schema"] == "finalize.alert/1" and body["alert"]["kind"] == "unreachable"
    assert body["alert"]["source"] == "erp" and body["alert"]["severity"] == "critical"
    assert "18456" in body["alert"]["message"] and "Login failed for user 'sa'." in body["alert"]["message"]
    assert opened.header("Idempotency-Key") == body["idempotency_key"] == body["dedup_key"] + "-open"
    sim.call("sim.fault_clear")
    env.wait_caught_up("d.orders", sim)
    resolved, = rx.wait_for(lambda r: r.json and r.json["event"] == "resolve", timeout=60)
    assert resolved.hmac_ok is True and resolved.json["dedup_key"] == body["dedup_key"]
    assert resolved.json["alert"]["state"] == "resolved" and resolved.json["alert"]["resolved_at"]
    # Its message says it resolved, when, and what it was.
    assert resolved.json["alert"]["message"] == "Resolved at %s (open since %s). It was: %s" % (
        resolved.json["alert"]["resolved_at"], body["alert"]["opened_at"],
        pg.sql("SELECT message FROM finalize.alerts WHERE alert_id = %s", (body["alert"]["id"],))[0][0])
    assert "18456" in resolved.json["alert"]["message"]
    assert [r.json["event"] for r in rx.requests()] == ["open", "resolve"]
    pg.wait_for(lambda: all(d[2] == "delivered" for d in deliveries(pg)), what="deliveries recorded")
    assert [(d[1], d[2], d[3], d[4]) for d in deliveries(pg)] == [("open", "delivered", 1, 200),
                                                                  ("resolve", "delivered", 1, 200)]


def test_slack_pagerduty_and_opsgenie_get_what_their_apis_expect(pg, rx):
    """Each format follows its service's public API through open,
    acknowledge and resolve."""
    rx.set_default(Respond(202, body={"status": "success"}), path="/pd")
    rx.set_default(Respond(202, body={"result": "Request will be processed"}), path="/og")
    target(pg, "slack", rx.url_for("/slack"), fmt="slack", min_severity="warning")
    target(pg, "pd", rx.url_for("/pd/v2/enqueue"), fmt="pagerduty_v2", min_severity="critical", routing_key=ROUTING)
    target(pg, "og", rx.url_for("/og"), fmt="opsgenie", api_key=GENIE)
    info = raise_alert(pg, kind="schema_change", severity="info", subject="x", message="ALTER TABLE <x> & y")
    crit = raise_alert(pg, message="Login failed for user 'cdc'. (18456)")
    pg.sql("SELECT finalize.acknowledge_alert(%s, 'on it, OPS-7')", (crit,))
    pg.sql("SELECT finalize_internal.resolve_alerts('unreachable', NULL, 'erp')")
    rx.wait_for(lambda r: r.path.startswith("/pd"), count=3)
    rx.wait_for(lambda r: r.path.startswith("/og"), count=4)
    rx.wait_for(lambda r: r.path.startswith("/slack"), count=3)

    pd = [r.json for r in rx.requests("/pd")]
    assert [p["event_action"] for p in pd] == ["trigger", "acknowledge", "resolve"]
    assert {p["routing_key"] for p in pd} == {ROUTING} and len({p["dedup_key"] for p in pd}) == 1
    trig = pd[0]["payload"]
    assert trig["severity"] == "critical" and trig["source"] == "erp" and trig["class"] == "unreachable"
    assert "18456" in trig["summary"] and len(trig["summary"]) <= 1024 and trig["timestamp"].endswith("Z")
    assert "payload" not in pd[1] and "payload" not in pd[2]

    og = rx.requests("/og")
    creates = {r.json["priority"]: r for r in og if r.path == "/og/v2/alerts"}
    assert set(creates) == {"P1", "P5"}                        # the critical and the info incident
    alias = creates["P1"].json["alias"]
    assert alias == pd[0]["dedup_key"] and alias != creates["P5"].json["alias"]
    later = [r for r in og if r.path != "/og/v2/alerts"]
    assert [r.path for r in later] == ["/og/v2/alerts/%s/acknowledge?identifierType=alias" % alias,
                                       "/og/v2/alerts/%s/close?identifierType=alias" % alias]
    assert later[0].json["note"] == "on it, OPS-7" and later[0].json["user"] == "postgres"
    assert all(r.header("Authorization") == "GenieKey " + GENIE for r in og)
    msg = creates["P1"].json["message"]
    assert len(msg) <= 130 and all(isinstance(v, str) for v in creates["P1"].json["details"].values())

    slack = [r.json for r in rx.requests("/slack")]
    assert slack[0]["text"].startswith(":red_circle: [CRITICAL] unreachable on source erp")
    assert slack[1]["text"].startswith(":eyes: ACKNOWLEDGED") and "on it, OPS-7" in json.dumps(slack[1]["blocks"])
    assert slack[2]["text"].startswith(":large_green_circle: [CRITICAL] unreachable on source erp: Resolved at ")
    assert all(s["blocks"][0]["type"] == "section" for s in slack)
    # the info incident reached only the targets whose min_severity allows it
    assert not any("schema_change" in r.text for r in rx.requests("/slack") + rx.requests("/pd"))
    assert [(d[0], d[1]) for d in deliveries(pg, info)] == [("og", "open")]


def test_retries_back_off_and_honour_retry_after(pg, rx):
    """A 500, then a 429 asking for 2 s, then success: three attempts of the
    same request, spaced by the backoff and then by Retry-After."""
    rx.script([Respond(500, body="upstream down"), Respond(429, headers={"Retry-After": "2"})], path="/r")
    target(pg, "retry", rx.url_for("/r"))
    alert = raise_alert(pg)
    got = rx.wait_for(lambda r: r.status == 200, timeout=30)
    reqs = rx.requests("/r")
    assert [r.status for r in reqs] == [500, 429, 200]
    assert len({r.body for r in reqs}) == 1 and len({r.header("Idempotency-Key") for r in reqs}) == 1
    # backoff 1 s with jitter in its upper half, then at least Retry-After
    assert reqs[1].monotonic - reqs[0].monotonic >= 0.5
    assert reqs[2].monotonic - reqs[1].monotonic >= 2.0
    pg.wait_for(lambda: deliveries(pg, alert)[0][2] == "delivered", what="the delivery recorded")
    assert deliveries(pg, alert)[0][2:5] == ("delivered", 3, 200)
    assert got


def test_the_retry_limit_and_answers_no_retry_can_change(pg, rx):
    pg.sql("ALTER SYSTEM SET finalize.alert_retry_limit = 2")
    pg.reload()
    rx.set_default(Respond(503, body="try later"), path="/busy")
    rx.set_default(Respond(400, body={"status": "invalid event", "errors": ["bad"]}), path="/bad")
    target(pg, "busy", rx.url_for("/busy"))
    target(pg, "bad", rx.url_for("/bad"))
    alert = raise_alert(pg)
    pg.wait_for(lambda: all(d[2] == "failed" for d in deliveries(pg, alert)) and len(deliveries(pg, alert)) == 2,
                timeout=30, what=lambda: "both deliveries failed: %s" % deliveries(pg, alert))
    by_target = {d[0]: d for d in deliveries(pg, alert)}
    assert by_target["busy"][3:6] == (2, 503, "HTTP 503: try later")
    assert by_target["bad"][3:5] == (1, 400) and "invalid event" in by_target["bad"][5]
    time.sleep(1.5)
    assert len(rx.requests("/busy")) == 2 and len(rx.requests("/bad")) == 1


def test_a_circuit_breaker_stops_hammering_a_dead_target(pg, rx):
    """Five failures in a row open the target's breaker: nothing more is
    sent while it is open; once it is due, one probe closes it and the
    backlog drains."""
    rx.set_default(Reset(), path="/cb")
    target(pg, "flaky", rx.url_for("/cb"))
    for i in range(7):
        raise_alert(pg, subject="partition-%d" % i, message="incident %d" % i)
    pg.wait_for(lambda: pg.sql("SELECT open_until > now() FROM finalize.alert_target_state")[0:1] == [(True,)],
                timeout=30, what="the breaker to open")
    sent = len(rx.requests("/cb"))
    assert sent == 5 and all(r.outcome == "reset" for r in rx.requests("/cb"))
    time.sleep(2)
    assert len(rx.requests("/cb")) == sent, "nothing is sent while the breaker is open"
    opened = pg.sql("SELECT count(*) FROM finalize.alert_deliveries WHERE breaker_open_until IS NOT NULL")[0][0]
    assert opened == 7
    errors = {d[5] for d in deliveries(pg) if d[5]}
    assert errors and all("reset" in e.lower() or "recv" in e.lower() or "empty reply" in e.lower() for e in errors), errors
    # the target recovers; the breaker is due (as it would be 30 s later)
    rx.set_default(Respond(200), path="/cb")
    pg.sql("UPDATE finalize.alert_target_state SET open_until = now()")
    pg.sql("UPDATE finalize.alert_delivery SET next_attempt = now() WHERE state = 'pending'")
    # a new incident wakes the worker at once (else it finds them within 10 s)
    raise_alert(pg, subject="wake", message="wake the worker")
    pg.wait_for(lambda: all(d[2] == "delivered" for d in deliveries(pg)), timeout=30,
                what=lambda: "the backlog to drain: %s" % deliveries(pg))
    assert pg.sql("SELECT consecutive_failures, open_until FROM finalize.alert_target_state") == [(0, None)]


def test_a_stalled_receiver_delays_no_verdict(pg, env, sim, rx):
    """The receiver holds every request for 60 s: the alerts worker waits on
    it, the source worker does not."""
    rx.set_default(Stall(60), path="/stall")
    target(pg, "stalled", rx.url_for("/stall"), timeout="60 seconds")
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("erp", sim)
    env.sql("SELECT finalize.track_table('d.stall', 'erp', 'dbo.orders')")
    env.wait_caught_up("d.stall", sim)
    raise_alert(pg, message="held by a stalled receiver")
    rx.wait_for(lambda r: r.path == "/stall", timeout=30)
    before = env.one("SELECT finalized_until FROM finalize.watermark w JOIN finalize.tracked_table t "
                     "USING (table_id) WHERE t.table_name = 'd.stall'")
    for _ in range(3):
        sim.call("sim.commit", inserts=2)
        sim.call("sim.advance", seconds=3600)
        env.wait_caught_up("d.stall", sim)
    after = env.one("SELECT finalized_until FROM finalize.watermark w JOIN finalize.tracked_table t "
                    "USING (table_id) WHERE t.table_name = 'd.stall'")
    assert after > before
    stalled, = rx.requests("/stall")
    assert stalled.outcome == "pending", "the delivery is still held while verdicts moved"
    assert pg.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'finalize alerts' "
                  "AND query LIKE 'finalize: delivering an alert to%'")[0][0] == 1


def test_secrets_never_reach_the_log_or_the_tables(pg, rx):
    """A receiver that echoes the request back in a 500 (Authorization
    header, routing key in the body) puts no secret into last_error; no
    secret is in the server log, the incident tables or the views."""
    def echoing(req):
        return Respond(500, body="you sent %s %s %s" % (req.path, dict(req.headers), req.text))
    rx.set_default(echoing, path="/echo")
    target(pg, "echo_json", rx.url_for("/echo/json"), hmac_key=HMAC_KEY, bearer_token=BEARER)
    target(pg, "echo_pd", rx.url_for("/echo/pd"), fmt="pagerduty_v2", routing_key=ROUTING)
    pg.sql("CREATE SERVER echo_slack FOREIGN DATA WRAPPER finalize_webhook OPTIONS (format 'slack')")
    pg.sql("CREATE USER MAPPING FOR postgres SERVER echo_slack OPTIONS (url %s)", (rx.url_for("/echo" + SLACK_PATH),))
    pg.sql("CREATE SERVER echo_og FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url %s, format 'opsgenie')",
           (rx.url_for("/echo/og"),))
    pg.sql("CREATE USER MAPPING FOR postgres SERVER echo_og OPTIONS (api_key %s)", (GENIE,))
    raise_alert(pg, message="secret check")
    pg.wait_for(lambda: len([d for d in deliveries(pg) if d[3] >= 1 and d[5]]) == 4, timeout=30,
                what=lambda: "four failed attempts: %s" % deliveries(pg))
    assert any("[redacted]" in d[5] for d in deliveries(pg))
    dump = "\n".join(str(r) for r in pg.sql(
        "SELECT a::text FROM finalize.alert a UNION ALL SELECT d::text FROM finalize.alert_delivery d "
        "UNION ALL SELECT s::text FROM finalize.alert_target_state s UNION ALL SELECT v::text FROM finalize.alert_deliveries v "
        "UNION ALL SELECT v::text FROM finalize.alerts v"))
    log = pg.log()
    for secret in (HMAC_KEY, BEARER, ROUTING, GENIE, SLACK_PATH.rsplit("/", 1)[1]):
        assert secret not in dump, secret
        assert secret not in log, secret
    # a role that is not the servers' owner cannot read the mappings' options
    pg.sql("DROP ROLE IF EXISTS nosy")
    pg.sql("CREATE ROLE nosy LOGIN")
    try:
        rows = pg.sql("SELECT umoptions FROM pg_catalog.pg_user_mappings WHERE srvname LIKE 'echo%%'", user="nosy")
        assert rows and all(r[0] is None for r in rows)
    finally:
        pg.sql("DROP ROLE nosy")


def test_a_secret_in_the_url_host_or_user_info_stays_secret(pg, rx):
    """Services whose secret is a sub-domain: curl's words ("Could not resolve host: tok9f3a7c2e1d.invalid",
    "Failed to connect to ...") name the host, and the delivery that fails for good logs a WARNING; neither
    finalize.alert_deliveries nor the server log shows the host or the query of a URL kept in a user mapping
    (before, only its path was redacted; user info and fragments the validator refuses)."""
    pg.sql("ALTER SYSTEM SET finalize.alert_retry_limit = 1")
    pg.reload()
    dns = "tok9f3a7c2e1d.invalid"
    pg.sql("CREATE SERVER sub_dns FOREIGN DATA WRAPPER finalize_webhook OPTIONS (format 'json')")
    pg.sql("CREATE USER MAPPING FOR postgres SERVER sub_dns OPTIONS (url %s)",
           ("https://%s/hook?sig=qu3ry-s3cret-v4lue" % dns,))
    pg.sql("CREATE SERVER sub_refused FOREIGN DATA WRAPPER finalize_webhook OPTIONS (format 'json')")
    # *.localhost is loopback, where nothing listens on port 1: curl names the host it could not reach
    pg.sql("CREATE USER MAPPING FOR postgres SERVER sub_refused OPTIONS (url %s)",
           ("https://h0st-s3cret-x9.localhost:1/hook",))
    # An internationalized host: the resolver's error names its punycode form, xn--tk9f3a7c2e1d-4ib.invalid.
    pg.sql("CREATE SERVER sub_idn FOREIGN DATA WRAPPER finalize_webhook OPTIONS (format 'json')")
    pg.sql("CREATE USER MAPPING FOR postgres SERVER sub_idn OPTIONS (url %s)", ("https://t\u00f6k9f3a7c2e1d.invalid/hook",))
    try:
        raise_alert(pg, message="host secret check")
        pg.wait_for(lambda: {d[0] for d in deliveries(pg) if d[2] == "failed"} >= {"sub_dns", "sub_refused", "sub_idn"},
                    timeout=60, what=lambda: "the deliveries failed for good: %s" % deliveries(pg))
        errors = [d[5] for d in deliveries(pg) if d[0] in ("sub_dns", "sub_refused", "sub_idn")]
        assert all(e for e in errors) and any("[redacted]" in e for e in errors), errors
        dump = "\n".join(str(r) for r in pg.sql(
            "SELECT d::text FROM finalize.alert_delivery d UNION ALL SELECT v::text FROM finalize.alert_deliveries v "
            "UNION ALL SELECT s::text FROM finalize.alert_target_state s"))
        log = pg.log()
        assert "failed for good" in log
        for secret in (dns, "tok9f3a7c2e1d", "h0st-s3cret-x9", "qu3ry-s3cret-v4lue", "tk9f3a7c2e1d", "xn--tk9"):
            assert secret not in dump, (secret, errors)
            assert secret not in log, secret
    finally:
        pg.sql("ALTER SYSTEM RESET finalize.alert_retry_limit")
        pg.reload()


def test_a_paused_finalize_still_pages_when_verdicts_stop(pg, rx):
    """finalize.enabled = off stops polling, so the verdict stops; the
    freshness SLA opens an incident that reaches the webhook, and resuming
    resolves it. (A simulator on the real clock with live traffic: the SLA
    compares the verdict with now().)"""
    from simproc import Simulator
    from worker_env import Env
    target(pg, "ops", rx.url_for("/fresh"), min_severity="warning")
    with Simulator(clock="real", pollinginterval=1, dummy_interval=2, traffic=True, traffic_rate=3) as sim:
        env = Env(pg)
        try:
            env.add_source("live", sim)
            env.sql("SELECT finalize.track_table('d.live', 'live', 'dbo.orders', granularity => '1 second')")
            env.wait_status("d.live", lambda s: s.get("finalized_until") is not None, timeout=60)
            env.sql("SELECT finalize.alter_tracked_table('d.live', max_lag => '8 seconds')")
            pg.sql("ALTER SYSTEM SET finalize.enabled = off")
            pg.reload()
            opened, = rx.wait_for(lambda r: r.json and r.json["event"] == "open", timeout=60)
            alert = opened.json["alert"]
            assert alert["kind"] == "freshness" and alert["table"] == "d.live" and alert["severity"] == "warning"
            assert "freshness SLA (max_lag) is 00:00:08" in alert["message"]
            pg.sql("ALTER SYSTEM RESET finalize.enabled")
            pg.reload()
            resolved, = rx.wait_for(lambda r: r.json and r.json["event"] == "resolve", timeout=60)
            assert resolved.json["dedup_key"] == opened.json["dedup_key"]
            assert pg.sql("SELECT state FROM finalize.alerts WHERE kind = 'freshness'") == [("resolved",)]
            # Not the opening message again: it says it resolved, then what it was.
            assert resolved.json["alert"]["message"].startswith(
                "Resolved at %s (open since %s). It was: Table \"d.live\" is final only until "
                % (resolved.json["alert"]["resolved_at"], alert["opened_at"])), resolved.json["alert"]["message"]
        finally:
            pg.sql("ALTER SYSTEM RESET finalize.enabled")
            pg.reload()
            env.cleanup()


def test_the_alerts_worker_keeps_its_memory_flat(pg, rx):
    """Hundreds of deliveries answered with 200 kB bodies: the alerts
    worker's memory (Grand total of its contexts) does not grow with them
    (median of three thirds, as the source worker's test measures it)."""
    from worker_env import memory_total
    # answers longer than the worker reads (64 kB): delivered, and nothing of them kept
    rx.set_default(Respond(200, body="x" * 200_000), path="/mem")
    target(pg, "mem", rx.url_for("/mem"))
    conn = pg.connect()
    cur = conn.cursor()

    def deliver(n):
        start = len(rx.requests("/mem"))
        for i in range(n):
            cur.execute("SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, %s, '', 'memory')",
                        ("m%d-%d" % (start, i),))
        rx.wait_for(lambda r: True, count=start + n, timeout=120)
        pg.wait_for(lambda: not pg.sql("SELECT 1 FROM finalize.alert_delivery WHERE state = 'pending'"),
                    what="deliveries recorded")

    try:
        deliver(100)
        pid = pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize alerts'")[0][0]
        totals = [memory_total(pg, pid)]
        for _ in range(3):
            deliver(150)
            totals.append(memory_total(pg, pid))
        assert pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize alerts'")[0][0] == pid
    finally:
        conn.close()
    thirds = sorted((totals[i + 1] - totals[i]) / 150 for i in range(3))
    print("\nalerts worker %d memory: %s bytes; per delivery %s" % (pid, " -> ".join(map(str, totals)), thirds))
    assert thirds[1] < 256, "the alerts worker's memory grew by %.0f bytes per delivery (%s)" % (thirds[1], totals)


def test_bytes_of_a_sql_ascii_database_go_out_as_utf8(pg):
    """SQL_ASCII promises nothing about its bytes; JSON on the wire is UTF-8:
    a sequence that is not UTF-8 becomes '?', one that is stays."""
    pg.sql("DROP DATABASE IF EXISTS ascii_db")
    pg.sql("CREATE DATABASE ascii_db ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    try:
        pg.sql("CREATE EXTENSION finalize", dbname="ascii_db")
        body, = pg.sql("SELECT encode(convert_to(r.body, 'SQL_ASCII'), 'hex') FROM finalize_internal.alert_request('json', 'https://x.example', "
                       "jsonb_build_object('event', 'open', 'dedup_key', 'finalize-x', 'idempotency_key', 'finalize-x-open',"
                       " 'alert', jsonb_build_object('id', 1, 'kind', 'sql_error', 'severity', 'critical', "
                       "'message', E'caf\\xe9 ' || convert_from('\\xc3a9'::bytea, 'SQL_ASCII'))), '{}') r",
                       dbname="ascii_db")[0]
        assert json.loads(bytes.fromhex(body).decode("utf-8"))["alert"]["message"] == "caf? \u00e9"
    finally:
        pg.sql("DROP DATABASE ascii_db")
