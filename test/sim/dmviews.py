"""Server- and CDC-state dynamic management views: ``sys.dm_server_services`` and
``sys.dm_cdc_log_scan_sessions`` (columns and permissions as learn.microsoft.com documents them).

* sys.dm_server_services: "Requires VIEW SERVER STATE permission on the server."  Without it SQL Server
  sends Msg 300 "VIEW SERVER STATE permission was denied on object 'server', database 'master'." (class 14)
  followed by Msg 297 "The user does not have permission to perform this action." (class 16).  Rows: the
  Database Engine and SQL Server Agent services, both running (the capture and cleanup jobs are Agent jobs;
  stopping the capture job with sp_cdc_stop_job does not stop the Agent).
* sys.dm_cdc_log_scan_sessions: "Requires VIEW DATABASE STATE permission" (a database-scoped DMV): Msg 262
  "VIEW DATABASE STATE permission denied in database 'demo'." (class 14), then 297.  One row per log scan
  session of the capture job (capture.scan), the newest last, and the aggregate row ``session_id = 0``.
  LSNs are ``nvarchar(23)`` texts ``xxxxxxxx:xxxxxxxx:xxxx`` plus the terminating NUL that fills the 23rd
  character (a session that found no CDC transaction has start_lsn ``00000000:00000000:0000``).
Holders: sysadmin has VIEW SERVER STATE (which implies VIEW DATABASE STATE); db_owner has VIEW DATABASE STATE
(CONTROL on the database); ``GRANT VIEW DATABASE STATE TO user`` gives it too."""
import collections
import os

from . import sqltypes as T
from .catalog import Column
from .errors import SqlError

KEEP_SESSIONS = 1000           # scan sessions kept (SQL Server resets the view at restart)
EMPTY_LSN = "00000000:00000000:0000\x00"
VIEW_DATABASE_STATE = "perm::view database state"


def _cols(spec):
    """Column objects of a view from (name, type) pairs."""
    return [Column(n, t, t.nullable, i) for i, (n, t) in enumerate(spec, 1)]


_LSN = T.nvarchar(23)
COLUMNS = {
    "dm_server_services": _cols([
        ("servicename", T.nvarchar(256).null(False)), ("startup_type", T.INT), ("startup_type_desc",
                                                                              T.nvarchar(256).null(False)),
        ("status", T.INT), ("status_desc", T.nvarchar(256).null(False)), ("process_id", T.INT.null(False)),
        ("last_startup_time", T.datetimeoffset(7)), ("service_account", T.nvarchar(256).null(False)),
        ("filename", T.nvarchar(256).null(False)), ("is_clustered", T.nvarchar(1).null(False)),
        ("cluster_nodename", T.nvarchar(256)), ("instant_file_initialization_enabled", T.nvarchar(1))]),
    "dm_cdc_log_scan_sessions": _cols([
        ("session_id", T.INT), ("start_time", T.DATETIME), ("end_time", T.DATETIME), ("duration", T.INT),
        ("scan_phase", T.nvarchar(200)), ("error_count", T.INT), ("start_lsn", _LSN), ("current_lsn", _LSN),
        ("end_lsn", _LSN), ("tran_count", T.BIGINT), ("last_commit_lsn", _LSN), ("last_commit_time", T.DATETIME),
        ("log_record_count", T.BIGINT), ("schema_change_count", T.INT), ("command_count", T.BIGINT),
        ("first_begin_cdc_lsn", _LSN), ("last_commit_cdc_lsn", _LSN), ("last_commit_cdc_time", T.DATETIME),
        ("latency", T.INT), ("empty_scan_count", T.INT), ("failed_sessions_count", T.INT)]),
    # sys.dm_exec_connections (a subset): auth_scheme SQL, NTLM or KERBEROS; VIEW SERVER STATE as above
    "dm_exec_connections": _cols([
        ("session_id", T.INT), ("connect_time", T.DATETIME.null(False)), ("net_transport", T.nvarchar(40).null(False)),
        ("protocol_type", T.nvarchar(40)), ("encrypt_option", T.nvarchar(40).null(False)),
        ("auth_scheme", T.nvarchar(40).null(False)), ("client_net_address", T.SqlType("varchar", 48)),
        ("client_tcp_port", T.INT), ("local_tcp_port", T.INT)]),
    # sys.server_principals (a subset): logins, type S (SQL) or U (Windows); a login that is not sysadmin sees
    # itself and the fixed server role sysadmin (metadata visibility)
    "server_principals": _cols([
        ("name", T.SYSNAME.null(False)), ("principal_id", T.INT.null(False)),
        ("type", T.SqlType("nchar", 1).null(False)),
        ("type_desc", T.nvarchar(60)), ("is_disabled", T.BIT), ("default_database_name", T.SYSNAME),
        ("is_fixed_role", T.BIT.null(False))]),
}


