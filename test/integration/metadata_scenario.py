"""A metadata database with finalize in use, for the tests that move one (pg_dump and pg_restore,
pg_upgrade): its roles and their grants, a SQL Server source and a webhook target with their user
mappings, tracked tables whose facts the worker recorded from the simulator, a consumer that
reported, a data loss the worker recorded (one acknowledged, one not), a derived table, a release
published through the gate from a file:// store and an incident; and what a user sees of all that
(snapshot), which a moved database must show unchanged.

Every PostgreSQL program runs as the postgres user when the tests run as root (tools())."""

import datetime
import json
import os
import subprocess

from storefiles import write_file
from pgcluster import _as_postgres
from worker_env import Env, UTC, as_utc, assert_chain, lsn_text, sim_max_lsn, truth_watermark

ORDERS = "sales.orders"
PAYMENTS = "sales.payments"
DAILY = "mart.daily_orders"
LEDGER = "fin.ledger"
PARTITION = "day=02/hour=09"


def at(hh, mm=0, ss=0.0):
    """An instant on 2026-11-02 (UTC), the day the simulator's clock starts."""
    return datetime.datetime(2026, 11, 2, hh, mm, tzinfo=UTC) + datetime.timedelta(seconds=ss)


def advance(sim, seconds=6, database=None, **commit):
    """One commit (if any, in database) and a capture cycle on the simulator's clock."""
    if commit:
        sim.call("sim.commit", database=database, **commit)
    sim.call("sim.advance", seconds=seconds)


def worker_conf(**more):
    """The settings of a cluster whose worker polls the simulator: fast cycles, no webhook sent (the
    targets and incidents are what is moved, not their delivery)."""
    conf = {"finalize.poll_interval": "200ms", "finalize.max_retry_interval": "1s",
            "finalize.alerts_enabled": "off", "finalize.alert_after": "0"}
    conf.update(more)
    return conf


