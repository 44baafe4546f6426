"""Chaos: a randomized, seeded run of many cycles mixing traffic, idle
periods, DDL, capture-instance switches, cleanup (also in the middle of a
read), faults, worker kills, PostgreSQL restarts, paused workers and steps of
SQL Server's clock (forward and back, within and beyond the source's
clock_tolerance). After every step, against the simulator's ground truth: no
verdict ever led the truth (whose commit times are the stamps of the stepped
clock: a period is truly complete only when no later commit can be stamped
in it), except where a step back beyond the tolerance reopened it; every
commit stamped in a period the source verdict had called final before such
a step is flagged (its period inexact, a critical clock_stepped_back
incident); and every recorded range holds exactly the changes committed in
it (nothing lost, nothing counted twice). At the end every period finalize
calls exact holds the true counts.

The lake side runs along (issue 12): a required consumer of c.orders and one
of c.payments apply the simulator's changes late, in random batches, crash
(losing what they had not reported yet) and replay older LSNs, in finalize's
and Debezium's forms; a derived table c.orders_hourly over both has a
consumer reporting a lagging processed_until and replaying older ones. After
every step: no verdict, tracked or derived, claims a period holding a commit
a consumer has not applied (first commit above its last accepted LSN, from
the simulator's truth) or that its job has not processed; derived verdicts
are whole periods below their inputs'; no verdict ever moves back; every
forward report moves and every replay is ignored with a NOTICE. At the end
the consumers fall an hour behind and hold every verdict back, then catch up,
and the verdicts reach their sources'.

FINALIZE_CHAOS_STEPS (default 40) and FINALIZE_CHAOS_SEED make longer or
repeatable runs; the seed and the count of every event are printed.

At the end, with every table active again, the worker's memory must stay
flat over a few hundred more cycles of traffic (bytes per cycle printed),
while the pipelines keep up with it (the worker resolves their reports)."""

import collections
import contextlib
import datetime
import os
import random
import signal
import threading
import time

import psycopg2

from pgcluster import kill
from test_consumers_worker import debezium
from test_worker_hardening import LEAK_BYTES_PER_CYCLE, memory_per_cycle, reconfigure
from worker_env import (ClockSteps, Env, as_utc, lsn_text, new_cluster, sim_clock, sim_max_lsn, sim_now,
                        truth_counts, truth_watermark, wall_clock)

TABLES = {  # lake table -> (source table, track_table options)
    "c.orders": ("dbo.orders", dict(granularity="1 hour", ddl_policy="warn", on_data_loss="resume")),
    "c.orders_strict": ("dbo.orders", dict(granularity="15 minutes", ddl_policy="block", on_data_loss="stop")),
    "c.payments": ("dbo.payments", dict(granularity="5 minutes")),
}
CONSUMERS = {"c.orders": "spark-orders", "c.payments": "spark-payments"}   # lake table -> its required consumer
DERIVED = "c.orders_hourly"                     # built from DERIVED_INPUTS, hourly, by DERIVED_CONSUMER
DERIVED_INPUTS = ["c.orders", "c.payments"]
DERIVED_GRANULARITY = datetime.timedelta(hours=1)
DERIVED_CONSUMER = "airflow-hourly"
NOTHING = "0x" + "00" * 10                      # the LSN of a consumer that has applied nothing
EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
TOLERANCE = 45                                  # the source's clock_tolerance, seconds
GRANULARITY = {t: {"1 hour": 3600, "15 minutes": 900, "5 minutes": 300}[opts["granularity"]]
               for t, (_, opts) in TABLES.items()}


def worker_pid(pg):
    rows = pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize worker'")
    return rows[0][0] if rows else None


def instances(sim, table):
    schema, name = table.split(".")
    return [r for r in sim.call("sim.state")[1] if r["source_table"].lower() == f"{schema}.{name}".lower()]


def settled(env, sim, n=None):
    """Every table either caught up with max LSN or stopped (lost, blocked). A source held after a step
    back of its clock beyond the tolerance (commit_time_ahead) is released, as an operator would once
    the clock is right (the commits it then records are checked by check_clock_steps)."""
    held = env.source_status("erp")
    if held and held["held_by"]:
        env.sql("SELECT finalize.release_source('erp')")
        if n is not None:
            n["clock:released"] += 1
        return False
    target = sim_max_lsn(sim)
    for t in TABLES:
        st = env.status(t)
        if st["state"] in ("data_lost", "schema_blocked"):
            continue
        if st["state"] != "active" or st["offset_lsn"] != target:
            return False
    return True


