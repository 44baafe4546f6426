"""Publications (issue 44, docs/publishing.md): each period of a table that
becomes final is recorded in the outbox by the transaction that makes it
final and sent by the delivery worker ("finalize alerts") through libcurl to
a real HTTP receiver on loopback (test/lib/webhook_receiver.py).

The verdicts are real: the worker reads a simulator over FreeTDS, whose
clock the test moves an hour at a time. Between two moves the verdict
stands still, so "nothing early" is checked exactly: once the verdict is V
and every event up to V arrived, no event of a period ending after V may
have arrived (the assert in `step`)."""

import datetime
import json
import os
import signal
import time

import pytest

from webhook_receiver import Respond, Stall, WebhookReceiver
from worker_env import new_cluster, truth_watermark

UTC = datetime.timezone.utc
TABLE = "p.orders"
HMAC_KEY = "pub-hm4c-k3y"


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster(**{"finalize.alert_after": "2s"})
    yield cluster
    cluster.cleanup()


@pytest.fixture
def rx(pg):
    receiver = WebhookReceiver(hmac_key=HMAC_KEY).start()
    yield receiver
    receiver.stop()
    pg.sql("DELETE FROM finalize.publication")
    for (name,) in pg.sql("SELECT s.srvname FROM pg_foreign_server s JOIN pg_foreign_data_wrapper w "
                          "ON w.oid = s.srvfdw WHERE w.fdwname = 'finalize_webhook'"):
        pg.sql('DROP SERVER "%s" CASCADE' % name)
    pg.sql("DELETE FROM finalize.alert")
    pg.sql("DELETE FROM finalize.alert_target_state")


def webhook(pg, name, url, timeout="3 seconds"):
    pg.sql("CREATE SERVER %s FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url %%s, timeout %%s)" % name,
           (url, timeout))
    pg.sql("CREATE USER MAPPING FOR postgres SERVER %s OPTIONS (hmac_key %%s)" % name, (HMAC_KEY,))


def verdict(pg, table=TABLE):
    return pg.sql("SELECT finalize.finalized_until(%s)", (table,))[0][0]


def iso(ts):
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def events(rx, path):
    """The publication events a path received and answered 2xx, in arrival order (a webhook
    target also receives the incidents of alerts, which are not events)."""
    return [r.json for r in rx.requests(path) if r.json and r.json.get("schema") == "finalize.publication/1"
            and r.status and 200 <= r.status < 300]


def step(pg, sim, rx, path, hours=1):
    """Moves SQL Server's clock on by `hours` with a commit in each, waits for the verdict and for
    every event up to it, and checks that no event ran ahead of it. Returns the verdict."""
    for _ in range(hours):
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=3600)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    target = pg.sql("SELECT finalize.period_start(%s::timestamptz, interval '1 hour')", (truth_watermark(sim),))[0][0]
    pg.wait_for(lambda: verdict(pg) is not None and verdict(pg) >= target, timeout=30,
                what=f"the verdict of {TABLE} to reach {target}")
    v = verdict(pg)
    pg.wait_for(lambda: any(e["period_end"] == iso(v) for e in events(rx, path)), timeout=30,
                what=lambda: f"the event of the period ending {iso(v)} at {path}: {events(rx, path)}")
    time.sleep(0.5)                 # anything sent early would be here by now
    ahead = [e for e in events(rx, path) if e["period_end"] > iso(verdict(pg))]
    assert not ahead, f"events ran ahead of the verdict {verdict(pg)}: {ahead}"
    return v


def setup_table(env, sim):
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("pubsrc", sim)
    env.sql("SELECT finalize.track_table(%s, 'pubsrc', 'dbo.orders')", (TABLE,))
    env.wait_caught_up(TABLE, sim)