def billing_max_lsn(sim):
    """Max LSN of the simulator's second database, billing (sales.payments' source)."""
    return lsn_text(sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m", database="billing")[0]["m"])


def populate(pg, sim, store, clock_sim=None):
    """Builds the metadata database in pg (finalize installed, its worker running against sim);
    returns the Env. The simulator's clock ends at 11:00:30 with every table caught up. With
    clock_sim (a second simulator), also a source held by a person's gate (hold_ledger)."""
    env = Env(pg)
    pg.sql("CREATE ROLE airflow_sensor LOGIN IN ROLE finalize_reader")
    pg.sql("CREATE ROLE spark_writer LOGIN IN ROLE finalize_pipeline")
    pg.sql("CREATE ROLE release_bot LOGIN IN ROLE finalize_publisher, pg_read_server_files")
    pg.sql("CREATE ROLE platform_admin LOGIN IN ROLE finalize_admin")
    sim.create_database("billing")
    advance(sim, seconds=1, inserts=1)
    advance(sim, seconds=10, database="billing", inserts=1)
    env.add_source("erp", sim)
    pg.sql("CREATE SERVER billing FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', port '%d', "
           "database 'billing', encrypt 'off', clock_tolerance '0 s')" % sim.port)
    pg.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER billing OPTIONS (username 'sa', password 'Passw0rd!')")
    pg.sql("CREATE SERVER pager FOREIGN DATA WRAPPER finalize_webhook "
           "OPTIONS (url 'http://127.0.0.1:9/hook', format 'json', min_severity 'info')")
    pg.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER pager OPTIONS (hmac_key 'hook-secret-1234567890')")
    env.track(ORDERS, "erp")
    env.track(PAYMENTS, "billing")
    env.wait_caught_up(ORDERS, sim)
    wait_payments(env, sim)
    pg.sql("SELECT finalize.add_consumer(%s, 'spark', true, 'spark_writer')", (ORDERS,))
    pg.sql("SELECT finalize.track_derived(%s, ARRAY[%s], interval '1 day')", (DAILY, ORDERS))
    for when, ops in [(at(9, 5), dict(inserts=3)), (at(9, 15), dict(database="billing", inserts=2)),
                      (at(9, 20), dict(updates=2)), (at(9, 40), dict(deletes=1)), (at(10, 10), dict(inserts=5)),
                      (at(10, 30), dict(inserts=1, updates=1))]:
        advance(sim, at=when, **ops)
    sim.call("sim.advance", to=at(10, 45))
    env.wait_caught_up(ORDERS, sim)
    wait_payments(env, sim)
    # The pipeline applied everything up to the commit of 10:10.
    applied = lsn_text([c for c in sim.call("sim.truth_commits", table="dbo.orders")[0]
                        if as_utc(c["commit_time_utc"]) == at(10, 10)][0]["commit_lsn"])
    conn = pg.connect(user="spark_writer")
    conn.cursor().execute("SELECT finalize.report_progress(%s, 'spark', %s)", (ORDERS, applied))
    conn.close()
    lose_payments(pg, env, sim)
    sim.call("sim.advance", to=at(11, 0, 30))
    env.wait_caught_up(ORDERS, sim)
    wait_payments(env, sim)
    env.wait_status(ORDERS, lambda s: env.one("SELECT commit_time FROM finalize.consumers "
                                              "WHERE consumer = 'spark'") == at(10, 10),
                    what="the consumer's report resolved")
    release(pg, store)
    if clock_sim is not None:
        hold_ledger(env, clock_sim)
    return env


def hold_ledger(env, sim):
    """Source ledger (on a simulator of its own, clock_tolerance 1 min) whose SQL Server clock ran
    five minutes fast and was stepped back: the worker holds it (commit_time_ahead) until a person
    runs finalize.release_source, which no move of the database may do for them."""
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("ledger", sim, clock_tolerance="1 min")
    env.track(LEDGER, "ledger")
    env.wait_caught_up(LEDGER, sim)
    sim.call("sim.advance", to=at(9, 56, 50))
    sim.call("sim.step_clock", seconds=300)
    sim.call("sim.commit", inserts=1, at=at(9, 57))
    sim.call("sim.advance", to=at(9, 57, 10))
    env.wait_caught_up(LEDGER, sim)
    sim.call("sim.step_clock", seconds=-300)
    sim.call("sim.commit", inserts=3, at=at(9, 58))
    sim.call("sim.advance", to=at(9, 58, 10))
    # Held, and a cycle of the held source ran: its error (and the incident's message, the
    # explanation's reason) is then the held source's, which the moved database's worker writes too.
    env.pg.wait_for(lambda: "is held by commit_time_ahead" in ((env.source_status("ledger") or {}).get("last_error")
                                                                or ""),
                    what=lambda: f"the ledger source held: {env.source_status('ledger')}")
    env.pg.wait_for(lambda: "is held by commit_time_ahead" in (env.one(
                        "SELECT message FROM finalize.alerts WHERE server_name = 'ledger' AND state = 'open'") or ""),
                    what="the ledger incident's message to be the held source's")


def wait_payments(env, sim):
    """Waits until sales.payments' offset is billing's max LSN."""
    target = billing_max_lsn(sim)
    env.wait_status(PAYMENTS, lambda s: s.get("offset_lsn") == target, what=f"{PAYMENTS} at {target}")


def lose_payments(pg, env, sim):
    """CDC cleanup in billing passes sales.payments' offset while the worker is off: a data loss,
    resumed, one of its periods acknowledged."""
    pg.sql("ALTER SYSTEM SET finalize.enabled = off")
    pg.reload()
    pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker'"),
                what="the worker to stop")
    advance(sim, database="billing", inserts=4, at=at(10, 50))
    sim.call("sim.advance", to=at(10, 55))
    sim.call("sim.cleanup", database="billing", low_lsn=sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m",
                                                                    database="billing")[0]["m"])
    pg.sql("ALTER SYSTEM RESET finalize.enabled")
    pg.reload()
    env.wait_status(PAYMENTS, lambda s: s.get("state") == "data_lost", what="the data loss")
    pg.sql("SELECT finalize.resume_table(%s)", (PAYMENTS,))
    env.wait_status(PAYMENTS, lambda s: s.get("state") == "active", what="resumed")
    pg.sql("SELECT finalize.acknowledge_loss(%s, %s, %s, 'replayed from the ERP export')",
           (PAYMENTS, at(9), at(10)))


def release(pg, store):
    """Hour 9 of sales.orders (final) released through the gate from a file:// store."""
    files = {}
    for i in range(2):
        path = f"{PARTITION}/gen-1/part-{i}.parquet"
        data = f"rows {i}".encode() * (i + 2)
        write_file(store, path, data)
        files[path] = len(data)
    pg.sql("SELECT finalize.register_partition(%s, %s, %s)", (ORDERS, PARTITION, f"{PARTITION}/gen-1/"))
    manifest = {"table": ORDERS, "partition": PARTITION, "generation": "gen-1", "store": "file://" + store,
                "prefix": f"{PARTITION}/gen-1/", "files": files, "period_start": at(9).isoformat()}
    conn = pg.connect(user="release_bot")
    cur = conn.cursor()
    cur.execute("SELECT released, problems FROM finalize.release_gate(%s)", (json.dumps(manifest),))
    released, problems = cur.fetchone()
    conn.close()
    assert released, problems


def _rows(pg, query, args=None, dbname="postgres"):
    return [tuple(r) for r in pg.sql(query, args, dbname=dbname) or []]


