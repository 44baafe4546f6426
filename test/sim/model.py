"""The simulated database: storage, catalog, LSN counter, the log of commits, CDC metadata.

All mutation happens under ``Database.lock``.  sqlite holds the data (source
tables in ``main``, CDC tables in the attached ``cdc`` database, WAL mode so
readers keep a consistent snapshot while the capture and cleanup jobs write);
the catalog and the log of not-yet-captured transactions live in Python.
"""
import collections
import datetime as _dt
import contextlib
import os
import random
import shutil
import sqlite3
import tempfile
import threading
from dataclasses import dataclass

from . import lsn as L
from . import permissions, sysviews, timeutil
from . import catalog
from .catalog import (META_TABLES, SYS_VIEWS, Column, Instance, Login, Table, create_sql, ct_columns, fold, q,
                      update_mask)
from .clock import Clock, parse_utc
from .errors import SqlError

LSN_START = (0x2A << 48) | (0x100 << 16) | 1
OID_START = 245575913
OID_STEP = 16000057


@dataclass(eq=False)
class LogTxn:
    """A committed transaction not yet read by the capture process."""
    table: Table
    begin_lsn: int
    commit_lsn: int
    begin_t300: int                 # UTC, 1/300 s since 1900
    end_t300: int
    tran_id: bytes
    columns: tuple                  # source column names at commit time
    changes: list                   # (seqval, op, values tuple, changed column names or None)
    counts: tuple = (0, 0, 0)
    kind: str = "txn"
    step: int = 0                   # the server's wall clock minus the simulator's at commit, 1/300 s

    @property
    def stamp_t300(self):
        """The commit time the server's wall clock gave it (UTC, 1/300 s): what it is stamped with."""
        return self.end_t300 + self.step


@dataclass(eq=False)
class LogRecord:
    """Non-transaction log records the capture process acts on: 'enable', 'ddl'."""
    kind: str
    lsn: int
    t300: int
    table: Table = None
    instance: Instance = None
    command: str = ""
    required_column_update: bool = False
    commit_lsn: int = 0

    def __post_init__(self):
        self.commit_lsn = self.lsn


def storage_dir(cfg):
    """Where the instance's sqlite files go: ``--storage-dir``; else, with ``--extra-databases``, /dev/shm when it
    is a writable tmpfs with room (creating a database's files there costs a fraction of a disk file system's
    CPU); else the system's temporary directory."""
    if getattr(cfg, "storage_dir", ""):
        return cfg.storage_dir
    if getattr(cfg, "extra_databases", ""):
        try:
            if os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free >= 2 << 30:
                return "/dev/shm"
        except OSError:
            pass
    return None


class InstanceState:
    """What the databases of one SQL Server instance share: the clock and its time zone, one lock, the server
    logins, the databases by name (ids from 5, in creation order) and the storage root."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.lock = threading.RLock()
        self.tz = timeutil.zone(cfg.timezone)
        self.clock = Clock(cfg.clock, parse_utc(cfg.start_time) if cfg.start_time else None)
        started = self.clock.now().astimezone(self.tz)   # sys.dm_server_services.last_startup_time
        self.started_dto = timeutil.dto_text(timeutil.naive_text(started.replace(tzinfo=None)),
                                             int(started.utcoffset().total_seconds() // 60))
        self.databases = {}            # name lower -> Database, in creation order
        self.by_id = {}
        self.next_db_id = 5            # 1-4: master, tempdb, model, msdb
        # server principals (name, password, sysadmin, default database); each database keeps its own
        # view of a login (Database.login) with the user, roles and grants it has there
        self.logins = {cfg.login.lower(): Login(cfg.login, cfg.password, sysadmin=True, default_db=cfg.database)}
        self.dir = tempfile.mkdtemp(prefix="mssql-sim-", dir=storage_dir(cfg))
        self.scheduler = None          # set by the server (scheduler.Scheduler)
        # how far the server's wall clock (SYSDATETIME(), commit and DDL stamps) is ahead of the simulator's
        # clock, in 1/300 s (negative: behind); moved only by sim.step_clock, as NTP or a VM host steps a clock
        self.clock_step = 0

    def database(self, name):
        """The user database ``name`` (case-insensitive, like database names under the server collation)."""
        return self.databases.get((name or "").lower())

    def add(self, db):
        self.databases[db.name.lower()] = db
        self.by_id[db.db_id] = db

    def close(self):
        for db in list(self.databases.values()):
            db.close(remove=False)
        shutil.rmtree(self.dir, ignore_errors=True)


class _NoStorage:
    """The connection of a database built from a template until ``open_template``: statements of the
    creation steps are already in the template's files."""

    def execute(self, *a):
        return None

    def executemany(self, *a):
        return None

    def close(self):
        pass


