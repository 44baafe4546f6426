"""The worker resolves what the pipelines writing a lake table (its consumers) report, against the
SQL Server simulator over real FreeTDS: a consumer that lags holds the verdict; an LSN between two
commits resolves to the greatest mapping row at or below it; Debezium's LSN form; a report beyond
max LSN is capped there and follows it; a replay moves nothing; a login that may not read
cdc.lsn_time_mapping leaves the consumer unresolved with SQL Server's message in the log, in
finalize.consumers and in explain_verdict; a consumer that stops reporting is consumer_stalled with
an alert. After every step the simulator's ground truth checks that no verdict claims a period
holding a change the consumer has not applied."""

import datetime
import json
import re
import select
import time

import psycopg2
import pytest

from worker_env import at, as_utc, assert_never_leads, lsn_text, new_cluster, sim_clock, sim_max_lsn

UTC = datetime.timezone.utc
TABLE = "sales.orders"
NOTHING = "0x" + "00" * 10            # a consumer that has applied nothing
PASSWORD = "Fin4lize-Reader!"
DENIED = "The SELECT permission was denied on the object 'lsn_time_mapping', database 'erp', schema 'cdc'."


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


# --- helpers ---------------------------------------------------------------------------------

def commit(sim, when, **ops):
    """One committed transaction on dbo.orders at a simulated instant -> its LSN (finalize's text)."""
    return lsn_text(sim.call("sim.commit", at=when, **ops)[0][0]["start_lsn"])


def plus(lsn, n):
    """An LSN n steps after (or before) another, in finalize's text form."""
    return "0x%020X" % (int(lsn, 16) + n)


def debezium(lsn):
    """finalize's LSN text as Debezium's source.commit_lsn writes it (8:8:4 lower-case hex)."""
    h = lsn[2:].lower()
    return "%s:%s:%s" % (h[:8], h[8:16], h[16:])


def start_tracking(env, sim, source="erp", **source_options):
    """A first commit at 08:59 and its capture, then track and wait for the baseline (verdict 08:00)."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source(source, sim, **source_options)
    env.track(TABLE, source)
    env.wait_caught_up(TABLE, sim)


def until(env):
    return env.one("SELECT finalize.finalized_until(%s)", (TABLE,))


def report(env, consumer, lsn):
    return env.one("SELECT finalize.report_progress(%s, %s, %s)", (TABLE, consumer, lsn))


def consumer_view(env, consumer):
    """The consumer's row of finalize.consumers, as a dict."""
    conn = env.pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM finalize.consumers WHERE table_name = %s AND consumer = %s",
                        (TABLE, consumer))
            row = cur.fetchone()
            return None if row is None else dict(zip([d[0] for d in cur.description], row))
    finally:
        conn.close()


def stored(env, consumer):
    """The consumer's catalog row (what the worker resolved), as a dict."""
    conn = env.pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT c.* FROM finalize.consumer c JOIN finalize.tracked_table t USING (table_id) "
                        "WHERE t.table_name = %s AND t.untracked_at IS NULL AND c.consumer = %s",
                        (TABLE, consumer))
            row = cur.fetchone()
            return None if row is None else dict(zip([d[0] for d in cur.description], row))
    finally:
        conn.close()


def wait_cycles(env, n=3, source="erp"):
    """Waits until the source's worker has completed n more cycles."""
    cycles = lambda: env.one("SELECT cycles FROM finalize.source_status WHERE server_name = %s", (source,)) or 0
    start = cycles()
    env.pg.wait_for(lambda: cycles() >= start + n, what=f"{n} cycles of {source}")


def wait_until(env, expected, what="the verdict"):
    """Waits until finalized_until is the expected instant; returns it."""
    env.pg.wait_for(lambda: until(env) == expected, what=lambda: f"{what} = {expected}: {env.status(TABLE)}")
    return expected


def wait_resolved(env, consumer, for_lsn):
    """Waits until the worker has resolved the consumer for that LSN; returns the view's row."""
    env.pg.wait_for(lambda: (stored(env, consumer) or {}).get("resolved_for_lsn") == for_lsn,
                    what=lambda: f"{consumer} resolved for {for_lsn}: {stored(env, consumer)}")
    return consumer_view(env, consumer)


def first_unapplied(sim, applied_lsn):
    """The earliest commit time of a dbo.orders commit the consumer has not applied (LSN above what it
    reported), captured or not, or None: the truth a consumer-held verdict must never pass."""
    times = [as_utc(c["commit_time_utc"]) for c in sim.call("sim.truth_commits", table="dbo.orders")[0]
             if lsn_text(c["commit_lsn"]) > applied_lsn]
    return min(times) if times else None