@pytest.mark.every_major
def test_each_final_hour_reaches_the_webhook_once_in_order_and_never_early(pg, env, sim, rx):
    """A webhook publication added to a tracked table hears of every hour
    that becomes final after it was added, once, in order, signed, under
    the event's id, and never before the hour is final."""
    setup_table(env, sim)
    webhook(pg, "hooks", rx.url_for("/hook"))
    start = verdict(pg)
    pg.sql("SELECT finalize.add_publication(%s, 'to_hook', 'hooks', '{\"partition_key\": \"{date}/{hour}\"}')",
           (TABLE,))
    v = step(pg, sim, rx, "/hook", hours=3)
    got = events(rx, "/hook")
    starts = [e["period_start"] for e in got]
    expected = [iso(start + datetime.timedelta(hours=h)) for h in range(int((v - start).total_seconds() // 3600))]
    assert starts == expected, got
    assert len({e["event_id"] for e in got}) == len(got)
    for r in rx.requests("/hook"):
        assert r.hmac_ok is True
        if r.json.get("schema") != "finalize.publication/1":
            continue
        assert r.header("Idempotency-Key") == r.json["event_id"]
    e = got[0]
    assert e["schema"] == "finalize.publication/1" and e["event"] == "final" and e["table"] == TABLE
    assert e["partition_key"] == e["partition"] == start.astimezone(UTC).strftime("%Y-%m-%d/%H")
    assert e["period_end"] <= e["finalized_until"]
    rows = pg.rows("SELECT * FROM finalize.publications")
    assert rows[0]["state"] == "up_to_date" and rows[0]["delivered_until"] == v and rows[0]["pending"] == 0
    # one more hour: exactly one more event
    v2 = step(pg, sim, rx, "/hook", hours=1)
    assert [e["period_end"] for e in events(rx, "/hook")][-1] == iso(v2)
    assert len(events(rx, "/hook")) == len(expected) + int((v2 - v).total_seconds() // 3600)


def test_backfill_and_a_dead_target_that_returns(pg, env, sim, rx):
    """backfill_from publishes the final hours before the publication; a
    target that fails keeps its events waiting in order (an incident once
    it failed longer than alert_after; 401 at once), while another
    publication of the same table goes on; once it answers, every hour
    arrives in order, none twice."""
    setup_table(env, sim)
    webhook(pg, "good", rx.url_for("/good"))
    webhook(pg, "flaky", rx.url_for("/flaky"))
    rx.set_default(Respond(401, body={"error": "token expired"}), path="/flaky")
    first = verdict(pg)
    pg.sql("SELECT finalize.add_publication(%s, 'to_good', 'good')", (TABLE,))
    pg.sql("SELECT finalize.add_publication(%s, 'to_flaky', 'flaky', backfill_from => %s)",
           (TABLE, first - datetime.timedelta(hours=2)))
    v = step(pg, sim, rx, "/good", hours=2)
    pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.alert WHERE kind = 'publication_failing' "
                               "AND subject = 'to_flaky' AND state = 'open'")[0][0] == 1,
                timeout=20, what="the publication_failing incident")
    (msg,) = pg.sql("SELECT message FROM finalize.alert WHERE kind = 'publication_failing'")[0]
    assert "token expired" in msg and "to_flaky" in msg and HMAC_KEY not in msg
    (state, err) = pg.sql("SELECT state, last_error FROM finalize.publications WHERE publication = 'to_flaky'")[0]
    assert state == "failing" and "HTTP 401" in err
    # backoff, not a storm: a handful of attempts in these seconds
    attempts = [r for r in rx.requests("/flaky") if (r.json or {}).get("schema") == "finalize.publication/1"]
    assert len(attempts) <= 8, len(attempts)
    rx.set_default(Respond(200), path="/flaky")
    pg.sql("SELECT finalize.retry_publication(%s, 'to_flaky')", (TABLE,))
    want = [iso(first + datetime.timedelta(hours=h)) for h in range(-2, int((v - first).total_seconds() // 3600))]
    pg.wait_for(lambda: [e["period_start"] for e in events(rx, "/flaky")] == want, timeout=30,
                what=lambda: f"{want} at /flaky: {[e['period_start'] for e in events(rx, '/flaky')]}")
    assert [e["period_start"] for e in events(rx, "/good")] == want[2:]
    pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.alert WHERE kind = 'publication_failing' "
                               "AND state = 'resolved'")[0][0] == 1, timeout=10, what="the incident resolved")


def test_a_killed_delivery_worker_and_a_crashed_server_lose_nothing(pg, env, sim, rx):
    """The delivery worker killed (SIGKILL) while a request is out sends that event
    again under the same event_id; a server crash (immediate stop) after
    the verdict's commit and before delivery loses no event: every hour
    arrives, each effect once per event_id, in order."""
    setup_table(env, sim)
    webhook(pg, "slow", rx.url_for("/slow"), timeout="20 seconds")
    start = verdict(pg)
    pg.sql("SELECT finalize.add_publication(%s, 'to_slow', 'slow')", (TABLE,))
    rx.stall(30, path="/slow")
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=3600)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    rx.wait_for(lambda r: r.path == "/slow", timeout=30)
    (pid,) = pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize alerts'")[0]
    os.kill(pid, signal.SIGKILL)           # the postmaster then restarts every process (crash recovery)
    pg.wait_for(lambda: pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize alerts'"),
                timeout=60, what="the delivery worker back after the crash")
    # the server down with events recorded and not delivered
    rx.set_default(Respond(503), path="/slow")
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=3600)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.publication_event")[0][0] >= 2, timeout=30,
                what="two events recorded")
    pg.kill_postmaster()
    pg.start()
    rx.set_default(Respond(200), path="/slow")
    v = verdict(pg)
    want = [iso(start + datetime.timedelta(hours=h)) for h in range(int((v - start).total_seconds() // 3600))]
    pg.wait_for(lambda: sorted({e["period_start"] for e in events(rx, "/slow")}) == want, timeout=60,
                what=lambda: f"{want}: {[e['period_start'] for e in events(rx, '/slow')]}")
    got = events(rx, "/slow")
    by_period = {}
    for e in got:
        by_period.setdefault(e["period_start"], set()).add(e["event_id"])
    assert all(len(ids) == 1 for ids in by_period.values()), by_period
    assert [e["period_start"] for e in got] == sorted(e["period_start"] for e in got)


def test_paimon_contract_and_bad_declarations(pg, env, sim, rx):
    """With contract "paimon" a 2xx without {"result": "SUCCESS"} is not a
    delivery; bad declarations get clear errors and change nothing."""
    setup_table(env, sim)
    webhook(pg, "paimon", rx.url_for("/paimon"))
    rx.set_default(Respond(200, body={"result": "FAILED"}), path="/paimon")
    pg.sql("SELECT finalize.add_publication(%s, 'to_paimon', 'paimon', '{\"contract\": \"paimon\", "
           "\"params\": \"opaque\"}')", (TABLE,))
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=3610)
    sim.call("sim.commit", inserts=1)
    pg.wait_for(lambda: pg.sql("SELECT last_error FROM finalize.publications")[0][0] is not None, timeout=30,
                what="a refused answer")
    assert "result" in pg.sql("SELECT last_error FROM finalize.publications")[0][0]
    rx.set_default(Respond(200, body={"result": "SUCCESS"}), path="/paimon")
    pg.sql("SELECT finalize.retry_publication(%s, 'to_paimon')", (TABLE,))
    pg.wait_for(lambda: pg.sql("SELECT state FROM finalize.publications")[0][0] == "up_to_date", timeout=30,
                what="delivered")
    body = events(rx, "/paimon")[-1]
    assert body["params"] == "opaque" and body["table"] == TABLE and "partition" in body
    for args, words in [
        (("no.such", "x", "paimon", "{}"), "no.such"),
        ((TABLE, "x", "nosuchserver", "{}"), "does not exist"),
        ((TABLE, "x", "pubsrc", "{}"), "cannot be a publication"),
        ((TABLE, "x", "paimon", '{"contract": "kafka"}'), "contract"),
        ((TABLE, "x", "paimon", '{"partition_key": "{week}"}'), "partition_key"),
        ((TABLE, "to_paimon", "paimon", "{}"), "already has a publication"),
        ((TABLE, "bad name!", "paimon", "{}"), "invalid publication name"),
    ]:
        with pytest.raises(Exception) as e:
            pg.sql("SELECT finalize.add_publication(%s, %s, %s, %s::jsonb)", args)
        assert words in str(e.value), (args, str(e.value))
    assert pg.sql("SELECT count(*) FROM finalize.publication")[0][0] == 1
    pg.sql("SELECT finalize.drop_publication(%s, 'to_paimon')", (TABLE,))
    assert pg.sql("SELECT count(*) FROM finalize.publication")[0][0] == 0


def at(hh, mm=0):
    return datetime.datetime(2026, 11, 2, hh, mm, tzinfo=UTC)


def test_losses_consumers_and_derived_tables_never_publish_ahead(pg, env, sim, rx):
    """Every other path that makes periods final publishes them, and none
    runs ahead: a range past an unacknowledged loss moves the watermark but
    publishes nothing past the loss (on the table and on a derived table
    of it); the acknowledgement publishes the hours it made final, once; a
    required consumer holds the next hour until its report; the derived
    table's publication follows its input through the scheduler."""
    copy = TABLE + "_copy"
    sim.call("sim.commit", inserts=1, at=at(9, 30))
    sim.call("sim.advance", to=at(10, 5))
    env.add_source("pubsrc", sim)
    env.sql("SELECT finalize.track_table(%s, 'pubsrc', 'dbo.orders', '1 hour'::interval, 'max_lsn', 'warn', "
            "'resume')", (TABLE,))
    env.wait_caught_up(TABLE, sim)
    env.sql("SELECT finalize.track_derived(%s, ARRAY[%s])", (copy, TABLE))
    webhook(pg, "lossy", rx.url_for("/src"))
    webhook(pg, "lossy_copy", rx.url_for("/copy"))
    pg.sql("SELECT finalize.add_publication(%s, 'src', 'lossy', backfill_from => %s)", (TABLE, at(9)))
    pg.sql("SELECT finalize.add_publication(%s, 'copy', 'lossy_copy', backfill_from => %s)", (copy, at(9)))

    def published(path):
        return [e["period_start"] for e in events(rx, path)]

    def settle(path, table, until):
        pg.wait_for(lambda: verdict(pg, table) == until and published(path) and
                    published(path)[-1] == iso(until - datetime.timedelta(hours=1)), timeout=60,
                    what=lambda: f"{path} up to {until}: {published(path)}, verdict {verdict(pg, table)}")
        time.sleep(0.5)
        assert all(p < iso(verdict(pg, table)) for p in published(path)), (published(path), verdict(pg, table))
        assert len(published(path)) == len(set(published(path))), published(path)

    settle("/src", TABLE, at(10))
    settle("/copy", copy, at(10))
    # Hours 10 to 12 purged before the worker reads them: a loss.
    pg.sql("ALTER SYSTEM SET finalize.enabled = off")
    pg.reload()
    pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker'"),
                what="the worker to stop")
    for minute in (15, 75, 140):
        sim.call("sim.commit", inserts=1, at=at(10) + datetime.timedelta(minutes=minute))
    sim.call("sim.advance", to=at(12, 25))
    sim.call("sim.cleanup", low_lsn=sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])
    pg.sql("ALTER SYSTEM RESET finalize.enabled")
    pg.reload()
    pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.loss")[0][0] == 1, timeout=60,
                what=lambda: f"the loss: {env.status(TABLE)} {env.source_status('pubsrc')}")
    sim.call("sim.commit", inserts=1, at=at(14))
    sim.call("sim.advance", to=at(15, 1))
    env.wait_caught_up(TABLE, sim)
    assert pg.sql("SELECT w.finalized_until FROM finalize.watermark w "
                  "WHERE w.table_id = finalize_internal.tracked_id(%s)", (TABLE,))[0][0] == at(15)
    time.sleep(1.5)                  # a scheduler round or more: the derived table had its chance
    assert published("/src") == [iso(at(9))] and published("/copy") == [iso(at(9))], \
        (published("/src"), published("/copy"))
    # The acknowledgement makes hours 10 to 14 final: published once each, in order.
    span = pg.sql("SELECT finalize.period_start(min(l.lost_from), '1 hour', 'UTC'), "
                  "finalize.period_end(max(l.lost_to), '1 hour', 'UTC') FROM finalize.loss l")[0]
    pg.sql("SELECT finalize.acknowledge_loss(%s, %s, %s, 're-snapshotted')", (TABLE, span[0], span[1]))
    settle("/src", TABLE, at(15))
    settle("/copy", copy, at(15))
    assert published("/src") == [iso(at(h)) for h in range(9, 15)]
    # A required consumer holds the next hour until it reports.
    env.sql("SELECT finalize.add_consumer(%s, 'loader')", (TABLE,))
    sim.call("sim.commit", inserts=1, at=at(15, 10))
    sim.call("sim.advance", to=at(16, 5))
    env.wait_caught_up(TABLE, sim)
    time.sleep(1.5)
    assert published("/src")[-1] == iso(at(14)) and published("/copy")[-1] == iso(at(14))
    pg.sql("SELECT finalize.report_progress(%s, 'loader', %s)", (TABLE, env.status(TABLE)["offset_lsn"]))
    settle("/src", TABLE, at(16))
    settle("/copy", copy, at(16))


