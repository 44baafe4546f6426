"""Every announcement of a verdict is the verdict the sensors give (issue 41,
lead 3b): a NOTIFY payload on channel "finalize", finalize.status and
explain_verdict name what finalized_until() answers - losses, consumers,
inputs and shards applied - never a raw watermark; and whatever makes a
period final announces it, once.

One listener (LISTEN finalize) follows a source table read by the real
worker from a simulator (real FreeTDS over TCP), a derived table of it, a
derived table whose job reports, and a sharded table whose shard another
simulator feeds, through every path that makes periods final: a range, a
derived table's input, a shard, a job's report, a loss the worker finds
(hours 10 to 12 purged by CDC cleanup before it read them) and the range
recorded past it, the acknowledgement of the loss (on the table that lost
the data, which makes its derived table final too, and on a derived table
that must acknowledge it itself), a consumer's report resolved by the
worker, a consumer made optional and one dropped (and the freshness
incident, which names the verdict too). Each payload is checked
as it arrives against finalized_until() read at once on the same
connection (never beyond it, chained from the verdict announced before);
after each step every table's last announcement must be its verdict (a
path that made periods final and announced nothing fails), and
finalize.status and explain_verdict must show that verdict too."""

import datetime
import json
import threading

import pytest

from worker_env import Env, new_cluster, sim_clock, sim_max_lsn

UTC = datetime.timezone.utc
SOURCE, COPY, JOB, SHARDED = "a.orders", "a.orders_copy", "a.orders_job", "s.orders"
SHARD = SHARDED + "/db01"
TABLES = (SOURCE, COPY, JOB, SHARDED, SHARD)


def at(hh, mm=0, ss=0):
    return datetime.datetime(2026, 11, 2, hh, mm, ss, tzinfo=UTC)


def utc_iso(ts):
    """A time as the payloads write it (finalize_internal.utc_iso), or None."""
    return None if ts is None else ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


@pytest.fixture
def sims():
    """Two simulators on simulated clocks at 08:59 UTC: the source's database and the shard's."""
    a = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    b = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    yield a, b
    a.stop()
    b.stop()