def assert_truth(env, sim, applied_lsn):
    """No verdict claims a period with a change SQL Server has not captured or the consumer not applied:
    every period ending at or before finalized_until holds only commits at or below applied_lsn."""
    verdict, _ = assert_never_leads(env, TABLE, sim)
    pending = first_unapplied(sim, applied_lsn)
    assert verdict is None or pending is None or verdict <= pending, \
        f"verdict {verdict} claims the commit at {pending} the consumer has not applied (it reported {applied_lsn})"
    return verdict


def server_log_lines(pg, text):
    return [line for line in pg.log().splitlines() if text in line]


# --- tests -----------------------------------------------------------------------------------

def test_a_lagging_consumer_holds_the_verdict(env, sim):
    start_tracking(env, sim)
    env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "spark-orders"))
    held = until(env)
    assert held is None or held <= at(9, 0)
    a = commit(sim, at(9, 5), inserts=3)
    b = commit(sim, at(9, 20), updates=2)
    c = commit(sim, at(9, 40), deletes=1)
    sim.call("sim.advance", to=at(10, 5))             # dummy rows carry max LSN past 10:00
    env.wait_caught_up(TABLE, sim)
    wait_cycles(env)
    st = env.status(TABLE)
    assert st["source_until"] == at(10, 0), "SQL Server has captured hour 9"
    assert st["finalized_until"] == held and st["held_back_by"] == "spark-orders", st
    assert_truth(env, sim, NOTHING)

    # It has applied the first commit of hour 9 (and whatever else lies at or below it).
    assert report(env, "spark-orders", a) is True
    row = wait_resolved(env, "spark-orders", a)
    assert as_utc(row["commit_time"]) == at(9, 5) and row["consumer_until"] == at(9, 0)
    assert wait_until(env, at(9, 0)) == assert_truth(env, sim, a)
    assert row["lag"] == datetime.timedelta(hours=1)

    # More of hour 9: still not all of it.
    for lsn, when in [(b, at(9, 20)), (c, at(9, 40))]:
        assert report(env, "spark-orders", lsn) is True
        row = wait_resolved(env, "spark-orders", lsn)
        assert as_utc(row["commit_time"]) == when
        wait_cycles(env, 2)
        assert until(env) == at(9, 0) == assert_truth(env, sim, lsn)

    # Everything up to max LSN: the consumer no longer holds the verdict back.
    top = sim_max_lsn(sim)
    assert report(env, "spark-orders", top) is True
    wait_until(env, at(10, 0))
    assert assert_truth(env, sim, top) == at(10, 0)
    st = env.status(TABLE)
    assert st["held_back_by"] is None and consumer_view(env, "spark-orders")["lag"] == datetime.timedelta(0)


def mapping_at_or_below(sim, lsn):
    """The simulator's own answer: the greatest mapping row at or below an LSN (LSN, local time)."""
    rows = sim.query("SELECT TOP (1) start_lsn, tran_end_time FROM cdc.lsn_time_mapping "
                     "WHERE start_lsn <= %s ORDER BY start_lsn DESC" % lsn)
    return (lsn_text(rows[0]["start_lsn"]), rows[0]["tran_end_time"]) if rows else None


def test_an_lsn_between_two_commits_resolves_to_the_commit_below_it(env, sim):
    # No dummy rows: between two commits of dbo.orders there is no mapping row at all. Another
    # captured table's commit at 11:05 carries max LSN past 11:00.
    sim.call("sim.create_table", name="payments", columns="[id] int NOT NULL, [v] int")
    sim.call("sim.enable_table", name="payments")
    sim.call("sim.set_job", dummy_interval=0)
    start_tracking(env, sim)
    env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "flink"))
    a = commit(sim, at(9, 50), inserts=1)
    b = commit(sim, at(10, 20), inserts=2)
    c = commit(sim, at(10, 40), updates=1)
    sim.call("sim.commit", table="dbo.payments", inserts=1, at=at(11, 5))
    sim.call("sim.advance", seconds=6)
    env.wait_caught_up(TABLE, sim)
    assert env.status(TABLE)["source_until"] == at(11, 0)
    assert mapping_at_or_below(sim, plus(b, -1))[0] == a, "no mapping row between a and b"

    # Between a and b: the greatest mapping row at or below it is a's. Every commit before 09:50 is
    # applied, nothing is known of 09:50 to 10:00: hour 9 is not final yet (the verdict lags; it never
    # leads: mapping to the next row, b at 10:20, would call hour 9 final, to max LSN hour 10 too).
    between = plus(a, 1)
    assert a < between < b
    assert report(env, "flink", between) is True
    row = wait_resolved(env, "flink", between)
    assert row["reported_lsn"] == between and as_utc(row["commit_time"]) == at(9, 50)
    assert stored(env, "flink")["mapped_lsn"] == a
    wait_cycles(env, 2)
    assert until(env) == at(9, 0) == assert_truth(env, sim, between)

    # Between b and c: b's commit time (10:20): hour 9 is final, hour 10 is not (c at 10:40 is pending).
    between = plus(b, 1)
    assert report(env, "flink", between) is True
    row = wait_resolved(env, "flink", between)
    assert as_utc(row["commit_time"]) == at(10, 20) and stored(env, "flink")["mapped_lsn"] == b
    assert wait_until(env, at(10, 0)) == assert_truth(env, sim, between)

    # Just below a (nothing of hour 9 applied): resolves to the 08:59 commit, holds nothing new.
    env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "slow"))
    below = plus(a, -1)
    assert report(env, "slow", below) is True
    row = wait_resolved(env, "slow", below)
    first, _ = mapping_at_or_below(sim, below)
    assert stored(env, "slow")["mapped_lsn"] == first < a and as_utc(row["commit_time"]) < at(9, 0)
    assert row["consumer_until"] == at(8, 0)
    wait_cycles(env, 2)
    assert until(env) == at(10, 0), "declaring a consumer never retracts what was final"