def test_the_webhook_recipes_as_printed(pg, env, sim):
    """docs/publishing.md's webhook recipes, run as printed (the URL and the
    table name replaced): the receiver checks every signature and prints
    each final hour once."""
    import os
    import socket
    import subprocess
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "peers"))
    from peerlib import recipe
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    receiver = subprocess.Popen([sys.executable, "-c", recipe("publish-webhook-receiver", "python")],
                                env=dict(os.environ, FINALIZE_HMAC_KEY="a-long-random-secret", PORT=str(port)),
                                stdout=subprocess.PIPE, text=True)
    try:
        setup_table(env, sim)
        start = verdict(pg)
        sql = recipe("publish-webhook-sql", "sql").replace(
            "https://hooks.example.com/finalize", f"http://127.0.0.1:{port}/finalize").replace("sales.orders", TABLE)
        pg.sql(sql)
        for _ in range(2):
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=3600)
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=10)
        pg.wait_for(lambda: pg.sql("SELECT delivered_until FROM finalize.publications")[0][0] ==
                    start + datetime.timedelta(hours=2), timeout=30, what="two hours delivered")
    finally:
        receiver.terminate()
        out = receiver.communicate(timeout=10)[0]
        pg.sql("DELETE FROM finalize.publication")
        pg.sql("DROP SERVER IF EXISTS lake_events CASCADE")
    want = ["final %s %s" % (TABLE, (start + datetime.timedelta(hours=h)).astimezone(UTC).strftime("dt=%Y-%m-%d/hour=%H"))
            for h in range(2)]
    assert out.splitlines() == want, out


