"""Control procedures ``sim.*``: drive the simulator deterministically over TDS (sysadmin only).

Every procedure works from a SQL batch (``EXEC sim.commit @table = N'dbo.orders', @inserts = 3``)
and as an RPC (FreeTDS dbrpcsend, tedious callProcedure).  README.md lists them."""
import datetime as _dt
import itertools

from . import capture, cleanup, commits
from . import lsn as L
from . import sqltypes as T
from . import timeutil, truth
from .catalog import fold
from .clock import parse_utc
from .errors import SqlError
from .faults import Fault
from .procs import BIT, INT, LSN, NV, REQUIRED, SYSNAME, ResultSet, proc
from .tsql.lexer import tokenize
from .tsql.parser import Parser

DT2 = T.datetime2(7)
FLOAT = T.FLOAT
SYS = "sysadmin"


def _clock_row(db):
    now = db.now()
    t = timeutil.t300_of(now.replace(tzinfo=None))
    return (timeutil.naive_text(now.replace(tzinfo=None)), db.local_text(t), db.max_lsn)


CLOCK_COLS = [("clock_utc", DT2), ("clock_local", T.DATETIME), ("max_lsn", LSN)]


def _names(text):
    return [t.value for t in tokenize(text) if t.kind in ("word", "qid")]


@proc("sim.create_table", [("schema", SYSNAME, "dbo"), ("name", SYSNAME, REQUIRED), ("columns", NV, REQUIRED),
                           ("key", SYSNAME, None)], SYS)
def create_table(s, schema, name, columns, key):
    """Create a source table. @columns: '[id] int NOT NULL, [we]]ird] nvarchar(20), ...'."""
    p = Parser(columns)
    cols = []
    while p.tok.kind != "eof":
        cname = p.ident()
        try:
            t = T.parse_type(p.type_name())
        except T.UnknownType as e:
            raise SqlError(2715, "Column, parameter, or variable #%d: Cannot find data type %s." % (len(cols) + 1, e),
                           16, 6)
        nullable = True
        if p.accept_word("NOT"):
            p.expect_word("NULL")
            nullable = False
        elif p.accept_word("NULL"):
            nullable = True
        if p.accept_word("PRIMARY"):
            p.expect_word("KEY")
            key = key or cname
            nullable = False
        cols.append((cname, t, nullable))
        if not p.accept_op(","):
            break
    if p.tok.kind != "eof":
        p.fail()
    t = s.db.create_table(schema, name, cols, key)
    return [ResultSet([("object_id", INT), ("table_name", T.nvarchar(257))], [(t.object_id, t.display)])]


@proc("sim.enable_table", [("schema", SYSNAME, "dbo"), ("name", SYSNAME, REQUIRED),
                           ("capture_instance", SYSNAME, None), ("role_name", SYSNAME, None),
                           ("captured_columns", NV, None), ("supports_net_changes", BIT, 0)], SYS)
def enable_table(s, schema, name, capture_instance, role_name, captured_columns, supports_net_changes):
    """New capture instance (sys.sp_cdc_enable_table with a NULL default role)."""
    inst = s.db.enable_table(schema, name, role_name, capture_instance, bool(supports_net_changes), None,
                             captured_columns)
    return [ResultSet([("capture_instance", SYSNAME), ("object_id", INT), ("create_lsn", LSN)],
                      [(inst.name, inst.object_id, L.to_bytes(inst.create_lsn))])]


@proc("sim.disable_table", [("schema", SYSNAME, "dbo"), ("name", SYSNAME, REQUIRED),
                            ("capture_instance", SYSNAME, "all")], SYS)
def disable_table(s, schema, name, capture_instance):
    """Drop a capture instance (or all of a table's)."""
    s.db.disable_table(schema, name, capture_instance)


def _at(s, at):
    if at is None:
        return None
    t = parse_utc(str(at))
    db = s.db
    if db.clock.simulated:
        if t < db.now():
            raise SqlError(50000, "@at %s is before the simulated clock %s" % (at, db.now().isoformat()), 16, 1)
        s.server.scheduler.advance(t)
    else:
        raise SqlError(50000, "@at needs the simulated clock (--clock sim)", 16, 1)
    return t


COMMIT_COLS = [("start_lsn", LSN), ("tran_begin_lsn", LSN), ("commit_time_utc", DT2),
               ("commit_time_local", T.DATETIME), ("inserts", INT), ("updates", INT), ("deletes", INT)]


