"""Start and drive the SQL Server CDC simulator (test/mssql-sim) from Python tests.

Small API::

    from simproc import Simulator, freetds_conf

    with Simulator(clock="sim", timezone="Europe/Berlin", dummy_interval=300,
                   start_time="2026-10-25T00:00:00Z") as sim:
        sim.call("sim.commit", table="dbo.orders", inserts=3)      # -> list of result sets
        sim.call("sim.advance", seconds=10)
        rows = sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")   # -> first result set, list of dicts
        conn = sim.connect()                                       # a fresh pymssql connection (autocommit)
        print(sim.host, sim.port, sim.server)                      # '127.0.0.1', 43121, '127.0.0.1:43121'

* ``Simulator(**options)``: keyword options become ``--option value`` command-line flags
  (underscores -> dashes; True -> bare flag; False/None -> omitted), e.g. ``clock``,
  ``timezone``, ``start_time``, ``dummy_interval``, ``pollinginterval``, ``maxtrans``,
  ``retention``, ``traffic=True``, ``no_demo=True``.  The port is always picked free.
* ``start()`` / ``stop()`` (SIGTERM, then kill) / ``kill()`` (SIGKILL, e.g. to test a
  vanished server); also a context manager.
* ``control()``: the cached sa connection used by ``call``/``query``/``execute``.
* ``call(proc, **params)`` runs ``EXEC proc @k = v, ...`` and returns every result set
  as a list of lists of dicts; ``query(sql)`` returns the first result set;
  ``execute(sql)`` returns all of them.
* ``freetds_conf(dir)`` writes a private freetds.conf (TDS 7.4, no encryption, UTF-8)
  and returns its path; the Simulator sets ``FREETDSCONF`` to one if it is unset.
"""
import atexit
import datetime
import os
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

    def start(self, timeout=20):
        """Start the process and wait until it listens."""
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

    def control(self):
        """The cached sysadmin connection for control procedures."""
        if self._control is None:
            self._control = self.connect()
        return self._control

    def execute(self, sql):
        """Run a batch; return every result set as a list of dict rows."""
        cur = self.control().cursor(as_dict=True)
        cur.execute(sql)
        out = []
        while True:
            if cur.description:
                out.append(cur.fetchall())
            if not cur.nextset():
                break
        return out

    def query(self, sql):
        """First result set of ``sql`` (list of dicts)."""
        sets = self.execute(sql)
        return sets[0] if sets else []

    def call(self, proc, **params):
        """EXEC proc @k = v, ... -> list of result sets (lists of dicts)."""
        args = ", ".join("@%s = %s" % (k, sql_literal(v)) for k, v in params.items())
        return self.execute("EXEC %s %s" % (proc, args))

    def stop(self):
        """Stop gracefully (SIGTERM), killing it if it does not exit."""
        if self._control is not None:
            try:
                self._control.close()
            except Exception:
                pass
            self._control = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None
        self._cleanup()

    def kill(self):
        """SIGKILL the simulator (clients see the connection vanish)."""
        self._control = None
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