def test_debezium_lsns_are_accepted_and_stored_in_finalizes_form(env, sim):
    start_tracking(env, sim)
    env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "debezium-sink"))
    a = commit(sim, at(9, 15), inserts=2)
    b = commit(sim, at(10, 25), inserts=1)
    sim.call("sim.advance", to=at(11, 5))
    env.wait_caught_up(TABLE, sim)
    assert report(env, "debezium-sink", debezium(a)) is True
    row = wait_resolved(env, "debezium-sink", a)
    assert row["reported_lsn"] == a and as_utc(row["commit_time"]) == at(9, 15)
    assert wait_until(env, at(9, 0)) == assert_truth(env, sim, a)
    assert report(env, "debezium-sink", debezium(b).upper()) is True
    wait_resolved(env, "debezium-sink", b)
    assert wait_until(env, at(10, 0)) == assert_truth(env, sim, b)

    # Anything else is refused with 22023, naming the value, and changes nothing.
    for bad in ["2d:f2a:2", debezium(b) + " ", "0000002d-00000f2a-0002", "0x" + b[2:-1], "", "latest"]:
        with pytest.raises(psycopg2.Error) as e:
            report(env, "debezium-sink", bad)
        assert e.value.pgcode == "22023" and "invalid LSN" in str(e.value), (bad, str(e.value))
    assert stored(env, "debezium-sink")["reported_lsn"] == b
    assert env.one("SELECT finalize_internal.lsn_normalize(%s)", ("0000002D:00000F2A:0002",)) == "0x0000002D00000F2A0002"


def incidents(env, kind, consumer):
    return env.sql("SELECT state, severity, message, detail FROM finalize.alerts "
                   "WHERE kind = %s AND table_name = %s AND subject = %s ORDER BY alert_id", (kind, TABLE, consumer))


