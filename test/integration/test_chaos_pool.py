"""Chaos in the pool: a randomized, seeded run of many sources on a pool of two
source workers (finalize.max_source_workers = 2). One simulator instance
serves six databases, each the SQL Server database of its own source (a
foreign server), with one or two tracked tables each and its own capture job
on the shared clock; a seventh source points at a listener that never answers
a login, all along.

The steps mix commits in random databases, clock advances, capture jobs
stopped and started per database, per-database faults (a stalled statement,
an error, a dropped connection, the database's sessions killed, refused
logins, a login never answered, a cleanup in the middle of a read, a cleanup
holding its low watermark, a plain cleanup), pool workers killed (SIGKILL: a
crash, every process restarts), terminated (replaced alone) or cancelled, and
reloads (SIGHUP, also with another poll interval or connection budget), and
steps of the instance's clock (forward and back, within and beyond the
clock_tolerance of some or all sources: each has its own).

While every step settles, against the simulator's ground truth of each
table's own database (commit times as the stepped clock stamped them): no
verdict (finalize.finalized_until() nor the watermark in finalize.status)
ever leads the truth watermark, except where a step back beyond its source's
tolerance reopened it, none ever moves back, the hung source never gets one;
a source held after such a step is released (as an operator would), and
every commit stamped in a period its source verdict had already called final
makes that period inexact and opens a critical clock_stepped_back incident; after it, every recorded range holds
exactly the changes committed in it (nothing lost, nothing counted twice) and
the ranges chain, except across a recorded loss. At the end, with the faults
stopped and the hung source still hanging, every other table catches up: its
verdict reaches the truth's period, and every period finalize calls exact
holds the true counts.

FINALIZE_CHAOS_POOL_STEPS (default 25) and FINALIZE_CHAOS_SEED make longer or
repeatable runs; the seed and the count of every event are printed."""

import collections
import datetime
import os
import random
import signal
import time

from pgcluster import kill
from worker_env import ClockSteps, Env, SilentServer, as_utc, lsn_text, new_cluster, sim_clock, sim_now, wall_clock

DATABASES = [f"shard_{i:03d}" for i in range(6)]
POLLING = dict(zip(DATABASES, [5, 10, 5, 20, 5, 30]))   # each database's capture job
TOLERANCE = dict(zip(DATABASES, [30, 60, 120, 45, 90, 60]))     # each source's clock_tolerance, seconds
PATTERNS = ["COUNT_BIG", "sp_cdc", "max_lsn", "get_min_lsn", "ddl_history", None]
SILENT = "pool_silent"
SILENT_TABLE = "pool.silent"
EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)


