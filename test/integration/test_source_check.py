"""track_table and add_shard check the SQL Server table once, when they are called, as the worker
will read it (real FreeTDS over TCP against the simulator, logging in with the server's user
mapping): a table that does not exist, one without change data capture (or in a database without
it), a login that may not read the table, may not read its capture instance (the gating role),
may not open the database or is refused are each their own error with their own hint, and nothing
is tracked; a source that cannot be reached (or does not answer in time) only gets a NOTICE, and the
table is tracked. The check holds none of finalize's locks while it waits and a cancel or
statement_timeout ends it. The worker's condition for a table that does not exist says so.

Before the fix, every one of these calls returned an id; seconds later the table showed
no_capture_instance, whose detail said CDC was not enabled (or the login could not read it) even
for a table that does not exist."""

import os
import socket
import threading

import psycopg2
import pytest

from worker_env import new_cluster, sim_clock

PASSWORD = "Ch3ck!pw"


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


def track(env, source, source_table, table="chk.orders", setup=None):
    """track_table in a session of its own -> (table id, NOTICEs); raises psycopg2.Error."""
    conn = env.pg.connect()
    try:
        with conn.cursor() as cur:
            if setup:
                cur.execute(setup)
            cur.execute("SELECT finalize.track_table(%s, %s, %s)", (table, source, source_table))
            return cur.fetchone()[0], [n.strip() for n in conn.notices]
    finally:
        conn.close()


def refused(env, source, source_table, table="chk.orders"):
    """The error track_table raises, as psycopg2's diagnostics; nothing is tracked."""
    with pytest.raises(psycopg2.Error) as e:
        track(env, source, source_table, table)
    assert env.one("SELECT count(*) FROM finalize.tracked_table WHERE table_name = %s", (table,)) == 0
    return e.value.pgcode, e.value.diag


def test_a_table_that_does_not_exist_is_refused(env, sim):
    env.add_source("chk", sim)
    code, d = refused(env, "chk", "dbo.ordres")
    assert code == "HV00R", (code, d.message_primary)
    assert d.message_primary == 'SQL Server table [dbo].[ordres] does not exist in database "demo"'
    assert "Invalid object name 'dbo.ordres'." in d.message_detail and "208" in d.message_detail
    assert "source_table" in d.message_hint
    # Names are quoted as T-SQL quotes them in every message.
    code, d = refused(env, "chk", "[my schema].[o]]dd's]")
    assert d.message_primary == 'SQL Server table [my schema].[o]]dd\'s] does not exist in database "demo"'
    # The table itself is tracked without a word.
    table_id, notices = track(env, "chk", "dbo.orders")
    assert table_id is not None and notices == []


def test_a_table_without_change_data_capture_is_refused(env, sim):
    sim.call("sim.create_table", name="plain", columns="[id] int NOT NULL, [v] int")
    env.add_source("chk", sim)
    code, d = refused(env, "chk", "dbo.plain")
    assert code == "55000"
    assert d.message_primary == "change data capture is not enabled on SQL Server table [dbo].[plain]"
    assert "is_tracked_by_cdc = 0" in d.message_detail
    assert "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'plain'" in d.message_hint


def test_a_database_without_change_data_capture_is_refused(env, sim):
    sim.create_database("bare", demo=False)
    env.sql("CREATE SERVER chk FOREIGN DATA WRAPPER finalize_mssql "
            "OPTIONS (host '127.0.0.1', port %s, database 'bare', encrypt 'off')", (str(sim.port),))
    env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER chk OPTIONS (username 'sa', password 'Passw0rd!')")
    env.sources["chk"] = sim
    code, d = refused(env, "chk", "dbo.orders")
    assert code == "55000"
    assert d.message_primary == 'change data capture is not enabled on SQL Server database "bare"'
    assert "sys.sp_cdc_enable_db" in d.message_hint


def test_a_login_without_select_on_the_table_is_refused(env, sim):
    sim.call("sim.create_login", login="nosel", password=PASSWORD, cdc_select=1)
    env.add_source("chk", sim, login="nosel", password=PASSWORD)
    code, d = refused(env, "chk", "dbo.orders")
    assert code == "42501"
    assert d.message_primary == 'login "nosel" may not read SQL Server table [dbo].[orders]'
    assert "The SELECT permission was denied on the object 'orders', database 'demo', schema 'dbo'." \
        in d.message_detail and "229" in d.message_detail
    assert "GRANT SELECT ON [dbo].[orders] TO [nosel];" in d.message_hint
    # Without a permission SQL Server hides the table like a missing one; the two stay apart.
    code, d = refused(env, "chk", "dbo.nope")
    assert code == "HV00R" and "does not exist" in d.message_primary


