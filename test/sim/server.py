"""TCP listener: one thread per connection; the instance: its databases, faults and job scheduler."""
import dataclasses
import logging
import os
import re
import socket
import threading

from . import catalogprocs, cleanup, control, sysprocs, winprocs  # noqa: F401  (registers procedures)
from . import lsn as L
from . import sqltypes as T
from . import tls as TLS
from .faults import Faults
from .errors import SqlError
from .model import Database, InstanceState
from .scheduler import Scheduler
from .session import Session
from .winauth import WindowsAuth

log = logging.getLogger("mssql-sim")

VERSIONS = {
    "2019": ((15, 0, 2000), "15.0.2000.5", "Microsoft SQL Server 2019 (RTM) - 15.0.2000.5 (X64) \n\tSep 24 2019 "
             "13:48:23 \n\tCopyright (C) 2019 Microsoft Corporation\n\tDeveloper Edition (64-bit) on Linux "
             "(mssql-sim CDC simulator) <X64>"),
    "2022": ((16, 0, 1000), "16.0.1000.6", "Microsoft SQL Server 2022 (RTM) - 16.0.1000.6 (X64) \n\tOct  8 2022 "
             "05:58:25 \n\tCopyright (C) 2022 Microsoft Corporation\n\tDeveloper Edition (64-bit) on Linux "
             "(mssql-sim CDC simulator) <X64>"),
}

SYSTEM_DATABASES = ("master", "tempdb", "model", "msdb")


def parse_database_spec(spec):
    """``--extra-databases``: comma-separated NAME, PATTERN:COUNT (numbers 1..COUNT) or PATTERN:FIRST-LAST,
    PATTERN a name with one printf integer conversion (``shard_%03d:100`` -> shard_001 .. shard_100).
    -> list of names; ValueError for a malformed item."""
    names = []
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"(.*%[0-9]*d.*):(\d+)(?:-(\d+))?", item)
        if m:
            pattern, a, b = m.group(1), int(m.group(2)), m.group(3)
            first, last = (1, a) if b is None else (a, int(b))
            try:
                names += [pattern % i for i in range(first, last + 1)]
            except (TypeError, ValueError) as e:
                raise ValueError("bad database pattern %r: %s" % (pattern, e))
        elif "%" in item:
            raise ValueError("a database pattern needs :COUNT or :FIRST-LAST: %r" % item)
        else:
            names.append(item)
    return names


def check_database_name(name, instance):
    """CREATE DATABASE's checks of a new name: Msg 1801 for an existing one (the system databases too),
    Msg 103 beyond 128 characters."""
    if not name or not name.strip():
        raise SqlError(102, "Incorrect syntax near ''.", 15, 1)
    if len(name) > 128:
        raise SqlError(103, "The identifier that starts with '%s' is too long. Maximum length is 128." % name[:128],
                       15, 4)
    if name.lower() in SYSTEM_DATABASES or instance.database(name) is not None:
        raise SqlError(1801, "Database '%s' already exists. Choose a different database name." % name, 16, 3)


DEMO_COLUMNS = [("order_id", T.INT, False), ("customer", T.nvarchar(40), True),
                ("amount", T.SqlType("decimal", precision=12, scale=2), True), ("status", T.nvarchar(20), True),
                ("created_at", T.datetime2(7), True)]


