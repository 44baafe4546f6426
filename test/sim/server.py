"""TCP listener: one thread per connection, the shared Database, faults and job scheduler."""
import logging
import socket
import threading

from . import catalogprocs, cleanup, control, sysprocs  # noqa: F401  (registers procedures)
from . import lsn as L
from . import sqltypes as T
from . import tls as TLS
from .faults import Faults
from .model import Database
from .scheduler import Scheduler
from .session import Session

log = logging.getLogger("mssql-sim")

VERSIONS = {
    "2019": ((15, 0, 2000), "15.0.2000.5", "Microsoft SQL Server 2019 (RTM) - 15.0.2000.5 (X64) \n\tSep 24 2019 "
             "13:48:23 \n\tCopyright (C) 2019 Microsoft Corporation\n\tDeveloper Edition (64-bit) on Linux "
             "(mssql-sim CDC simulator) <X64>"),
    "2022": ((16, 0, 1000), "16.0.1000.6", "Microsoft SQL Server 2022 (RTM) - 16.0.1000.6 (X64) \n\tOct  8 2022 "
             "05:58:25 \n\tCopyright (C) 2022 Microsoft Corporation\n\tDeveloper Edition (64-bit) on Linux "
             "(mssql-sim CDC simulator) <X64>"),
}

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
        self.db = Database(cfg)
        self.faults = Faults()
        self.sessions = {}
        self.sessions_lock = threading.Lock()
        self.next_spid = 51
        self.sock = None
        self.port = None
        self._stopping = threading.Event()
        self._stopped = False
        if cfg.demo:
            self.setup_demo()
        self.scheduler = Scheduler(self.db)
        with self.db.lock:
            self.scheduler.run_due(self.db.now())

    def setup_demo(self):
        """Database 'demo' with CDC enabled on dbo.orders (capture instance dbo_orders)."""
        with self.db.lock:
            self.db.create_table("dbo", "orders", DEMO_COLUMNS, key="order_id")
            self.db.enable_db()
            self.db.enable_table("dbo", "orders", role_name=None)

    # --- network ---------------------------------------------------------------------------

    def listen(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.cfg.host, self.cfg.port))
        s.listen(128)
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

    def kill_sessions(self, except_spid=None, login=None):
        """Close other client connections (they see the socket drop)."""
        with self.sessions_lock:
            victims = [s for s in self.sessions.values() if s.spid != except_spid
                       and (login is None or (s.login and s.login.name.lower() == login.lower()))]
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
        self.kill_sessions()
        self.db.close()

    # --- faults needing the whole server ------------------------------------------------------

    def purge_now(self, fault):
        """Purge fault: run a full cleanup (default low watermark: the current max LSN)."""
        with self.db.lock:
            db = self.db
            if not db.cdc_enabled or db.max_lsn is None:
                return
            low = fault.low_lsn
            if low is None and fault.retention is None:
                low = db.max_lsn
            if db.cleanup.held_low is not None:
                cleanup.release(db)
            cleanup.run(db, retention_minutes=fault.retention, low_lsn=low)
            log.info("purge fault: low watermark %s", L.hexlit(db.cleanup.last_low or bytes(10)))