def test_a_login_outside_the_gating_role_is_refused(env, sim):
    sim.call("sim.create_table", name="gated", columns="[id] int NOT NULL, [v] int")
    sim.call("sim.enable_table", name="gated", role_name="cdc_gate")
    sim.call("sim.create_login", login="nogate", password=PASSWORD, tables="dbo.gated")
    env.add_source("chk", sim, login="nogate", password=PASSWORD)
    code, d = refused(env, "chk", "dbo.gated")
    assert code == "42501"
    assert d.message_primary == 'login "nogate" may not read the capture instance of SQL Server table [dbo].[gated]'
    assert "gating role" in d.message_detail and "ALTER ROLE [<role>] ADD MEMBER [nogate];" in d.message_hint
    sim.execute("ALTER ROLE [cdc_gate] ADD MEMBER [nogate]")
    table_id, notices = track(env, "chk", "dbo.gated")
    assert table_id is not None and notices == []


def test_a_login_without_a_user_in_the_database_or_a_wrong_password_is_refused(env, sim):
    sim.execute("CREATE LOGIN [nouser] WITH PASSWORD = N'%s'" % PASSWORD)
    env.add_source("chk", sim, login="nouser", password=PASSWORD)
    code, d = refused(env, "chk", "dbo.orders")
    assert code == "42501"
    assert d.message_primary == 'login "nouser" may not open SQL Server database "demo"'
    assert "4060" in d.message_detail and "CREATE USER [nouser] FOR LOGIN [nouser];" in d.message_hint
    env.add_source("chk2", sim, login="sa", password="Wr0ng-S3cret!")
    code, d = refused(env, "chk2", "dbo.orders")
    assert code == "28000"
    assert d.message_primary == 'SQL Server refused the login "sa"' and "18456" in d.message_detail
    assert not any("Wr0ng-S3cret!" in (x or "") for x in (d.message_primary, d.message_detail, d.message_hint))
    assert "Wr0ng-S3cret!" not in env.pg.log(), "the password never reaches the log"


def test_an_unreachable_source_is_tracked_with_a_notice(env, sim):
    env.add_source("chk", sim)
    sim.stop()
    table_id, notices = track(env, "chk", "dbo.orders")
    assert table_id is not None
    assert len(notices) == 1, notices
    assert "SQL Server table [dbo].[orders] of server \"chk\" could not be checked; it is tracked all the same" \
        in notices[0], notices
    assert env.one("SELECT count(*) FROM finalize.tracked_table WHERE table_name = 'chk.orders'") == 1
    # A server the worker cannot log in to yet (no user mapping): the same.
    env.sql("CREATE SERVER chk_nomap FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo')")
    env.sources["chk_nomap"] = sim
    table_id, notices = track(env, "chk_nomap", "dbo.orders", table="chk.nomap")
    assert table_id is not None and "no user mapping" in notices[0], notices
    # finalize.source_check_timeout = 0: nothing is checked, nothing said.
    table_id, notices = track(env, "chk", "dbo.nope", table="chk.unchecked", setup="SET finalize.source_check_timeout = 0")
    assert table_id is not None and notices == []


