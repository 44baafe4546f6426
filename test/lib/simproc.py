"""Start and drive the SQL Server CDC simulator (test/mssql-sim) from Python tests.

Small API::

    from simproc import Simulator, freetds_conf

    with Simulator(clock="sim", timezone="Europe/Berlin", dummy_interval=300,
                   start_time="2026-10-25T00:00:00Z") as sim:
        sim.call("sim.commit", table="dbo.orders", inserts=3)      # -> list of result sets
        sim.call("sim.advance", seconds=10)
        rows = sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")   # -> first result set, list of dicts

    with Simulator(clock="sim", extra_databases="shard_%03d:100") as sim:     # 101 databases, one instance
        sim.call("sim.commit", database="shard_007", inserts=3)    # in shard_007 (its own LSNs, truth)
        sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m", database="shard_007")
        conn = sim.connect()                                       # a fresh pymssql connection (autocommit)
        print(sim.host, sim.port, sim.server)                      # '127.0.0.1', 43121, '127.0.0.1:43121'

* ``Simulator(**options)``: keyword options become ``--option value`` command-line flags
  (underscores -> dashes; True -> bare flag; False/None -> omitted), e.g. ``clock``,
  ``timezone``, ``start_time``, ``dummy_interval``, ``pollinginterval``, ``maxtrans``,
  ``retention``, ``traffic=True``, ``no_demo=True``.  The port is always picked free.
* ``start()`` / ``stop()`` (SIGTERM, then kill) / ``kill()`` (SIGKILL, e.g. to test a
  vanished server); also a context manager.
* ``control(database=None)``: the cached sa connection to that database (default: the
  login database, ``demo``) used by ``call``/``query``/``execute``.
* ``call(proc, database=None, **params)`` runs ``EXEC proc @k = v, ...`` in ``database``
  and returns every result set as a list of lists of dicts; ``query(sql, database=None)``
  returns the first result set; ``execute(sql, database=None)`` returns all of them.
  Control procedures act on the database they run in; for those with a ``@database``
  parameter of their own (the faults, ``sim.kill_sessions``), ``database=`` is also that
  parameter: ``call("sim.fault_stall", database="shard_007", seconds=60)`` stalls
  statements in shard_007 only.
* Many databases: ``Simulator(extra_databases="shard_%03d:100")`` (``--extra-databases``),
  ``create_database(name, demo=True)`` (``sim.create_database``), ``databases()`` (names
  from ``sys.databases``, without master).
* ``freetds_conf(dir)`` writes a private freetds.conf (TDS 7.4, no encryption, UTF-8)
  and returns its path; the Simulator sets ``FREETDSCONF`` to one if it is unset.
"""
import atexit
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIM = os.path.join(os.path.dirname(HERE), "mssql-sim")


def freetds_conf(directory):
    """Write ``directory/freetds.conf`` for talking to the simulator; return its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "freetds.conf")
    with open(path, "w") as f:
        f.write("[global]\n\ttds version = 7.4\n\tencryption = off\n\tclient charset = UTF-8\n")
    return path


def sql_literal(v):
    """A Python value as a T-SQL literal (N'' strings, 0x binary, ISO datetimes)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (bytes, bytearray)):
        return "0x" + bytes(v).hex().upper()
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return "N'%s'" % v.isoformat(sep=" ")
    return "N'" + str(v).replace("'", "''") + "'"


