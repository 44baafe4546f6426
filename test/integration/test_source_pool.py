"""The pool of source workers (finalize.max_source_workers): many sources on a
fixed number of processes, each source with its own poll, backoff, connection
and status; sources that hang (a login never answered, a query never
answered), refuse logins or present a certificate that does not verify are
retried on at most half the pool, so the other workers keep every healthy
source's poll; a worker killed while it serves one source is replaced and no
other source loses anything; the connection budget; and one process per
source again with finalize.max_source_workers = 0.

Real PostgreSQL, real FreeTDS over TCP against simulators (and a silent TCP
listener), real TLS."""

import os
import shutil
import sys
import tempfile
import time

import pytest

from worker_env import Env, SilentServer, new_cluster, sim_clock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from certs import make_test_pki  # noqa: E402

HEALTHY = [f"h{i}" for i in range(8)]


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster(**{"finalize.max_source_workers": "2", "finalize.login_timeout": "4s",
                             "finalize.query_timeout": "4s"})
    yield cluster
    cluster.cleanup()


@pytest.fixture
def env(pg):
    e = Env(pg)
    yield e
    e.cleanup()


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="finalize-pki.")
    os.chmod(d, 0o755)
    yield make_test_pki(d)
    shutil.rmtree(d, ignore_errors=True)


def started_sim(**options):
    sim = sim_clock(start_time="2026-11-02T08:59:00Z", **options).start()
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    return sim