@proc("sim.commit", [("table", NV, "dbo.orders"), ("inserts", INT, 0), ("updates", INT, 0), ("deletes", INT, 0),
                     ("rows", NV, None), ("at", DT2, None), ("transactions", INT, 1), ("duration_ms", INT, 0),
                     ("lateness", NV, None)], SYS)
def commit(s, table, inserts, updates, deletes, rows, at, transactions, duration_ms, lateness):
    """Commit transactions (generated operations or explicit JSON @rows); @at = UTC commit time (sim clock);
    @lateness = distribution of generated date/time values (see --lateness; NULL/'none': up to 2 s, UTC)."""
    db = s.db
    t = db.user_table(table)
    late = commits.lateness_arg(lateness)
    when = _at(s, at)
    out = []
    for _ in range(max(1, transactions or 1)):
        txn = commits.commit(db, t, inserts or 0, updates or 0, deletes or 0, rows, at=when,
                             duration_ms=duration_ms or 0, lateness=late)
        out.append((L.to_bytes(txn.commit_lsn), L.to_bytes(txn.begin_lsn), timeutil.t300_text(txn.end_t300),
                    db.stamp_text(txn.stamp_t300)) + tuple(txn.counts))
    return [ResultSet(COMMIT_COLS, out)]


@proc("sim.advance", [("seconds", FLOAT, None), ("to", DT2, None)], SYS)
def advance(s, seconds, to):
    """Move the simulated clock, running every capture cycle, dummy row, cleanup and traffic due meanwhile."""
    db = s.db
    if not db.clock.simulated:
        raise SqlError(50000, "sim.advance needs the simulated clock (--clock sim)", 16, 1)
    if to is not None:
        target = parse_utc(str(to))
    else:
        target = db.now() + _dt.timedelta(seconds=float(seconds or 0))
    if target < db.now():
        raise SqlError(50000, "the simulated clock never goes backwards", 16, 1)
    s.server.scheduler.advance(target)
    return [ResultSet(CLOCK_COLS, [_clock_row(db)])]


@proc("sim.capture", [("cycles", INT, 1)], SYS)
def run_capture(s, cycles):
    """Run capture cycles now (even when the job is stopped)."""
    db = s.db
    db.require_cdc()
    n = 0
    was = db.capture_running
    db.capture_running = True
    try:
        for _ in range(max(1, cycles or 1)):
            n += capture.cycle(db)
    finally:
        db.capture_running = was
    return [ResultSet([("records_read", INT), ("max_lsn", LSN), ("pending_records", INT)],
                      [(n, db.max_lsn, len(db.log))])]


CLEANUP_COLS = [("low_lsn", LSN), ("change_rows_deleted", INT), ("mapping_rows_deleted", INT), ("held", BIT)]


@proc("sim.cleanup", [("retention_minutes", INT, None), ("low_lsn", LSN, None), ("hold", BIT, 0)], SYS)
def run_cleanup(s, retention_minutes, low_lsn, hold):
    """Cleanup now: raise start_lsn of every instance, then delete (@hold = 1 stops between the two)."""
    low, ct, mp = cleanup.run(s.db, retention_minutes, low_lsn, bool(hold))
    return [ResultSet(CLEANUP_COLS, [(low, ct, mp, int(bool(hold) and low is not None))])]


@proc("sim.cleanup_release", [], SYS)
def cleanup_release(s):
    """Finish a held cleanup: delete change rows and mapping rows below the raised low watermark."""
    low, ct, mp = cleanup.release(s.db)
    return [ResultSet(CLEANUP_COLS, [(low, ct, mp, 0)])]