@dataclass
class CleanupState:
    held_low: bytes = None          # a cleanup raised start_lsn and waits to delete
    runs: int = 0
    last_low: bytes = None
    deleted_change_rows: int = 0
    deleted_mapping_rows: int = 0


class Database:
    """One SQL Server database with CDC: its own storage, catalog, LSN space, log and job state, its view of
    the instance's logins (users, roles, grants); the clock, time zone and lock are the instance's."""

    def __init__(self, cfg, instance=None, name=None, primary=True, template=None):
        """A database of ``instance`` (a private one when None).  ``cfg`` holds its job settings (each
        database has its own capture and cleanup job); the primary database (``--database``) draws its random
        values from ``--seed``, every other one from the seed and its name.

        ``template``: a directory holding the sqlite files of a database created by the same steps (see
        ``save_template``); the catalog is then built in Python only, with no sqlite statement, and
        ``open_template`` (after those steps) copies the files in: a thousand databases in seconds."""
        self.cfg = cfg
        self.instance = instance = instance or InstanceState(cfg)
        self.name = name or cfg.database
        self.db_id = instance.next_db_id
        instance.next_db_id += 1
        self.collation = getattr(cfg, "collation", None) or "SQL_Latin1_General_CP1_CI_AS"
        self.case_sensitive = "_CS_" in self.collation.upper() + "_" or "_BIN" in self.collation.upper()
        catalog.set_case_sensitive(self.case_sensitive)
        self.lock = instance.lock
        self.dir = os.path.join(instance.dir, str(self.db_id))
        os.mkdir(self.dir)
        self.main_path = os.path.join(self.dir, "main.db")
        self.cdc_path = os.path.join(self.dir, "cdc.db")
        self.template = template
        if template is None:
            self.conn = self.connect(readonly=False)
            for db in ("main", "cdc"):
                if not primary:
                    # 1 KB pages: sqlite allocates a page cache of 20 pages per file and connection at once,
                    # 2 x 86 KB with 4 KB pages, a few KB with these; every session connection pays it too
                    self.conn.execute("PRAGMA %s.page_size=1024" % db)
                self.conn.execute("PRAGMA %s.journal_mode=WAL" % db)
                self.conn.execute("PRAGMA %s.journal_size_limit=4194304" % db)
        else:
            self.conn = _NoStorage()
        self.tz = instance.tz
        self.clock = instance.clock
        # its own LSN space: every database's log starts in its own virtual log file sequence number
        self.lsn = LSN_START + ((self.db_id - 5) << 48)
        self.next_oid = OID_START
        self.tables = {}               # (schema lower, name lower) -> Table
        self.by_oid = {}
        self.instances = {}            # capture instance lower -> Instance
        self.cdc_enabled = False
        self.capture_running = True
        self.started_dto = instance.started_dto
        self.log = collections.deque()
        self.max_lsn = None            # bytes, cache of MAX(start_lsn) of cdc.lsn_time_mapping
        self.last_mapping_t300 = None  # UTC instant of the newest mapping row (or of enabling CDC)
        self.lsn_at_last_mapping = 0
        self.activity_lsn = 0           # LSN of the newest transaction or DDL (any table)
        self.last_commit_t300 = 0
        self.tran_counter = 0x1A2B00
        self.cleanup = CleanupState()
        self.role_grants = {}          # fold(role) -> grants (GRANT ... TO role)
        self.logins = {}               # login lower -> this database's view of it (see login())
        self.roles = set()             # database roles (fold()ed): CREATE ROLE and gating roles
        self.rng = random.Random(cfg.seed if primary else "%s/%s" % (cfg.seed, self.name.lower()))
        self.stats = collections.Counter()
        self.last_job_error = None
        self.jobs = None               # the scheduler's timetable of this database's jobs
        self.schemas = {"dbo": 1, "cdc": 5, "sys": 4}
        self.allow_snapshot_isolation = False      # ALTER DATABASE ... SET ALLOW_SNAPSHOT_ISOLATION (default OFF)
        self._bulk = 0
        with self.bulk():
            self.conn.execute("CREATE TABLE sim_truth (commit_t300 INTEGER, commit_lsn BLOB, table_oid INTEGER,"
                              " ins INTEGER, upd INTEGER, del INTEGER, tracked INTEGER)")
            self.conn.execute("CREATE INDEX sim_truth_i ON sim_truth(table_oid, commit_t300)")
            # sys.* catalog views are computed from the catalog when a statement reads them (sysviews.dynamic_sql):
            # no sqlite tables to create or rebuild per database
            for vname, cols in list(SYS_VIEWS.items()) + list(sysviews.STORED.items()) + list(sysviews.DYNAMIC.items()):
                if self.table("sys", vname) is not None:
                    continue
                self._register(Table(self.new_oid(), "sys", vname, cols, kind="sys", phys="", dynamic=True))
        self.login(cfg.login)          # the sysadmin login, as dbo

    @contextlib.contextmanager
    def bulk(self):
        """Run several catalog changes as one sqlite transaction (creating a database is then a few
        milliseconds)."""
        outer = self._bulk == 0
        if outer:
            self.conn.execute("BEGIN")
        self._bulk += 1
        try:
            yield
        except BaseException:
            self._bulk -= 1
            if outer:
                self.conn.execute("ROLLBACK")
            raise
        self._bulk -= 1
        if outer:
            self.conn.execute("COMMIT")

    def _begin(self):
        if not self._bulk:
            self.conn.execute("BEGIN")

    def _commit(self):
        if not self._bulk:
            self.conn.execute("COMMIT")

    # --- storage ---------------------------------------------------------------

    def connect(self, readonly=True):
        """A sqlite connection with ``cdc`` attached (sessions get read-only ones)."""
        c = sqlite3.connect(self.main_path, isolation_level=None, check_same_thread=False, timeout=60)
        c.execute("ATTACH DATABASE ? AS cdc", (self.cdc_path,))
        for db in ("main", "cdc"):
            c.execute("PRAGMA %s.synchronous=OFF" % db)
            c.execute("PRAGMA %s.cache_size=-65536" % db)
        if self.case_sensitive:
            c.execute("PRAGMA case_sensitive_like=ON")
        if readonly:
            c.execute("PRAGMA query_only=1")
        return c

    def save_template(self, directory):
        """Copy this (newly created, untouched) database's sqlite files to ``directory`` for ``template``."""
        os.mkdir(directory)
        for db in ("main", "cdc"):
            self.conn.execute("PRAGMA %s.wal_checkpoint(TRUNCATE)" % db)
        shutil.copyfile(self.main_path, os.path.join(directory, "main.db"))
        shutil.copyfile(self.cdc_path, os.path.join(directory, "cdc.db"))

    def open_template(self):
        """The storage of a database built from ``template``: its files, and what differs (creation times)."""
        shutil.copyfile(os.path.join(self.template, "main.db"), self.main_path)
        shutil.copyfile(os.path.join(self.template, "cdc.db"), self.cdc_path)
        self.template = None
        self.conn = self.connect(readonly=False)
        for db in ("main", "cdc"):
            self.conn.execute("PRAGMA %s.journal_size_limit=4194304" % db)
        if self.instances:
            self.conn.executemany("UPDATE cdc.change_tables SET create_date = ? WHERE object_id = ?",
                                  [(i.create_date, i.object_id) for i in self.instances.values()])

    def close(self, remove=True):
        """Close storage and remove the database's directory (``remove``; the instance removes them all)."""
        try:
            self.conn.close()
        finally:
            if remove:
                shutil.rmtree(self.dir, ignore_errors=True)

    def new_oid(self):
        """A fresh object id: a positive int, as SQL Server's are. The step
        wraps modulo 2**31 - 1 (both prime, so every value comes round once)
        and skips ids in use and the low ones system objects have."""
        while True:
            oid = self.next_oid
            self.next_oid = (self.next_oid + OID_STEP) % 2147483647
            if oid >= 1000 and oid not in self.by_oid:
                return oid

    def next_lsn(self):
        """Allocate one LSN (every log record consumes one, captured or not)."""
        self.lsn += 1
        return self.lsn

    def _register(self, t):
        self.tables[(fold(t.schema), fold(t.name))] = t
        self.by_oid[t.object_id] = t
        return t

    def _unregister(self, t):
        self.tables.pop((fold(t.schema), fold(t.name)), None)
        self.by_oid.pop(t.object_id, None)

    def refresh_sys(self):
        """After DDL: nothing to rebuild, the sys.* views are computed when read (sysviews.dynamic_sql)."""

    def sys_rows(self, name, login=None):
        """Rows of the catalog views sys.schemas, sys.tables, sys.indexes, sys.index_columns, sys.columns.
        With a login, the tables and their columns and indexes are those it has some permission on
        (metadata visibility, as OBJECT_ID applies it): a login without a grant on a table sees no row
        of it, as on SQL Server."""
        if name == "schemas":
            return list(self.schemas.items())
        objects = [t for t in self.tables.values() if t.kind in ("user", "change_table", "cdc_meta")
                   and (login is None or permissions.can_see(login, t))]
        if name == "tables":
            tracked = {i.source.object_id for i in self.instances.values()}
            return [(t.name, t.object_id, self.schemas.get(fold(t.schema), 1), int(t.object_id in tracked))
                    for t in objects]
        return sysviews.stored_rows(objects)[name]

    # --- time --------------------------------------------------------------------

    def now(self):
        return self.clock.now()

    def step_t300(self):
        """The server's wall clock minus the simulator's clock, in 1/300 s (sim.step_clock)."""
        return self.instance.clock_step

    def wall_now(self):
        """The server's wall clock: what SYSDATETIME() & co. read and what stamps commits."""
        return self.now() + _dt.timedelta(microseconds=self.instance.clock_step * 10_000 / 3)

    def now_t300(self):
        """Current UTC instant in 1/300 s."""
        return timeutil.t300_of(self.now().replace(tzinfo=None))

    def local_text(self, utc_t300):
        """UTC instant -> server-local datetime text (DST-aware, exact ticks)."""
        return timeutil.t300_text(timeutil.local_t300(self.tz, utc_t300))

    def stamp_text(self, utc_t300):
        """Local datetime text the server stamps on commits (lsn_time_mapping, ddl_history): the clock's
        local time plus ``commit_time_offset`` minutes (a server stamping commits in another zone)."""
        offset = int(getattr(self.cfg, "commit_time_offset", 0) or 0)
        return timeutil.t300_text(timeutil.local_t300(self.tz, utc_t300) + offset * 60 * 300)

    def offset_minutes(self, utc_naive):
        return timeutil.offset_minutes(self.tz, utc_naive)

    def commit_instant(self, at=None):
        """Commit time of a new transaction: the clock (or ``at``) rounded to a datetime tick,
        never before the previous commit."""
        base = at if at is not None else self.now()
        t = timeutil.t300_of(base.astimezone(timeutil.UTC).replace(tzinfo=None))
        t = max(t, self.last_commit_t300)
        self.last_commit_t300 = t
        return t

    # --- catalog ---------------------------------------------------------------

    def table(self, schema, name):
        """The table schema.name under the database collation (or None)."""
        return self.tables.get((fold(schema), fold(name)))

    def user_table(self, name_text):
        """'dbo.orders' / '[dbo].[orders]' / 'orders' -> Table (or Msg 208)."""
        from .tsql.lexer import tokenize
        parts = [t.value for t in tokenize(name_text) if t.kind in ("word", "qid")]
        if len(parts) == 1:
            parts = ["dbo"] + parts
        t = self.table(parts[-2], parts[-1]) if len(parts) >= 2 else None
        if t is None or t.kind != "user":
            raise SqlError(208, "Invalid object name '%s'." % name_text, 16, 1)
        return t

    def create_table(self, schema, name, columns, key=None):
        """Create a user (source) table.  ``columns``: [(name, SqlType, nullable)];
        the key column (first int column by default) identifies rows for updates/deletes."""
        if self.table(schema, name):
            raise SqlError(2714, "There is already an object named '%s' in the database." % name, 16, 6)
        if fold(schema) == "cdc":
            raise SqlError(22974, "Tables contained in the cdc schema cannot be enabled for Change Data Capture.")
        cols = [Column(n, t.null(nullable), nullable, i) for i, (n, t, nullable) in enumerate(columns, 1)]
        if not cols:
            raise SqlError(4567, "A table must have at least one column.", 16, 1)
        if key is None:
            key_idx = next((i for i, c in enumerate(cols) if c.type.name in ("int", "bigint")), None)
            if key_idx is None:
                raise SqlError(50000, "sim tables need an int or bigint key column", 16, 1)
        else:
            key_idx = next((i for i, c in enumerate(cols) if fold(c.name) == fold(key)), None)
            if key_idx is None:
                raise SqlError(1911, "Column name '%s' does not exist in the target table or view." % key, 16, 1)
        oid = self.new_oid()
        t = Table(oid, schema, name, cols, "user", "main.%s" % q("src_%d" % oid), key_idx,
                  create_date=self.local_text(self.now_t300()))
        if self.template is None:
            self.conn.execute(create_sql(t.phys, cols, ", PRIMARY KEY (%s)" % q(cols[key_idx].name)))
        self.schemas.setdefault(fold(schema), max(self.schemas.values()) + 1)
        self._register(t)
        self.refresh_sys()
        return t

    # --- CDC on the database ---------------------------------------------------

    def enable_db(self):
        """sys.sp_cdc_enable_db: create the cdc metadata tables."""
        if self.cdc_enabled:
            return
        c = self.conn
        for name, cols in META_TABLES.items():
            t = Table(self.new_oid(), "cdc", name, cols, "cdc_meta", "cdc.%s" % q(name))
            extra = ", PRIMARY KEY (start_lsn)" if name == "lsn_time_mapping" else ""
            if self.template is None:
                c.execute(create_sql(t.phys, cols, extra))
            self._register(t)
        c.execute("CREATE INDEX cdc.lsn_time_mapping_t ON lsn_time_mapping(tran_end_time)")
        self.cdc_enabled = True
        self.max_lsn = None
        self.last_mapping_t300 = self.now_t300()
        self.lsn_at_last_mapping = self.lsn
        self.refresh_sys()

    def disable_db(self):
        """sys.sp_cdc_disable_db: drop every capture instance and the cdc tables."""
        if not self.cdc_enabled:
            return
        for inst in list(self.instances.values()):
            self._drop_instance(inst)
        for name in META_TABLES:
            t = self.table("cdc", name)
            self.conn.execute("DROP TABLE %s" % t.phys)
            self._unregister(t)
        self.cdc_enabled = False
        self.max_lsn = None
        self.log.clear()
        self.cleanup.held_low = None
        self.refresh_sys()

    def require_cdc(self):
        if not self.cdc_enabled:
            raise SqlError(22901, "The database '%s' is not enabled for Change Data Capture. Ensure that the "
                           "correct database context is set and retry the operation. To report on the databases "
                           "enabled for Change Data Capture, query the is_cdc_enabled column in the sys.databases "
                           "catalog view." % self.name)

    def instances_of(self, table):
        return [i for i in self.instances.values() if i.source is table]

    def enable_table(self, schema, name, role_name=None, capture_instance=None, supports_net_changes=False,
                     index_name=None, captured_column_list=None, filegroup_name=None):
        """sys.sp_cdc_enable_table: a new capture instance (at most two per table)."""
        self.require_cdc()
        src = self.table(schema, name)
        if src is None or src.kind != "user":
            raise SqlError(22931, "Source table '%s.%s' does not exist in the current database. Ensure that the "
                           "correct database context is set. Specify a valid schema and table name for the "
                           "database." % (schema, name))
        existing = self.instances_of(src)
        if len(existing) >= 2:
            raise SqlError(22962, "Two capture instances already exist for source table '%s.%s'. A table can have "
                           "at most two capture instances. If the current tracking options are not appropriate, "
                           "disable change tracking for the obsolete instance by using sys.sp_cdc_disable_table "
                           "and retry the operation." % (src.schema, src.name))
        ci = capture_instance or ("%s_%s" % (src.schema, src.name))
        if len(ci) > 100:
            raise SqlError(22927, "Capture instance name '%s' exceeds the length limit of 100 characters. Specify "
                           "a name that satisfies the length constraint." % ci)
        if fold(ci) in self.instances or self.table("cdc", ci + "_CT"):
            raise SqlError(22926, "Could not create a capture instance because the capture instance name '%s' "
                           "already exists in the current database. Specify an explicit unique name for the "
                           "parameter @capture_instance." % ci)
        if role_name is not None and role_name.strip() == "":
            raise SqlError(22907, "Parameter @role_name cannot be empty. Specify a value for @role_name and retry "
                           "the operation. Supply null as the value if no role is to be used to gate access to "
                           "captured change data.")
        if captured_column_list:
            from .tsql.lexer import tokenize
            names = [t.value for t in tokenize(captured_column_list) if t.kind in ("word", "qid")]
            captured = []
            for n in names:
                c = src.column(n)
                if c is None:
                    raise SqlError(22942, "Columns specified in the captured column list could not be mapped to "
                                   "columns in source table '%s.%s'. Verify that the columns specified in the "
                                   "parameter @captured_column_list are delimited properly and match columns in "
                                   "the source table." % (src.schema, src.name))
                captured.append(c)
            captured.sort(key=lambda c: c.column_id)
        else:
            captured = list(src.columns)
        captured = [Column(c.name, c.type, c.nullable, c.column_id) for c in captured]
        key_col = src.columns[src.key]
        if supports_net_changes and not any(c.name == key_col.name for c in captured):
            raise SqlError(22943, "Columns used to uniquely identify a row for net change tracking must be "
                           "included in the list of captured columns.")
        oid = self.new_oid()
        cols = ct_columns(captured)
        # Physical name by object id: sqlite names are case-insensitive, capture instances may not be.
        ct = Table(oid, "cdc", ci + "_CT", cols, "change_table", "cdc.%s" % q("ct_%d" % oid))
        if self.template is None:
            self.conn.execute(create_sql(ct.phys, cols))
        self.conn.execute("CREATE INDEX cdc.%s ON %s(%s, %s, %s)" % (
            q("ct_%d_idx" % oid), q("ct_%d" % oid), q("__$start_lsn"), q("__$seqval"), q("__$operation")))
        now = self.now_t300()
        inst = Instance(ci, src, ct, captured, role_name=role_name, index_name=index_name or ("PK_" + src.name),
                        index_columns=[key_col.name], supports_net_changes=bool(supports_net_changes),
                        filegroup=filegroup_name, create_date=self.local_text(now),
                        all_mask=update_mask(range(1, len(captured) + 1), len(captured)))
        ct.instance = inst
        if role_name:
            self.roles.add(fold(role_name))
        rec = LogRecord("enable", self.next_lsn(), now, table=src, instance=inst)
        inst.create_lsn = rec.lsn
        c = self.conn
        self._begin()
        c.execute("INSERT INTO cdc.change_tables VALUES (?, 0, ?, ?, NULL, NULL, ?, 0, ?, ?, ?, ?, 0)",
                  (oid, src.object_id, ci, int(inst.supports_net_changes), role_name, inst.index_name,
                   filegroup_name, inst.create_date))
        c.executemany("INSERT INTO cdc.captured_columns VALUES (?, ?, ?, ?, ?, 0)",
                      [(oid, col.name, col.column_id, col.type.decl(), i)
                       for i, col in enumerate(captured, 1)])
        c.execute("INSERT INTO cdc.index_columns VALUES (?, ?, 1, ?)", (oid, key_col.name, key_col.column_id))
        self._commit()
        self._register(ct)
        self.instances[fold(ci)] = inst
        self.log.append(rec)
        self.refresh_sys()
        return inst

    def _drop_instance(self, inst):
        c = self.conn
        c.execute("DROP TABLE IF EXISTS %s" % inst.ct.phys)
        if self.cdc_enabled:
            self._begin()
            for t in ("change_tables", "captured_columns", "index_columns", "ddl_history"):
                c.execute("DELETE FROM cdc.%s WHERE object_id = ?" % t, (inst.object_id,))
            self._commit()
        self._unregister(inst.ct)
        self.instances.pop(fold(inst.name), None)

    def disable_table(self, schema, name, capture_instance="all"):
        """sys.sp_cdc_disable_table: drop one (or all) capture instances of a table."""
        self.require_cdc()
        src = self.table(schema, name)
        if src is None:
            raise SqlError(22931, "Source table '%s.%s' does not exist in the current database." % (schema, name))
        insts = self.instances_of(src)
        if not insts:
            raise SqlError(22985, "Change data capture has not been enabled for source table '%s.%s'. Specify the "
                           "name of a table enabled for Change Data Capture." % (schema, name))
        if capture_instance and capture_instance.lower() != "all":
            insts = [i for i in insts if fold(i.name) == fold(capture_instance)]
            if not insts:
                raise SqlError(22960, "Change data capture instance '%s' has not been enabled for the source table "
                               "'%s.%s'." % (capture_instance, schema, name))
        for inst in insts:
            self._drop_instance(inst)
        self.log = collections.deque(r for r in self.log if getattr(r, "instance", None) not in insts)
        self.refresh_sys()

    # --- commits -----------------------------------------------------------------

    def record_commit(self, table, begin_lsn, changes, counts, at=None, duration_ms=0):
        """Put a committed transaction into the log (and the ground truth)."""
        commit_lsn = self.next_lsn()
        self.activity_lsn = commit_lsn
        end = self.commit_instant(at)
        begin = max(0, end - int(duration_ms * 300 // 1000))
        self.tran_counter += 1
        tran_id = self.tran_counter.to_bytes(10, "big")
        txn = LogTxn(table, begin_lsn, commit_lsn, begin, end, tran_id,
                     tuple(c.name for c in table.columns), changes, counts, step=self.step_t300())
        tracked = bool(self.cdc_enabled and self.instances_of(table))
        # the truth keeps the commit time the server's wall clock stamped (a stepped clock's), the instant
        # its period is judged by
        self.conn.execute("INSERT INTO sim_truth VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (txn.stamp_t300, L.to_bytes(commit_lsn), table.object_id) + tuple(counts)
                          + (int(tracked),))
        if tracked:
            self.log.append(txn)
        self.stats["commits"] += 1
        return txn

    def add_ddl(self, table, command, required_column_update, at=None):
        """A DDL log record for a source table (ddl_history gets it when captured)."""
        t = self.commit_instant(at) + self.step_t300()     # stamped by the server's wall clock
        rec = LogRecord("ddl", self.next_lsn(), t, table=table, command=command,
                        required_column_update=required_column_update)
        self.activity_lsn = rec.lsn
        if self.cdc_enabled and self.instances_of(table):
            self.log.append(rec)
        return rec

    # --- logins --------------------------------------------------------------------

    def login(self, name):
        """This database's view of the server login ``name`` (logins compare case-insensitively, like the
        server collation): its user here (a sysadmin is dbo everywhere), roles and grants; None if the login
        does not exist."""
        key = (name or "").lower()
        lg = self.logins.get(key)
        if lg is None:
            base = self.instance.logins.get(key)
            if base is None:
                return None
            lg = Login(base.name, base.password, sysadmin=base.sysadmin, default_db=base.default_db,
                       user="dbo" if base.sysadmin else None, role_grants=self.role_grants, windows=base.windows)
            self.logins[key] = lg
        return lg

    def create_login(self, name, password, db_owner=False, sysadmin=False, user=True, default_db=None,
                     windows=False):
        """A server login; ``user`` True also maps it to a user of the same name in this database
        (sim.create_login), False leaves it without one (CREATE LOGIN)."""
        key = name.lower()
        if key in self.instance.logins:
            raise SqlError(15025, "The server principal '%s' already exists." % name, 16, 1)
        self.instance.logins[key] = Login(name, password, sysadmin=sysadmin, default_db=default_db or self.name,
                                          windows=windows)
        for db in self.instance.databases.values():
            db.logins.pop(key, None)
        lg = self.login(name)
        if user:
            lg.user = name
            lg.db_owner = db_owner
        return lg

    def drop_login(self, name):
        """DROP LOGIN: the server principal and its view in every database."""
        key = name.lower()
        self.instance.logins.pop(key, None)
        for db in self.instance.databases.values():
            db.logins.pop(key, None)
        self.logins.pop(key, None)

    def user(self, name):
        """The login whose database user is called ``name`` (or None)."""
        key = fold(name or "")
        for lg in self.logins.values():
            if lg.user is not None and fold(lg.user) == key:
                return lg
        return None

    def role_exists(self, name):
        """A database role: fixed (db_owner, db_datareader, public), created, or a gating role."""
        return fold(name) in self.roles or name.lower() in ("db_owner", "db_datareader", "public")

    def pending_truth_t300(self):
        """The earliest commit time stamped on a committed-but-uncaptured change that some instance will
        capture (UTC; after a step back of the clock a later commit may carry an earlier one)."""
        stamps = [rec.stamp_t300 for rec in self.log
                  if rec.kind == "txn" and any(i.create_lsn < rec.commit_lsn for i in self.instances_of(rec.table))]
        return min(stamps) if stamps else None