def check_invariants(env, sim, counters, clocks):
    truth = truth_watermark(sim)
    commits = {}
    for t, (src, _) in TABLES.items():
        until = env.one("SELECT finalize.finalized_until(%s)", (t,))
        assert until is None or until <= truth or clocks.excuses(TOLERANCE, until, truth), \
            f"{t}: verdict {until} leads the truth {truth}"
        if src not in commits:
            commits[src] = [(lsn_text(c["commit_lsn"]), c["inserts"], c["updates"], c["deletes"])
                            for c in sim.call("sim.truth_commits", table=src)[0]]
        facts = env.facts(t)
        events = env.facts(t, kind="event")
        # A data loss restarts the chain at a later LSN; several losses in a
        # row leave a chain of "resumed" events.
        jumps = {e["start_lsn"]: e["end_lsn"] for e in events
                 if e["event"] == "resumed" and e["detail"].get("after") == "data_loss"}
        ranges = [f for f in facts if f["start_lsn"] is not None]
        ends = [f["end_lsn"] for f in facts]
        assert len(ends) == len(set(ends)), f"{t}: a range recorded twice"
        for prev, cur in zip(facts, facts[1:]):
            at = prev["end_lsn"]
            while at != cur["start_lsn"] and at in jumps:
                at = jumps[at]
            assert at == cur["start_lsn"], \
                f"{t}: gap or overlap between {prev['end_lsn']} and {cur['start_lsn']} without a recorded loss"
        for f in ranges:
            got = [0, 0, 0]
            for lsn, i, u, d in commits[src]:
                if f["start_lsn"] < lsn <= f["end_lsn"]:
                    got[0] += i
                    got[1] += u
                    got[2] += d
            assert got == [f["inserts"], f["updates"], f["deletes"]], f"{t}: range {f} vs truth {got}"
        counters["events:" + t] = len(events)


def check_clock_steps(env, sim, beyond, n):
    """Every commit made after a step back beyond the tolerance and stamped in a period the source
    verdict had already called final (beyond: [(max LSN, {table: source_until}) at each such step])
    makes that period inexact and opens a critical clock_stepped_back incident, once recorded."""
    for src in sorted({s for s, _ in TABLES.values()}):
        # (a transaction that changed no row of the table puts nothing in a period)
        commits = [(lsn_text(c["commit_lsn"]), as_utc(c["commit_time_utc"]))
                   for c in sim.call("sim.truth_commits", table=src)[0] if c["inserts"] + c["updates"] + c["deletes"]]
        for t in [t for t, (s, _) in TABLES.items() if s == src]:
            ranges = [(f["start_lsn"], f["end_lsn"]) for f in env.facts(t) if f["start_lsn"] is not None]
            for lsn_at_step, verdicts in beyond:
                final = verdicts.get(t)
                late = [(lsn, stamp) for lsn, stamp in commits
                        if final is not None and lsn > lsn_at_step and stamp < final
                        and any(a < lsn <= b for a, b in ranges)]
                for lsn, stamp in late:
                    period = env.one("SELECT finalize.period_start(%s, %s::interval)",
                                     (stamp, "%d seconds" % GRANULARITY[t]))
                    exact = env.one("SELECT exact FROM finalize.changes_by_period(%s, %s, %s)",
                                    (t, period, period + datetime.timedelta(seconds=1)))
                    assert exact is False, f"{t}: commit {lsn} stamped {stamp} in a final period: {period} is exact"
                    n["clock:late_commits_flagged"] += 1
                if late:
                    assert env.one("SELECT count(*) FROM finalize.alert WHERE kind = 'clock_stepped_back' "
                                   "AND severity = 'critical' AND table_name = %s", (t,)) > 0, \
                        f"{t}: commits {late} landed in final periods, and no critical incident says so"


def out_of_reach(env, sim, t, src):
    """The periods of commits that retention removed before finalize read them and that SQL Server's clock,
    stepped back by more than the clock_tolerance inside the lost changes, stamped outside the loss's window
    (the commit times of its bounds): finalize never saw those stamps, nor the step (docs/periods.md, "Data
    loss"), so it cannot tell their periods; they are not compared. A stamp outside the window by less
    than the tolerance stays compared."""
    # As seconds since the epoch: a loss from before the first watermark starts at -infinity (a float, where
    # a datetime would overflow with the slack).
    losses = env.sql("SELECT l.from_lsn::text, l.to_lsn::text, extract(epoch FROM l.lost_from)::float8, "
                     "extract(epoch FROM l.lost_to)::float8 FROM finalize.loss l "
                     "JOIN finalize.tracked_table tt USING (table_id) WHERE tt.table_name = %s", (t,))
    if not losses:
        return set()
    slack = TOLERANCE
    commits = sim.call("sim.truth_commits", table=src)[0]
    periods = set()
    for from_lsn, to_lsn, lost_from, lost_to in losses:
        if from_lsn is None or to_lsn is None:
            continue
        low, high = bytes.fromhex(from_lsn[2:]), bytes.fromhex(to_lsn[2:])
        for c in commits:
            stamp = as_utc(c["commit_time_utc"])
            if low <= bytes(c["commit_lsn"]) <= high and \
                    not lost_from - slack <= stamp.timestamp() <= lost_to + slack:
                periods.add(stamp - datetime.timedelta(seconds=stamp.timestamp() % GRANULARITY[t]))
    return periods