def test_a_report_beyond_max_lsn_stays_pending_with_a_condition_and_an_incident(env, sim, pg):
    """Before the fix, a report beyond SQL Server's max LSN was resolved to max LSN and followed it
    as capture moved on: a pipeline that reported a bogus LSN (another database's, a placeholder)
    no longer held the verdict at all, nothing said so, and its honest reports after it were
    ignored as lower, for ever. Now the report is accepted but stays pending: the consumer keeps
    what it applied before, its condition is report_ahead (with why), an incident opens after
    finalize.alert_after, explain_verdict says it, and an admin's reset forgets it. A report SQL
    Server does reach later is simply resolved then, and the condition and incident clear."""
    reconfigure(pg, "finalize.alert_after", "1s")
    try:
        start_tracking(env, sim)
        env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "eager"))
        a = commit(sim, at(9, 5), inserts=1)
        sim.call("sim.advance", to=at(9, 30))
        env.wait_caught_up(TABLE, sim)
        assert report(env, "eager", a) is True
        wait_resolved(env, "eager", a)
        top = sim_max_lsn(sim)
        ahead = plus(top, 0x100000)                     # the same VLF: reachable, but not reached
        assert report(env, "eager", debezium(ahead)) is True

        # SQL Server moves on past 10:00 (dummy rows) without reaching the report.
        sim.call("sim.advance", to=at(10, 6))
        env.wait_caught_up(TABLE, sim)
        assert sim_max_lsn(sim) < ahead
        row = env.pg.wait_for(lambda: (lambda r: r if r["condition"] == "report_ahead" else None)(
            consumer_view(env, "eager")), what=lambda: f"report_ahead: {consumer_view(env, 'eager')}")
        assert row["reported_lsn"] == ahead and row["condition_since"] is not None
        assert "beyond SQL Server's max LSN" in row["resolve_error"] and ahead in row["resolve_error"], row
        assert stored(env, "eager")["resolved_for_lsn"] == a, "the pending report is not resolved to max LSN"
        wait_cycles(env, 3)
        assert env.status(TABLE)["source_until"] == at(10, 0)
        assert until(env) == at(9, 0) == assert_truth(env, sim, a), \
            "the verdict follows what the consumer applied, not SQL Server's max LSN"
        why = env.one("SELECT reason FROM finalize.explain_verdict(%s, %s)", (TABLE, at(9, 0)))
        assert ahead in why and "beyond SQL Server's max LSN" in why, why
        (state, severity, message, detail), = env.pg.wait_for(
            lambda: incidents(env, "report_ahead", "eager") or None, what="the report_ahead incident")
        assert (state, severity) == ("open", "warning"), message
        assert 'Consumer "eager"' in message and ahead in message and "reset => true" in message, message
        assert detail["reported_lsn"] == ahead, detail

        # Its honest reports are lower, so ignored (what made a bogus report stick for ever) ...
        assert report(env, "eager", sim_max_lsn(sim)) is False
        # ... until an admin forgets the report: the condition and the incident clear at once.
        env.sql("SELECT finalize.alter_consumer(%s, %s, reset => true)", (TABLE, "eager"))
        row = consumer_view(env, "eager")
        assert row["condition"] is None and row["reported_lsn"] is None, row
        assert [r[0] for r in incidents(env, "report_ahead", "eager")] == ["resolved"]
        assert until(env) == at(9, 0), "a reset never moves a verdict"
        top = sim_max_lsn(sim)
        assert report(env, "eager", top) is True
        wait_resolved(env, "eager", top)
        assert wait_until(env, at(10, 0)) == assert_truth(env, sim, top)

        # A report SQL Server reaches a little later (it read a newer LSN than the worker): pending,
        # then resolved once captured; the condition clears and so does an incident it opened.
        ahead = plus(top, 0x40)
        assert report(env, "eager", ahead) is True
        env.pg.wait_for(lambda: consumer_view(env, "eager")["condition"] == "report_ahead",
                        what=lambda: f"report_ahead: {consumer_view(env, 'eager')}")
        env.pg.wait_for(lambda: incidents(env, "report_ahead", "eager")[-1][0] == "open",
                        what="a second report_ahead incident")
        while sim_max_lsn(sim) < ahead:
            sim.call("sim.commit", inserts=1, transactions=10)
            sim.call("sim.advance", seconds=6)
        sim.call("sim.advance", to=at(11, 2))
        env.wait_caught_up(TABLE, sim)
        wait_resolved(env, "eager", ahead)
        env.pg.wait_for(lambda: consumer_view(env, "eager")["condition"] is None,
                        what=lambda: f"the condition to clear: {consumer_view(env, 'eager')}")
        env.pg.wait_for(lambda: incidents(env, "report_ahead", "eager")[-1][0] == "resolved",
                        what="the incident to resolve")
        assert_truth(env, sim, ahead)
    finally:
        pg.sql("ALTER SYSTEM RESET finalize.alert_after")
        pg.sql("SELECT pg_reload_conf()")
        pg.sql("DELETE FROM finalize.alert")


def test_a_report_sql_server_cannot_have_reached_is_refused(env, sim):
    """Before the fix, report_progress('...', 'ffffffff:ffffffff:ffff') was accepted, and every
    honest report after it ignored. Now an LSN whose VLF sequence number lies further beyond the
    source's max LSN than SQL Server can have written since the worker read it is refused with
    22023, naming the consumer and the max LSN; nothing changes. Debezium's form still works."""
    start_tracking(env, sim)
    env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "buggy"))
    a = commit(sim, at(9, 5), inserts=1)
    sim.call("sim.advance", to=at(9, 30))
    env.wait_caught_up(TABLE, sim)
    assert report(env, "buggy", debezium(a)) is True
    top = env.one("SELECT max_lsn FROM finalize.source_status WHERE server_name = 'erp'")
    for bad in ["ffffffff:ffffffff:ffff", "0xFFFFFFFFFFFFFFFFFFFF", "7fffffff:00000000:0001",
                "0x%08X000000000001" % (int(top[2:10], 16) + 0x10000000)]:
        with pytest.raises(psycopg2.Error) as e:
            report(env, "buggy", bad)
        assert e.value.pgcode == "22023", (bad, str(e.value))
        err = e.value.diag
        assert 'consumer "buggy" of table "sales.orders"' in err.message_primary, err.message_primary
        assert "beyond anything SQL Server can have written" in err.message_primary
        assert top in err.message_detail and "erp" in err.message_detail, err.message_detail
        assert "source.commit_lsn" in err.message_hint
    assert stored(env, "buggy")["reported_lsn"] == a, "a refused report changes nothing"
    # Within reach (the next VLFs): accepted, pending.
    near = "0x%08X000000010001" % (int(top[2:10], 16) + 2)
    assert report(env, "buggy", debezium(near)) is True
    assert stored(env, "buggy")["reported_lsn"] == near


