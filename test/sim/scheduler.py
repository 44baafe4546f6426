"""Time-driven jobs: capture cycles, the daily cleanup, the traffic generator.

The same ``run_due`` serves both clocks: with the real clock a background
thread calls it as time passes; with the simulated clock ``sim.advance``
calls it for the skipped interval, so every capture cycle, dummy row, cleanup
and generated transaction that would have happened in between happens, in
order, at its own instant."""
import datetime as _dt
import threading

from . import capture, cleanup, commits, timeutil

_EPS = _dt.timedelta(microseconds=1)


class Scheduler:
    """Owns the job timetable of one Database."""

    def __init__(self, db):
        self.db = db
        self.cfg = db.cfg
        now = db.now()
        self.next_capture = now
        self.next_cleanup = self._next_cleanup_after(now)
        self.next_traffic = self._next_traffic_after(now) if self.cfg.traffic else None
        self.traffic_tables = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.thread = None

    # --- timetable -----------------------------------------------------------------

    def _next_cleanup_after(self, t):
        """Next local HH:MM strictly after ``t`` (DST-aware), as UTC."""
        if not self.cfg.cleanup_time:
            return None
        hh, mm = (int(x) for x in self.cfg.cleanup_time.split(":"))
        local = t.astimezone(self.db.tz)
        cand = local.replace(hour=hh, minute=mm, second=0, microsecond=0)
        for _ in range(3):
            if cand.astimezone(timeutil.UTC) > t:
                return cand.astimezone(timeutil.UTC)
            cand = (cand.replace(tzinfo=None) + _dt.timedelta(days=1)).replace(tzinfo=self.db.tz)
        return cand.astimezone(timeutil.UTC)

    def _next_traffic_after(self, t):
        rate = max(self.cfg.traffic_rate, 1e-6)
        return t + _dt.timedelta(seconds=self.db.rng.expovariate(rate))

    def reset_capture(self, now=None):
        """Restart the capture timetable (capture job started or its settings changed)."""
        self.next_capture = now or self.db.now()
        self._wake.set()

    def enable_traffic(self, on):
        self.cfg.traffic = on
        self.next_traffic = self._next_traffic_after(self.db.now()) if on else None
        self._wake.set()

    def _due(self):
        events = [(self.next_capture, 0, "capture")]
        if self.next_cleanup is not None:
            events.append((self.next_cleanup, 1, "cleanup"))
        if self.next_traffic is not None:
            events.append((self.next_traffic, 2, "traffic"))
        return min(events)

    # --- running -------------------------------------------------------------------

    def run_due(self, until):
        """Run every job due at or before ``until`` in time order (caller holds db.lock)."""
        db = self.db
        for _ in range(10_000_000):
            t, _, kind = self._due()
            if t > until:
                return
            if db.clock.simulated:
                db.clock.set(t)
            if kind == "capture":
                if db.capture_running:
                    capture.cycle(db, timeutil.t300_of(t.replace(tzinfo=None)))
                self.next_capture = t + _dt.timedelta(seconds=max(self.cfg.pollinginterval, 0.001))
            elif kind == "cleanup":
                if db.cdc_enabled and db.cleanup.held_low is None:
                    cleanup.run(db)
                self.next_cleanup = self._next_cleanup_after(t)
            else:
                self.generate_one(t)
                self.next_traffic = self._next_traffic_after(t)

    def generate_one(self, t):
        """One random transaction of the traffic generator (70% inserts, 20% updates, 10% deletes)."""
        db = self.db
        tables = []
        for name in self.cfg.traffic_tables.split(","):
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
        at = t if db.clock.simulated else None
        return commits.commit(db, table, ins, upd, dele, at=at, lateness=commits.parse_lateness(self.cfg.lateness))

    def advance(self, until):
        """sim clock: run the timetable up to ``until`` and set the clock there."""
        self.run_due(until)
        self.db.clock.set(until)

    def start(self):
        """Real clock: a daemon thread runs due jobs as wall time passes."""
        if self.db.clock.simulated or self.thread:
            return
        self.thread = threading.Thread(target=self._loop, name="sim-scheduler", daemon=True)
        self.thread.start()

    def _loop(self):
        db = self.db
        while not self._stop.is_set():
            with db.lock:
                now = db.now()
                try:
                    self.run_due(now)
                except Exception as e:          # keep the jobs alive; visible in sim.state
                    db.stats["job_errors"] += 1
                    db.last_job_error = repr(e)
                t, _, _ = self._due()
            delay = max(0.0, min(1.0, (t - db.now()).total_seconds()))
            self._wake.wait(delay)
            self._wake.clear()

    def stop(self):
        self._stop.set()
        self._wake.set()
        if self.thread:
            self.thread.join(timeout=5)