class Server:
    """The simulator: listen, accept, and own the shared state."""

    def __init__(self, cfg):
        self.cfg = cfg
        if cfg.force_encryption and not cfg.tls_cert:
            raise ValueError("--force-encryption needs a certificate (--tls-cert)")
        # loaded first: a bad certificate stops the start before any storage exists
        self.tls_context = TLS.server_context(cfg.tls_cert, cfg.tls_key or None) if cfg.tls_cert else None
        self.tls_mode = TLS.FORCED if cfg.force_encryption else TLS.OPTIONAL if cfg.tls_cert else TLS.NO_CERT
        self.version, self.version_string, self.version_text = VERSIONS.get(cfg.version, VERSIONS["2019"])
        major, minor, build = self.version
        self.microsoft_version = (major << 24) | (minor << 16) | build
        self.base_cfg = dataclasses.replace(cfg)      # the command line's job settings, for new databases
        self.instance = InstanceState(cfg)
        self.faults = Faults()
        self.winauth = WindowsAuth(cfg)               # Windows authentication: domain, NTLM accounts, keytab
        self.sessions = {}
        self.sessions_lock = threading.Lock()
        self.next_spid = 51
        self.sock = None
        self.port = None
        self._stopping = threading.Event()
        self._stopped = False
        self.scheduler = Scheduler(self.instance)
        self.templates = {}                           # demo? -> directory of a new database's sqlite files
        extra = parse_database_spec(getattr(cfg, "extra_databases", ""))
        with self.instance.lock:
            self.db = self.create_database(cfg.database, cfg.demo, primary=True)
            for name in extra:
                self.create_database(name, cfg.demo)
            self.scheduler.run_due(self.instance.clock.now())

    @property
    def databases(self):
        """The user databases by lower-case name, in creation order."""
        return self.instance.databases

    def create_database(self, name, demo=True, primary=False):
        """A new database with its own CDC state and jobs; ``demo``: dbo.orders with CDC enabled (capture
        instance dbo_orders), else empty with CDC disabled.  Caller holds the instance lock."""
        check_database_name(name, self.instance)
        cfg = self.cfg if primary else dataclasses.replace(self.base_cfg, database=name)
        template = None if primary else self.templates.get(bool(demo))
        db = Database(cfg, self.instance, name=name, primary=primary, template=template)
        try:
            if demo:
                self.setup_demo(db)
            if template is not None:
                db.open_template()
            elif not primary:
                # the first database of its kind, untouched yet: the files every next one starts from
                template = os.path.join(self.instance.dir, "template-%s" % ("demo" if demo else "empty"))
                db.save_template(template)
                self.templates[bool(demo)] = template
        except BaseException:
            db.close()
            raise
        self.instance.add(db)
        self.scheduler.add(db)
        return db

    @staticmethod
    def setup_demo(db):
        """dbo.orders with CDC enabled (capture instance dbo_orders)."""
        with db.lock, db.bulk():
            db.create_table("dbo", "orders", DEMO_COLUMNS, key="order_id")
            db.enable_db()
            db.enable_table("dbo", "orders", role_name=None)

    # --- network ---------------------------------------------------------------------------

    def listen(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.cfg.host, self.cfg.port))
        s.listen(1024)                      # many pool workers connect at once
        self.sock = s
        self.port = s.getsockname()[1]
        return self.port

    def serve_forever(self):
        self.scheduler.start()
        self.sock.settimeout(0.05)          # so a stop request is noticed promptly
        while not self._stopping.is_set():
            try:
                conn, peer = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                raise
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            with self.sessions_lock:
                spid = self.next_spid
                self.next_spid = 51 + (self.next_spid - 50) % 30000
                sess = Session(self, conn, spid, peer)
                self.sessions[spid] = sess
            threading.Thread(target=sess.run, name="sim-session-%d" % spid, daemon=True).start()

    def session_list(self):
        """The connected sessions, by SPID."""
        with self.sessions_lock:
            return sorted(self.sessions.values(), key=lambda s: s.spid)

    def forget(self, sess):
        with self.sessions_lock:
            if self.sessions.get(sess.spid) is sess:
                del self.sessions[sess.spid]

    def kill_sessions(self, except_spid=None, login=None, database=None):
        """Close other client connections (they see the socket drop), optionally only those of a login or
        whose current database is ``database``."""
        with self.sessions_lock:
            victims = [s for s in self.sessions.values() if s.spid != except_spid
                       and (login is None or (s.login and s.login.name.lower() == login.lower()))
                       and (database is None or (s.database or "").lower() == database.lower())]
        for s in victims:
            s.channel.close()
        return len(victims)

    def stop(self):
        """Stop accepting, stop the jobs, close every session and remove the storage (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        if self.sock:
            try:
                self.sock.close()
            except OSError:
                pass
        self.scheduler.stop()
        self.faults.clear()                 # releases held logins and stalls
        self.kill_sessions()
        self.instance.close()

    # --- faults needing the whole server ------------------------------------------------------

    def purge_now(self, fault, db):
        """Purge fault: run a full cleanup of ``db`` (default low watermark: the current max LSN)."""
        with db.lock:
            if not db.cdc_enabled or db.max_lsn is None:
                return
            low = fault.low_lsn
            if low is None and fault.retention is None:
                low = db.max_lsn
            if db.cleanup.held_low is not None:
                cleanup.release(db)
            cleanup.run(db, retention_minutes=fault.retention, low_lsn=low)
            log.info("purge fault: low watermark %s", L.hexlit(db.cleanup.last_low or bytes(10)))