def lsn_text(raw):
    """10-byte LSN -> the view's text form (with the NUL in the 23rd position); None stays None."""
    if raw is None:
        return None
    raw = bytes(raw).rjust(10, b"\0")
    return "%s:%s:%s\x00" % (raw[:4].hex(), raw[4:8].hex(), raw[8:10].hex())


def check(name, ctx):
    """Raise SQL Server's permission errors for a view the session's login may not read."""
    login = ctx.login
    if name in ("dm_server_services", "dm_exec_connections") and not login.sysadmin:
        raise SqlError(297, "The user does not have permission to perform this action.", 16, 1, preceding=[
            SqlError(300, "VIEW SERVER STATE permission was denied on object 'server', database 'master'.", 14, 1)])
    if name == "dm_cdc_log_scan_sessions" and not has_view_database_state(login):
        raise SqlError(297, "The user does not have permission to perform this action.", 16, 1, preceding=[
            SqlError(262, "VIEW DATABASE STATE permission denied in database '%s'." % ctx.db.name, 14, 1)])


def has_view_database_state(login):
    """sysadmin (VIEW SERVER STATE), db_owner (CONTROL), or a grant of VIEW DATABASE STATE."""
    return login.sysadmin or login.db_owner or VIEW_DATABASE_STATE in login.effective_grants()


class _EmptyCycles:
    """A run of capture cycles that found nothing, accounted in one step by the scheduler (scheduler.py):
    ``scans`` empty scan sessions per cycle, cycles ``step`` apart from ``t0``; sessions ``lo`` .. ``hi - 1``
    of the run are still kept."""
    __slots__ = ("t0", "step", "scans", "first_id", "first_empty", "lo", "hi")

    def __init__(self, t0, step, scans, first_id, first_empty, n):
        self.t0, self.step, self.scans = t0, step, scans
        self.first_id, self.first_empty = first_id, first_empty
        self.lo, self.hi = 0, n


def _sessions(db):
    sessions = getattr(db, "scan_sessions", None)
    if sessions is None:
        sessions = db.scan_sessions = collections.deque()
        db.scan_session_ids = 0
        db.scan_empty_run = 0
        db.scan_sessions_kept = 0
    return sessions


def _trim(db, sessions):
    """Keep the newest KEEP_SESSIONS scan sessions."""
    extra = db.scan_sessions_kept - KEEP_SESSIONS
    while extra > 0:
        first = sessions[0]
        if isinstance(first, _EmptyCycles):
            k = min(extra, first.hi - first.lo)
            first.lo += k
            if first.lo == first.hi:
                sessions.popleft()
        else:
            k = 1
            sessions.popleft()
        extra -= k
        db.scan_sessions_kept -= k


def record_scan(db, start_t300, end_t300, records, first_lsn, last_lsn, trans, commands, ddls, last_commit):
    """Append one log scan session (called by capture.scan, also for a scan that found nothing).  Kept as a
    tuple of raw values (formatted when the view is read): 1,000 databases keep up to 1,000 sessions each."""
    sessions = _sessions(db)
    db.scan_session_ids += 1
    db.scan_empty_run = 0 if trans else db.scan_empty_run + 1
    sessions.append((db.scan_session_ids, start_t300, end_t300, records, first_lsn if records else None,
                     last_lsn if records else None, trans, commands, ddls, last_commit, db.scan_empty_run))
    db.scan_sessions_kept += 1
    _trim(db, sessions)


def record_empty_cycles(db, t0, step, n, scans=1):
    """``n`` capture cycles from ``t0`` (aware UTC datetime), ``step`` apart, each ``scans`` empty scans."""
    if n <= 0:
        return
    sessions = _sessions(db)
    total = n * scans
    sessions.append(_EmptyCycles(t0, step, scans, db.scan_session_ids + 1, db.scan_empty_run + 1, total))
    db.scan_session_ids += total
    db.scan_empty_run += total
    db.scan_sessions_kept += total
    _trim(db, sessions)


