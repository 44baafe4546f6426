"""Throwaway PostgreSQL clusters for finalize's integration tests.

A Cluster is initdb'ed and run as the ``postgres`` user (PostgreSQL refuses to
run as root, and CI runs as root), preloads the finalize library, listens on
127.0.0.1 and a Unix socket in its own directory, and is removed on cleanup.
Tests talk to it through psycopg2.

    with Cluster(conf={"finalize.poll_interval": "1s"}) as pg:
        pg.sql("CREATE EXTENSION finalize")
        pg.sql("SELECT finalize.finalized_until(%s)", ("sales.orders",))
"""

import atexit
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import psycopg2
import psycopg2.extensions

PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(cmd, **kw):
    """Runs a command as the postgres user when we are root (CI), else as us."""
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--"] + cmd
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


# A statement that may leave state in its session: its connection is not kept (Cluster.sql).
_SESSION_STATE = re.compile(r"\b(SET|RESET|LISTEN|UNLISTEN|PREPARE|DECLARE|BEGIN|START|TEMP|TEMPORARY|LOCK|"
                            r"DISCARD|LOAD)\b|pg_temp|set_config|advisory_lock|advisory_unlock|setseed|pg_reload_conf", re.I)

_templates = {}


def _template_data(bindir=None):
    """A data directory initdb'ed once per test process (and PostgreSQL: bindir, default PG_BIN),
    which every Cluster copies: the suite starts a few hundred clusters, and a copy costs a third
    of an initdb (nothing is synced either way: the clusters are thrown away)."""
    bindir = bindir or PG_BIN
    if bindir not in _templates:
        top = tempfile.mkdtemp(prefix="finalize-pg-template.")
        os.chmod(top, 0o755)
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(top, pw.pw_uid, pw.pw_gid)
        data = os.path.join(top, "data")
        _as_postgres([f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust",
                      "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
        atexit.register(shutil.rmtree, top, True)
        _templates[bindir] = data
    return _templates[bindir]


class Cluster:
    """One PostgreSQL cluster in a temporary directory; bindir names another PostgreSQL's bin
    directory than PG_BIN (a major upgrade's old or new one)."""

    def __init__(self, conf=None, port=None, keep=False, bindir=None):
        self.bin = bindir or PG_BIN
        self.port_chosen = port is None     # a port of our choosing may be changed when taken
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="finalize-pg.")
        os.chmod(self.dir, 0o755)
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self._kept = threading.local()
        self.logfile = os.path.join(self.dir, "server.log")
        self.keep = keep or bool(os.environ.get("KEEP_WORKDIR"))
        self.conf = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.dir}'",
            "shared_preload_libraries": "'finalize'",
            "max_worker_processes": "32",
            "fsync": "off",
            "log_line_prefix": "'%m [%p] %b %d '",
        }
        for k, v in (conf or {}).items():
            self.conf[k] = v if str(v).startswith("'") or str(v).isdigit() else f"'{v}'"
        _as_postgres(["cp", "-a", _template_data(self.bin), self.data])
        self.write_conf()

    def write_conf(self):
        """Writes the settings into postgresql.auto.conf (read on start and reload)."""
        lines = [f"{k} = {v}\n" for k, v in self.conf.items()]
        path = os.path.join(self.data, "postgresql.auto.conf")
        with open(path, "w") as f:
            f.writelines(lines)
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def set(self, **settings):
        """Changes settings (applied by reload() or the next start)."""
        for k, v in settings.items():
            self.conf[k.replace("__", ".")] = f"'{v}'"
        self.write_conf()

    def start(self):
        """Starts the server; on a port another process took since free_port() chose it (tests
        run in parallel), on a new one."""
        for attempt in range(5):
            seen = len(self.log())
            try:
                _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "-l", self.logfile, "-w", "-t", "60", "start"])
                return self
            except subprocess.CalledProcessError:
                if attempt == 4 or not self.port_chosen or "could not bind" not in self.log()[seen:]:
                    raise
                self.port = free_port()
                self.conf["port"] = str(self.port)
                self.write_conf()
        return self

    def stop(self, mode="fast"):
        self.forget_sessions()
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            try:
                _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop"])
            except subprocess.CalledProcessError:
                pass

    def restart(self, mode="fast"):
        self.stop(mode)
        return self.start()

    def reload(self):
        self.forget_sessions()      # a kept session would take the new settings later than a new one
        _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "reload"])

    def postmaster_pid(self):
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            return int(f.readline())

    def kill_postmaster(self):
        """SIGKILL-free crash of the whole server: an immediate shutdown."""
        self.stop("immediate")

    def connect(self, dbname="postgres", user="postgres", autocommit=True):
        conn = psycopg2.connect(host=self.dir, port=self.port, dbname=dbname, user=user)
        conn.autocommit = autocommit
        return conn

    def _session(self, dbname, user):
        """A connection of this thread kept for sql() (a new backend per statement cost the
        suite's CPU more than any test: tens of thousands of forks); a fresh one when the kept
        one is gone (a restart, a terminated backend: checked with a round trip first, so that a
        statement never runs twice)."""
        sessions = getattr(self._kept, "sessions", None)
        if sessions is None or self._kept.pid != os.getpid():
            sessions = self._kept.sessions = {}
            self._kept.pid = os.getpid()
        conn = sessions.pop((dbname, user), None)
        if conn is not None:
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
                return conn
            except psycopg2.Error:
                conn.close()
        return self.connect(dbname=dbname, user=user)

    def _keep(self, conn, dbname, user, query):
        """Keeps a connection for the next sql() unless its statement may leave state in the
        session (settings, a transaction, LISTEN, temporary objects, session locks, a reload of
        the configuration the session would take later than a new one), or is of another database
        or role than postgres (the tests drop and recreate theirs, and a kept session would skip
        the checks of a new login): then it is closed, as every connection of sql() was before."""
        if conn.closed or (dbname, user) != ("postgres", "postgres") or _SESSION_STATE.search(query):
            conn.close()
            return
        old = self._kept.sessions.pop((dbname, user), None)
        if old is not None:
            old.close()
        self._kept.sessions[(dbname, user)] = conn

    def forget_sessions(self):
        """Closes this thread's kept connections (before the server stops, or a test that
        counts the sessions)."""
        for conn in (getattr(self._kept, "sessions", None) or {}).values():
            conn.close()
        self._kept.sessions = {}
        self._kept.pid = os.getpid()

    def sql(self, query, args=None, dbname="postgres", user="postgres"):
        """Runs one statement in autocommit, in a connection of its own unless one of this
        thread is kept (_session), and returns all rows (or None)."""
        conn = self._session(dbname, user)
        try:
            with conn.cursor() as cur:
                cur.execute(query, args)
                return cur.fetchall() if cur.description else None
        finally:
            self._keep(conn, dbname, user, query)

    def rows(self, query, args=None):
        """Runs one statement like sql(); its rows as dicts by column name."""
        conn = self._session("postgres", "postgres")
        try:
            with conn.cursor() as cur:
                cur.execute(query, args)
                cols = [d[0] for d in cur.description]
                return [dict(zip(cols, r)) for r in cur.fetchall()]
        finally:
            self._keep(conn, "postgres", "postgres", query)

    def log(self):
        try:
            with open(self.logfile, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def server_version_num(self):
        return int(self.sql("SHOW server_version_num")[0][0])

    def wait_event_of(self, name):
        """The wait_event pg_stat_activity shows for one of finalize's waits (a name of
        src/core/wait_events.c): the name itself from PostgreSQL 17 on (custom wait events), the
        generic "Extension" before; its wait_event_type is "Extension" on every major."""
        return name if self.server_version_num() >= 170000 else "Extension"

    def wait_for(self, predicate, timeout=30.0, interval=0.1, what="condition"):
        """Polls predicate() until it returns a true value; fails with the server log tail
        (what may be a callable, evaluated only then)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = predicate()
            except psycopg2.Error as e:
                # The server is restarting (crash recovery, shutdown): try again.
                if e.pgcode is not None and not e.pgcode.startswith("57"):
                    raise
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                if callable(what):
                    try:
                        what = what()
                    except Exception as e:          # the server gone: the timeout is still the news
                        what = "(its description failed: %s)" % e
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n"
                                     f"--- server log tail ---\n{self.log()[-4000:]}")
            time.sleep(interval)

    def cleanup(self):
        self.stop("immediate")
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def running(self):
        return os.path.exists(os.path.join(self.data, "postmaster.pid"))

    def __enter__(self):
        return self if self.running() else self.start()

    def __exit__(self, *exc):
        self.cleanup()
        return False


def cluster_with_source(conf=None):
    """A started cluster with the extension and a SQL Server source "src" that
    is never contacted: for tests that record facts through the write path by
    hand (set finalize.enabled = off in conf to keep the worker away)."""
    cluster = Cluster(conf=conf)
    cluster.start()
    try:
        cluster.sql("CREATE EXTENSION finalize")
        cluster.sql("CREATE SERVER src FOREIGN DATA WRAPPER finalize_mssql "
                    "OPTIONS (host '127.0.0.1', database 'demo')")
    except Exception:
        cluster.cleanup()
        raise
    return cluster


def kill(pid, sig=signal.SIGKILL):
    """Sends a signal to a process, ignoring one that is already gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