class Listener:
    """A connection that LISTENs on channel "finalize" and asks every question of a step itself,
    so that a payload committed before an answer is received with it."""

    def __init__(self, pg):
        self.pg = pg
        self.conn = pg.connect()
        with self.conn.cursor() as cur:
            cur.execute("LISTEN finalize")
        self.announced = {t: None for t in TABLES}   # the verdict each table's last payload named
        self.step_payloads = []

    def one(self, query, args=None):
        with self.conn.cursor() as cur:
            cur.execute(query, args)
            row = cur.fetchone()
        self._receive()
        return row[0] if row else None

    def verdict(self, table):
        with self.conn.cursor() as cur:
            cur.execute("SELECT finalize.finalized_until(%s)", (table,))
            return cur.fetchone()[0]

    def _receive(self):
        """Checks each payload as it arrives: a verdict of one of our tables, chained onto the one
        announced before, moving forward, and never beyond what finalized_until() answers now."""
        self.conn.poll()
        while self.conn.notifies:
            p = json.loads(self.conn.notifies.pop(0).payload)
            table = p["table"]
            if table not in self.announced:
                continue
            now = self.verdict(table)
            self.step_payloads.append(p)
            assert p["old"] == utc_iso(self.announced[table]), \
                f"{table}: payload {p} does not follow the verdict announced before, {self.announced[table]}"
            assert p["new"] is not None and (p["old"] is None or p["new"] > p["old"]), f"{table}: {p}"
            assert now is not None and p["new"] <= utc_iso(now), \
                f"{table}: payload {p} announces a verdict finalized_until() does not give: it answers {now}"
            self.announced[table] = datetime.datetime.strptime(p["new"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)

    def settle(self, expected, ready=None, what="the step", once=()):
        """Waits until every table's finalized_until() is what expected says (a table not named keeps
        its verdict) and ready() holds, and until every table's last payload names its verdict (a
        derived table is announced within a round of the scheduler); then checks that
        finalize.status and explain_verdict show the same verdicts. once: tables that one
        transaction moved, which must be announced exactly once."""
        want = {t: expected.get(t, self.announced[t]) for t in TABLES}

        def done():
            self._receive()
            if ready is not None and not ready():
                return False
            now = {t: self.verdict(t) for t in TABLES}
            self._receive()
            return now == want and all(self.announced[t] == now[t] for t in TABLES)

        self.pg.wait_for(done, timeout=60, what=lambda: (
            f"{what}: verdicts {({t: self.verdict(t) for t in TABLES})}, expected {want}, "
            f"last announced {self.announced}"))
        for t in TABLES:
            status = self.one("SELECT finalized_until FROM finalize.status WHERE table_name = %s", (t,))
            explained = self.one("SELECT finalized_until FROM finalize.explain_verdict(%s)", (t,))
            assert status == want[t] and explained == want[t], \
                f"{what}: {t} is final until {want[t]}, but finalize.status says {status} and " \
                f"explain_verdict {explained}"
        for t in once:
            n = sum(1 for p in self.step_payloads if p["table"] == t)
            assert n == 1, f"{what}: {t} was announced {n} times: {self.step_payloads}"
        self.step_payloads = []


def test_every_path_announces_the_verdict_the_sensors_give(pg, sims):
    erp, db01 = sims
    env = Env(pg)
    listener = Listener(pg)
    try:
        for sim in (erp, db01):
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
        env.add_source("erp", erp)
        env.add_source("db01", db01)
        # In one transaction: the worker's first range of the source, or a scheduler round,
        # before the job's table has its consumer would make that table final from its input
        # (track_derived advances a new table at once; a verdict never moves back). A loaded
        # machine let the worker's first cycle in between.
        env.sql("SELECT finalize.track_table(%s, 'erp', 'dbo.orders', '1 hour'::interval, 'max_lsn', 'warn', "
                "'resume'); SELECT finalize.track_derived(%s, ARRAY[%s]); "
                "SELECT finalize.track_derived(%s, ARRAY[%s]); SELECT finalize.add_consumer(%s, 'job')",
                (SOURCE, COPY, SOURCE, JOB, SOURCE, JOB))
        env.sql("SELECT finalize.track_sharded(%s, '1 hour')", (SHARDED,))
        env.sql("SELECT finalize.add_shard(%s, 'db01', 'db01', 'dbo.orders')", (SHARDED,))
        # The first ranges: each table is final up to the hour its tracking began in.
        listener.settle({SOURCE: at(8), COPY: at(8), SHARD: at(8), SHARDED: at(8)}, what="tracking")

        # A range (the worker), a derived table's input, a shard.
        erp.call("sim.commit", inserts=2, at=at(9, 30))
        erp.call("sim.advance", to=at(10, 5))
        db01.call("sim.commit", inserts=1, at=at(9, 40))
        db01.call("sim.advance", to=at(10, 5))
        listener.settle({SOURCE: at(10), COPY: at(10), SHARD: at(10), SHARDED: at(10)}, what="a range")

        # A derived table's job reports (SQL).
        listener.one("SELECT finalize.report_processed(%s, 'job', %s)", (JOB, at(10)))
        listener.settle({JOB: at(10)}, what="a job's report", once=(JOB,))

        # Hours 10 to 12 are purged before the worker reads them: a loss, resumed at once.
        pg.sql("ALTER SYSTEM SET finalize.enabled = off")
        pg.reload()
        pg.wait_for(lambda: not pg.sql("SELECT 1 FROM pg_stat_activity WHERE backend_type = 'finalize worker'"),
                    what="the worker to stop")
        for minute in (15, 75, 140):
            erp.call("sim.commit", inserts=1, at=at(10) + datetime.timedelta(minutes=minute))
        erp.call("sim.advance", to=at(12, 25))
        erp.call("sim.cleanup", low_lsn=erp.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])
        pg.sql("ALTER SYSTEM RESET finalize.enabled")
        pg.reload()
        # A range that ends at 15:01, past the loss: the watermark reaches 15:00, the verdict stays
        # at 10:00, and nothing may announce more (today's bug: {"old": 10:00, "new": 15:00}).
        listener.pg.wait_for(lambda: listener.one("SELECT count(*) FROM finalize.loss") == 1, timeout=60,
                             what="the loss")
        erp.call("sim.commit", inserts=1, at=at(14))
        erp.call("sim.advance", to=at(15, 1))
        target = sim_max_lsn(erp)
        listener.settle({}, ready=lambda: listener.one(
            "SELECT offset_lsn FROM finalize.status WHERE table_name = %s", (SOURCE,)) == target,
            what="a range past an unacknowledged loss")
        assert listener.one("SELECT w.finalized_until FROM finalize.watermark w "
                            "WHERE w.table_id = finalize_internal.tracked_id(%s)", (SOURCE,)) == at(15)
        # The freshness incident names the verdict too (a month behind the server's clock here).
        env.sql("SELECT finalize.alter_tracked_table(%s, max_lag => '1 hour')", (SOURCE,))
        detail = pg.wait_for(lambda: listener.one(
            "SELECT detail FROM finalize.alerts WHERE kind = 'freshness' AND table_name = %s", (SOURCE,)),
            timeout=60, what="the freshness incident")
        assert detail["finalized_until"] == utc_iso(at(10)), detail
        env.sql("SELECT finalize.alter_tracked_table(%s, max_lag => '0')", (SOURCE,))

        # The acknowledgement makes hours 10 to 14 final: announced once on the table (SQL), and
        # on the derived table without a job of its own (the scheduler). The one with a job must
        # acknowledge the loss itself, once its job rebuilt them.
        span = listener.one("SELECT ARRAY[finalize.period_start(min(l.lost_from), '1 hour', 'UTC'), "
                            "finalize.period_end(max(l.lost_to), '1 hour', 'UTC')] FROM finalize.loss l")
        listener.one("SELECT finalize.acknowledge_loss(%s, %s, %s, 're-snapshotted')", (SOURCE, span[0], span[1]))
        listener.settle({SOURCE: at(15), COPY: at(15)}, what="an acknowledgement", once=(SOURCE, COPY))
        listener.one("SELECT finalize.report_processed(%s, 'job', %s)", (JOB, at(15)))
        listener.settle({}, what="a job's report over a loss it has not acknowledged")
        listener.one("SELECT finalize.acknowledge_loss(%s, %s, %s, 'rebuilt')", (JOB, span[0], span[1]))
        listener.settle({JOB: at(15)}, what="an acknowledgement on a derived table", once=(JOB,))

        # A required consumer holds the next hour until its report is resolved by the worker.
        env.sql("SELECT finalize.add_consumer(%s, 'loader')", (SOURCE,))
        erp.call("sim.commit", inserts=1, at=at(15, 10))
        erp.call("sim.advance", to=at(16, 5))
        target = sim_max_lsn(erp)
        listener.settle({}, ready=lambda: listener.one(
            "SELECT offset_lsn FROM finalize.status WHERE table_name = %s", (SOURCE,)) == target,
            what="a range held by a consumer")
        listener.one("SELECT finalize.report_progress(%s, 'loader', %s)", (SOURCE, target))
        listener.settle({SOURCE: at(16), COPY: at(16)}, what="a consumer's report")

        # A consumer made optional, then one dropped (SQL): the verdict moves at once.
        erp.call("sim.advance", to=at(17, 5))
        target = sim_max_lsn(erp)
        listener.settle({}, ready=lambda: listener.one(
            "SELECT offset_lsn FROM finalize.status WHERE table_name = %s", (SOURCE,)) == target,
            what="a range held by a consumer that does not report")
        listener.one("SELECT finalize.alter_consumer(%s, 'loader', required => false)", (SOURCE,))
        listener.settle({SOURCE: at(17), COPY: at(17)}, what="a consumer made optional", once=(SOURCE,))
        env.sql("SELECT finalize.add_consumer(%s, 'loader2')", (SOURCE,))
        erp.call("sim.advance", to=at(18, 5))
        target = sim_max_lsn(erp)
        listener.settle({}, ready=lambda: listener.one(
            "SELECT offset_lsn FROM finalize.status WHERE table_name = %s", (SOURCE,)) == target,
            what="a range held by a second consumer")
        listener.one("SELECT finalize.drop_consumer(%s, 'loader2')", (SOURCE,))
        listener.settle({SOURCE: at(18), COPY: at(18)}, what="a consumer dropped", once=(SOURCE,))
    finally:
        listener.conn.close()
        env.cleanup()