def test_who_may_publish_is_checked_at_every_attempt(pg, env, sim, rx):
    """A publication is declared by an admin with USAGE on its server, and
    delivered only while that still holds: USAGE revoked, the events wait
    with the reason (an incident at once), granted again, they go out. A
    file:// marker needs pg_write_server_files."""
    setup_table(env, sim)
    pg.sql("DROP ROLE IF EXISTS pub_admin")
    pg.sql("CREATE ROLE pub_admin LOGIN IN ROLE finalize_admin")
    try:
        webhook(pg, "guarded", rx.url_for("/guarded"))
        with pytest.raises(Exception) as e:
            pg.sql("SELECT finalize.add_publication(%s, 'g', 'guarded')", (TABLE,), user="pub_admin")
        assert "permission denied for server guarded" in str(e.value) and "GRANT USAGE" in str(e.value)
        with pytest.raises(Exception) as e:
            pg.sql("SELECT finalize.add_publication(%s, 'm', NULL, '{\"location\": \"file:///tmp/x/{date}/\"}')",
                   (TABLE,), user="pub_admin")
        assert "pg_write_server_files" in str(e.value)
        pg.sql("GRANT USAGE ON FOREIGN SERVER guarded TO pub_admin")
        pg.sql("GRANT postgres TO pub_admin")       # the owner's user mapping is the one the worker reads
        pg.sql("SELECT finalize.add_publication(%s, 'g', 'guarded')", (TABLE,), user="pub_admin")
        pg.sql("REVOKE USAGE ON FOREIGN SERVER guarded FROM pub_admin")
        pg.sql("REVOKE postgres FROM pub_admin")
        start = verdict(pg)
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=3610)
        sim.call("sim.commit", inserts=1)
        pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.alert WHERE kind = 'publication_failing' "
                                   "AND state = 'open'")[0][0] == 1, timeout=30, what="the incident")
        assert "no longer has USAGE" in pg.sql("SELECT last_error FROM finalize.publications")[0][0]
        assert events(rx, "/guarded") == []
        pg.sql("GRANT USAGE ON FOREIGN SERVER guarded TO pub_admin")
        pg.sql("GRANT postgres TO pub_admin")
        pg.sql("SELECT finalize.retry_publication(%s, 'g')", (TABLE,))
        pg.wait_for(lambda: [e["period_start"] for e in events(rx, "/guarded")] == [iso(start)], timeout=30,
                    what="the event once allowed again")
    finally:
        pg.sql("DELETE FROM finalize.publication")
        pg.sql("DROP OWNED BY pub_admin")
        pg.sql("DROP ROLE pub_admin")