class BlackHole:
    """A TCP server that accepts connections and never answers (a SQL Server that hangs)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


def test_a_source_that_never_answers_costs_the_timeout_and_can_be_cancelled(env, sim):
    hole = BlackHole()
    try:
        env.add_source("chk", sim, port=hole.port)
        table_id, notices = track(env, "chk", "dbo.orders", setup="SET finalize.source_check_timeout = 1")
        assert table_id is not None and "did not complete the login" in notices[0], notices
        # A cancel (here statement_timeout) ends the wait at once, as any other.
        with pytest.raises(psycopg2.Error) as e:
            track(env, "chk", "dbo.orders", table="chk.cancelled",
                  setup="SET finalize.source_check_timeout = 30; SET statement_timeout = '300ms'")
        assert e.value.pgcode == "57014", str(e.value)
    finally:
        hole.close()


def test_the_check_has_one_deadline_however_many_questions_it_asks(env, sim):
    """Each batch the check sends is answered 1.5 s late: shorter than finalize.source_check_timeout
    (2 s), but the batches share the 2 s (before, each wait had its own: the check of a table that
    does not exist took 4.5 s and refused it). The table is tracked with a NOTICE that says so."""
    env.add_source("chk", sim)
    for statement in ("TEXTSIZE", "fn_cdc_get_max_lsn", "TOP (0)"):
        sim.call("sim.fault_stall", seconds=1.5, count=-1, pattern=statement)
    table_id, notices = track(env, "chk", "dbo.nope", setup="SET finalize.source_check_timeout = 2")
    assert table_id is not None and len(notices) == 1, notices
    assert "within finalize.source_check_timeout, 2 s, in all" in notices[0], notices


def test_add_shard_checks_before_it_locks_the_sharded_table(env, sim):
    """The check of a shard's table runs before add_shard locks its sharded table: while it waits
    for a SQL Server that does not answer, another session may lock the sharded table's verdict."""
    env.add_source("chk", sim)
    env.sql("SELECT finalize.track_sharded('chk.sharded', '1 hour')")
    with pytest.raises(psycopg2.Error) as e:
        env.sql("SELECT finalize.add_shard('chk.sharded', 'db1', 'chk', 'dbo.nope')")
    assert e.value.pgcode == "HV00R" and "[dbo].[nope]" in e.value.diag.message_primary
    assert env.one("SELECT finalize.add_shard('chk.sharded', 'db1', 'chk', 'dbo.orders')") is not None

    hole = BlackHole()
    try:
        env.add_source("chk_hole", sim, port=hole.port)
        conn = env.pg.connect()
        result = {}

        def add():
            try:
                with conn.cursor() as cur:
                    cur.execute("SET finalize.source_check_timeout = 3")
                    cur.execute("SELECT finalize.add_shard('chk.sharded', 'db2', 'chk_hole', 'dbo.orders')")
                    result["id"] = cur.fetchone()[0]
            except psycopg2.Error as err:
                result["error"] = err
        thread = threading.Thread(target=add)
        thread.start()
        pid = conn.get_backend_pid()
        # The check's private FreeTDS configuration exists while it logs in.
        conf = os.path.join(env.pg.data, "pg_finalize", "tds", "check-%d.conf" % pid)
        env.pg.wait_for(lambda: os.path.exists(conf), what="add_shard to be waiting for SQL Server")
        sharded_id = env.one("SELECT table_id FROM finalize.tracked_table WHERE table_name = 'chk.sharded'")
        locker = env.pg.connect(autocommit=False)
        try:
            with locker.cursor() as cur:
                cur.execute("SELECT 1 FROM finalize.watermark WHERE table_id = %s FOR UPDATE NOWAIT", (sharded_id,))
                assert thread.is_alive(), "the check ended before the lock was tried"
        finally:
            locker.rollback()
            locker.close()
        thread.join(30)
        conn.close()
        assert "error" not in result, result
        assert result["id"] is not None, "an unreachable source: tracked, with a NOTICE"
        assert not os.path.exists(conf), "the check's files are removed"
    finally:
        hole.close()


def test_the_worker_says_a_table_does_not_exist(env, sim):
    """A table tracked without the check (or removed after it) shows no_capture_instance with a
    detail that says it does not exist; a login without SELECT on it, that it may not read it."""
    sim.call("sim.create_login", login="nosel", password=PASSWORD, cdc_select=1)
    sim.call("sim.commit", inserts=1)
    sim.call("sim.advance", seconds=10)
    env.add_source("chk", sim)
    env.add_source("chk_nosel", sim, login="nosel", password=PASSWORD)
    off = "SET finalize.source_check_timeout = 0"
    track(env, "chk", "dbo.gone", table="chk.gone", setup=off)
    track(env, "chk_nosel", "dbo.orders", table="chk.nosel", setup=off)

    def detail(table):
        st = env.status(table)
        return st["condition_detail"] if st and st["condition"] == "no_capture_instance" else None
    gone = env.pg.wait_for(lambda: detail("chk.gone"), what=lambda: env.status("chk.gone"))
    assert gone.startswith('SQL Server table [dbo].[gone] does not exist in database "demo".'), gone
    assert "Invalid object name 'dbo.gone'." in gone and "CDC is not enabled" not in gone
    nosel = env.pg.wait_for(lambda: detail("chk.nosel"), what=lambda: env.status("chk.nosel"))
    assert nosel.startswith('Login "nosel" may not read SQL Server table [dbo].[orders].'), nosel
    assert "GRANT SELECT ON [dbo].[orders] TO [nosel];" in nosel
