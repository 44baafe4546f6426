"""Time-driven jobs of every database: capture cycles, the daily cleanup, the traffic generator.

One scheduler (and, with the real clock, one thread) serves all databases of the instance.  Each database
has its own timetable (``Jobs``: its capture job, cleanup job and traffic generator, as SQL Server runs a
``cdc.<db>_capture`` and ``cdc.<db>_cleanup`` job per CDC-enabled database); a heap orders the next event of
every database.  The same ``run_due`` serves both clocks: with the real clock the thread calls it as time
passes; with the simulated clock ``sim.advance`` calls it for the skipped interval, so every capture cycle,
dummy row, cleanup and generated transaction that would have happened in between happens, in order, at its
own instant.

Idle databases cost nothing: a capture cycle that finds the log empty and writes no dummy row changes
nothing but counters (``capture_cycles``, the empty scan sessions of ``sys.dm_cdc_log_scan_sessions``), so
the scheduler does not wake for it.  The next event of an idle database is the cycle that will write its
dummy row (or none); the empty cycles before it are accounted in one step (``_account``) when that event
runs, or when a procedure touches the database (``sync``, called before every procedure).  Whatever makes a
database busy (a commit, DDL, enabling a table or CDC, starting the job, changing a setting) happens inside
a procedure, after which ``replan`` schedules the next cycle on the database's polling grid."""
import datetime as _dt
import heapq
import threading

from . import capture, cleanup, commits, dmviews, timeutil

_US = _dt.timedelta(microseconds=1)
_MARGIN = _dt.timedelta(milliseconds=10)
CAPTURE, CLEANUP, TRAFFIC = 0, 1, 2
KINDS = {CAPTURE: "capture", CLEANUP: "cleanup", TRAFFIC: "traffic"}


def _t300(t):
    return timeutil.t300_of(t.replace(tzinfo=None))


class Jobs:
    """The timetable of one database's jobs."""
    __slots__ = ("seq", "next_capture", "next_cleanup", "next_traffic", "planned", "version")

    def __init__(self, seq):
        self.seq = seq
        self.next_capture = None       # the next capture cycle on the polling grid not yet run or accounted
        self.next_cleanup = None
        self.next_traffic = None
        self.planned = None            # (time, kind) of the event queued for this database
        self.version = 0