def test_a_replayed_lower_lsn_changes_nothing(env, sim):
    start_tracking(env, sim)
    env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "replayer"))
    a = commit(sim, at(9, 10), inserts=1)
    b = commit(sim, at(10, 10), inserts=1)
    sim.call("sim.advance", to=at(11, 5))
    env.wait_caught_up(TABLE, sim)
    assert report(env, "replayer", b) is True
    before = wait_resolved(env, "replayer", b)
    wait_until(env, at(10, 0))
    # The pipeline restarts from an older checkpoint and reports again: ignored, with a NOTICE.
    conn = env.pg.connect()
    try:
        with conn.cursor() as cur:
            for lsn in (a, debezium(a), b):
                cur.execute("SELECT finalize.report_progress(%s, %s, %s)", (TABLE, "replayer", lsn))
                assert cur.fetchone()[0] is False
        assert conn.notices, "a replay says why nothing moved"
    finally:
        conn.close()
    wait_cycles(env)
    after = consumer_view(env, "replayer")
    assert (after["reported_lsn"], after["commit_time"], after["consumer_until"]) == \
        (before["reported_lsn"], before["commit_time"], before["consumer_until"])
    assert stored(env, "replayer")["resolved_for_lsn"] == b
    assert until(env) == at(10, 0) == assert_truth(env, sim, b)


def readme_login_without_mapping_grant():
    """The least-privilege login script of docs/sql-server.md, without any line that grants SELECT on
    cdc.lsn_time_mapping (what a DBA who set finalize up before consumers existed has)."""
    from test_mssql_realism import readme_login_script
    return "\n".join(line for line in readme_login_script().splitlines() if "lsn_time_mapping" not in line)


def test_a_login_that_may_not_read_the_mapping_leaves_the_consumer_unresolved(env, pg):
    from test_mssql_realism import GATING_ROLE, LOGIN, run_script
    sim = sim_clock(database="erp", start_time="2026-11-02T08:59:00Z").start()
    try:
        sim.call("sim.disable_table", name="orders")
        sim.call("sim.enable_table", name="orders", role_name=GATING_ROLE)
        run_script(sim, readme_login_without_mapping_grant().replace("<password>", PASSWORD))
        start_tracking(env, sim, login=LOGIN, password=PASSWORD)
        env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "spark-orders"))
        held = until(env)
        a = commit(sim, at(9, 5), inserts=1)
        commit(sim, at(9, 30), inserts=1)
        sim.call("sim.advance", to=at(10, 5))
        env.wait_caught_up(TABLE, sim)
        assert report(env, "spark-orders", a) is True    # below max LSN: needs the mapping table

        # SQL Server's own words reach the log, once however many cycles fail the same way.
        env.pg.wait_for(lambda: server_log_lines(pg, DENIED), what="the 229 in the server log")
        wait_cycles(env, 4)
        lines = server_log_lines(pg, DENIED)
        assert len(lines) == 1 and '"spark-orders"' in lines[0] and LOGIN in lines[0], lines
        st = env.status(TABLE)
        assert st["source_until"] == at(10, 0) and st["finalized_until"] == held
        assert st["held_back_by"] == "spark-orders" and st["source_condition"] == "ok"
        assert stored(env, "spark-orders")["resolved_for_lsn"] is None
        view = consumer_view(env, "spark-orders")
        assert view["commit_time"] is None and DENIED in view["resolve_error"], view
        assert "GRANT SELECT ON [cdc].[lsn_time_mapping]" in view["resolve_error"]
        # explain_verdict says why the period waits, in SQL Server's words.
        why = env.one("SELECT (finalize.explain_verdict(%s, %s)).reason", (TABLE, at(9, 0)))
        assert '"spark-orders"' in why and DENIED in why, why
        assert_truth(env, sim, a)

        # The script's GRANT lets the worker resolve it.
        run_script(sim, "GRANT SELECT ON [cdc].[lsn_time_mapping] TO [%s];" % LOGIN)
        row = wait_resolved(env, "spark-orders", a)
        assert as_utc(row["commit_time"]) == at(9, 5) and row["resolve_error"] is None
        assert wait_until(env, at(9, 0)) == assert_truth(env, sim, a)
    finally:
        sim.stop()