def test_a_stalled_target_opens_its_breaker_after_one_attempt(pg, env, sim, rx):
    """A target that stalls holds the delivery worker for its timeout once:
    that slow failure opens its circuit breaker at once (not after five),
    so the other publications' events go out meanwhile and the stalled
    one is not tried again until the breaker lets a probe through."""
    setup_table(env, sim)
    webhook(pg, "stuck", rx.url_for("/stuck"), timeout="3 seconds")
    webhook(pg, "fine", rx.url_for("/fine"))
    rx.set_default(Stall(30), path="/stuck")
    pg.sql("SELECT finalize.add_publication(%s, 'to_stuck', 'stuck')", (TABLE,))
    pg.sql("SELECT finalize.add_publication(%s, 'to_fine', 'fine')", (TABLE,))
    start = verdict(pg)
    for _ in range(3):
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=3600)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    want = [iso(start + datetime.timedelta(hours=h)) for h in range(3)]
    pg.wait_for(lambda: [e["period_start"] for e in events(rx, "/fine")] == want, timeout=60,
                what=lambda: f"{want} at /fine: {events(rx, '/fine')}")
    (failures, open_until) = pg.sql("SELECT consecutive_failures, open_until FROM finalize.alert_target_state "
                                    "WHERE target_name = 'stuck'")[0]
    tried = [r for r in rx.requests("/stuck") if (r.json or {}).get("schema") == "finalize.publication/1"]
    assert failures == 1 and open_until is not None, (failures, open_until)
    assert len(tried) == 1, len(tried)