def _expand(db):
    """The kept scan sessions as dicts, oldest first."""
    from .timeutil import t300_of
    out = []
    for e in _sessions(db):
        if isinstance(e, _EmptyCycles):
            for i in range(e.lo, e.hi):
                text = db.local_text(t300_of((e.t0 + (i // e.scans) * e.step).replace(tzinfo=None)))
                out.append({"id": e.first_id + i, "start": text, "end": text, "duration": 0, "start_lsn": EMPTY_LSN,
                            "end_lsn": EMPTY_LSN, "trans": 0, "records": 0, "commands": 0, "ddls": 0,
                            "last_commit": None, "empty": e.first_empty + i})
            continue
        sid, start, end, records, first, last, trans, commands, ddls, last_commit, empty = e
        out.append({"id": sid, "start": db.local_text(start), "end": db.local_text(end),
                    "duration": (end - start) // 300, "start_lsn": lsn_text(first) if records else EMPTY_LSN,
                    "end_lsn": lsn_text(last) if records else EMPTY_LSN, "trans": trans, "records": records,
                    "commands": commands, "ddls": ddls, "last_commit": last_commit, "empty": empty})
    return out


def rows(name, ctx):
    """The view's rows as the session may see them (after ``check``)."""
    db = ctx.db
    if name in ("dm_exec_connections", "server_principals"):
        return _security_rows(name, ctx)
    if name == "dm_server_services":
        started = getattr(db, "started_dto", None)
        return [("SQL Server (MSSQLSERVER)", 2, "Automatic", 4, "Running", os.getpid(), started,
                 "NT Service\\MSSQLSERVER", '"C:\\Program Files\\Microsoft SQL Server\\MSSQL\\Binn\\sqlservr.exe" '
                 "-sMSSQLSERVER", "N", None, "Y"),
                ("SQL Server Agent (MSSQLSERVER)", 2, "Automatic", 4, "Running", os.getpid(), started,
                 "NT Service\\SQLSERVERAGENT", '"C:\\Program Files\\Microsoft SQL Server\\MSSQL\\Binn\\SQLAGENT.EXE" '
                 "-i MSSQLSERVER", "N", None, None)]
    sched = getattr(db.instance, "scheduler", None)
    if sched is not None:
        sched.sync(db)                  # the idle cycles up to now
    sessions = _expand(db)
    out = []
    for s in sessions:
        lc_lsn, lc_time = s["last_commit"] or (None, None)
        out.append((s["id"], s["start"], s["end"], s["duration"], "Done", 0, s["start_lsn"], EMPTY_LSN,
                    s["end_lsn"], s["trans"], lsn_text(lc_lsn), lc_time, s["records"], s["ddls"], s["commands"],
                    s["start_lsn"], lsn_text(lc_lsn), lc_time, 0, s["empty"], 0))
    if sessions:
        last = sessions[-1]
        busy = [s for s in sessions if s["trans"]]
        lc = next((s["last_commit"] for s in reversed(busy)), None) or (None, None)
        out.insert(0, (0, sessions[0]["start"], last["end"], sum(s["duration"] for s in busy), "Aggregate", 0,
                       last["start_lsn"], EMPTY_LSN, last["end_lsn"], sum(s["trans"] for s in sessions),
                       lsn_text(lc[0]), lc[1], sum(s["records"] for s in sessions),
                       sum(s["ddls"] for s in sessions), sum(s["commands"] for s in sessions),
                       busy[0]["start_lsn"] if busy else EMPTY_LSN, lsn_text(lc[0]), lc[1], 0, last["empty"], 0))
    return out


def _security_rows(name, ctx):
    """Rows of sys.dm_exec_connections (every session with a login) and sys.server_principals."""
    if name == "dm_exec_connections":
        out = []
        for s in ctx.server.session_list():
            if s.login is None:
                continue
            peer = s.peer or ("", None)
            enc = "TRUE" if s.channel.encryption == "full" else "FALSE"
            out.append((s.spid, s.login_time, "TCP", "TSQL", enc, s.auth_scheme or "SQL", peer[0], peer[1],
                        ctx.server.port))
        return out
    logins = sorted(ctx.server.instance.logins.values(), key=lambda lg: lg.name.lower())
    out = [("sysadmin", 3, "R", "SERVER_ROLE", 0, None, 1)]
    for i, lg in enumerate(logins):
        if lg.sysadmin or ctx.login.sysadmin or lg.name.lower() == ctx.login.name.lower():
            pid = 1 if lg.sysadmin and i == 0 else 256 + i
            out.append((lg.name, pid, "U" if lg.windows else "S", "WINDOWS_LOGIN" if lg.windows else "SQL_LOGIN", 0,
                        lg.default_db or "master", 0))
    return out