def listen(pg):
    conn = pg.connect()
    conn.cursor().execute("LISTEN finalize_alert")
    return conn


def alerts(conn, until_pred, timeout=15):
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(until_pred(p) for p in seen):
        if select.select([conn], [], [], 0.2)[0]:
            conn.poll()
            seen.extend(json.loads(n.payload) for n in conn.notifies)
            conn.notifies.clear()
    return seen


def test_a_consumer_that_stops_reporting_is_stalled_with_an_alert(env, sim, pg):
    pg.sql("ALTER SYSTEM SET finalize.consumer_stall_threshold = '2s'")
    pg.sql("SELECT pg_reload_conf()")
    listener = listen(pg)
    try:
        env.pg.wait_for(lambda: env.one("SELECT finalize_internal.consumer_stall_threshold()")
                        == datetime.timedelta(seconds=2), what="the threshold to be reloaded")
        start_tracking(env, sim)
        env.sql("SELECT finalize.add_consumer(%s, %s)", (TABLE, "nightly"))
        commit(sim, at(9, 10), inserts=1)
        sim.call("sim.advance", to=at(9, 20))
        env.wait_caught_up(TABLE, sim)
        top = sim_max_lsn(sim)
        assert report(env, "nightly", top) is True
        wait_resolved(env, "nightly", top)
        verdict = wait_until(env, at(9, 0))
        wait_cycles(env, 2)
        assert consumer_view(env, "nightly")["condition"] is None, "it reported and nothing moved since"

        # The source moves on, the consumer stays silent past the threshold.
        sim.call("sim.advance", to=at(10, 30))
        env.wait_caught_up(TABLE, sim)
        seen = alerts(listener, lambda p: p.get("alert") == "consumer_stalled")
        stalled = [p for p in seen if p.get("alert") == "consumer_stalled"]
        assert stalled and "nightly" in json.dumps(stalled[0]), seen
        row = consumer_view(env, "nightly")
        assert row["condition"] == "consumer_stalled" and row["condition_since"] is not None
        assert until(env) == verdict == assert_truth(env, sim, top), "a stall holds the verdict, as before"

        # It reports again: the condition clears and the verdict moves.
        top = sim_max_lsn(sim)
        assert report(env, "nightly", top) is True
        wait_until(env, at(10, 0))
        env.pg.wait_for(lambda: consumer_view(env, "nightly")["condition"] is None,
                        what=lambda: f"the stall to clear: {consumer_view(env, 'nightly')}")
        assert_truth(env, sim, top)
    finally:
        listener.close()
        pg.sql("ALTER SYSTEM RESET finalize.consumer_stall_threshold")
        pg.sql("SELECT pg_reload_conf()")


def test_a_pipelines_open_transaction_never_holds_the_worker_up(env, sim):
    """A pipeline that reported for a derived table and keeps its transaction open holds that
    table's verdict row. The worker's advance of the input must not wait for it (a lock timeout
    would cost the input its range, another team's table): it skips the derived table, and its
    next cycle after the pipeline commits brings the derived verdict up to date."""
    start_tracking(env, sim)
    env.sql("SELECT finalize.track_derived('sales.hourly', ARRAY[%s])", (TABLE,))
    env.sql("SELECT finalize.add_consumer('sales.hourly', 'agg', required => false)")
    commit(sim, at(9, 5), inserts=1)
    sim.call("sim.advance", to=at(10, 5))
    wait_until(env, at(10, 0))
    derived = lambda: env.one("SELECT finalize.finalized_until('sales.hourly')")
    # The advance skips a derived row another session holds for a moment (the scheduler's round,
    # SKIP LOCKED); the scheduler's next round brings it up: it may lag the input, never pass it.
    def reached(expected):
        value = derived()
        assert value is None or value <= expected, f"the derived verdict {value} passed its input's {expected}"
        return value == expected
    env.pg.wait_for(lambda: reached(at(10, 0)), what=lambda: f"the derived verdict = {at(10, 0)}: {derived()}")
    held = env.pg.connect(autocommit=False)
    try:
        held.cursor().execute("SELECT finalize.report_processed('sales.hourly', 'agg', %s)", (at(10, 0),))
        # The transaction stays open, holding the derived table's verdict row.
        commit(sim, at(10, 30), inserts=1)
        sim.call("sim.advance", to=at(11, 5))
        wait_until(env, at(11, 0), what="the input's verdict while a pipeline holds the derived one")
        assert env.status(TABLE)["condition"] is None
        assert derived() == at(10, 0)
    finally:
        held.commit()
        held.close()
    env.pg.wait_for(lambda: reached(at(11, 0)), what="the derived verdict to catch up")
    assert_never_leads(env, TABLE, sim)