def test_events_waiting_when_a_loss_takes_their_periods_back_wait_for_them(pg, env, sim, rx):
    """Events recorded while their periods were final, still waiting for a
    target that was down, are not sent once a loss takes those periods back
    (what a lake rollback records, inserted here as lake_rollback writes
    it): they wait, in order, until the loss is acknowledged."""
    setup_table(env, sim)
    webhook(pg, "later", rx.url_for("/later"))
    rx.set_default(Respond(503), path="/later")
    start = verdict(pg)
    pg.sql("SELECT finalize.add_publication(%s, 'to_later', 'later')", (TABLE,))
    for _ in range(3):
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=3600)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    pg.wait_for(lambda: pg.sql("SELECT count(*) FROM finalize.publication_event")[0][0] == 3, timeout=30,
                what="three events recorded")
    lost_from = start + datetime.timedelta(hours=1)
    pg.sql("WITH f AS (INSERT INTO finalize.fact (table_id, kind, event, detail) "
           "VALUES (finalize_internal.tracked_id(%s), 'event', 'data_loss', '{\"cause\": \"lake_rollback\"}') "
           "RETURNING fact_id) "
           "INSERT INTO finalize.loss (table_id, fact_id, lost_from, lost_to, created_at) "
           "SELECT finalize_internal.tracked_id(%s), f.fact_id, %s, 'infinity', clock_timestamp() FROM f",
           (TABLE, TABLE, lost_from))
    pg.sql("SELECT finalize_internal.refresh_loss_blocked(finalize_internal.tracked_id(%s))", (TABLE,))
    assert verdict(pg) == lost_from
    rx.set_default(Respond(200), path="/later")
    pg.sql("SELECT finalize.retry_publication(%s, 'to_later')", (TABLE,))
    pg.wait_for(lambda: "no longer final" in (pg.sql("SELECT last_error FROM finalize.publications")[0][0] or ""),
                timeout=30, what="the next event held")
    assert [e["period_start"] for e in events(rx, "/later")] == [iso(start)]
    time.sleep(1)
    assert [e["period_start"] for e in events(rx, "/later")] == [iso(start)]
    pg.sql("SELECT finalize.acknowledge_loss(%s, %s, %s, 'rebuilt')",
           (TABLE, lost_from, start + datetime.timedelta(hours=3)))
    want = [iso(start + datetime.timedelta(hours=h)) for h in range(3)]
    pg.wait_for(lambda: [e["period_start"] for e in events(rx, "/later")] == want, timeout=30,
                what=lambda: f"{want}: {events(rx, '/later')}")