def snapshot(pg, dbname="postgres"):
    """What users see of the catalog: verdicts and their reasons, per-period counts, facts, status,
    consumers, losses and acknowledgements, releases, incidents, sources and webhook targets with
    their user mappings, the roles' memberships and grants on finalize's objects, and where each
    identity sequence stands. Leaves out what a running worker rewrites every cycle (last poll,
    pid, lag)."""
    q = lambda query, args=None: _rows(pg, query, args, dbname)  # noqa: E731
    snap = {}
    for (table,) in q("SELECT table_name FROM finalize.tracked_table ORDER BY table_id"):
        snap[table, "until"] = q("SELECT finalize.finalized_until(%s)", (table,))
        snap[table, "final"] = q("SELECT h, finalize.is_final(%s, h) FROM generate_series(%s::timestamptz, "
                                 "%s, '1 hour') h", (table, at(8), at(12)))
        # The reason names when a failing source last failed: the worker's, at every cycle.
        snap[table, "explain"] = q("SELECT v.is_final, v.finalized_until, regexp_replace(v.reason, "
                                   "'failed at [-0-9]+ [0-9:.]+[+]00', 'failed at (when)') "
                                   "FROM finalize.explain_verdict(%s, %s) v", (table, at(10)))
        snap[table, "status"] = q("SELECT table_name, server_name, source_table, capture_instance, granularity, "
                                  "state, state_detail, finalized_until, offset_lsn, captured_until, kind, "
                                  "source_until, held_back_by, loss_blocked, period_zone, tracked_since, "
                                  "local_finalized_until FROM finalize.status WHERE table_name = %s", (table,))
        snap[table, "changes"] = q("SELECT * FROM finalize.changes_by_period(%s, %s, %s)", (table, at(8), at(12)))
    snap["facts"] = q("SELECT fact_id, table_name, kind, start_lsn, end_lsn, end_commit_time, inserts, updates, "
                      "deletes, event, detail::text FROM finalize.facts ORDER BY fact_id")
    snap["consumers"] = q("SELECT table_name, consumer, required, reporter::text, reported_lsn, commit_time, "
                          "consumer_until, condition FROM finalize.consumers ORDER BY 1, 2")
    snap["losses"] = q("SELECT loss_id, t.table_name, lost_from, lost_to, from_lsn, to_lsn FROM finalize.loss "
                       "JOIN finalize.tracked_table t USING (table_id) ORDER BY loss_id")
    snap["acks"] = q("SELECT ack_id, period_from, period_to, note, acknowledged_by FROM finalize.loss_ack "
                     "ORDER BY ack_id")
    snap["releases"] = q("SELECT release_id, table_name, partition, generation, released, problems::text, "
                         "current FROM finalize.releases ORDER BY release_id")
    snap["release_reports"] = q("SELECT release_id, finalize.release_report(release_id)::text FROM finalize.release "
                                "ORDER BY release_id")
    snap["published"] = q("SELECT finalize.released_generation(%s, %s)", (ORDERS, PARTITION))
    # Without their counts: an open incident counts every cycle that still sees its condition.
    snap["alerts"] = q("SELECT alert_id, kind, severity, table_name, server_name, state, message, dedup_key "
                       "FROM finalize.alerts ORDER BY alert_id")
    snap["targets"] = q("SELECT * FROM finalize_internal.alert_targets() ORDER BY 1")
    # Options in name order: their order means nothing (ALTER SERVER, the validators may reorder them).
    snap["servers"] = q("SELECT s.srvname, w.fdwname, ARRAY(SELECT unnest(s.srvoptions) ORDER BY 1) "
                        "FROM pg_foreign_server s "
                        "JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw ORDER BY 1")
    snap["mappings"] = q("SELECT srvname, usename, ARRAY(SELECT unnest(umoptions) ORDER BY 1) "
                         "FROM pg_user_mappings ORDER BY 1, 2")
    snap["members"] = q("SELECT r.rolname, m.rolname FROM pg_auth_members a JOIN pg_roles r ON r.oid = a.roleid "
                        "JOIN pg_roles m ON m.oid = a.member WHERE r.rolname LIKE 'finalize\\_%%' ORDER BY 1, 2")
    # Grants as they act: a NULL ACL is the owner's default (which pg_upgrade may write out), and
    # MAINTAIN (PostgreSQL 17) is a privilege an owner has on a newer major only.
    grants = ("SELECT string_agg(coalesce(r.rolname, 'PUBLIC') || ':' || a.privilege_type, ',' "
              "ORDER BY r.rolname, a.privilege_type) FROM aclexplode(coalesce({acl}, acldefault({kind}, {owner}))) a "
              "LEFT JOIN pg_roles r ON r.oid = a.grantee WHERE a.privilege_type <> 'MAINTAIN'")
    snap["function_acl"] = q("SELECT p.oid::regprocedure::text, (%s) FROM pg_proc p "
                             "WHERE p.pronamespace = 'finalize'::regnamespace ORDER BY 1"
                             % grants.format(acl="p.proacl", kind="'f'", owner="p.proowner"))
    snap["relation_acl"] = q("SELECT c.relname, (%s) FROM pg_class c "
                             "WHERE c.relnamespace = 'finalize'::regnamespace AND c.relkind IN ('r', 'v', 'S') "
                             "ORDER BY 1" % grants.format(acl="c.relacl", owner="c.relowner",
                                                          kind="CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::\"char\""))
    snap["held"] = q("SELECT server_name, held_by FROM finalize.source_status WHERE held_by IS NOT NULL")
    return snap