@proc("sim.ddl", [("table", NV, REQUIRED), ("command", NV, REQUIRED), ("at", DT2, None)], SYS)
def ddl(s, table, command, at):
    """Apply ALTER TABLE ... ADD col type | DROP COLUMN col | ALTER COLUMN col type; recorded in ddl_history."""
    db = s.db
    t = db.user_table(table)
    when = _at(s, at)
    p = Parser(command)
    p.expect_word("ALTER")
    p.expect_word("TABLE")
    p.multipart()
    required = False
    if p.accept_word("ADD"):
        cname = p.ident()
        ctype = T.parse_type(p.type_name())
        if p.accept_word("NOT"):
            p.expect_word("NULL")
        else:
            p.accept_word("NULL")
        if t.column(cname):
            raise SqlError(2705, "Column names in each table must be unique. Column name '%s' in table '%s' is "
                           "specified more than once." % (cname, t.display), 16, 4)
        from .catalog import Column, q, sqlite_decl
        col = Column(cname, ctype, True, max(c.column_id for c in t.columns) + 1)
        db.conn.execute("ALTER TABLE %s ADD COLUMN %s %s" % (t.phys, q(cname), sqlite_decl(ctype)))
        t.columns.append(col)
    elif p.accept_word("DROP"):
        p.expect_word("COLUMN")
        cname = p.ident()
        col = t.column(cname)
        if col is None or t.columns.index(col) == t.key:
            raise SqlError(4924, "ALTER TABLE DROP COLUMN failed because column '%s' does not exist in table '%s'."
                           % (cname, t.name), 16, 1)
        from .catalog import q
        db.conn.execute("ALTER TABLE %s DROP COLUMN %s" % (t.phys, q(col.name)))
        keyname = t.columns[t.key].name
        t.columns.remove(col)
        t.key = [c.name for c in t.columns].index(keyname)
    elif p.accept_word("ALTER"):
        p.expect_word("COLUMN")
        cname = p.ident()
        col = t.column(cname)
        if col is None:
            raise SqlError(4924, "ALTER TABLE ALTER COLUMN failed because column '%s' does not exist in table '%s'."
                           % (cname, t.name), 16, 1)
        newt = T.parse_type(p.type_name())
        required = newt.decl() != col.type.decl()
        col.type = newt
        for inst in db.instances_of(t):
            for c in inst.captured:
                if c.name.lower() == col.name.lower():
                    c.type = newt
                    inst.ct.column(c.name).type = newt.null(True)
                    db.conn.execute("UPDATE cdc.captured_columns SET column_type = ? WHERE object_id = ? AND "
                                    "column_name = ?", (newt.decl(), inst.object_id, c.name))
    else:
        p.fail()
    rec = db.add_ddl(t, command, required, at=when)
    db.refresh_sys()
    return [ResultSet([("ddl_lsn", LSN), ("ddl_time_local", T.DATETIME), ("required_column_update", BIT)],
                      [(L.to_bytes(rec.lsn), db.stamp_text(rec.t300), int(required))])]


@proc("sim.cdc_enable", [], SYS)
def cdc_enable(s):
    """sys.sp_cdc_enable_db."""
    s.db.enable_db()


@proc("sim.cdc_disable", [], SYS)
def cdc_disable(s):
    """sys.sp_cdc_disable_db: max LSN becomes NULL."""
    s.db.disable_db()


@proc("sim.capture_stop", [], SYS)
def capture_stop(s):
    """Stop the capture job (max LSN frozen while commits continue)."""
    s.db.capture_running = False


@proc("sim.capture_start", [], SYS)
def capture_start(s):
    """Start the capture job again (it catches up cycle by cycle)."""
    s.db.capture_running = True
    s.server.scheduler.reset_capture(s.db)


@proc("sim.set_job", [("pollinginterval", FLOAT, None), ("maxtrans", INT, None), ("maxscans", INT, None),
                      ("retention", INT, None), ("threshold", INT, None), ("dummy_interval", FLOAT, None),
                      ("dummy_on_idle_log", BIT, None), ("cleanup_time", T.nvarchar(5), None),
                      ("map_absent", T.nvarchar(10), None)], SYS)
def set_job(s, **kw):
    """Change capture/cleanup/dummy-row settings; returns them all."""
    cfg = s.db.cfg
    for k, v in kw.items():
        if v is not None:
            if k == "cleanup_time":
                setattr(cfg, k, v)
                s.server.scheduler.reset_cleanup(s.db)
            elif k == "dummy_on_idle_log":
                cfg.dummy_on_idle_log = bool(v)
            elif k == "map_absent":
                if v not in ("null", "next"):
                    raise SqlError(50000, "@map_absent is null or next", 16, 1)
                cfg.map_absent = v
            else:
                setattr(cfg, k, type(getattr(cfg, k))(v))
    if kw.get("pollinginterval") is not None:
        s.server.scheduler.reset_capture(s.db)
    cols = [("pollinginterval", FLOAT), ("maxtrans", INT), ("maxscans", INT), ("retention", INT), ("threshold", INT),
            ("dummy_interval", FLOAT), ("dummy_on_idle_log", BIT), ("cleanup_time", T.nvarchar(5)),
            ("map_absent", T.nvarchar(10))]
    return [ResultSet(cols, [(cfg.pollinginterval, cfg.maxtrans, cfg.maxscans, cfg.retention, cfg.threshold,
                              cfg.dummy_interval, int(cfg.dummy_on_idle_log), cfg.cleanup_time, cfg.map_absent)])]