def test_declarations_that_would_mislead_are_refused_and_untrack_ends_publications(pg, env, sim, rx):
    """A partition key that names periods apart by one key, and a webhook
    server made for an alert channel, are refused; a failure before the
    target is reached does not open the breaker alert webhooks share;
    untracking a table drops its publications and their pending events."""
    setup_table(env, sim)
    pg.sql("CREATE SERVER chat FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url %s, format 'slack')",
           (rx.url_for("/chat"),))
    webhook(pg, "plain", rx.url_for("/plain"))
    for args, words in [((TABLE, "c", "plain", '{"partition_key": "h={hour}"}'), "the same key"),
                        ((TABLE, "c", "plain", '{"partition_key": "{month}/{day}"}'), "the same key"),
                        ((TABLE, "c", "chat", "{}"), "does not take publications")]:
        with pytest.raises(Exception) as e:
            pg.sql("SELECT finalize.add_publication(%s, %s, %s, %s::jsonb)", args)
        assert words in str(e.value), (args, str(e.value))
    pg.sql("SELECT finalize.add_publication(%s, 'p', 'plain', '{\"partition_key\": \"{date}T{hour}\"}')", (TABLE,))
    pg.sql("ALTER SERVER plain OPTIONS (ADD format 'slack')")     # load() now refuses it
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=3610)
    sim.call("sim.commit", inserts=1)
    pg.wait_for(lambda: "format" in (pg.sql("SELECT last_error FROM finalize.publications")[0][0] or ""),
                timeout=30, what="the refused load")
    assert pg.sql("SELECT count(*) FROM finalize.alert_target_state WHERE target_name = 'plain' "
                  "AND consecutive_failures > 0")[0][0] == 0
    env.sql("SELECT finalize.untrack_table(%s)", (TABLE,))
    assert pg.sql("SELECT count(*) FROM finalize.publication")[0][0] == 0
    assert pg.sql("SELECT count(*) FROM finalize.publication_event")[0][0] == 0