def received(pg, listener):
    """The payloads a listener received up to now, each with what finalized_until() answers for
    its table at once: a notification sent last arrives after them."""
    pg.sql("NOTIFY finalize, 'end'")
    pg.wait_for(lambda: listener.poll() or any(n.payload == "end" for n in listener.notifies),
                what="the notifications")
    got = []
    with listener.cursor() as cur:
        for n in [n for n in listener.notifies if n.payload != "end"]:
            p = json.loads(n.payload)
            cur.execute("SELECT finalize.finalized_until(%s)", (p["table"],))
            got.append((p, cur.fetchone()[0]))
    listener.notifies.clear()
    return got


def ahead(got):
    """The payloads that name a verdict finalized_until() did not give."""
    return [(p, now) for p, now in got if now is None or p["new"] > utc_iso(now)]


def record_loss(pg, table, end):
    """Records on a table, by hand, a range to 2026-11-01 10:00, a loss over its hours 10 to 21
    acknowledged hour by hour, and a range to end."""
    for q in [f"SELECT finalize.record_range('{table}', NULL, '0x00000000000000000100', '2026-11-01 10:00+00')",
              f"SELECT finalize_internal.record_event(finalize_internal.tracked_id('{table}'), 'data_loss', "
              "'0x00000000000000000100', '0x00000000000000000300', 'dbo_orders', '{}', 'data_lost', 'purged')",
              f"SELECT finalize.resume_table('{table}')",
              f"SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('{table}'), '0x000000000000000002FF', "
              "'2026-11-01 21:00+00', '2026-11-01 21:00+00', 'dbo_orders', false, '{}')",
              f"SELECT finalize.record_range('{table}', '0x000000000000000002FF', '0x00000000000000000400', '{end}')",
              f"SELECT finalize.acknowledge_loss('{table}', '2026-11-01 10:00+00', '2026-11-01 22:00+00', 'fixed')"]:
        pg.sql(q)