class Scheduler:
    """Owns the job timetables of every database of an instance (``model.InstanceState``)."""

    def __init__(self, instance):
        self.instance = instance
        self.clock = instance.clock
        self.heap = []                 # (time, kind, seq, version)
        self.by_seq = {}
        self._seq = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.thread = None
        instance.scheduler = self

    # --- databases ----------------------------------------------------------------

    def add(self, db):
        """Give a new database its timetable (its first capture cycle is due at once)."""
        self._seq += 1
        j = db.jobs = Jobs(self._seq)
        self.by_seq[j.seq] = db
        now = self.clock.now()
        j.next_capture = now
        j.next_cleanup = self._next_cleanup_after(db, now)
        j.next_traffic = self._next_traffic_after(db, now) if db.cfg.traffic else None
        self.replan(db)

    # --- timetable -----------------------------------------------------------------

    @staticmethod
    def _interval(db):
        return _dt.timedelta(seconds=max(db.cfg.pollinginterval, 0.001))

    def _next_cleanup_after(self, db, t):
        """Next local HH:MM strictly after ``t`` (DST-aware), as UTC."""
        if not db.cfg.cleanup_time:
            return None
        hh, mm = (int(x) for x in db.cfg.cleanup_time.split(":"))
        local = t.astimezone(db.tz)
        cand = local.replace(hour=hh, minute=mm, second=0, microsecond=0)
        for _ in range(3):
            if cand.astimezone(timeutil.UTC) > t:
                return cand.astimezone(timeutil.UTC)
            cand = (cand.replace(tzinfo=None) + _dt.timedelta(days=1)).replace(tzinfo=db.tz)
        return cand.astimezone(timeutil.UTC)

    @staticmethod
    def _next_traffic_after(db, t):
        rate = max(db.cfg.traffic_rate, 1e-6)
        return t + _dt.timedelta(seconds=db.rng.expovariate(rate))

    def reset_capture(self, db, now=None):
        """Restart the capture timetable (capture job started or its settings changed)."""
        db.jobs.next_capture = now or self.clock.now()
        self.replan(db)

    def reset_cleanup(self, db):
        """The cleanup time changed."""
        db.jobs.next_cleanup = self._next_cleanup_after(db, self.clock.now())
        self.replan(db)

    def enable_traffic(self, db, on):
        db.cfg.traffic = on
        db.jobs.next_traffic = self._next_traffic_after(db, self.clock.now()) if on else None
        self.replan(db)

    @staticmethod
    def _capturing(db):
        return db.cdc_enabled and db.capture_running

    def _dummy_cycle(self, db):
        """The first cycle on the grid (from next_capture) that finds the drained log due for a dummy row
        (capture.maybe_dummy), or None if no cycle will write one."""
        cfg = db.cfg
        j = db.jobs
        if cfg.dummy_interval <= 0:
            return None
        if not cfg.dummy_on_idle_log and db.activity_lsn <= db.lsn_at_last_mapping:
            return None
        last = db.last_mapping_t300
        if last is None:
            return j.next_capture
        step = self._interval(db)
        target = timeutil.t300_to_naive(last).replace(tzinfo=timeutil.UTC) + _dt.timedelta(
            seconds=cfg.dummy_interval)
        k = max(0, (target - j.next_capture - _MARGIN) // step)
        g = j.next_capture + k * step
        while _t300(g) - last < cfg.dummy_interval * 300:
            g += step
        return g

    def _capture_event(self, db):
        """When the capture job next does something observable: at once-on-the-grid if the log holds
        records, else at the cycle writing a dummy row; None while CDC or the job is off."""
        if not self._capturing(db):
            return None
        return db.jobs.next_capture if db.log else self._dummy_cycle(db)

    def _plan(self, db):
        j = db.jobs
        cands = []
        t = self._capture_event(db)
        if t is not None:
            cands.append((t, CAPTURE))
        if j.next_cleanup is not None:
            cands.append((j.next_cleanup, CLEANUP))
        if j.next_traffic is not None:
            cands.append((j.next_traffic, TRAFFIC))
        return min(cands) if cands else None

    def replan(self, db):
        """Queue the database's next event (after anything that may have changed it)."""
        j = db.jobs
        if j is None:
            return
        plan = self._plan(db)
        if plan == j.planned:
            return
        j.planned = plan
        j.version += 1
        if plan is not None:
            heapq.heappush(self.heap, (plan[0], plan[1], j.seq, j.version))
            if len(self.heap) > 4 * len(self.by_seq) + 1024:
                self._compact()
        self._wake.set()

    def _compact(self):
        """Drop superseded heap entries."""
        self.heap = [(d.jobs.planned[0], d.jobs.planned[1], d.jobs.seq, d.jobs.version)
                     for d in self.by_seq.values() if d.jobs.planned is not None]
        heapq.heapify(self.heap)

    def _account(self, db, limit, inclusive):
        """Capture cycles on the grid before ``limit`` (or at it, ``inclusive``) that changed nothing: counted
        (and recorded as empty scan sessions) while the job runs, skipped while CDC or the job is off."""
        j = db.jobs
        span = limit - j.next_capture
        if span < _dt.timedelta(0) or (span == _dt.timedelta(0) and not inclusive):
            return
        step = self._interval(db)
        n = (span // step if inclusive else (span - _US) // step) + 1
        if self._capturing(db):
            scans = 1 if db.cfg.maxtrans >= 1 else max(1, db.cfg.maxscans)
            dmviews.record_empty_cycles(db, j.next_capture, step, n, scans)
            db.stats["cycles"] += n
        j.next_capture += n * step

    def sync(self, db, now=None):
        """Account the idle cycles of ``db`` up to now (before a procedure looks at or changes it)."""
        if db.jobs is None:
            return
        with self.instance.lock:
            now = now or self.clock.now()
            t = self._capture_event(db)
            if t is not None and t <= now:
                self._account(db, t, inclusive=False)      # due, not run yet (the real-clock thread runs it)
            else:
                self._account(db, now, inclusive=True)

    # --- running -------------------------------------------------------------------

    def run_due(self, until, catch=False):
        """Run every job of every database due at or before ``until`` in time order (caller holds the
        instance lock).  ``catch``: a failing job is recorded on its database (sim.state) and skipped."""
        heap = self.heap
        for _ in range(100_000_000):
            if not heap or heap[0][0] > until:
                return
            t, kind, seq, version = heapq.heappop(heap)
            db = self.by_seq.get(seq)
            if db is None or db.jobs.version != version:
                continue
            db.jobs.planned = None
            try:
                self._run(db, t, kind)
            except Exception as e:
                if not catch:
                    raise
                db.stats["job_errors"] += 1
                db.last_job_error = repr(e)
            finally:
                self.replan(db)

    def _run(self, db, t, kind):
        j = db.jobs
        self._account(db, t, inclusive=False)
        if self.clock.simulated:
            self.clock.set(t)
        if kind == CAPTURE:
            try:
                if db.capture_running:
                    capture.cycle(db, _t300(t))
            finally:
                j.next_capture = t + self._interval(db)
        elif kind == CLEANUP:
            try:
                if db.cdc_enabled and db.cleanup.held_low is None:
                    cleanup.run(db)
            finally:
                j.next_cleanup = self._next_cleanup_after(db, t)
        else:
            try:
                self.generate_one(db, t)
            finally:
                j.next_traffic = self._next_traffic_after(db, t)

    def generate_one(self, db, t):
        """One random transaction of the traffic generator (70% inserts, 20% updates, 10% deletes)."""
        tables = []
        for name in db.cfg.traffic_tables.split(","):
            try:
                tables.append(db.user_table(name.strip()))
            except Exception:
                pass
        if not tables:
            return None
        table = db.rng.choice(tables)
        n = db.rng.randint(1, 5)
        ins = upd = dele = 0
        for _ in range(n):
            r = db.rng.random()
            if r < 0.7 or len(table.key_list) < 10:
                ins += 1
            elif r < 0.9:
                upd += 1
            else:
                dele += 1
        upd = min(upd, len(table.key_list))
        dele = min(dele, max(0, len(table.key_list) - upd))
        at = t if self.clock.simulated else None
        return commits.commit(db, table, ins, upd, dele, at=at, lateness=commits.parse_lateness(db.cfg.lateness))

    def advance(self, until):
        """sim clock: run every database's timetable up to ``until`` and set the clock there."""
        self.run_due(until)
        self.clock.set(until)

    def start(self):
        """Real clock: one daemon thread runs the due jobs of all databases as wall time passes."""
        if self.clock.simulated or self.thread:
            return
        self.thread = threading.Thread(target=self._loop, name="sim-scheduler", daemon=True)
        self.thread.start()

    def _loop(self):
        lock = self.instance.lock
        while not self._stop.is_set():
            with lock:
                self.run_due(self.clock.now(), catch=True)
                t = self.heap[0][0] if self.heap else None
                self._wake.clear()          # replan (always under the lock) sets it again
            delay = 1.0 if t is None else max(0.0, min(1.0, (t - self.clock.now()).total_seconds()))
            self._wake.wait(delay)

    def stop(self):
        self._stop.set()
        self._wake.set()
        if self.thread:
            self.thread.join(timeout=5)