def check_exact_periods(env, sim, start, end):
    """Every period finalize calls exact (and final) holds the truth's counts by stamp."""
    compared = 0
    for t, (src, _) in TABLES.items():
        truth = truth_counts(sim, src, start, end, granularity_seconds=GRANULARITY[t])
        unseen = out_of_reach(env, sim, t, src)
        for ps, ins, upd, dele in env.sql("SELECT period_start, inserts, updates, deletes "
                                          "FROM finalize.changes_by_period(%s, %s, %s) "
                                          "WHERE covered AND exact AND is_final", (t, start, end)):
            if ps in unseen:
                continue
            assert (ins, upd, dele) == truth[ps], f"{t}: period {ps} is exact with {(ins, upd, dele)}, " \
                                                  f"the truth is {truth[ps]}"
            compared += 1
    assert compared > 0, "no exact period to compare"
    return compared


def verdict(env, table):
    return env.one("SELECT finalize.finalized_until(%s)", (table,))


def watermark(env, table):
    """The watermark (finalize.status shows the verdict as finalized_until() answers it)."""
    return env.one("SELECT w.finalized_until FROM finalize.watermark w WHERE w.table_id = finalize_internal.tracked_id(%s)",
                   (table,))


def call_noticing(pg, query, args):
    """Runs one statement in its own connection: (its value, the NOTICEs it raised)."""
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchone()[0], list(conn.notices)
    finally:
        conn.close()


