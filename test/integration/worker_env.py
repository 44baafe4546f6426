"""Helpers for the worker's integration tests: a PostgreSQL cluster that runs
finalize's worker against one or more SQL Server simulators (real FreeTDS
over real TCP), and the checks that compare what finalize recorded with the
simulator's ground truth."""

import datetime
import os
import re
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from pgcluster import Cluster  # noqa: E402
from simproc import Simulator  # noqa: E402

UTC = datetime.timezone.utc


def at(hh, mm, ss=0.0):
    """An instant on 2026-11-02 (UTC), the day the sim fixture's clock starts."""
    return datetime.datetime(2026, 11, 2, hh, mm, tzinfo=UTC) + datetime.timedelta(seconds=ss)


def lsn_text(value):
    """An LSN from pymssql (bytes) as finalize writes it."""
    return None if value is None else "0x" + bytes(value).hex().upper()


def as_utc(dt):
    """A naive datetime (pymssql datetime2 in UTC) or an aware one, as aware UTC."""
    if dt is None:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def sim_clock(**options):
    """A simulator on a simulated clock with no jobs running on their own."""
    opts = dict(clock="sim", start_time="2026-11-02T09:00:00Z", pollinginterval=5,
                dummy_interval=300, cleanup_time="")
    opts.update(options)
    return Simulator(**opts)


class Env:
    """A cluster running finalize, plus the simulators serving as its sources."""

    def __init__(self, pg):
        self.pg = pg
        self.sources = {}

    def sql(self, query, args=None):
        return self.pg.sql(query, args)

    def one(self, query, args=None):
        rows = self.pg.sql(query, args)
        return rows[0][0] if rows else None

    def add_source(self, name, sim, login="sa", password="Passw0rd!", timezone=None, port=None, **options):
        """CREATE SERVER + user mapping for a simulator; options are more server options. The
        connection is not encrypted unless options say so (encrypt, ca_file): the simulator speaks
        TLS only when started with a certificate, and test_tls.py covers that. The clock_tolerance
        is 0 unless options say otherwise (None: the server's default, 60 s): these tests assert the
        verdict a commit time gives, on a simulated clock that is never stepped back unless a test
        steps it; the tolerance has its own tests (test_worker_time.py, the chaos runs)."""
        options.setdefault("encrypt", "off")
        options.setdefault("clock_tolerance", "0 s")
        options = {k: v for k, v in options.items() if v is not None}
        opts = "host '127.0.0.1', port '%d', database '%s'" % (port or sim.port, sim.database)
        if timezone:
            opts += ", timezone '%s'" % timezone
        for key, value in options.items():
            opts += ", %s '%s'" % (key, value)
        self.sql('CREATE SERVER "%s" FOREIGN DATA WRAPPER finalize_mssql OPTIONS (%s)' % (name, opts))
        self.sql('CREATE USER MAPPING FOR CURRENT_USER SERVER "%s" OPTIONS (username %%s, password %%s)' % name,
                 (login, password))
        self.sources[name] = sim

    def track(self, table, source, source_table="dbo.orders", granularity="1 hour", start_from="max_lsn",
              ddl_policy="warn", on_data_loss="stop", check_source=True):
        """track_table; check_source=False tracks without its check of the SQL Server table
        (finalize.source_check_timeout = 0), as a table whose source changes after it was tracked."""
        conn = self.pg.connect()
        try:
            with conn.cursor() as cur:
                if not check_source:
                    cur.execute("SET finalize.source_check_timeout = 0")
                cur.execute("SELECT finalize.track_table(%s, %s, %s, %s::interval, %s, %s, %s)",
                            (table, source, source_table, granularity, start_from, ddl_policy, on_data_loss))
                return cur.fetchone()[0]
        finally:
            conn.close()

    def status(self, table):
        rows = self.pg.rows("SELECT * FROM finalize.status WHERE table_name = %s", (table,))
        return rows[0] if rows else None

    def source_status(self, source):
        rows = self.pg.rows("SELECT * FROM finalize.source_status WHERE server_name = %s", (source,))
        return rows[0] if rows else None

    def facts(self, table, kind="range"):
        return self.pg.rows("SELECT * FROM finalize.facts WHERE table_name = %s AND kind = %s ORDER BY fact_id",
                            (table, kind))

    def wait_caught_up(self, table, sim, timeout=30):
        """Waits until the table's offset is the simulator's current max LSN."""
        target = sim_max_lsn(sim)
        return self.pg.wait_for(lambda: (self.status(table) or {}).get("offset_lsn") == target,
                                timeout=timeout, what=lambda: f"{table} to reach {target}: {self.status(table)}")

    def wait_status(self, table, predicate, timeout=30, what="status"):
        """Waits until predicate(status row) holds; returns that row."""
        def check():
            st = self.status(table) or {}
            return st if predicate(st) else None
        return self.pg.wait_for(check, timeout=timeout, what=lambda: f"{what}: {self.status(table)}")

    def cleanup(self):
        """Forgets every table and source (between tests sharing a cluster)."""
        self.sql("DELETE FROM finalize.tracked_table")
        for name in list(self.sources):
            self.sql('DROP SERVER IF EXISTS "%s" CASCADE' % name)
        self.sql("DELETE FROM finalize.source_status")
        self.sources.clear()