@proc("sim.step_clock", [("seconds", FLOAT, REQUIRED)], SYS)
def step_clock(s, seconds):
    """Step the server's wall clock (SYSDATETIME() & co., commit, dummy-row and DDL stamps of every database)
    @seconds forward (negative: back), as NTP or a VM host corrects a clock; the simulator's clock, which
    drives the jobs, @at and sim.advance, does not move.  LSNs keep increasing: after a step back, new commits
    are stamped earlier than commits already made."""
    ticks = int(round(float(seconds) * 300))
    inst = s.db.instance
    with inst.lock:
        inst.clock_step += ticks
    wall = s.db.wall_now()
    t = timeutil.t300_of(wall.replace(tzinfo=None))
    return [ResultSet([("clock_utc", DT2), ("wall_clock_utc", DT2), ("wall_clock_local", T.DATETIME),
                       ("step_seconds", FLOAT)],
                      [(timeutil.naive_text(s.db.now().replace(tzinfo=None)),
                        timeutil.naive_text(wall.replace(tzinfo=None)), s.db.local_text(t), inst.clock_step / 300)])]


@proc("sim.set_clock_quirk", [("commit_time_offset_minutes", INT, None)], SYS)
def set_clock_quirk(s, commit_time_offset_minutes):
    """Stamp commit/DDL times (lsn_time_mapping, ddl_history) this many minutes off the local clock, while
    SYSDATETIME() & co. keep the real clock; NULL = unchanged.  Applies to rows captured from now on."""
    if commit_time_offset_minutes is not None:
        for db in s.server.databases.values():          # the server's clock: every database
            db.cfg.commit_time_offset = int(commit_time_offset_minutes)
        s.server.base_cfg.commit_time_offset = int(commit_time_offset_minutes)
    return [ResultSet([("commit_time_offset_minutes", INT)], [(s.db.cfg.commit_time_offset,)])]


def _grant_target(s, obj):
    if obj.lower().startswith("schema::"):
        return "schema::" + fold(obj.split("::", 1)[1].strip("[]"))
    parts = _names(obj)
    if len(parts) == 1:
        parts = ["dbo"] + parts
    t = s.db.table(parts[-2], parts[-1]) if len(parts) >= 2 else None
    if t is None:
        raise SqlError(15151, "Cannot find the object '%s', because it does not exist or you do not have "
                       "permission." % obj, 16, 1)
    return t.object_id


def _login(s, name):
    lg = s.db.login(name)
    if lg is None:
        raise SqlError(15151, "Cannot find the login '%s', because it does not exist or you do not have "
                       "permission." % name, 16, 1)
    return lg


@proc("sim.create_login", [("login", SYSNAME, REQUIRED), ("password", NV, None), ("db_owner", BIT, 0),
                           ("cdc_select", BIT, 0), ("tables", NV, None), ("roles", NV, None)], SYS)
def create_login(s, login, password, db_owner, cdc_select, tables, roles):
    """A login + database user with no permission by default (as CREATE LOGIN + CREATE USER);
    @cdc_select = 1 grants SELECT ON SCHEMA::cdc; @tables/@roles are comma lists.  A login that exists
    (same password) without a user in the current database gets one here (a login for many databases).
    @login = N'DOMAIN\\user' without @password: a Windows login (CREATE LOGIN ... FROM WINDOWS + CREATE USER)."""
    windows = password is None
    if windows:
        from .winprocs import windows_login_name
        login = windows_login_name(s, login)
    base = s.server.instance.logins.get(login.lower())
    if (base is not None and base.password == password and base.windows == windows and not base.sysadmin
            and s.db.login(login).user is None):
        lg = s.db.login(login)
        lg.user = base.name
        lg.db_owner = bool(db_owner)
    else:
        lg = s.db.create_login(login, password, db_owner=bool(db_owner), windows=windows)
    if cdc_select:
        lg.grants.add("schema::cdc")
    for obj in (tables or "").split(","):
        if obj.strip():
            lg.grants.add(_grant_target(s, obj.strip()))
    for r in (roles or "").split(","):
        if r.strip():
            lg.roles.add(fold(r.strip().strip("[]")))