class Pipelines:
    """The lake side: the pipelines writing the lake tables, as finalize sees them.

    A tracked table's consumer keeps the LSN it has applied in memory (lost when it crashes) and
    the greatest LSN finalize accepted from it (durable: it restarts from there). It applies only
    what CDC has captured (up to max LSN), a few commits of its source at a time and not on every
    step, sometimes up to an LSN between two commits; it reports on some steps only, in one of the
    accepted forms, and after a crash or as an at-least-once redelivery it reports an LSN it
    reported before, which must be ignored. The derived table's job reads its inputs' verdict and
    reports a lagging processed_until, and after a crash an older one again."""

    def __init__(self, env, sim, rng, n, seed):
        self.env, self.sim, self.rng, self.n, self.seed = env, sim, rng, n, seed
        self.applied = {t: NOTHING for t in CONSUMERS}
        self.durable = {t: None for t in CONSUMERS}
        self.history = {t: [] for t in CONSUMERS}
        self.processed = None                    # the derived job's last accepted processed_until
        self.processed_history = []
        self.floor = {}                          # verdicts when the consumers were declared
        self.last = {}                           # verdicts at the previous check
        self.step = "setup"
        self.clocks = None                       # the run's clock steps (ClockSteps)

    def declare(self):
        """The consumers of the tracked tables, the derived table and its consumer (after the
        baselines: declaring a consumer never retracts a verdict, so the verdicts then are floors)."""
        for t, consumer in CONSUMERS.items():
            self.env.sql("SELECT finalize.add_consumer(%s, %s)", (t, consumer))
        self.env.sql("SELECT finalize.track_derived(%s, %s, %s::interval)",
                     (DERIVED, DERIVED_INPUTS, "%d seconds" % DERIVED_GRANULARITY.total_seconds()))
        self.env.sql("SELECT finalize.add_consumer(%s, %s)", (DERIVED, DERIVED_CONSUMER))
        for t in list(CONSUMERS) + [DERIVED]:
            self.floor[t] = watermark(self.env, t)

    def fail(self, message):
        self.n["violations"] += 1
        raise AssertionError(f"seed {self.seed}, step {self.step}: {message}")

    def report(self, table, value, expected):
        """One report (LSN text or processed_until); it must move exactly when expected, and say why not."""
        if table == DERIVED:
            query, consumer = "SELECT finalize.report_processed(%s, %s, %s)", DERIVED_CONSUMER
        else:
            query, consumer = "SELECT finalize.report_progress(%s, %s, %s)", CONSUMERS[table]
        moved, notices = call_noticing(self.env.pg, query, (table, consumer, value))
        self.n["consumer_reports"] += 1
        if moved is not expected:
            self.fail(f"{consumer} of {table} reported {value}: returned {moved}, expected {expected} "
                      f"(last accepted {self.processed if table == DERIVED else self.durable[table]})")
        if not moved:
            self.n["consumer_reports_ignored"] += 1
            if not any("ignored" in m for m in notices):
                self.fail(f"{consumer} of {table}: the ignored report {value} raised no NOTICE: {notices}")
        return moved

    def lsn_form(self, lsn, rng=None):
        """finalize's form (either case of hex digits) or Debezium's (either case)."""
        return (rng or self.rng).choice([lsn, "0x" + lsn[2:].lower(), debezium(lsn), debezium(lsn).upper()])

    def apply(self, table):
        """The consumer applies a few more commits of its source that CDC has captured."""
        src = TABLES[table][0]
        top = sim_max_lsn(self.sim)
        ahead = [lsn_text(c["commit_lsn"]) for c in self.sim.call("sim.truth_commits", table=src)[0]]
        ahead = [lsn for lsn in ahead if self.applied[table] < lsn <= top]
        if not ahead:
            return
        k = min(len(ahead), self.rng.randint(1, 4))
        new = ahead[k - 1]
        if self.rng.random() < 0.25:        # a position between two commits of the source
            lo = int(new, 16)
            hi = int(ahead[k], 16) - 1 if k < len(ahead) else int(top, 16)
            if hi > lo:
                new = "0x%020X" % self.rng.randint(lo + 1, hi)
        self.applied[table] = new
        self.n["consumer_applied"] += 1

    def act(self, step):
        """One step of every pipeline."""
        self.step = step
        rng = self.rng
        for t in CONSUMERS:
            durable = self.durable[t] or NOTHING
            if rng.random() < 0.08:             # crash: back to the last report, which it sends again
                self.applied[t] = durable
                self.n["consumer_crashes"] += 1
                if self.history[t]:
                    self.report(t, self.lsn_form(rng.choice(self.history[t][-3:])), False)
                continue
            if rng.random() < 0.5:
                self.apply(t)
            if self.applied[t] > durable and rng.random() < 0.6:
                self.report(t, self.lsn_form(self.applied[t]), True)
                self.durable[t] = self.applied[t]
                self.history[t].append(self.applied[t])
            elif self.history[t] and rng.random() < 0.1:     # at-least-once: the same report again
                self.report(t, self.lsn_form(self.durable[t]), False)
        for t in DERIVED_INPUTS + [DERIVED]:          # now and then an operator repairs a loss
            if rng.random() < 0.15 and self.env.status(t)["loss_blocked"]:
                self.acknowledge(t)
        if rng.random() < 0.08:
            self.n["consumer_crashes"] += 1
            if self.processed_history:
                self.report(DERIVED, rng.choice(self.processed_history[-3:]), False)
        elif rng.random() < 0.45:
            # A run of the job: it read its inputs' verdict and processed up to it, or less.
            inputs = self.env.one("SELECT finalize.finalized_until(%s::text[])", (DERIVED_INPUTS,))
            if inputs is not None and (self.processed is None or inputs > self.processed):
                room = 7200 if self.processed is None else int((inputs - self.processed).total_seconds()) - 1
                done = inputs - datetime.timedelta(seconds=rng.choice([0, 0, rng.randint(0, max(room, 0))]))
                self.report(DERIVED, done, True)
                self.processed = done
                self.processed_history.append(done)
            elif self.processed_history and rng.random() < 0.2:     # a rerun with nothing new
                self.report(DERIVED, self.processed, False)

    def verdicts(self):
        """What a sensor reads (finalized_until(), which stops at an unacknowledged loss) and the
        watermark (finalize.watermark) of every table, the derived table's first: an input's only grow."""
        out = {}
        for t in [DERIVED] + list(TABLES):
            sensor = verdict(self.env, t)            # before the watermark, which only grows
            out[t] = (sensor, watermark(self.env, t))
        return out

    def check(self, sim):
        """No verdict claims what a consumer has not applied or processed; none moves back."""
        verdicts = self.verdicts()
        truth = truth_watermark(sim)
        for t, (sensor, mark) in verdicts.items():
            if sensor is not None and (mark is None or sensor > mark):
                self.fail(f"{t}: finalized_until() {sensor} is beyond the watermark {mark}")
            for what, until in (("finalized_until()", sensor), ("the watermark", mark)):
                before = self.last.get((t, what))
                gran = GRANULARITY.get(t, DERIVED_GRANULARITY.total_seconds())
                if before is not None and (until is None or until < before) and not (
                        what == "finalized_until()" and self.clocks.excuses_back(TOLERANCE, before, until, gran)):
                    self.fail(f"{t}: {what} moved back from {before} to {until}")
                self.last[(t, what)] = until
        for t, consumer in CONSUMERS.items():
            mark, applied = verdicts[t][1], self.durable[t] or NOTHING
            if mark is not None and mark > truth and not self.clocks.excuses(TOLERANCE, mark, truth):
                self.fail(f"{t}: verdict {mark} leads the truth watermark {truth}")
            pending = [as_utc(c["commit_time_utc"]) for c in sim.call("sim.truth_commits", table=TABLES[t][0])[0]
                       if lsn_text(c["commit_lsn"]) > applied]
            first = min(pending) if pending else None
            floor = self.floor[t]
            if mark is not None and first is not None and mark > first and (floor is None or mark > floor) \
                    and not self.clocks.excuses(TOLERANCE, mark, first):
                self.fail(f"{t}: verdict {mark} claims the commit at {first} that {consumer} has not applied "
                          f"(it reported {applied}; verdict when declared {floor})")
        (sensor, mark), floor = verdicts[DERIVED], self.floor[DERIVED]
        if mark is not None and (floor is None or mark > floor):
            inputs = {t: verdicts[t][1] for t in DERIVED_INPUTS}
            if any(i is None or mark > i for i in inputs.values()):
                self.fail(f"{DERIVED}: verdict {mark} leads its inputs {inputs}")
            if self.processed is None or mark > self.processed:
                self.fail(f"{DERIVED}: verdict {mark} leads what {DERIVED_CONSUMER} processed ({self.processed})")
        if sensor is not None:
            inputs = {t: verdicts[t][0] for t in DERIVED_INPUTS}
            if any(i is None or sensor > i for i in inputs.values()):
                self.fail(f"{DERIVED}: finalized_until() {sensor} leads its inputs' {inputs}")
        for until in (sensor, mark):
            if until is not None and (until - EPOCH) % DERIVED_GRANULARITY:
                self.fail(f"{DERIVED}: verdict {until} is not a period boundary of {DERIVED_GRANULARITY}")
        held = self.env.one("SELECT count(*) FROM finalize.status WHERE held_back_by IS NOT NULL")
        self.n["consumer_held"] += held

    def acknowledge(self, table):
        """The lake was re-snapshotted: every loss of the table so far is acknowledged. A derived
        table acknowledges only the losses its job rebuilt (it has a required consumer)."""
        try:
            self.env.sql("SELECT finalize.acknowledge_loss(%s, '-infinity', 'infinity', %s)",
                         (table, f"chaos step {self.step}: re-snapshotted"))
            self.n["loss_acknowledged"] += 1
        except psycopg2.Error as e:
            if table != DERIVED or e.pgcode != "42809":      # no loss inherited to acknowledge
                raise

    @contextlib.contextmanager
    def keeping_up(self):
        """While the block runs, the pipelines keep up with the traffic, from a thread with its own
        connections: a few times a second every consumer reports max LSN (what CDC has captured),
        the derived job its inputs' verdict. The worker's memory is then measured while it resolves
        consumers and moves every verdict, as without consumers."""
        stop = threading.Event()
        errors = []

        def run():
            rng = random.Random(self.seed)
            conn = self.env.pg.connect()
            mssql = None
            try:
                while not stop.wait(0.2):
                    try:
                        if mssql is None:
                            mssql = self.sim.connect()
                        cur = mssql.cursor()
                        cur.execute("SELECT sys.fn_cdc_get_max_lsn()")
                        top = lsn_text(cur.fetchall()[0][0])
                    except Exception:               # a fault still armed, a killed session: next time
                        mssql = None
                        continue
                    with conn.cursor() as pgcur:
                        for t, consumer in CONSUMERS.items():
                            if top is None or top <= (self.durable[t] or NOTHING):
                                continue
                            pgcur.execute("SELECT finalize.report_progress(%s, %s, %s)",
                                          (t, consumer, self.lsn_form(top, rng)))
                            self.n["consumer_reports_live"] += 1
                            if pgcur.fetchone()[0] is not True:
                                errors.append(f"{consumer} of {t}: the report of {top} did not move "
                                              f"(last accepted {self.durable[t]})")
                            self.applied[t] = self.durable[t] = top
                            self.history[t].append(top)
                        pgcur.execute("SELECT finalize.finalized_until(%s::text[])", (DERIVED_INPUTS,))
                        inputs = pgcur.fetchone()[0]
                        if inputs is not None and (self.processed is None or inputs > self.processed):
                            pgcur.execute("SELECT finalize.report_processed(%s, %s, %s)",
                                          (DERIVED, DERIVED_CONSUMER, inputs))
                            self.n["consumer_reports_live"] += 1
                            if pgcur.fetchone()[0] is not True:
                                errors.append(f"{DERIVED_CONSUMER}: the report of {inputs} did not move "
                                              f"(last accepted {self.processed})")
                            self.processed = inputs
                            self.processed_history.append(inputs)
            except Exception as e:
                errors.append(repr(e))
            finally:
                conn.close()
                if mssql is not None:
                    mssql.close()

        self.step = "memory"
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(30)
        if thread.is_alive():
            self.fail("the pipelines' thread is stuck in a report (30 s)")
        if errors:
            self.fail(errors[0])

    def catch_up(self, pg):
        """The consumers stop keeping up: with new commits an hour later, every consumer holds its
        table's verdict below its source's, and the derived job holds the derived table. Then every
        consumer reports everything (max LSN): the verdicts reach their source's. Once the losses
        are acknowledged, finalized_until() says so too; the derived job reports its inputs'
        verdict, and the derived verdict reaches the inputs' (in whole hours)."""
        self.step = "end"
        for src in sorted({TABLES[t][0] for t in CONSUMERS}):
            self.sim.call("sim.commit", table=src, inserts=1)
        self.sim.call("sim.advance", seconds=3900)
        pg.wait_for(lambda: settled(self.env, self.sim, self.n), timeout=60, what="the tables to catch up at the end")
        self.check(self.sim)
        for t, consumer in CONSUMERS.items():
            st = self.env.status(t)
            if not (st["held_back_by"] == consumer and watermark(self.env, t) < st["source_until"]):
                self.fail(f"{t}: {consumer} reported nothing of the last hour, yet it holds nothing: {st}")
        top = sim_max_lsn(self.sim)
        for t in CONSUMERS:
            self.report(t, self.lsn_form(top), True)
            self.applied[t] = self.durable[t] = top
        for t in CONSUMERS:
            pg.wait_for(lambda: (lambda st: st["held_back_by"] is None
                                 and watermark(self.env, t) == st["source_until"])(self.env.status(t)),
                        timeout=30, what=lambda: f"seed {self.seed}: {t} to reach its source's verdict once "
                                                 f"{CONSUMERS[t]} reported max LSN {top}: {self.env.status(t)}")
            self.acknowledge(t)
            st = self.env.status(t)
            if verdict(self.env, t) != st["finalized_until"] or st["loss_blocked"]:
                self.fail(f"{t}: finalized_until() {verdict(self.env, t)} once every loss is acknowledged: {st}")
        self.check(self.sim)
        inputs = self.env.one("SELECT finalize.finalized_until(%s::text[])", (DERIVED_INPUTS,))
        expected = inputs - (inputs - EPOCH) % DERIVED_GRANULARITY
        st = self.env.status(DERIVED)
        if not (st["held_back_by"] == DERIVED_CONSUMER and watermark(self.env, DERIVED) < st["source_until"] == expected):
            self.fail(f"{DERIVED}: {DERIVED_CONSUMER} has not processed the last hour, yet it holds nothing "
                      f"(inputs until {inputs}): {st}")
        self.report(DERIVED, inputs, True)
        self.processed = inputs
        self.acknowledge(DERIVED)
        pg.wait_for(lambda: verdict(self.env, DERIVED) == expected == self.env.status(DERIVED)["source_until"]
                    == self.env.status(DERIVED)["finalized_until"],
                    timeout=30, what=lambda: f"seed {self.seed}: {DERIVED} to reach {expected} once "
                                             f"{DERIVED_CONSUMER} reported {inputs}: {self.env.status(DERIVED)}")
        self.check(self.sim)