def sim_max_lsn(sim):
    """The simulator's max LSN, read through sim.state (exempt from faults)."""
    return lsn_text(sim.call("sim.state")[0][0]["max_lsn"])


def truth_watermark(sim):
    """The simulator's true instant before which every commit is captured."""
    return as_utc(sim.call("sim.truth_watermark")[0][0]["watermark_utc"])


def truth_counts(sim, table, start, end, granularity_seconds=3600):
    """True (inserts, updates, deletes) per UTC period start."""
    rows = sim.call("sim.truth_counts", table=table, **{"from": start, "to": end},
                    granularity_seconds=granularity_seconds)[0]
    return {as_utc(r["period_start_utc"]): (r["inserts"], r["updates"], r["deletes"]) for r in rows}


def assert_never_leads(env, table, sim):
    """The verdict never runs ahead of the truth."""
    until = env.one("SELECT finalize.finalized_until(%s)", (table,))
    truth = truth_watermark(sim)
    assert until is None or until <= truth, f"verdict {until} leads the truth {truth}"
    return until, truth


def assert_chain(facts):
    """Range facts of a table chain without gaps, overlaps or duplicates."""
    ranges = [f for f in facts if f["kind"] == "range"]
    for prev, cur in zip(ranges, ranges[1:]):
        assert cur["start_lsn"] == prev["end_lsn"], f"gap or overlap between {prev} and {cur}"
    ends = [f["end_lsn"] for f in ranges]
    assert len(ends) == len(set(ends))


def new_cluster(**conf):
    settings = {"finalize.poll_interval": "200ms", "finalize.max_retry_interval": "1s"}
    settings.update(conf)
    cluster = Cluster(conf=settings)
    cluster.start()
    cluster.sql("CREATE EXTENSION finalize")
    return cluster


def wait(seconds):
    time.sleep(seconds)


def memory_total(pg, pid, samples=3):
    """Asks the worker to log its memory contexts (pg_log_backend_memory_contexts) and reads the
    bytes of its "Grand total" line from the server log; the smallest of a few samples, so that
    one taken in the middle of a cycle's transaction does not count."""
    pattern = re.compile(r"\[%d\] .*Grand total: (\d+) bytes in (\d+) blocks; (\d+) free" % pid)
    totals = []
    for _ in range(samples):
        seen = len(pattern.findall(pg.log()))
        assert pg.sql("SELECT pg_log_backend_memory_contexts(%s)", (pid,))[0][0], f"no process {pid}"
        found = pg.wait_for(lambda: pattern.findall(pg.log())[seen:], timeout=30,
                            what=f"the memory contexts of {pid} in the log")
        totals.append(int(found[0][0]))
        time.sleep(0.15)
    return min(totals)


class SilentServer:
    """A TCP listener that accepts connections and never sends a byte: a login that never ends."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = []
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.closing.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted.append(conn)

    def close(self):
        self.closing.set()
        self.thread.join(5)
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def wall_clock(sim):
    """SQL Server's wall clock (SYSUTCDATETIME(), what stamps commits), which sim.step_clock moves."""
    return as_utc(sim.query("SELECT SYSUTCDATETIME() AS t")[0]["t"])


def sim_now(sim):
    """The simulator's own clock (sim.advance, @at), which clock steps do not move."""
    return as_utc(sim.call("sim.state")[0][0]["clock_utc"])