@proc("sim.grant", [("login", SYSNAME, REQUIRED), ("object", NV, REQUIRED)], SYS)
def grant(s, login, object):
    """GRANT SELECT ON <object | SCHEMA::name> TO <login>."""
    _login(s, login).grants.add(_grant_target(s, object))


@proc("sim.revoke", [("login", SYSNAME, REQUIRED), ("object", NV, REQUIRED)], SYS)
def revoke(s, login, object):
    """REVOKE SELECT ON <object | SCHEMA::name> FROM <login>."""
    _login(s, login).grants.discard(_grant_target(s, object))


@proc("sim.add_role_member", [("role", SYSNAME, REQUIRED), ("login", SYSNAME, REQUIRED)], SYS)
def add_role_member(s, role, login):
    """ALTER ROLE <role> ADD MEMBER <login> (gating roles of capture instances)."""
    _login(s, login).roles.add(fold(role))


@proc("sim.drop_role_member", [("role", SYSNAME, REQUIRED), ("login", SYSNAME, REQUIRED)], SYS)
def drop_role_member(s, role, login):
    """ALTER ROLE <role> DROP MEMBER <login>."""
    _login(s, login).roles.discard(fold(role))


def _fault_database(s, database):
    """@database of a fault: NULL (any database) or an existing one (Msg 911 otherwise)."""
    if database is None:
        return None
    if database.lower() != "master" and s.server.instance.database(database) is None:
        raise SqlError(911, "Database '%s' does not exist. Make sure that the name is entered correctly." % database,
                       16, 1)
    return database


def _arm(s, database=None, **kw):
    f = s.server.faults.arm(Fault(database=_fault_database(s, database), **kw))
    return [ResultSet([("fault", T.nvarchar(20)), ("count", INT)], [(f.kind, f.count)])]


@proc("sim.fault_error", [("number", INT, 50000), ("message", NV, None), ("class", INT, 16), ("state", INT, 1),
                          ("pattern", NV, None), ("count", INT, 1), ("database", SYSNAME, None)], SYS)
def fault_error(s, number, message, state, pattern, count, database, **kw):
    """The next statement matching @pattern (in @database; NULL: any) fails with this error (then DONE with
    the error bit)."""
    return _arm(s, kind="error", number=number, message=message or "Injected error %d" % number,
                cls=kw.get("class", 16), state=state, pattern=pattern, count=count, database=database)


@proc("sim.fault_stall", [("seconds", FLOAT, REQUIRED), ("pattern", NV, None), ("count", INT, 1),
                          ("database", SYSNAME, None)], SYS)
def fault_stall(s, seconds, pattern, count, database):
    """The next matching statement (in @database; NULL: any) waits @seconds before answering (an ATTENTION
    still cancels it, sim.fault_clear ends the wait)."""
    return _arm(s, kind="stall", seconds=seconds, pattern=pattern, count=count, database=database)


@proc("sim.fault_drop", [("after_rows", INT, 0), ("pattern", NV, None), ("count", INT, 1),
                         ("database", SYSNAME, None)], SYS)
def fault_drop(s, after_rows, pattern, count, database):
    """The connection running the next matching statement (in @database; NULL: any) is closed after
    @after_rows result rows."""
    return _arm(s, kind="drop", after_rows=after_rows, pattern=pattern, count=count, database=database)


@proc("sim.fault_purge", [("low_lsn", LSN, None), ("retention_minutes", INT, None),
                          ("capture_instance", SYSNAME, None), ("count", INT, 1), ("database", SYSNAME, None)], SYS)
def fault_purge(s, low_lsn, retention_minutes, capture_instance, count, database):
    """Cleanup runs in the middle of the next read of a change table (in @database; NULL: any; default low
    watermark: max LSN of the database read)."""
    return _arm(s, kind="purge", low_lsn=low_lsn, retention=retention_minutes, capture_instance=capture_instance,
                count=count, database=database)


@proc("sim.fault_refuse_logins", [("count", INT, 1), ("number", INT, 18456), ("message", NV, None),
                                  ("login", SYSNAME, None), ("database", SYSNAME, None)], SYS)
def fault_refuse_logins(s, count, number, message, login, database):
    """Refuse the next @count logins (-1: until sim.fault_clear) with error @number (those asking for
    @database; NULL: any)."""
    return _arm(s, kind="refuse_login", count=count, number=number, message=message, pattern=login,
                cls=14 if number == 18456 else 16, database=database)