def reconfigure(pg, name, value):
    """ALTER SYSTEM SET and reload; waits until sessions see it. Returns what to reset."""
    pg.sql(f"ALTER SYSTEM SET {name} = %s", (value,))
    pg.sql("SELECT pg_reload_conf()")
    pg.wait_for(lambda: pg.sql("SELECT current_setting(%s)", (name,))[0][0] == value,
                what=f"{name} to become {value}")


def cycle_times(env, n, source="erp"):
    """The cycle_time of each of the source's next n cycles (sampled as cycles completes)."""
    times, last = [], env.one("SELECT cycles FROM finalize.source_status WHERE server_name = %s", (source,))
    while len(times) < n:
        row = env.pg.wait_for(
            lambda: (lambda r: r if r and r[0] > last else None)(
                env.pg.sql("SELECT cycles, cycle_time FROM finalize.source_status WHERE server_name = %s",
                           (source,))[0]),
            what=f"a cycle of {source} after cycle {last}")
        last = row[0]
        times.append(row[1])
    return times


def test_a_consumer_row_held_by_an_open_report_costs_only_that_consumer(env, sim, pg):
    """Before the fix, a pipeline that left report_progress uncommitted held its consumer's row,
    and every cycle of the source waited finalize.lock_timeout for it in _consumer_resolved
    (cycle time 3 ms -> lock_timeout for every table of the source) and logged a WARNING. Now the
    worker skips the row (SKIP LOCKED) and tries again next cycle: the source's cycles never wait,
    its other tables move, nothing is logged per cycle, and the hold shows once, as the
    consumer's condition consumer_locked, with an incident after finalize.alert_after. Once the
    pipeline commits, the condition and the incident clear and its report is resolved."""
    reconfigure(pg, "finalize.lock_timeout", "4s")
    reconfigure(pg, "finalize.alert_after", "1s")
    try:
        sim.call("sim.create_table", name="held_lines", columns="[id] int NOT NULL, [v] int")
        sim.call("sim.enable_table", name="held_lines")
        start_tracking(env, sim)
        env.track("sales.lines", "erp", "dbo.held_lines")
        env.wait_caught_up("sales.lines", sim)
        env.sql("SELECT finalize.add_consumer(%s, 'debezium')", (TABLE,))
        first = commit(sim, at(9, 5), inserts=1)
        sim.call("sim.advance", to=at(9, 10))
        top = sim_max_lsn(sim)
        assert report(env, "debezium", top) is True
        wait_resolved(env, "debezium", top)
        # A report a little beyond max LSN (the pipeline read commits capture had not yet
        # committed): pending until SQL Server's max LSN reaches it.
        ahead = plus(top, 2)
        assert report(env, "debezium", ahead) is True
        warnings_before = len(server_log_lines(pg, 'could not record the progress of consumer "debezium"'))

        holder = pg.connect(autocommit=False)
        try:
            holder.cursor().execute("SELECT finalize.report_progress(%s, 'debezium', %s)",
                                    (TABLE, plus(ahead, 1)))
            # The pipeline's transaction stays open. SQL Server moves on past the committed report:
            # each cycle has the consumer to resolve, and its row is held.
            for minute in (20, 40, 59):
                sim.call("sim.commit", table="dbo.held_lines", inserts=1, at=at(9, minute))
                commit(sim, at(9, minute), inserts=1)
            sim.call("sim.advance", to=at(10, 5))
            env.wait_caught_up("sales.lines", sim)
            env.pg.wait_for(lambda: env.one("SELECT finalize.finalized_until('sales.lines')") == at(10, 0),
                            what="the other table of the source to move while the row is held")
            times = cycle_times(env, 6)
            assert max(times) < datetime.timedelta(seconds=4), \
                f"a cycle waited for the held row (finalize.lock_timeout is 4 s): {times}"
            row = env.pg.wait_for(lambda: (lambda r: r if r["condition"] == "consumer_locked" else None)(
                consumer_view(env, "debezium")), what=lambda: f"the hold on the consumer: {consumer_view(env, 'debezium')}")
            assert row["condition_since"] is not None
            incident = env.pg.wait_for(lambda: env.pg.sql(
                "SELECT kind, severity, subject, state, message FROM finalize.alerts "
                "WHERE kind = 'consumer_locked' AND state = 'open'"), what="the consumer_locked incident")
            assert incident[0][1:4] == ("warning", "debezium", "open"), incident
            assert "debezium" in incident[0][4] and TABLE in incident[0][4], incident
            assert len(server_log_lines(pg, 'could not record the progress of consumer "debezium"')) \
                == warnings_before, "the hold was logged per cycle"
            assert sim_max_lsn(sim) > ahead
            assert until(env) == at(9, 0), "the consumer applied only hour 9's first commit as far as it committed"
            assert_truth(env, sim, ahead)
        finally:
            holder.commit()
            holder.close()

        # Committed: the report is resolved, the condition and the incident clear.
        wait_resolved(env, "debezium", plus(ahead, 1))
        top = sim_max_lsn(sim)
        assert report(env, "debezium", top) is True
        wait_resolved(env, "debezium", top)
        wait_until(env, at(10, 0))
        env.pg.wait_for(lambda: consumer_view(env, "debezium")["condition"] is None,
                        what=lambda: f"the hold to clear: {consumer_view(env, 'debezium')}")
        env.pg.wait_for(lambda: env.one("SELECT state FROM finalize.alerts WHERE kind = 'consumer_locked'")
                        == "resolved", what="the consumer_locked incident to be resolved")
        assert env.one("SELECT count(*) FROM finalize.consumer_hold") == 0
        assert_truth(env, sim, top)
    finally:
        pg.sql("ALTER SYSTEM RESET finalize.lock_timeout")
        pg.sql("ALTER SYSTEM RESET finalize.alert_after")
        pg.sql("SELECT pg_reload_conf()")
        pg.sql("DELETE FROM finalize.alert")