def test_a_sharded_table_given_new_periods_announces_what_its_shards_allow():
    """alter_tracked_table on a sharded table gives its shards the new periods too: the table's
    verdict under them is announced once they have them. A shard's loss acknowledged for UTC days
    holds Seoul days again; announced before the shards changed, the payload named the Seoul day
    2026-11-02 final while finalized_until() said 2026-10-31 15:00 (hand-recorded ranges, no worker)."""
    pg = new_cluster(**{"finalize.enabled": "off"})
    listener = pg.connect()
    try:
        with listener.cursor() as cur:
            cur.execute("LISTEN finalize")
        pg.sql("CREATE SERVER sh_db01 FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'db01')")
        pg.sql("SELECT finalize.track_sharded('sh.orders', '1 hour')")
        pg.sql("SELECT finalize.add_shard('sh.orders', 'db01', 'sh_db01', 'dbo.orders')")
        record_loss(pg, "sh.orders/db01", "2026-11-02 16:00+00")
        pg.sql("SELECT finalize.alter_tracked_table('sh.orders', granularity => '1 day')")
        pg.sql("SELECT finalize.acknowledge_loss('sh.orders/db01', '2026-11-01 00:00+00', '2026-11-02 00:00+00', 'x')")
        # (the scheduler's round announces the sharded table)
        pg.wait_for(lambda: pg.sql("SELECT w.announced_until FROM finalize.watermark w "
                                   "WHERE w.table_id = finalize_internal.tracked_id('sh.orders')")[0][0] == at(0),
                    what="the sharded table announced final until 2026-11-02")
        received(pg, listener)
        pg.sql("SELECT finalize.alter_tracked_table('sh.orders', period_zone => 'Asia/Seoul')")
        assert ahead(received(pg, listener)) == []
        assert pg.sql("SELECT finalize.finalized_until('sh.orders')")[0][0] == datetime.datetime(
            2026, 10, 31, 15, tzinfo=UTC)
    finally:
        listener.close()
        pg.cleanup()