def layout():
    """Sources and tables: source src_<i> on database shard_<i>; every database's dbo.orders is
    tracked, every other one's dbo.payments too; granularities and loss policies vary.
    table -> (source, database, source table, granularity in seconds, on_data_loss)."""
    tables = {}
    for i, db in enumerate(DATABASES):
        tables[f"pool.orders_{i}"] = (f"src_{i}", db, "dbo.orders", [3600, 900, 300][i % 3],
                                      ["resume", "stop"][i % 2])
        if i % 2 == 0:
            tables[f"pool.payments_{i}"] = (f"src_{i}", db, "dbo.payments", [300, 3600][i % 4 // 2], "resume")
    return tables


TABLES = layout()


def worker_pids(pg):
    """The pool's processes."""
    return sorted(r[0] for r in pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize worker'"))


def add_source(env, sim, name, database):
    """A foreign server on one database of the simulator, with that database's clock tolerance."""
    env.sql(f'CREATE SERVER "{name}" FOREIGN DATA WRAPPER finalize_mssql OPTIONS '
            f"(host '127.0.0.1', port '{sim.port}', database '{database}', encrypt 'off', "
            f"clock_tolerance '{TOLERANCE[database]} s')")
    env.sql(f'CREATE USER MAPPING FOR CURRENT_USER SERVER "{name}" OPTIONS (username %s, password %s)',
            ("sa", "Passw0rd!"))
    env.sources[name] = sim


def add_silent(env, server):
    """A foreign server on a listener that accepts and never answers (a login that never ends)."""
    env.sql(f"CREATE SERVER {SILENT} FOREIGN DATA WRAPPER finalize_mssql "
            f"OPTIONS (host '127.0.0.1', port '{server.port}', database 'demo', encrypt 'off')")
    env.sql(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {SILENT} OPTIONS (username 'sa', password 'x')")
    env.sources[SILENT] = None


def sim_view(sim):
    """Per database, from the simulator (control calls, exempt from faults): (max LSN, truth watermark)."""
    out = {}
    for db in DATABASES:
        wm = sim.call("sim.truth_watermark", database=db)[0][0]
        out[db] = (lsn_text(wm["max_lsn"]), as_utc(wm["watermark_utc"]))
    return out


def floor_period(instant, seconds):
    """The start of the period (of that many seconds, UTC) holding instant."""
    return instant - datetime.timedelta(seconds=(instant - EPOCH).total_seconds() % seconds)


class Chaos:
    """The run's state: what it has seen of every verdict, and its counters."""

    def __init__(self, env, sim, seed):
        self.env, self.sim, self.seed = env, sim, seed
        self.pg = env.pg
        self.n = collections.Counter()
        self.last = {}                 # (table, "sensor" | "watermark") -> the verdict seen last
        self.step = "setup"
        self.view = None               # sim_view() of the step being settled (the clock stands still)
        self.clocks = None             # the run's clock steps (ClockSteps)
        self.beyond = []               # (max LSN per database, source verdict per table) at each step back

    def fail(self, message):
        """A violation, with the seed and the step that replay it."""
        raise AssertionError(f"seed {self.seed}, step {self.step}: {message}")

    def verdicts(self):
        """finalized_until() of every table, then (later: it only grows) the status rows."""
        names = list(TABLES) + [SILENT_TABLE]
        sensors = dict(self.env.sql("SELECT t, finalize.finalized_until(t) FROM unnest(%s::text[]) AS t", (names,)))
        # (the watermark itself: finalize.status shows the verdict as finalized_until() answers it)
        rows = self.env.sql("SELECT s.table_name, w.finalized_until, s.offset_lsn, s.state, s.loss_blocked, "
                            "s.condition, s.source_condition FROM finalize.status s "
                            "JOIN finalize.watermark w ON w.table_id = finalize_internal.tracked_id(s.table_name) "
                            "WHERE s.table_name = ANY(%s)", (names,))
        cols = ("watermark", "offset_lsn", "state", "loss_blocked", "condition", "source_condition")
        return {r[0]: dict(zip(cols, r[1:]), sensor=sensors[r[0]]) for r in rows}

    def check_verdicts(self, verdicts):
        """No verdict leads its database's truth or moves back; the hung source has none."""
        for t, st in verdicts.items():
            if t == SILENT_TABLE:
                if st["sensor"] is not None or st["watermark"] is not None or st["offset_lsn"] is not None:
                    self.fail(f"{t}: a verdict from a source that never answered: {st}")
                continue
            db, gran = TABLES[t][1], TABLES[t][3]
            truth = self.view[db][1]
            if st["sensor"] is not None and (st["watermark"] is None or st["sensor"] > st["watermark"]):
                self.fail(f"{t}: finalized_until() {st['sensor']} is beyond the watermark {st['watermark']}")
            for what in ("sensor", "watermark"):
                until = st[what]
                if until is not None and until > truth and not self.clocks.excuses(TOLERANCE[db], until, truth):
                    self.n["violations"] += 1
                    self.fail(f"{t} ({db}): {what} {until} leads the truth watermark {truth}")
                if until is not None and floor_period(until, gran) != until:
                    self.fail(f"{t}: {what} {until} is not a period boundary ({gran} s)")
                before = self.last.get((t, what))
                if before is not None and (until is None or until < before) and not (
                        what == "sensor" and self.clocks.excuses_back(TOLERANCE[db], before, until, gran)):
                    self.n["violations"] += 1
                    self.fail(f"{t}: {what} moved back from {before} to {until}")
                self.last[(t, what)] = until

    def settled(self):
        """Checks the verdicts; true once every table is caught up with its database's max LSN or
        stopped by a loss."""
        verdicts = self.verdicts()
        if len(verdicts) != len(TABLES) + 1:
            return False
        self.check_verdicts(verdicts)
        held = [r[0] for r in self.env.sql("SELECT server_name FROM finalize.source_status WHERE held_by IS NOT NULL")]
        ahead = self.env.one("SELECT count(*) FROM finalize.source_status WHERE condition = 'commit_time_ahead'")
        if (held or ahead) and self.clocks.observe() < self.clocks.high:
            # A capture job started after a step back beyond the tolerance exposes commits stamped
            # before it: SQL Server's clock stays behind them, and every source holds, until the
            # clock has caught up with its greatest reading, as it does in the world.
            behind = (self.clocks.high - self.clocks.observe()).total_seconds()
            self.sim.call("sim.advance", seconds=round(behind + 1, 2))
            self.view = sim_view(self.sim)
            self.n["clock:caught_up"] += 1
        for server in held:             # held by a step back beyond its tolerance: an operator releases it
            self.env.sql("SELECT finalize.release_source(%s)", (server,))
            self.n["clock:released"] += 1
        if held:
            return False
        for t, (_, db, *_rest) in TABLES.items():
            st = verdicts[t]
            if st["state"] == "data_lost":
                continue
            if st["state"] != "active" or st["offset_lsn"] != self.view[db][0]:
                return False
        return True

    def settle(self, what):
        """Waits (checking all along) until the step has settled."""
        if self.sim.proc.poll() is not None:
            raise AssertionError("the simulator died:\n" + self.sim.output()[-3000:])
        self.view = sim_view(self.sim)
        self.pg.wait_for(self.settled, timeout=90, interval=0.15,
                         what=lambda: f"seed {self.seed}, step {self.step} ({what}) to settle: "
                                      f"{self.describe()}")

    def describe(self):
        """Every table's status, the truth and the pool, for failure messages."""
        rows = self.env.sql("SELECT table_name, state, condition, source_condition, offset_lsn, finalized_until "
                            "FROM finalize.status ORDER BY 1")
        return f"{rows}; truth {self.view}; workers {self.env.sql('SELECT * FROM finalize.source_workers')}"

    def check_facts(self):
        """Every recorded range holds exactly the changes committed in it, by the truth of its
        database; the ranges chain without gap or overlap except across a recorded loss."""
        commits = {}
        for t, (_, db, src, _, _) in TABLES.items():
            if (db, src) not in commits:
                commits[(db, src)] = [(lsn_text(c["commit_lsn"]), c["inserts"], c["updates"], c["deletes"])
                                      for c in self.sim.call("sim.truth_commits", database=db, table=src)[0]]
            facts = self.env.facts(t)
            events = self.env.facts(t, kind="event")
            jumps = {e["start_lsn"]: e["end_lsn"] for e in events
                     if e["event"] == "resumed" and e["detail"].get("after") == "data_loss"}
            ends = [f["end_lsn"] for f in facts]
            if len(ends) != len(set(ends)):
                self.fail(f"{t}: a range recorded twice: {ends}")
            for prev, cur in zip(facts, facts[1:]):
                at = prev["end_lsn"]
                while at != cur["start_lsn"] and at in jumps:
                    at = jumps[at]
                if at != cur["start_lsn"]:
                    self.fail(f"{t}: gap or overlap between {prev['end_lsn']} and {cur['start_lsn']} "
                              "without a recorded loss")
            for f in facts:
                if f["start_lsn"] is None:
                    continue
                got = [0, 0, 0]
                for lsn, i, u, d in commits[(db, src)]:
                    if f["start_lsn"] < lsn <= f["end_lsn"]:
                        got[0] += i
                        got[1] += u
                        got[2] += d
                if got != [f["inserts"], f["updates"], f["deletes"]]:
                    self.n["violations"] += 1
                    self.fail(f"{t} ({db}): range ({f['start_lsn']}, {f['end_lsn']}] recorded "
                              f"{[f['inserts'], f['updates'], f['deletes']]}, the truth is {got}")
                self.n["ranges_checked"] += 1

    def check_clock_steps(self):
        """Every commit recorded after a step back and stamped in a period its table's source verdict
        had called final before it (a step beyond the source's tolerance) makes that period inexact
        and opens a critical clock_stepped_back incident."""
        for t, (_, db, src, gran, _) in TABLES.items():
            late = []
            ranges = None
            for tops, verdicts in self.beyond:
                final = verdicts.get(t)
                if final is None:
                    continue
                if ranges is None:
                    ranges = [(f["start_lsn"], f["end_lsn"]) for f in self.env.facts(t) if f["start_lsn"] is not None]
                    # (a transaction that changed no row of the table puts nothing in a period)
                    commits = [(lsn_text(c["commit_lsn"]), as_utc(c["commit_time_utc"]))
                               for c in self.sim.call("sim.truth_commits", database=db, table=src)[0]
                               if c["inserts"] + c["updates"] + c["deletes"]]
                late += [(lsn, stamp) for lsn, stamp in commits
                         if lsn > tops[db] and stamp < final and any(a < lsn <= b for a, b in ranges)]
            for lsn, stamp in late:
                period = floor_period(stamp, gran)
                exact = self.env.one("SELECT exact FROM finalize.changes_by_period(%s, %s, %s)",
                                     (t, period, period + datetime.timedelta(seconds=1)))
                if exact is not False:
                    self.fail(f"{t} ({db}): commit {lsn} stamped {stamp} in a period already final: {period} is exact")
                self.n["clock:late_commits_flagged"] += 1
            if late and not self.env.one("SELECT count(*) FROM finalize.alert WHERE kind = 'clock_stepped_back' "
                                         "AND severity = 'critical' AND table_name = %s", (t,)):
                self.fail(f"{t} ({db}): commits {late} landed in final periods, and no critical incident says so")

    def step_clock(self, rng):
        """The instance's clock is stepped, then the databases go on committing. Before a step back,
        the tables of 5-minute periods whose capture runs every 5 s get commits just past a
        boundary, read before the step: without the tolerance that period would be final, and the
        stepped-back clock stamps into it."""
        at_step = {}

        def before_back():
            self.clocks.just_past(rng, 300)
            for t, (_, db, src, gran, _) in TABLES.items():
                if gran == 300 and POLLING[db] == 5:
                    self.commit(rng, db, src)
            self.sim.call("sim.advance", seconds=6)
            self.settle("clock, before the step back")
            at_step["tops"] = {db: view[0] for db, view in sim_view(self.sim).items()}
            at_step["verdicts"] = {r[0]: r[1] for r in self.env.sql(
                "SELECT table_name, source_until FROM finalize.status WHERE table_name = ANY(%s)", (list(TABLES),))}

        kind, seconds = self.clocks.step(rng, list(TOLERANCE.values()), self.n, before_back)
        if seconds < 0:
            self.beyond.append((at_step["tops"], at_step["verdicts"]))
        for _ in range(rng.randint(2, 5)):
            self.commit(rng)

    # -- the actions --------------------------------------------------------------------------

    def commit(self, rng, db=None, table=None):
        """A commit (one or two transactions) in a table of a database, random unless given."""
        db = db or rng.choice(DATABASES)
        table = table or rng.choice([src for (_, d, src, _, _) in TABLES.values() if d == db])
        self.sim.call("sim.commit", database=db, table=table, inserts=rng.randint(0, 5), updates=rng.randint(0, 3),
                      deletes=rng.randint(0, 1), transactions=rng.randint(1, 2))
        self.n["commits"] += 1

    def kill_worker(self, how):
        """A pool worker, preferably one in a cycle: SIGKILL (PostgreSQL restarts every process),
        pg_terminate_backend (it alone is replaced) or pg_cancel_backend (its cycle is abandoned).
        The victim depends on timing, so it is drawn apart from the seed's sequence of actions."""
        rng = random.Random(f"{self.seed} {self.step}")
        time.sleep(rng.uniform(0, 0.3))
        busy = [r[0] for r in self.env.sql("SELECT pid FROM finalize.source_workers WHERE serving IS NOT NULL "
                                           "ORDER BY pid")]
        pids = busy or worker_pids(self.pg)
        if not pids:
            return
        victim = rng.choice(pids)
        if how == "sigkill":
            kill(victim, signal.SIGKILL)
        elif how == "terminate":
            self.pg.sql("SELECT pg_terminate_backend(%s)", (victim,))
        else:
            self.pg.sql("SELECT pg_cancel_backend(%s)", (victim,))
            return
        self.pg.wait_for(lambda: len(worker_pids(self.pg)) == 2 and victim not in worker_pids(self.pg),
                         timeout=90, what=lambda: f"seed {self.seed}, step {self.step}: a pool again after "
                                                  f"{how} of {victim}: {worker_pids(self.pg)}")

    def reload(self, rng):
        """SIGHUP, as it is or with another poll interval or connection budget."""
        kind = rng.choice(["plain", "poll_interval", "worker_connections"])
        self.n["reload:" + kind] += 1
        if kind == "poll_interval":
            self.pg.sql("ALTER SYSTEM SET finalize.poll_interval = %s", (rng.choice(["100ms", "200ms", "300ms"]),))
        elif kind == "worker_connections":
            self.pg.sql("ALTER SYSTEM SET finalize.worker_connections = %s", (rng.choice(["1", "2", "256"]),))
        self.pg.reload()


def test_chaos_in_the_pool():
    """The run: setup and baselines, the random steps, then the end (see the module's docstring)."""
    steps = int(os.environ.get("FINALIZE_CHAOS_POOL_STEPS", "25"))
    seed = int(os.environ.get("FINALIZE_CHAOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    start = time.monotonic()
    pg = new_cluster(**{"finalize.max_source_workers": "2", "finalize.login_timeout": "2s",
                        "finalize.query_timeout": "2s"})
    env = Env(pg)
    sim = sim_clock(start_time="2026-11-02T08:00:00Z", dummy_interval=120, retention=240,
                    extra_databases="shard_%03d:0-5").start()
    silent = SilentServer()
    chaos = Chaos(env, sim, seed)
    chaos.clocks = ClockSteps(sim)
    n = chaos.n
    print(f"chaos pool seed {seed}, {steps} steps")
    try:
        for db in DATABASES:
            if any(d == db and src == "dbo.payments" for (_, d, src, _, _) in TABLES.values()):
                sim.call("sim.create_table", database=db, name="payments", columns="[id] int NOT NULL, [amount] int")
                sim.call("sim.enable_table", database=db, name="payments")
            sim.call("sim.set_job", database=db, pollinginterval=POLLING[db])
            for (_, d, src, _, _) in TABLES.values():
                if d == db:
                    sim.call("sim.commit", database=db, table=src, inserts=20)     # rows for updates, deletes
        sim.call("sim.advance", seconds=60)
        for i, db in enumerate(DATABASES):
            add_source(env, sim, f"src_{i}", db)
        add_silent(env, silent)
        env.track(SILENT_TABLE, SILENT)
        for t, (source, _, src, gran, on_loss) in TABLES.items():
            env.track(t, source, source_table=src, granularity=f"{gran} seconds", on_data_loss=on_loss)
        chaos.settle("baselines")

        settling = collections.Counter()       # seconds the steps of each action took to settle
        stopped = set()            # databases whose capture job is stopped
        held = set()               # databases with a cleanup holding its low watermark
        for step in range(steps):
            chaos.step = step
            for db in sorted(held):      # a held cleanup finishes a step later
                sim.call("sim.cleanup_release", database=db)
            held.clear()
            action = rng.choices(
                ["commit", "idle", "capture", "stall", "error", "drop", "kill_sessions", "hang_login", "purge",
                 "cleanup", "sigkill", "terminate", "cancel", "reload", "resume", "clock"],
                weights=[20, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 3, 3, 5, 4, 7])[0]
            n[action] += 1
            db = rng.choice(DATABASES)
            if action == "commit":
                for _ in range(rng.randint(1, 5)):
                    chaos.commit(rng)
            elif action == "idle":
                sim.call("sim.advance", seconds=rng.randint(60, 900))
            elif action == "capture":
                # The capture job of one database stops (its commits wait, its truth with them) or starts.
                if db in stopped:
                    sim.call("sim.capture_start", database=db)
                    stopped.discard(db)
                else:
                    sim.call("sim.capture_stop", database=db)
                    stopped.add(db)
                    chaos.commit(rng, db)
            elif action == "stall":
                sim.call("sim.fault_stall", database=db, seconds=rng.choice([0.5, 1.5, 3, 5]),
                         pattern=rng.choice(PATTERNS), count=1)
                chaos.commit(rng, db)
            elif action == "error":
                sim.call("sim.fault_error", database=db, number=rng.choice([8645, 1205, 601]),
                         message="Injected by the pool chaos.", pattern=rng.choice(PATTERNS), count=1)
                chaos.commit(rng, db)
            elif action == "drop":
                sim.call("sim.fault_drop", database=db, after_rows=rng.randint(0, 1), pattern=rng.choice(PATTERNS),
                         count=1)
                chaos.commit(rng, db)
            elif action == "kill_sessions":
                if rng.random() < 0.5:
                    sim.call("sim.fault_refuse_logins", database=db, count=rng.randint(1, 3))
                    n["refuse_logins"] += 1
                sim.call("sim.kill_sessions", database=db)
                chaos.commit(rng, db)
            elif action == "hang_login":
                # The next login to the database is answered late, or never (not within
                # finalize.login_timeout); its sessions are killed, so the worker has to log in again.
                sim.call("sim.fault_hang_login", database=db, seconds=rng.choice([0.5, 30]), count=1)
                sim.call("sim.kill_sessions", database=db)
                chaos.commit(rng, db)
            elif action == "purge":
                # A cleanup in the middle of the next read: armed before the advance that captures it.
                chaos.commit(rng, db)
                sim.call("sim.fault_purge", database=db, count=1)
            elif action == "cleanup":
                if rng.random() < 0.5:
                    sim.call("sim.cleanup", database=db, retention_minutes=rng.choice([30, 120]), hold=1)
                    held.add(db)
                    n["cleanup_held"] += 1
                else:
                    sim.call("sim.cleanup", database=db, retention_minutes=rng.choice([30, 120, 240]))
                chaos.commit(rng, db)
            elif action in ("sigkill", "terminate", "cancel"):
                chaos.kill_worker(action)
            elif action == "reload":
                chaos.reload(rng)
            elif action == "resume":
                for t in TABLES:
                    if env.status(t)["state"] == "data_lost":
                        env.one("SELECT finalize.resume_table(%s)", (t,))
                        n["resumed"] += 1
            elif action == "clock":
                chaos.step_clock(rng)
            if rng.random() < 0.5:
                chaos.commit(rng)
            sim.call("sim.advance", seconds=rng.randint(6, 120))
            t0 = time.monotonic()
            chaos.settle(action)
            settling[action] += time.monotonic() - t0
            chaos.clocks.observe()
            chaos.check_facts()
            chaos.check_clock_steps()

        # The end: no fault, every capture job running, every loss resumed and acknowledged; then
        # commits everywhere just after the next hour (of the stepped clock) and the greatest
        # tolerance more, and a minute more: every table's verdict is that hour, the truth's period
        # in every granularity (the hung source still hanging).
        chaos.step = "end"
        n["faults_unfired"] = sim.call("sim.fault_clear")[0][0]["cleared"]
        for db in sorted(held):
            sim.call("sim.cleanup_release", database=db)
        for db in sorted(stopped):
            sim.call("sim.capture_start", database=db)
        sim.call("sim.advance", seconds=30)
        chaos.settle("faults cleared")
        deadline = time.monotonic() + 90
        while True:
            lost = [t for t in TABLES if env.status(t)["state"] == "data_lost"]
            for t in lost:
                env.one("SELECT finalize.resume_table(%s)", (t,))
                n["resumed"] += 1
            if not lost:
                break
            assert time.monotonic() < deadline, f"seed {seed}: tables not active again: {chaos.describe()}"
            chaos.settle("resume")
        for t in TABLES:
            if env.status(t)["loss_blocked"]:
                env.sql("SELECT finalize.acknowledge_loss(%s, '-infinity', 'infinity', 'pool chaos: re-snapshotted')",
                        (t,))
                n["loss_acknowledged"] += 1
        wall = wall_clock(sim)
        offset = wall - sim_now(sim)           # the wall clock minus the simulator's
        hour = floor_period(max(wall, chaos.clocks.high), 3600) + datetime.timedelta(hours=1)
        late = datetime.timedelta(seconds=max(TOLERANCE.values()))
        sim.call("sim.advance", to=hour + late + datetime.timedelta(seconds=20) - offset)
        for t, (_, db, src, _, _) in TABLES.items():
            chaos.commit(rng, db, src)
        sim.call("sim.advance", to=hour + late + datetime.timedelta(seconds=90) - offset)
        chaos.settle("the end")
        chaos.check_clock_steps()
        for db, (_, truth) in chaos.view.items():
            assert floor_period(truth, 3600) == hour, f"seed {seed}: {db}'s truth {truth} is not just after {hour}"

        def reached():
            """Checks the verdicts; true once every table's reaches that hour, its source ok."""
            verdicts = chaos.verdicts()
            chaos.check_verdicts(verdicts)
            return all(verdicts[t]["sensor"] == verdicts[t]["watermark"] == hour
                       and verdicts[t]["source_condition"] == "ok" for t in TABLES)
        pg.wait_for(reached, timeout=90, what=lambda: f"seed {seed}: every table's verdict to reach {hour}, "
                                                      f"the hung source hanging: {chaos.describe()}")
        chaos.check_facts()

        # Every period finalize calls exact holds the true counts of its database.
        compared = 0
        for t, (_, db, src, gran, _) in TABLES.items():
            truth = {as_utc(r["period_start_utc"]): (r["inserts"], r["updates"], r["deletes"])
                     for r in sim.call("sim.truth_counts", database=db, table=src, granularity_seconds=gran,
                                       **{"from": datetime.datetime(2026, 11, 2, 8, tzinfo=datetime.timezone.utc),
                                          "to": hour})[0]}
            rows = env.sql("SELECT period_start, inserts, updates, deletes FROM finalize.changes_by_period(%s, %s, %s) "
                           "WHERE covered AND exact AND is_final",
                           (t, datetime.datetime(2026, 11, 2, 8, tzinfo=datetime.timezone.utc), hour))
            for ps, ins, upd, dele in rows:
                assert (ins, upd, dele) == truth[ps], \
                    f"seed {seed}: {t} ({db}) period {ps}: exact counts {(ins, upd, dele)}, the truth {truth[ps]}"
                compared += 1
        assert compared > 0, "no exact period to compare"

        # The hung source hung all along, on the pool of two, and is still retried: its next login
        # times out too.
        failures = env.one("SELECT failures FROM finalize.source_status WHERE server_name = %s", (SILENT,))
        pg.wait_for(lambda: env.sql("SELECT condition = 'timeout' AND failures > %s FROM finalize.source_status "
                                    "WHERE server_name = %s", (failures, SILENT))[0][0],
                    timeout=60, what=lambda: f"the hung source to time out again: {env.source_status(SILENT)}")
        assert len(silent.accepted) >= 2, len(silent.accepted)
        assert len(worker_pids(pg)) == 2
        assert env.one("SELECT count(*) FROM finalize.source_workers WHERE worker IS NOT NULL") == 2
        events = collections.Counter(r[0] for r in pg.sql("SELECT event FROM finalize.fact WHERE event IS NOT NULL"))
        print(f"chaos pool seed {seed}: {steps} steps, {len(TABLES)} tables on {len(DATABASES)} databases and a hung "
              f"source; actions {dict(sorted(n.items()))}; events recorded {dict(sorted(events.items()))}; "
              f"{compared} exact periods compared; {len(silent.accepted)} logins to the hung source; "
              f"{time.monotonic() - start:.1f} s, settling {dict((k, round(v, 1)) for k, v in settling.items())}")
    except Exception:
        print("--- simulator output ---\n" + sim.output()[-4000:])
        print("--- server log (crashes) ---\n" + "\n".join(
            line for line in pg.log().splitlines() if "signal" in line or "PANIC" in line or "TRAP" in line)[-4000:])
        raise
    finally:
        silent.close()
        sim.stop()
        pg.cleanup()