def test_one_teams_open_report_never_holds_another_teams_derived_table(env, sim, pg):
    """Before the fix, team A's report on its derived table p.der_a advanced, in team A's own
    transaction, every derived table that uses it, and so locked team B's p.der_b (built from
    p.der_a and team B's input) until team A committed: team B's report_processed hung, the
    worker's catch-up skipped p.der_b, and admin calls on it waited. Now a session's transaction
    moves only the table it writes: p.der_b's row stays free while team A's transaction is open,
    and the scheduler brings p.der_b up to date within a round once team A commits."""
    for role in ("tenant_a", "tenant_b"):
        pg.sql(f"DROP ROLE IF EXISTS {role}")
        pg.sql(f"CREATE ROLE {role} LOGIN IN ROLE finalize_pipeline")
    start_tracking(env, sim)
    env.sql("SELECT finalize.track_derived('p.der_a', ARRAY[%s])", (TABLE,))
    env.sql("SELECT finalize.track_derived('p.der_b', ARRAY[%s, 'p.der_a'])", (TABLE,))
    env.sql("SELECT finalize.add_consumer('p.der_a', 'da', reporter => 'tenant_a')")
    env.sql("SELECT finalize.add_consumer('p.der_b', 'db', required => false, reporter => 'tenant_b')")
    commit(sim, at(9, 5), inserts=1)
    sim.call("sim.advance", to=at(11, 5))
    wait_until(env, at(11, 0))
    der_b = env.one("SELECT finalize_internal.tracked_id('p.der_b')")
    verdict = lambda t: env.one("SELECT finalize.finalized_until(%s)", (t,))
    before = verdict("p.der_a")
    assert before < at(10, 0) and verdict("p.der_b") == before, "team A's consumer holds both"

    team_a = pg.connect(user="tenant_a", autocommit=False)
    team_b = pg.connect(user="tenant_b")
    try:
        with team_a.cursor() as cur:
            cur.execute("SELECT finalize.report_processed('p.der_a', 'da', %s)", (at(10, 0),))
            assert cur.fetchone()[0] is True
        # Team A's transaction stays open. Team B's row of p.der_b is free ...
        locker = pg.connect(autocommit=False)
        try:
            with locker.cursor() as cur:
                cur.execute("SELECT 1 FROM finalize.watermark WHERE table_id = %s FOR UPDATE NOWAIT", (der_b,))
        finally:
            locker.rollback()
            locker.close()
        # ... so team B reports and an admin changes p.der_b without waiting for team A.
        with team_b.cursor() as cur:
            cur.execute("SET statement_timeout = '10s'")
            cur.execute("SELECT finalize.report_processed('p.der_b', 'db', %s)", (at(11, 0),))
        env.sql("SET statement_timeout = '10s'; SELECT finalize.alter_consumer('p.der_b', 'db', required => false)")
        # Team A's report is not committed: nothing it reported is final anywhere yet.
        assert verdict("p.der_a") == verdict("p.der_b") == before
    finally:
        team_a.commit()
        team_a.close()
        team_b.close()
    # Committed: p.der_a moves in team A's transaction, p.der_b in the scheduler's next round.
    assert verdict("p.der_a") == at(10, 0)
    env.pg.wait_for(lambda: verdict("p.der_b") == at(10, 0),
                    what=lambda: f"p.der_b to follow p.der_a: {env.status('p.der_b')}")
    assert_never_leads(env, TABLE, sim)