def meanwhile(pg, holder, sql):
    """Runs sql in a transaction of its own while holder's transaction is open, then commits
    holder: sql's transaction commits first when it did not wait for holder (as a call on its own
    would), else it is left waiting, then open. Returns it, to be committed once the payloads
    holder sent were checked."""
    other = pg.connect(autocommit=False)
    call = threading.Thread(target=lambda: other.cursor().execute(sql))
    call.start()
    pid = other.get_backend_pid()
    pg.wait_for(lambda: not call.is_alive() or pg.sql(
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,))[0][0],
        what="the call to end or wait")
    if not call.is_alive():
        other.commit()
    holder.commit()
    call.join(60)
    return other


def test_a_derived_table_is_not_announced_past_what_an_input_lost_meanwhile():
    """A round of _refresh_derived reads a derived table's new verdict (17:00) while an admin gives
    its input new periods, which its acknowledgements (per hour) no longer cover: the input's loss
    holds the derived table at 2026-11-01 10:00 again. Before, the change committed first and the
    round's payload named 17:00 while finalized_until() said 10:00 (a round run in a session here,
    holding the derived table's row from the start so that the scheduler's own rounds skip it; a
    session now leaves the rise to them). Likewise a range recorded while its table is untracked and
    tracked again under its name: the payload named the old table's verdict for the new one."""
    pg = new_cluster(**{"finalize.enabled": "off"})
    listener, round_, writer = pg.connect(), pg.connect(autocommit=False), pg.connect(autocommit=False)
    try:
        with listener.cursor() as cur:
            cur.execute("LISTEN finalize")
        pg.sql("CREATE SERVER s1 FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'db01')")
        pg.sql("SELECT finalize.track_table('a.orders', 's1', 'dbo.orders')")
        pg.sql("SELECT finalize.track_derived('d.orders', ARRAY['a.orders'])")
        record_loss(pg, "a.orders", "2026-11-02 16:05+00")
        pg.wait_for(lambda: pg.sql("SELECT w.announced_until FROM finalize.watermark w "
                                   "WHERE w.table_id = finalize_internal.tracked_id('d.orders')")[0][0] == at(16),
                    what="the derived table announced final until 16:00")
        round_.cursor().execute("SELECT FROM finalize.watermark WHERE table_id = finalize_internal.tracked_id('d.orders') "
                                "FOR UPDATE")
        pg.sql("SELECT finalize.record_range('a.orders', '0x00000000000000000400', '0x00000000000000000500', "
               "'2026-11-02 17:05+00')")
        assert ahead(received(pg, listener)) == []
        round_.cursor().execute("SELECT finalize_internal.refresh_derived()")
        change = meanwhile(pg, round_, "SELECT finalize.alter_tracked_table('a.orders', granularity => '1 day')")
        assert ahead(received(pg, listener)) == []
        change.commit()
        assert pg.sql("SELECT finalize.finalized_until('d.orders')")[0][0] == datetime.datetime(
            2026, 11, 1, 10, tzinfo=UTC)

        pg.sql("SELECT finalize.track_table('b.orders', 's1', 'dbo.b')")
        writer.cursor().execute("SELECT finalize.record_range('b.orders', NULL, '0x00000000000000000100', "
                                "'2026-11-02 12:05+00')")
        again = meanwhile(pg, writer, "SELECT finalize.untrack_table('b.orders'); "
                                      "SELECT finalize.track_table('b.orders', 's1', 'dbo.b')")
        assert ahead(received(pg, listener)) == []
        again.commit()
    finally:
        for c in (listener, round_, writer):
            c.close()
        pg.cleanup()