@proc("sim.fault_hang_login", [("database", SYSNAME, None), ("seconds", FLOAT, None), ("count", INT, 1),
                               ("login", SYSNAME, None)], SYS)
def fault_hang_login(s, database, seconds, count, login):
    """The next @count logins (-1: until sim.fault_clear) asking for @database (NULL: any; the LOGIN7
    database, else the login's default) are never answered: the server reads LOGIN7 and says nothing,
    the socket open, for @seconds (NULL: until sim.fault_clear), then answers the login as usual."""
    return _arm(s, kind="hang_login", database=database, seconds=seconds, count=count, pattern=login)


@proc("sim.fault_stall_tls", [("seconds", FLOAT, None), ("count", INT, 1)], SYS)
def fault_stall_tls(s, seconds, count):
    """The next @count TLS handshakes (-1: until sim.fault_clear) never complete: PRELOGIN is answered,
    then the server says nothing for @seconds (NULL: until sim.fault_clear), then goes on with the
    handshake.  For the whole instance: the database is only named later, in LOGIN7."""
    return _arm(s, kind="stall_tls", seconds=seconds, count=count)


@proc("sim.fault_clear", [], SYS)
def fault_clear(s):
    """Disarm every fault (and release the connections a stall or held login keeps waiting)."""
    n = s.server.faults.clear()
    return [ResultSet([("cleared", INT)], [(n,)])]


@proc("sim.create_database", [("name", SYSNAME, REQUIRED), ("demo", BIT, 1)], SYS)
def create_database(s, name, demo):
    """A new database on the instance, like the demo one (@demo = 1: dbo.orders with CDC enabled, capture
    instance dbo_orders) or empty with CDC disabled (@demo = 0); its job settings are the command line's."""
    db = s.server.create_database(name, bool(demo))
    return [ResultSet([("name", SYSNAME), ("database_id", INT), ("is_cdc_enabled", BIT)],
                      [(db.name, db.db_id, int(db.cdc_enabled))])]


@proc("sim.kill_sessions", [("login", SYSNAME, None), ("database", SYSNAME, None)], SYS)
def kill_sessions(s, login, database):
    """Close every other connection (optionally of one login, or those whose current database is
    @database)."""
    n = s.server.kill_sessions(except_spid=s.spid, login=login, database=database)
    return [ResultSet([("killed", INT)], [(n,)])]


@proc("sim.traffic", [("enabled", BIT, 1), ("rate", FLOAT, None), ("tables", NV, None), ("lateness", NV, None)],
      SYS)
def traffic(s, enabled, rate, tables, lateness):
    """Turn the traffic generator on/off (@rate transactions per second, @tables comma list, @lateness SPEC
    as --lateness; NULL = unchanged)."""
    cfg = s.db.cfg
    if lateness is not None:
        late = commits.lateness_arg(lateness)
        cfg.lateness = late.spec if late is not None else "none"
    if rate is not None:
        cfg.traffic_rate = float(rate)
    if tables is not None:
        cfg.traffic_tables = tables
    s.server.scheduler.enable_traffic(s.db, bool(enabled))


@proc("sim.truth_watermark", [], SYS)
def truth_watermark(s):
    """The instant before which every commit is captured (UTC datetime2 and local datetime)."""
    return [truth.watermark(s.db)]


def _truth_target(s, capture_instance, table):
    db = s.db
    if capture_instance:
        inst = db.instances.get(fold(capture_instance))
        if inst is None:
            raise SqlError(22981, "Object does not exist or access is denied.", 16, 1)
        return inst.source.object_id, L.to_bytes(inst.create_lsn)
    if table:
        return db.user_table(table).object_id, bytes(10)
    raise SqlError(201, "Procedure or function 'truth_counts' expects parameter '@capture_instance' or '@table', "
                   "which was not supplied.", 16, 4)


@proc("sim.truth_counts", [("capture_instance", SYSNAME, None), ("table", NV, None), ("from", DT2, REQUIRED),
                           ("to", DT2, REQUIRED), ("granularity_seconds", INT, 3600)], SYS)
def truth_counts(s, capture_instance, table, granularity_seconds, **kw):
    """True inserts/updates/deletes per UTC period [from, to) (instance: commits after it was created)."""
    oid, after = _truth_target(s, capture_instance, table)
    return [truth.counts(s.db, oid, after, kw["from"], kw["to"], granularity_seconds)]