def memory_after_chaos(env, sim, pg, n):
    """Every table active again and no fault armed; then, polling every 100 ms with traffic,
    the growth of the worker's memory per cycle after a warm-up (memory_per_cycle)."""
    sim.call("sim.fault_clear")
    deadline = time.monotonic() + 60
    while True:
        stopped = [t for t in TABLES if env.status(t)["state"] in ("data_lost", "schema_blocked")]
        for t in stopped:              # a table blocked by several DDL statements needs several
            env.one("SELECT finalize.resume_table(%s)", (t,))
        if not stopped and settled(env, sim, n) and all(env.status(t)["state"] == "active" for t in TABLES):
            break
        assert time.monotonic() < deadline, f"tables not active again: {[(t, env.status(t)['state']) for t in TABLES]}"
        sim.call("sim.advance", seconds=6)
        time.sleep(0.5)
    reconfigure(pg, "finalize.poll_interval", "100ms")
    per_cycle = memory_per_cycle(env, sim, "erp", warmup=50, measured=300)[0]
    pg.wait_for(lambda: settled(env, sim, n), timeout=60, what="the tables to catch up after the traffic")
    return per_cycle


def test_chaos():
    steps = int(os.environ.get("FINALIZE_CHAOS_STEPS", "40"))
    seed = int(os.environ.get("FINALIZE_CHAOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    n = collections.Counter()
    pg = new_cluster(**{"finalize.query_timeout": "2s", "finalize.max_retry_interval": "800ms"})
    env = Env(pg)
    sim = sim_clock(start_time="2026-11-02T08:00:00Z", dummy_interval=120, retention=240).start()
    print(f"chaos seed {seed}, {steps} steps")
    try:
        if True:
            sim.call("sim.create_table", name="payments", columns="[id] int NOT NULL, [amount] int")
            sim.call("sim.enable_table", name="payments")
            sim.call("sim.create_table", name="audit", columns="[id] int NOT NULL")     # no CDC
            for table in ("dbo.orders", "dbo.payments", "dbo.audit"):
                sim.call("sim.commit", table=table, inserts=20)     # rows for updates and deletes
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim, clock_tolerance=f"{TOLERANCE} s")
            for t, (src, opts) in TABLES.items():
                env.track(t, "erp", source_table=src, **opts)
            pg.wait_for(lambda: settled(env, sim, n), timeout=60, what="baselines")
            clocks = ClockSteps(sim)
            beyond = []                 # (max LSN, source verdicts) at each step back beyond the tolerance
            lake = Pipelines(env, sim, random.Random(f"lake {seed}"), n, seed)   # the actions stay the seed's
            lake.clocks = clocks
            lake.declare()
            lake.check(sim)
            ddl_no = version = 0
            for step in range(steps):
                if sim.proc.poll() is not None:
                    raise AssertionError("the simulator died:\n" + sim.output()[-3000:])
                action = rng.choices(
                    ["traffic", "idle", "ddl", "switch", "cleanup", "purge", "fault", "kill", "restart",
                     "pause", "resume", "clock"],
                    weights=[26, 8, 4, 4, 4, 3, 8, 5, 3, 3, 6, 8])[0]
                n[action] += 1
                if action == "traffic":
                    for _ in range(rng.randint(1, 4)):
                        table = rng.choice(["dbo.orders", "dbo.orders", "dbo.payments", "dbo.audit"])
                        sim.call("sim.commit", table=table, inserts=rng.randint(0, 5),
                                 updates=rng.randint(0, 3), deletes=rng.randint(0, 1))
                        n["commits"] += 1
                elif action == "idle":
                    sim.call("sim.advance", seconds=rng.randint(60, 900))
                elif action == "ddl":
                    ddl_no += 1
                    sim.call("sim.ddl", table="dbo.orders", command=f"ALTER TABLE dbo.orders ADD c{ddl_no} int")
                elif action == "switch":
                    cis = instances(sim, "dbo.orders")
                    if len(cis) == 1:
                        version += 1
                        sim.call("sim.enable_table", name="orders", capture_instance=f"dbo_orders_v{version}")
                        n["instance_created"] += 1
                    else:
                        oldest = min(cis, key=lambda r: r["create_lsn"])
                        sim.call("sim.disable_table", name="orders", capture_instance=oldest["capture_instance"])
                        n["instance_dropped"] += 1
                elif action == "cleanup":
                    sim.call("sim.cleanup", retention_minutes=rng.choice([30, 120, 240]))
                elif action == "purge":
                    ci = rng.choice([r["capture_instance"] for r in instances(sim, "dbo.orders")])
                    sim.call("sim.commit", inserts=2)
                    sim.call("sim.fault_purge", capture_instance=ci)
                elif action == "fault":
                    kind = rng.choice(["drop", "error", "stall", "refuse"])
                    n["fault:" + kind] += 1
                    if kind == "drop":
                        sim.call("sim.fault_drop", pattern=rng.choice(["COUNT_BIG", "sp_cdc", "max_lsn"]), count=1)
                    elif kind == "error":
                        sim.call("sim.fault_error", number=8645, message="A timeout occurred while waiting for memory.",
                                 pattern=rng.choice(["COUNT_BIG", "get_min_lsn", "ddl_history"]), count=1)
                    elif kind == "stall":
                        sim.call("sim.fault_stall", seconds=3, pattern="COUNT_BIG", count=1)
                    else:
                        sim.call("sim.kill_sessions")
                        sim.call("sim.fault_refuse_logins", count=2)
                    sim.call("sim.commit", inserts=1)
                elif action == "kill":
                    pid = worker_pid(pg)
                    if pid:
                        time.sleep(rng.uniform(0, 0.3))
                        kill(pid, signal.SIGKILL)
                        pg.wait_for(lambda: worker_pid(pg) not in (None, pid), timeout=60, what="a new worker")
                elif action == "restart":
                    pg.stop("immediate")
                    pg.start()
                elif action == "pause":
                    pg.sql("ALTER SYSTEM SET finalize.enabled = off")
                    pg.reload()
                    pg.wait_for(lambda: worker_pid(pg) is None, what="the worker to stop")
                    sim.call("sim.commit", inserts=3)
                    sim.call("sim.advance", seconds=rng.randint(600, 7200))
                    if rng.random() < 0.7:
                        sim.call("sim.cleanup", retention_minutes=30)
                    pg.sql("ALTER SYSTEM RESET finalize.enabled")
                    pg.reload()
                elif action == "resume":
                    for t in TABLES:
                        if env.status(t)["state"] in ("data_lost", "schema_blocked"):
                            env.one("SELECT finalize.resume_table(%s)", (t,))
                            n["resumed"] += 1
                elif action == "clock":
                    # NTP or a VM host steps SQL Server's clock; a busy database commits right after.
                    # Before a step back, commits just past a 5-minute boundary are read (c.payments'
                    # periods): without the tolerance that period would be final, and the stepped
                    # back clock stamps into it.
                    at_step = {}

                    def before_back():
                        clocks.just_past(rng, 300)
                        for table in ("dbo.payments", "dbo.orders"):
                            sim.call("sim.commit", table=table, inserts=1)
                            n["commits"] += 1
                        sim.call("sim.advance", seconds=6)
                        pg.wait_for(lambda: settled(env, sim, n), timeout=60,
                                    what=lambda: f"step {step} (clock, seed {seed}) to settle before the step back")
                        check_invariants(env, sim, n, clocks)
                        at_step.update(top=sim_max_lsn(sim),
                                       verdicts={t: env.status(t)["source_until"] for t in TABLES})

                    kind, seconds = clocks.step(rng, [TOLERANCE], n, before_back)
                    if seconds < 0:
                        beyond.append((at_step["top"], at_step["verdicts"]))
                    for _ in range(rng.randint(1, 3)):
                        sim.call("sim.commit", table=rng.choice(["dbo.orders", "dbo.payments"]),
                                 inserts=rng.randint(1, 3), updates=rng.randint(0, 2))
                        n["commits"] += 1
                lake.act(step)
                sim.call("sim.advance", seconds=rng.randint(6, 120))
                pg.wait_for(lambda: settled(env, sim, n), timeout=60,
                            what=lambda: f"step {step} ({action}, seed {seed}) to settle: "
                                         f"{[(t, env.status(t)['state'], env.status(t)['condition']) for t in TABLES]}")
                clocks.observe()
                check_invariants(env, sim, n, clocks)
                check_clock_steps(env, sim, beyond, n)
                lake.check(sim)
            with lake.keeping_up():
                per_cycle = memory_after_chaos(env, sim, pg, n)
            check_invariants(env, sim, n, clocks)
            lake.check(sim)
            lake.catch_up(pg)
            check_invariants(env, sim, n, clocks)
            check_clock_steps(env, sim, beyond, n)
            exact = check_exact_periods(env, sim, datetime.datetime(2026, 11, 2, 8, tzinfo=datetime.timezone.utc),
                                        wall_clock(sim))
            assert per_cycle < LEAK_BYTES_PER_CYCLE, \
                f"the worker's memory grew by {per_cycle:.0f} bytes per cycle after the chaos"
            events = collections.Counter(r[0] for r in pg.sql("SELECT event FROM finalize.fact WHERE event IS NOT NULL"))
            lake_keys = ("consumer_", "violations", "loss_acknowledged")
            print(f"chaos seed {seed}: {steps} steps; actions {dict(sorted((k, v) for k, v in n.items() if (':' not in k or k.startswith(('fault', 'clock'))) and not k.startswith(lake_keys)))}; "
                  f"{exact} exact periods compared; "
                  f"events recorded {dict(events)}; truth watermark {truth_watermark(sim)}; "
                  f"worker memory {per_cycle:.1f} bytes per cycle; "
                  f"consumers: {n['consumer_reports']} reports, {n['consumer_reports_ignored']} ignored, "
                  f"{n['consumer_crashes']} crashes, {n['consumer_applied']} batches applied, "
                  f"{n['consumer_held']} table-steps held back by a consumer, {n['loss_acknowledged']} losses acknowledged, "
                  f"{n['consumer_reports_live']} more reports keeping up with the traffic; violations: {n['violations']}")
    except Exception:
        print("--- simulator output ---\n" + sim.output()[-4000:])
        print("--- server log (crashes) ---\n" + "\n".join(
            l for l in pg.log().splitlines() if "signal" in l or "PANIC" in l or "TRAP" in l)[-4000:])
        raise
    finally:
        sim.stop()
        pg.cleanup()