def test_a_key_shared_by_a_run_of_periods_is_published_once_its_last_period_is_final(pg, env, sim, rx):
    """{date} on an hourly table names a day: it is published once, when
    the day's last hour is final, with the day as its span (never after
    its first hour)."""
    setup_table(env, sim)
    webhook(pg, "days", rx.url_for("/days"))
    start = verdict(pg)                                   # 2026-11-02 08:00 UTC
    pg.sql("SELECT finalize.add_publication(%s, 'by_day', 'days', '{\"partition_key\": \"{date}\"}')", (TABLE,))
    for _ in range(15):                                   # final to 23:00: the day is not
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=3600)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    pg.wait_for(lambda: verdict(pg) == start + datetime.timedelta(hours=15), timeout=30, what="23:00 final")
    time.sleep(1)
    assert events(rx, "/days") == []
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=3600)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    pg.wait_for(lambda: len(events(rx, "/days")) == 1, timeout=30,
                what=lambda: f"the day published: {pg.rows('SELECT * FROM finalize.publication_event')}")
    (e,) = events(rx, "/days")
    assert e["partition_key"] == "2026-11-02" and e["period_start"] == "2026-11-02T00:00:00Z"
    assert e["period_end"] == "2026-11-03T00:00:00Z" <= iso(verdict(pg))


def test_late_rows_are_told_only_for_keys_already_published(pg, env, sim, rx):
    """Late rows in an event period already final send a late_data event to
    a publication that published that period's key, with the counts; a
    publication whose key (a day of an hourly table) is not published yet
    hears nothing: a late_data event must not name a partition before it is
    final."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("pubsrc", sim)
    env.sql("SELECT finalize.track_table(%s, 'pubsrc', 'dbo.orders', event_time_column => 'created_at', "
            "allowed_lateness => '10 minutes')", (TABLE,))
    env.wait_caught_up(TABLE, sim)
    webhook(pg, "late_hours", rx.url_for("/hours"))
    webhook(pg, "late_days", rx.url_for("/days"))
    pg.sql("SELECT finalize.add_publication(%s, 'hours', 'late_hours')", (TABLE,))
    pg.sql("SELECT finalize.add_publication(%s, 'days', 'late_days', '{\"partition_key\": \"{date}\"}')", (TABLE,))
    start = verdict(pg)
    for _ in range(3):
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=3600)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.wait_caught_up(TABLE, sim)
    v = verdict(pg)
    assert v is not None and start is not None and v > start
    pg.wait_for(lambda: events(rx, "/hours") and events(rx, "/hours")[-1]["period_end"] == iso(v), timeout=30,
                what="the final hours")
    p1 = v - datetime.timedelta(hours=1)
    fmt = "%Y-%m-%d %H:%M:%S"
    late = [{"op": "insert", "created_at": (p1 + datetime.timedelta(minutes=m)).strftime(fmt)} for m in (1, 20, 40)]
    sim.call("sim.commit", rows=json.dumps(late))
    sim.call("sim.advance", seconds=10)
    env.wait_caught_up(TABLE, sim)
    pg.wait_for(lambda: [e for e in events(rx, "/hours") if e["event"] == "late_data"], timeout=30,
                what=lambda: f"the late_data event: {events(rx, '/hours')}")
    (e,) = [e for e in events(rx, "/hours") if e["event"] == "late_data"]
    assert e["period_start"] == iso(p1) and e["late_data"]["rows"] == 3
    time.sleep(1)
    assert events(rx, "/days") == []           # the day is not final: neither its event nor late data