class ClockSteps:
    """The chaos runs' steps of SQL Server's wall clock (sim.step_clock), forward and back, below and
    above a source's clock_tolerance, and what they allow a verdict.

    A step back to wall time w, when the wall clock has read `high` at its greatest, is absorbed by a
    source whose tolerance covers high - w: no commit can then be stamped before high - tolerance, and
    no verdict of that source reaches beyond it. A larger step reopens [w, high - tolerance): a commit may
    now be stamped in a period a verdict already called final. That is not prevented (it cannot be),
    but it must be detected: the source is held (commit_time_ahead) while the worker sees its clock
    behind a commit time it read, and each such commit, once recorded, makes its period inexact and
    opens a clock_stepped_back incident. The steps keep the wall clock within max_offset of the
    simulator's."""

    def __init__(self, sim, max_offset=1800):
        self.sim = sim
        self.high = wall_clock(sim)
        self.offset = 0.0                  # the wall clock minus the simulator's, in seconds
        self.max_offset = max_offset
        self.backs = []                    # (wall clock after a step back, its greatest reading before)

    def observe(self):
        """The wall clock now; its greatest reading so far follows it."""
        wall = wall_clock(self.sim)
        self.high = max(self.high, wall)
        return wall

    def just_past(self, rng, granularity):
        """Moves the simulator's clock on until the wall clock stands a few seconds past the next
        boundary of periods of that many seconds (UTC), where a step back hurts most: a commit
        stamped there lets a period become final that the stepped-back clock still stamps into."""
        wall = self.observe()
        since = (wall - datetime.datetime(2000, 1, 1, tzinfo=UTC)).total_seconds() % granularity
        self.sim.call("sim.advance", seconds=round(granularity - since + rng.uniform(0.5, 3), 2))

    def step(self, rng, tolerances, n, before_back=None):
        """One step of a random kind: forward or back, within or beyond the least and greatest of
        the sources' tolerances (seconds). Before a step back, before_back() runs (the chaos
        commits just past a period boundary and waits for the worker to read it). Returns (kind,
        seconds moved)."""
        least, most = min(tolerances), max(tolerances)
        kinds = ["forward_within", "forward_beyond", "back_within", "back_beyond"]
        kind = rng.choice(kinds + (["back_between"] if most - least > 4 else []))
        if kind.startswith("back") and before_back is not None:
            before_back()
        wall = self.observe()
        behind = (self.high - wall).total_seconds()        # already back from the greatest reading
        if kind == "forward_within":
            seconds = rng.uniform(1, most)
        elif kind == "forward_beyond":
            seconds = rng.uniform(most + 1, 900)
        elif kind == "back_within":
            room = least - behind                          # absorbed by every source
            seconds = -rng.uniform(0.5, room - 0.5) if room > 1 else 0.0
        elif kind == "back_between":                       # absorbed by some sources, not by others
            seconds = -max(rng.uniform(least + 2, most - 2) - behind, 0.0)
        else:                                              # beyond every source's tolerance
            seconds = -(max(rng.uniform(most + 5, 600), behind + 5) - behind)
        if seconds > 0 and self.offset + seconds > self.max_offset:
            seconds = 0.0
        if seconds < 0 and self.offset + seconds < -self.max_offset:
            seconds = 0.0
        if seconds == 0.0:
            return kind, 0.0
        seconds = round(seconds, 2)
        self.sim.call("sim.step_clock", seconds=seconds)
        self.offset += seconds
        if seconds < 0:
            self.backs.append((self.observe(), self.high))
        n["clock:" + kind] += 1
        return kind, seconds

    def reopened(self, tolerance):
        """The spans of stamps that steps back beyond this tolerance reopened: [after, high - tolerance)."""
        tol = datetime.timedelta(seconds=tolerance)
        return [(after, high - tol) for after, high in self.backs if after < high - tol]

    def excuses_back(self, tolerance, before, after, granularity):
        """Whether a sensor (finalized_until(), which a loss caps) that moved back from before to after
        did so for commits a step back beyond the tolerance stamped in periods it had called final: a
        reopened span starts before the verdict it had, and it went back no further than that span's
        first period (of granularity seconds, UTC). Such commits, once lost (cleanup before the
        worker read them, while their source was held), are a loss of those periods, which must not
        read as final; the watermark itself never moves back."""
        epoch = datetime.datetime(2000, 1, 1, tzinfo=UTC)

        def period(t):
            return t - datetime.timedelta(seconds=(t - epoch).total_seconds() % granularity)
        return after is not None and any(start < before and after >= period(start)
                                         for start, _ in self.reopened(tolerance))

    def excuses(self, tolerance, verdict, truth):
        """Whether a verdict beyond the truth is what a step back beyond the tolerance reopened (the
        truth lies in a reopened span, and the verdict no further than its end)."""
        return any(start <= truth and verdict <= end for start, end in self.reopened(tolerance))