def sequences(pg, dbname="postgres"):
    """Where each of finalize's identity sequences stands (0: never used)."""
    return dict(_rows(pg, "SELECT c.relname, coalesce(pg_sequence_last_value(c.oid), 0) FROM pg_class c "
                          "WHERE c.relnamespace = 'finalize'::regnamespace AND c.relkind = 'S'", dbname=dbname))


def check_sequences(before, after):
    """Every sequence came back where it stood, or further (an open incident counted again takes an id
    of its sequence each time), and none is behind its table's rows."""
    assert before.keys() == after.keys() and all(after[k] >= before[k] for k in before), (before, after)


def check_facts_kept(before, after):
    """Every fact of a snapshot's (fact_id, table, kind, start, end, end time, counts, event, detail)
    is there afterwards with its id, unchanged but for an empty range that was each table's last: the
    worker extends that one when the next range is empty too (consecutive empty ranges coalesce)."""
    last = {}
    for f in before:
        last[f[1]] = f
    now = {f[0]: f for f in after}
    for f in before:
        g = now.get(f[0])
        assert g is not None, f"fact {f} is gone"
        if g != f:
            assert f is last[f[1]] and f[2] == "range" and f[6:9] == (0, 0, 0) and g[:4] == f[:4] and \
                g[6:] == f[6:] and g[4] > f[4], (f, g)


def diff(before, after):
    """The entries of two snapshots that differ, for an assertion's message: each with the rows
    only before, and those only after."""
    return {k: ([r for r in before[k] if r not in after.get(k, [])], [r for r in after.get(k, []) if r not in before[k]])
            for k in before if before[k] != after.get(k)}


def check_continues(env, sim, before_facts):
    """After a move: the worker goes on from the offsets recorded before it (no new baseline, the
    chain of ranges unbroken) and the verdict follows the simulator without leading it."""
    advance(sim, inserts=2, at=at(11, 10))
    sim.call("sim.advance", to=at(12, 0, 30))
    env.wait_caught_up(ORDERS, sim)
    facts = env.facts(ORDERS)
    kept = [f for f in facts if f["fact_id"] <= before_facts]
    new = [f for f in facts if f["fact_id"] > before_facts]
    assert new, "the worker recorded nothing after the move"
    assert not [f for f in new if f["event"] == "tracking_started"], f"a new baseline after the move: {new}"
    assert_chain(facts)
    assert new[0]["start_lsn"] == kept[-1]["end_lsn"], (kept[-1], new[0])
    source_until = env.one("SELECT w.source_until FROM finalize.watermark w "
                           "WHERE w.table_id = finalize_internal.tracked_id(%s)", (ORDERS,))
    assert source_until == at(12, 0) and source_until <= truth_watermark(sim)
    assert env.status(ORDERS)["offset_lsn"] == sim_max_lsn(sim)
    # The consumer still holds the verdict where its report left it, until it reports more.
    assert env.one("SELECT finalize.finalized_until(%s)", (ORDERS,)) == at(10, 0)
    applied = lsn_text([c for c in sim.call("sim.truth_commits", table="dbo.orders")[0]
                        if as_utc(c["commit_time_utc"]) == at(11, 10)][0]["commit_lsn"])
    conn = env.pg.connect(user="spark_writer")
    conn.cursor().execute("SELECT finalize.report_progress(%s, 'spark', %s)", (ORDERS, applied))
    conn.close()
    env.pg.wait_for(lambda: env.one("SELECT finalize.finalized_until(%s)", (ORDERS,)) == at(11, 0),
                    what="the consumer's report to move the verdict")


def tools(bindir):
    """Runs PostgreSQL's client programs of bindir as the postgres user; returns run(program, *args)
    giving the CompletedProcess (not checked: the caller looks at returncode and stderr)."""
    def run(program, *args, input=None):
        cmd = [os.path.join(bindir, program)] + list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, input=input)
    return run


__all__ = ["check_facts_kept", "sequences", "check_sequences", "ORDERS", "PAYMENTS", "DAILY", "LEDGER", "at", "advance", "worker_conf", "populate", "snapshot", "diff",
           "check_continues", "tools", "_as_postgres"]