@proc("sim.truth_event_counts", [("table", NV, REQUIRED), ("column", SYSNAME, REQUIRED),
                                  ("granularity_seconds", INT, 3600), ("after_lsn", LSN, None), ("upto_lsn", LSN, None),
                                  ("capture_instance", SYSNAME, None)], SYS)
def truth_event_counts(s, table, column, granularity_seconds, after_lsn, upto_lsn, capture_instance):
    """Inserts/updates/deletes of the captured change rows with after_lsn < commit LSN <= upto_lsn per UTC event
    period of @column (local values read in the server zone, earliest instant; datetimeoffset by its offset)."""
    return [truth.event_counts(s.db, table, column, granularity_seconds, after_lsn, upto_lsn, capture_instance)]


@proc("sim.truth_lateness", [("table", NV, REQUIRED), ("column", SYSNAME, REQUIRED), ("after_lsn", LSN, None),
                             ("upto_lsn", LSN, None), ("quantiles", NV, "0.5,0.9,0.99,0.999"),
                             ("capture_instance", SYSNAME, None)], SYS)
def truth_lateness(s, table, column, after_lsn, upto_lsn, quantiles, capture_instance):
    """Exact nearest-rank quantiles of commit instant minus event instant (ms) over those change rows."""
    return [truth.lateness(s.db, table, column, after_lsn, upto_lsn, quantiles, capture_instance)]


@proc("sim.truth_commits", [("table", NV, None), ("from", DT2, None), ("to", DT2, None)], SYS)
def truth_commits(s, table, **kw):
    """Every commit with its UTC/local time, counts and whether capture has processed it."""
    oid = s.db.user_table(table).object_id if table else None
    return [truth.commits(s.db, oid, kw["from"], kw["to"])]


@proc("sim.state", [], SYS)
def state(s):
    """Debugging view: clock, LSNs, jobs; then one row per capture instance."""
    db = s.db
    now = db.now()
    t = timeutil.t300_of(now.replace(tzinfo=None))
    cols = [("clock_utc", DT2), ("clock_local", T.DATETIME), ("timezone", T.nvarchar(64)), ("clock_mode", T.nvarchar(4)),
            ("cdc_enabled", BIT), ("capture_running", BIT), ("max_lsn", LSN), ("log_lsn", LSN),
            ("pending_records", INT), ("cleanup_held_low", LSN), ("dummy_rows", INT), ("capture_cycles", INT),
            ("sessions", INT), ("database", SYSNAME), ("databases", INT)]
    row = (timeutil.naive_text(now.replace(tzinfo=None)), db.local_text(t), db.cfg.timezone, db.cfg.clock,
           int(db.cdc_enabled), int(db.capture_running), db.max_lsn, L.to_bytes(db.lsn), len(db.log),
           db.cleanup.held_low, db.stats["dummy_rows"], db.stats["cycles"], len(s.server.sessions), db.name,
           len(s.server.databases))
    icols = [("capture_instance", SYSNAME), ("source_table", T.nvarchar(257)), ("start_lsn", LSN),
             ("create_lsn", LSN), ("change_rows", T.BIGINT), ("role_name", SYSNAME)]
    irows = []
    for inst in db.instances.values():
        n = db.conn.execute("SELECT COUNT(*) FROM %s" % inst.ct.phys).fetchone()[0]
        irows.append((inst.name, inst.source.display, inst.start_lsn, L.to_bytes(inst.create_lsn), n,
                      inst.role_name))
    return [ResultSet(cols, [row]), ResultSet(icols, irows)]


@proc("sim.stream_constant", [("rows", INT, 1000)], SYS)
def stream_constant(s, rows):
    """Benchmark baseline: @rows identical narrow rows (no SQL engine work)."""
    cols = [("__$start_lsn", T.LSN.null(False)), ("__$seqval", T.LSN.null(False)), ("__$operation", INT),
            ("id", INT)]
    row = (L.to_bytes(0x2A0000010000000001), L.to_bytes(0x2A0000010000000002), 2, 42)
    return [ResultSet(cols, _Repeat(row, rows))]


class _Repeat:
    """A row repeated ``n`` times, produced lazily."""

    def __init__(self, row, n):
        self.row, self.n = row, n

    def __iter__(self):
        return itertools.repeat(self.row, self.n)