class Simulator:
    """One simulator subprocess on a free port."""

    def __init__(self, login="sa", password="Passw0rd!", database="demo", python=None, **options):
        self.login, self.password, self.database = login, password, database
        self.options = dict(options)
        self.python = python or "/usr/bin/python3"
        self.proc = None
        self.host = "127.0.0.1"
        self.port = None
        self._control = None
        self._controls = {}          # database (lower) -> cached sa connection, besides _control
        self._tmp = tempfile.mkdtemp(prefix="simproc-")
        if "FREETDSCONF" not in os.environ:
            conf_dir = tempfile.mkdtemp(prefix="simproc-freetds-")
            atexit.register(shutil.rmtree, conf_dir, True)
            os.environ["FREETDSCONF"] = freetds_conf(conf_dir)

    @property
    def server(self):
        """'host:port' as pymssql/FreeTDS take it."""
        return "%s:%d" % (self.host, self.port)

    def argv(self):
        args = [self.python, SIM, "--port", "0", "--ready-file", os.path.join(self._tmp, "port"),
                "--login", self.login, "--password", self.password, "--database", self.database]
        for k, v in self.options.items():
            if v is None or v is False:
                continue
            flag = "--" + k.replace("_", "-")
            args += [flag] if v is True else [flag, str(v)]
        return args

    def extra_database_count(self):
        """How many databases ``extra_databases`` asks for (NAME, PATTERN:COUNT, PATTERN:FIRST-LAST items)."""
        n = 0
        for item in str(self.options.get("extra_databases") or "").split(","):
            m = re.fullmatch(r".*%[0-9]*d.*:(\d+)(?:-(\d+))?", item.strip())
            if m:
                n += int(m.group(1)) if m.group(2) is None else int(m.group(2)) - int(m.group(1)) + 1
            elif item.strip():
                n += 1
        return n

    def start(self, timeout=None):
        """Start the process and wait until it listens (default timeout: 20 s, plus 50 ms per extra
        database)."""
        if timeout is None:
            timeout = 20 + 0.05 * self.extra_database_count()
        ready = os.path.join(self._tmp, "port")
        if os.path.exists(ready):
            os.unlink(ready)
        os.makedirs(self._tmp, exist_ok=True)
        self.log = open(os.path.join(self._tmp, "sim.log"), "w")
        self.proc = subprocess.Popen(self.argv(), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(ready):
                with open(ready) as f:
                    self.port = int(f.read().strip())
                return self
            if self.proc.poll() is not None:
                raise RuntimeError("mssql-sim exited: %s" % self.output())
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("mssql-sim did not start: %s" % self.output())

    def output(self):
        """What the simulator printed so far (for failure messages)."""
        try:
            self.log.flush()
            with open(os.path.join(self._tmp, "sim.log")) as f:
                return f.read()
        except OSError:
            return ""

    def connect(self, login=None, password=None, database=None, **kw):
        """A new pymssql connection (autocommit) to the simulator."""
        import pymssql
        kw.setdefault("autocommit", True)
        kw.setdefault("login_timeout", 10)
        return pymssql.connect(server=self.server, user=login or self.login,
                               password=self.password if password is None else password,
                               database=database or self.database, **kw)

    # procedures whose own @database parameter ``database=`` also sets (see call)
    DATABASE_PARAM = {"sim.fault_error", "sim.fault_stall", "sim.fault_drop", "sim.fault_purge",
                      "sim.fault_refuse_logins", "sim.fault_hang_login", "sim.kill_sessions"}

    def control(self, database=None):
        """The cached sysadmin connection for control procedures (in ``database``; default: the login's)."""
        if database is None or database.lower() == self.database.lower():
            if self._control is None:
                self._control = self.connect()
            return self._control
        conn = self._controls.get(database.lower())
        if conn is None:
            conn = self._controls[database.lower()] = self.connect(database=database)
        return conn

    def execute(self, sql, database=None):
        """Run a batch (in ``database``); return every result set as a list of dict rows."""
        cur = self.control(database).cursor(as_dict=True)
        cur.execute(sql)
        out = []
        while True:
            if cur.description:
                out.append(cur.fetchall())
            if not cur.nextset():
                break
        return out

    def query(self, sql, database=None):
        """First result set of ``sql`` (list of dicts), run in ``database``."""
        sets = self.execute(sql, database)
        return sets[0] if sets else []

    def call(self, proc, database=None, **params):
        """EXEC proc @k = v, ... in ``database`` -> list of result sets (lists of dicts)."""
        if database is not None and proc.lower() in self.DATABASE_PARAM:
            params.setdefault("database", database)
        args = ", ".join("@%s = %s" % (k, sql_literal(v)) for k, v in params.items())
        return self.execute("EXEC %s %s" % (proc, args), database)

    def create_database(self, name, demo=True):
        """sim.create_database: a database like the demo one (or empty, CDC not enabled) -> its row."""
        return self.call("sim.create_database", name=name, demo=bool(demo))[0][0]

    def databases(self):
        """Names of the user databases (sys.databases without master), by database_id."""
        return [r["name"] for r in self.query("SELECT name FROM sys.databases WHERE database_id > 4 "
                                              "ORDER BY database_id")]

    def _close_controls(self):
        for conn in [self._control] + list(self._controls.values()):
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
        self._control = None
        self._controls = {}

    def stop(self):
        """Stop gracefully (SIGTERM), killing it if it does not exit."""
        self._close_controls()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10 + 0.02 * self.extra_database_count())     # closing 1,000 databases
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None
        self._cleanup()

    def kill(self):
        """SIGKILL the simulator (clients see the connection vanish)."""
        self._control = None
        self._controls = {}
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._cleanup()

    def _cleanup(self):
        try:
            self.log.close()
        except Exception:
            pass
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def start(**options):
    """Shortcut: Simulator(**options).start()."""
    return Simulator(**options).start()


if __name__ == "__main__":
    with Simulator(clock="sim") as s:
        print(s.server, s.query("SELECT sys.fn_cdc_get_max_lsn() AS max_lsn"), file=sys.stderr)