def worker_pids(pg):
    return sorted(r[0] for r in pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'finalize worker'"))


def cycles(env, names):
    rows = env.sql("SELECT server_name, cycles, condition FROM finalize.source_status WHERE server_name = ANY(%s)",
                   (list(names),))
    return {r[0]: (r[1], r[2]) for r in rows}


def finalize_processes(pg):
    """What finalize's processes do, for failure messages."""
    return pg.sql("SELECT pid, backend_type, state, query FROM pg_stat_activity WHERE backend_type LIKE 'finalize%%'"), \
        pg.sql("SELECT * FROM finalize.source_workers")


def add_silent(env, server, name="silent"):
    env.sql(f"CREATE SERVER {name} FOREIGN DATA WRAPPER finalize_mssql "
            "OPTIONS (host '127.0.0.1', port '%d', database 'demo', encrypt 'off')" % server.port)
    env.sql(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {name} OPTIONS (username 'sa', password 'x')")
    env.sources[name] = None


def condition_of(env, name):
    rows = env.sql("SELECT condition, last_error, failures FROM finalize.source_status WHERE server_name = %s", (name,))
    return rows[0] if rows else (None, None, None)


def condition_when(env, name, wanted):
    """The source's status row if wanted(condition) holds, read in one query (two reads could
    straddle the next cycle and pair one condition with another error)."""
    row = condition_of(env, name)
    return row if wanted(row[0]) else None


def test_a_pool_of_two_keeps_every_healthy_poll_while_sources_hang_refuse_and_fail_tls(env, pg, pki):
    healthy = started_sim()
    stalled = started_sim()
    tls = sim_clock(start_time="2026-11-02T08:59:00Z", tls_cert=pki.wrong_ca.cert, tls_key=pki.wrong_ca.key).start()
    silent = SilentServer()
    try:
        for name in HEALTHY:
            env.add_source(name, healthy)
            env.track(f"pool.{name}", name)
        add_silent(env, silent)
        env.track("pool.silent", "silent")
        env.add_source("refused", healthy, password="wrong")
        env.track("pool.refused", "refused", check_source=False)   # tracked before its password broke
        env.add_source("badcert", tls, encrypt="require", ca_file=pki.ca)
        env.track("pool.badcert", "badcert")
        env.add_source("stalled", stalled)
        env.track("pool.stalled", "stalled")
        # Every statement of the finalize login on that server is never answered (within the test).
        pg.wait_for(lambda: condition_of(env, "stalled")[0] == "ok", what="the stalled source's first cycle")
        stalled.call("sim.fault_stall", seconds=60, count=-1)

        pg.wait_for(lambda: all(c == "ok" for _, c in cycles(env, HEALTHY).values()) and
                    len(cycles(env, HEALTHY)) == len(HEALTHY), what=lambda: f"healthy sources: {cycles(env, HEALTHY)}")
        st = pg.wait_for(lambda: condition_when(env, "silent", lambda c: c == "timeout"),
                         what=lambda: f"the silent login to time out: {condition_of(env, 'silent')}")
        assert "finalize.login_timeout (4 s)" in st[1], st
        st = pg.wait_for(lambda: condition_when(env, "stalled", lambda c: c == "timeout"),
                         what=lambda: f"the stalled query to time out: {condition_of(env, 'stalled')}")
        st = pg.wait_for(lambda: condition_when(env, "refused", lambda c: c not in (None, "ok")),
                         what="the refused login")
        assert "Login failed for user" in st[1], st          # SQL Server's own words
        st = pg.wait_for(lambda: condition_when(env, "badcert", lambda c: c == "tls_failed"),
                         what=lambda: f"the certificate to fail: {condition_of(env, 'badcert')}")
        assert "The certificate issuer is unknown" in st[1], st      # GnuTLS's reason, per source

        # Twelve sources, two processes; an admin (not a superuser) sees them.
        assert len(worker_pids(pg)) == 2
        env.sql("DROP ROLE IF EXISTS pool_admin")
        env.sql("CREATE ROLE pool_admin LOGIN IN ROLE finalize_admin")
        try:
            assert pg.sql("SELECT count(*) FROM finalize.source_workers WHERE worker IS NOT NULL",
                          user="pool_admin")[0][0] == 2
        finally:
            env.sql("DROP ROLE pool_admin")

        # While the two hanging sources keep hanging (each attempt costs its timeout), every
        # healthy source keeps being polled, and never more than one worker (the retry lane of a
        # pool of two) runs the cycle of a failing source: sampled all along.
        before = cycles(env, HEALTHY)
        silent_before = len(silent.accepted)
        stalled_failures = condition_of(env, "stalled")[2]
        lane_samples = []

        def progressed():
            lane_samples.append(env.one("SELECT count(*) FROM finalize.source_workers WHERE retrying"))
            now = cycles(env, HEALTHY)
            return (all(now[n][0] >= before[n][0] + 5 for n in HEALTHY) and
                    len(silent.accepted) >= silent_before + 2 and
                    condition_of(env, "stalled")[2] >= stalled_failures + 2)
        pg.wait_for(progressed, timeout=90, interval=0.05,
                    what=lambda: f"progress: {cycles(env, HEALTHY)} silent logins {len(silent.accepted)} "
                                 f"stalled {condition_of(env, 'stalled')}")
        assert max(lane_samples) == 1 and len(lane_samples) > 20, lane_samples
        assert all(c == "ok" for _, c in cycles(env, HEALTHY).values())
        assert all(env.status(f"pool.{n}")["finalized_until"] is not None for n in HEALTHY)
    finally:
        silent.close()
        stalled.call("sim.fault_clear")
        for s in (healthy, stalled, tls):
            s.stop()


def test_a_worker_killed_while_serving_a_hung_source_is_replaced_and_no_other_source_loses_state(env, pg):
    healthy = started_sim()
    silent = SilentServer()
    try:
        for name in HEALTHY[:4]:
            env.add_source(name, healthy)
            env.track(f"pool.{name}", name)
        add_silent(env, silent)
        env.track("pool.silent", "silent")
        pg.wait_for(lambda: len(cycles(env, HEALTHY[:4])) == 4 and
                    all(c[1] == "ok" for c in cycles(env, HEALTHY[:4]).values()), what="the healthy sources")
        pg.wait_for(lambda: condition_of(env, "silent")[0] == "timeout",
                    what=lambda: f"the silent login to time out: {condition_of(env, 'silent')} {finalize_processes(pg)}")
        pg.wait_for(lambda: env.one("SELECT pid FROM finalize.source_workers WHERE serving = 'silent'"),
                    what="a worker serving the silent source again")
        victim = env.one("SELECT pid FROM finalize.source_workers WHERE serving = 'silent'")
        kept = {n: env.status(f"pool.{n}")["offset_lsn"] for n in HEALTHY[:4]}
        failures = condition_of(env, "silent")[2]
        before = cycles(env, HEALTHY[:4])
        assert pg.sql("SELECT pg_terminate_backend(%s)", (victim,))[0][0]

        # The scheduler starts a worker in its place; the others never stopped.
        pg.wait_for(lambda: len(worker_pids(pg)) == 2 and victim not in worker_pids(pg),
                    what=lambda: f"a replacement for {victim}: {finalize_processes(pg)}")
        pg.wait_for(lambda: all(c[0] >= before[n][0] + 3 for n, c in cycles(env, HEALTHY[:4]).items()),
                    what=lambda: f"healthy sources to go on: {cycles(env, HEALTHY[:4])}")
        for n in HEALTHY[:4]:
            assert env.status(f"pool.{n}")["offset_lsn"] == kept[n], "the offsets stay where they were"
        # The silent source's own state goes on too: its failures keep counting, its next login comes.
        pg.wait_for(lambda: (condition_of(env, "silent")[2] or 0) > failures,
                    what=lambda: f"the silent source to be retried: {condition_of(env, 'silent')}")
        assert not any(f"server process (PID {victim})" in line and "terminated by signal" in line
                       for line in pg.log().splitlines()), "a terminated worker is not a crash"
    finally:
        silent.close()
        healthy.stop()


def test_the_connection_budget_bounds_the_connections_kept(env, pg):
    healthy = started_sim()
    previous = pg.sql("SELECT current_setting('finalize.worker_connections')")[0][0]
    try:
        pg.sql("ALTER SYSTEM SET finalize.worker_connections = 2")
        pg.sql("SELECT pg_reload_conf()")
        for name in HEALTHY[:6]:
            env.add_source(name, healthy)
            env.track(f"pool.{name}", name)
        pg.wait_for(lambda: len(cycles(env, HEALTHY[:6])) == 6 and
                    all(c[0] >= 3 and c[1] == "ok" for c in cycles(env, HEALTHY[:6]).values()),
                    what=lambda: f"six sources polled: {cycles(env, HEALTHY[:6])}")
        # Each of the two workers keeps at most two connections open between cycles.
        samples = [env.sql("SELECT coalesce(max(connections), 0), coalesce(sum(connections), 0) "
                           "FROM finalize.source_workers")[0] for _ in range(20)]
        assert all(m <= 2 and s <= 4 for m, s in samples), samples
        # SQL Server's side: the kept ones, plus cycles in flight. Sessions that finalize closed (the
        # budget's, track_table's checks) leave its list once it has read their close, on a loaded
        # machine a moment later (7 were seen): the count comes down to the bound (a leak never would).
        def sim_sessions():
            return healthy.query("SELECT count(*) AS n FROM sys.dm_exec_sessions WHERE program_name = 'finalize'")[0]["n"]
        pg.wait_for(lambda: sim_sessions() <= 2 * 2 + 2, timeout=30,
                    what=lambda: f"SQL Server's sessions of finalize within the budget: {sim_sessions()}")
        # A larger budget keeps one connection per source.
        pg.sql("ALTER SYSTEM SET finalize.worker_connections = 100")
        pg.sql("SELECT pg_reload_conf()")
        pg.wait_for(lambda: env.one("SELECT sum(connections) FROM finalize.source_workers") == 6,
                    what=lambda: f"one connection kept per source: {env.sql('SELECT * FROM finalize.source_workers')}")
    finally:
        pg.sql("ALTER SYSTEM SET finalize.worker_connections = %s", (previous,))
        pg.sql("SELECT pg_reload_conf()")
        healthy.stop()


def test_beyond_the_budget_the_connection_just_used_is_closed_and_the_others_stay():
    """One worker, four sources, two connections: sources are served in turn, so closing the least
    recently used connection (the next one needed) made every cycle log in; closing the one just used
    keeps two sessions open round after round. (A pool of one: no source can change workers.)"""
    pg = new_cluster(**{"finalize.max_source_workers": "1", "finalize.worker_connections": "2"})
    env = Env(pg)
    healthy = started_sim()
    names = HEALTHY[:4]

    def sessions():
        return {r["session_id"] for r in healthy.query(
            "SELECT session_id FROM sys.dm_exec_sessions WHERE program_name = 'finalize'")}
    try:
        for name in names:
            env.add_source(name, healthy)
            env.track(f"pool.{name}", name)
        pg.wait_for(lambda: len(cycles(env, names)) == 4 and
                    all(c[0] >= 3 and c[1] == "ok" for c in cycles(env, names).values()),
                    what=lambda: f"four sources polled: {cycles(env, names)}")
        before = sessions()
        start = cycles(env, names)
        # Three more rounds: every source ran three more cycles.
        pg.wait_for(lambda: all(c[0] >= start[n][0] + 3 for n, c in cycles(env, names).items()),
                    what=lambda: f"three more cycles of each source: {cycles(env, names)} after {start}")
        kept = before & sessions()
        assert len(kept) == 2, f"sessions of finalize that outlived three rounds: {sorted(kept)} " \
                               f"(before {sorted(before)}, after {sorted(sessions())})"
    finally:
        env.cleanup()
        healthy.stop()
        pg.cleanup()


def test_zero_workers_is_one_process_per_source_and_the_pool_comes_back(env, pg):
    healthy = started_sim()
    try:
        for name in HEALTHY[:3]:
            env.add_source(name, healthy)
            env.track(f"pool.{name}", name)
        pg.wait_for(lambda: len(worker_pids(pg)) == 2 and len(cycles(env, HEALTHY[:3])) == 3, what="the pool of two")
        pg.sql("ALTER SYSTEM SET finalize.max_source_workers = 0")
        pg.sql("SELECT pg_reload_conf()")
        pg.wait_for(lambda: env.one("SELECT count(*) FROM finalize.source_workers WHERE worker IS NULL") == 3 and
                    len(worker_pids(pg)) == 3, what=lambda: f"a process per source: {env.sql('SELECT * FROM finalize.source_workers')}")
        names = {r[0] for r in pg.sql("SELECT backend_type FROM pg_stat_activity WHERE pid = ANY(%s)",
                                      (worker_pids(pg),))}
        assert names == {"finalize worker"}
        before = pg.wait_for(lambda: len(cycles(env, HEALTHY[:3])) == 3 and cycles(env, HEALTHY[:3]),
                             what="the three sources' first cycles")
        pg.wait_for(lambda: all(c[0] >= before[n][0] + 3 for n, c in cycles(env, HEALTHY[:3]).items()),
                    what="each dedicated worker to poll its source")
        pg.sql("ALTER SYSTEM SET finalize.max_source_workers = 2")
        pg.sql("SELECT pg_reload_conf()")
        pg.wait_for(lambda: env.one("SELECT count(*) FROM finalize.source_workers WHERE worker IS NOT NULL") == 2 and
                    len(worker_pids(pg)) == 2, what="the pool again")
        before = cycles(env, HEALTHY[:3])
        pg.wait_for(lambda: all(c[0] >= before[n][0] + 3 for n, c in cycles(env, HEALTHY[:3]).items()),
                    what="the pool to poll the three sources")
    finally:
        pg.sql("ALTER SYSTEM SET finalize.max_source_workers = 2")
        pg.sql("SELECT pg_reload_conf()")
        healthy.stop()


def test_sources_beyond_max_sources_are_named_not_polled_and_the_others_keep_going():
    """finalize.max_sources = 16 (its minimum) with 17 sources: one is left out of the shared table
    and says so in its status (condition no_worker, the setting named), the 16 others are polled."""
    small = new_cluster(**{"finalize.max_source_workers": "2", "finalize.max_sources": "16"})
    sim = started_sim()
    try:
        e = Env(small)
        names = [f"m{i:02d}" for i in range(17)]
        for name in names:
            e.add_source(name, sim)
            e.track(f"cap.{name}", name)

        def split():
            rows = e.sql("SELECT server_name, condition, last_error FROM finalize.source_status "
                         "WHERE server_name = ANY(%s)", (names,))
            ok = [r[0] for r in rows if r[1] == "ok"]
            out = [r for r in rows if r[1] == "no_worker"]
            return (ok, out) if len(ok) == 16 and len(out) == 1 else None
        ok, out = small.wait_for(split, timeout=120, what=lambda: e.sql("SELECT server_name, condition, last_error "
                                                                         "FROM finalize.source_status"))
        assert "finalize.max_sources (16)" in out[0][2] and "restart PostgreSQL" in out[0][2], out
        assert out[0][0] not in ok
        before = cycles(e, ok)
        small.wait_for(lambda: all(c[0] > before[n][0] for n, c in cycles(e, ok).items()),
                       what="the 16 sources in the table to keep polling")
        assert cycles(e, [out[0][0]])[out[0][0]][1] == "no_worker"
    finally:
        sim.stop()
        small.cleanup()


def test_a_cycle_of_a_dropped_server_never_writes_as_the_server_recreated_under_its_name(env, pg):
    """A worker is in a login that never ends when its server is dropped and a new server takes
    its name: when that login times out, nothing of it is written as the new server's status."""
    silent = SilentServer()
    healthy = started_sim()
    try:
        add_silent(env, silent, name="reused")
        env.track("pool.reused", "reused")
        pg.wait_for(lambda: env.one("SELECT count(*) FROM finalize.source_workers WHERE serving = 'reused'") == 1,
                    what=lambda: finalize_processes(pg))
        env.sql("DELETE FROM finalize.tracked_table WHERE table_name = 'pool.reused'")
        env.sql('DROP SERVER "reused" CASCADE')
        env.sql("DELETE FROM finalize.source_status WHERE server_name = 'reused'")
        env.add_source("reused", healthy)
        env.track("pool.reused", "reused")
        pg.wait_for(lambda: condition_of(env, "reused")[0] == "ok", what=lambda: condition_of(env, "reused"))
        # The old login's timeout (finalize.login_timeout = 4s) passes; the new server stays clean.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            condition, error, failures = condition_of(env, "reused")
            assert (condition, error, failures) == ("ok", None, 0), (condition, error, failures)
            time.sleep(0.2)
    finally:
        healthy.stop()
        silent.close()


def test_a_login_timing_out_leaves_the_connections_its_worker_keeps_for_others(env, pg):
    """A pool of two shrinks to one without cutting a cycle short; then the worker keeping every
    healthy source's connection also runs the logins that never end: each timed-out login shuts
    down its own socket only, so no healthy source ever fails (a broken kept connection would
    fail its next cycle)."""
    healthy = started_sim()
    silent = SilentServer()
    try:
        pg.sql("ALTER SYSTEM SET finalize.max_source_workers = 1")
        pg.sql("SELECT pg_reload_conf()")
        pg.sql("ALTER SYSTEM SET finalize.max_source_workers = 2")
        pg.sql("SELECT pg_reload_conf()")
        for name in HEALTHY[:3]:
            env.add_source(name, healthy)
            env.track(f"pool.{name}", name)
        pg.wait_for(lambda: len(worker_pids(pg)) == 2 and all(c[0] >= 3 for c in cycles(env, HEALTHY[:3]).values())
                    and len(cycles(env, HEALTHY[:3])) == 3, what="a pool of two polling the three sources")
        # The pool shrinks: the worker it no longer needs ends its cycle and exits, never killed
        # in the middle of one (which would count a failure of its source).
        log_mark = len(pg.log())
        pg.sql("ALTER SYSTEM SET finalize.max_source_workers = 1")
        pg.sql("SELECT pg_reload_conf()")
        pg.wait_for(lambda: len(worker_pids(pg)) == 1 and
                    env.one("SELECT count(*) FROM finalize.source_workers WHERE worker IS NOT NULL") == 1,
                    what="a pool of one")
        assert 'terminating background worker "finalize worker"' not in pg.log()[log_mark:]
        pg.wait_for(lambda: [c for _, c in cycles(env, HEALTHY[:3]).values()] == ["ok"] * 3,
                    what=lambda: f"healthy sources: {cycles(env, HEALTHY[:3])}")
        add_silent(env, silent)
        env.track("pool.silent", "silent")
        before = cycles(env, HEALTHY[:3])
        pg.wait_for(lambda: (condition_of(env, "silent")[2] or 0) >= 2, timeout=60,
                    what=lambda: f"two timed-out logins: {condition_of(env, 'silent')}")
        pg.wait_for(lambda: all(c[0] >= before[n][0] + 2 for n, c in cycles(env, HEALTHY[:3]).items()),
                    what="the healthy sources' cycles after the timeouts")
        assert "finalize.login_timeout" in condition_of(env, "silent")[1]
        assert env.sql("SELECT server_name, last_error FROM finalize.source_status "
                       "WHERE server_name = ANY(%s) AND (last_error IS NOT NULL OR failures > 0)",
                       (HEALTHY[:3],)) == []
    finally:
        pg.sql("ALTER SYSTEM SET finalize.max_source_workers = 2")
        pg.sql("SELECT pg_reload_conf()")
        silent.close()
        healthy.stop()


def test_slow_sources_are_kept_to_the_retry_lane(env, pg):
    """Two sources whose server answers every statement, but half a second late (within
    finalize.query_timeout, so their cycles succeed): each cycle outlasts a poll interval, so they
    are slow and served in the retry lane, by at most one of the two workers at a time, while
    the healthy sources keep their poll."""
    healthy = started_sim()
    slow = started_sim()
    try:
        for name in HEALTHY[:3]:
            env.add_source(name, healthy)
            env.track(f"pool.{name}", name)
        for name in ("slow1", "slow2"):
            env.add_source(name, slow)
            env.track(f"pool.{name}", name)
        pg.wait_for(lambda: [c for _, c in cycles(env, ["slow1", "slow2"]).values()] == ["ok"] * 2,
                    what=lambda: f"the slow sources' first cycles: {cycles(env, ['slow1', 'slow2'])}")
        slow.call("sim.fault_stall", seconds=0.5, count=-1)
        first = cycles(env, ["slow1", "slow2"])
        pg.wait_for(lambda: all(c[0] >= first[n][0] + 1 for n, c in cycles(env, ["slow1", "slow2"]).items()),
                    timeout=60, what="a slow cycle of each")
        before = cycles(env, HEALTHY[:3] + ["slow1", "slow2"])
        samples = []

        def progressed():
            samples.append(env.sql("SELECT count(*) FILTER (WHERE retrying), "
                                   "count(*) FILTER (WHERE serving IN ('slow1', 'slow2')) "
                                   "FROM finalize.source_workers WHERE worker IS NOT NULL")[0])
            now = cycles(env, HEALTHY[:3] + ["slow1", "slow2"])
            return all(now[n][0] >= before[n][0] + (1 if n.startswith("slow") else 10) for n in now)
        pg.wait_for(progressed, timeout=90, interval=0.05, what=lambda: f"progress: {cycles(env, HEALTHY[:3])}")
        assert len(samples) > 20 and max(on_slow for _, on_slow in samples) == 1, samples
        assert all(c == "ok" for _, c in cycles(env, HEALTHY[:3] + ["slow1", "slow2"]).values()), \
            env.sql("SELECT server_name, condition, last_error FROM finalize.source_status")
    finally:
        slow.call("sim.fault_clear")
        healthy.stop()
        slow.stop()
