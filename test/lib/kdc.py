"""A throwaway MIT Kerberos KDC on loopback for tests (Debian's krb5-kdc and krb5-admin-server).

    from kdc import Kdc

    kdc = Kdc(workdir)                           # realm FINALIZE.TEST, krb5kdc -n on a free port (UDP and TCP)
    env = {"KRB5_CONFIG": kdc.krb5_conf}         # the client side: world-readable krb5.conf
    kdc.add_principal("alice")                   # random key
    kdc.add_principal("short", maxlife="30 seconds")   # tickets of at most 30 s
    spn = kdc.service_principal("localhost", 14330)    # "MSSQLSvc/localhost:14330@..." added, name returned
    kt = kdc.keytab("alice")                     # a keytab file (world-readable copy in workdir)
    raw = kdc.keytab_bytes("alice")              # the same keys as bytes (no new key version)
    kdc.stop(); kdc.start(clock_offset_seconds=600)    # a KDC 10 minutes ahead: "Clock skew too great"
    kdc.close()

The database lives in ``workdir`` (created with a random master password, ``kdb5_util create -s``);
the KDC reads its ``kdc.conf`` through KRB5_KDC_PROFILE, so nothing outside ``workdir`` is touched.
The realm's ``max_life`` is 1 day and ``max_renewable_life`` 7 days, so a principal's own max life
(``maxlife``) is what bounds its tickets.  Keys are aes256-cts-hmac-sha1-96 and aes128 only.
"""
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time

KRB5KDC = "/usr/sbin/krb5kdc"
KDB5_UTIL = "/usr/sbin/kdb5_util"
KADMIN_LOCAL = "/usr/sbin/kadmin.local"
FAKETIME = "/usr/bin/faketime"
ENCTYPES = "aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal"


def _free_port():
    """A port free for both TCP and UDP on 127.0.0.1 (the KDC listens on both)."""
    for _ in range(50):
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.bind(("127.0.0.1", 0))
        port = t.getsockname()[1]
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            u.close()
            t.close()
    raise RuntimeError("no free port for the KDC")


class Kdc:
    """One krb5kdc process with its own realm, database and configuration in ``workdir``."""

    def __init__(self, workdir=None, realm="FINALIZE.TEST"):
        self._own_dir = workdir is None
        self.workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="kdc-"))
        os.makedirs(self.workdir, exist_ok=True)
        # krb5.conf must be readable by the postgres user, which cannot traverse a 0700 mkdtemp
        os.chmod(self.workdir, 0o755)
        self.realm = realm
        self.port = _free_port()
        self.proc = None
        self.clock_offset = 0
        self.db_path = os.path.join(self.workdir, "principal")
        self.kdc_conf = os.path.join(self.workdir, "kdc.conf")
        self.krb5_conf = os.path.join(self.workdir, "krb5.conf")
        self.log_path = os.path.join(self.workdir, "krb5kdc.log")
        self._write_configs()
        self._kdb_create()
        self.start()

    # --- set-up ---------------------------------------------------------------------------

    def _write_configs(self):
        """kdc.conf (the KDC's profile: ports, database, stash) and krb5.conf (the clients')."""
        r = self.realm
        with open(self.kdc_conf, "w") as f:
            f.write("[kdcdefaults]\n kdc_ports = %d\n kdc_tcp_ports = %d\n\n"
                    "[realms]\n %s = {\n  database_name = %s\n  key_stash_file = %s\n"
                    "  acl_file = %s\n  max_life = 1d\n  max_renewable_life = 7d\n"
                    "  supported_enctypes = %s\n  default_principal_flags = +renewable,+preauth\n }\n\n"
                    "[logging]\n kdc = FILE:%s\n"
                    % (self.port, self.port, r, self.db_path, os.path.join(self.workdir, "stash"),
                       os.path.join(self.workdir, "kadm5.acl"), ENCTYPES, self.log_path))
        open(os.path.join(self.workdir, "kadm5.acl"), "w").close()
        with open(self.krb5_conf, "w") as f:
            f.write("[libdefaults]\n default_realm = %s\n dns_lookup_kdc = false\n dns_lookup_realm = false\n"
                    " rdns = false\n dns_canonicalize_hostname = false\n udp_preference_limit = 1\n"
                    " kdc_timesync = 0\n forwardable = true\n\n"
                    "[realms]\n %s = {\n  kdc = 127.0.0.1:%d\n  admin_server = 127.0.0.1:%d\n }\n\n"
                    "[domain_realm]\n localhost = %s\n .localhost = %s\n"
                    % (r, r, self.port, self.port, r, r))
        os.chmod(self.krb5_conf, 0o644)

    def _env(self):
        env = dict(os.environ)
        env["KRB5_KDC_PROFILE"] = self.kdc_conf
        env["KRB5_CONFIG"] = self.krb5_conf
        return env

    def _run(self, argv, what):
        p = subprocess.run(argv, env=self._env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        if p.returncode != 0 or "error" in p.stdout.lower() and "ktadd" not in what:
            raise RuntimeError("%s failed (%d): %s" % (what, p.returncode, p.stdout.strip()))
        return p.stdout

    def _kdb_create(self):
        """The realm's database with a random master key, stashed (krb5kdc reads the stash)."""
        self._run([KDB5_UTIL, "-r", self.realm, "create", "-s", "-W", "-P", secrets.token_hex(24)],
                  "kdb5_util create")

    def kadmin(self, query):
        """Run one kadmin.local query -> its output (RuntimeError if it failed)."""
        out = self._run([KADMIN_LOCAL, "-r", self.realm, "-q", query], "kadmin.local %r" % query)
        for line in out.splitlines():
            low = line.lower()
            if ("while " in low or "error" in low or "failed" in low) and not low.startswith("authenticating"):
                raise RuntimeError("kadmin.local %r: %s" % (query, out.strip()))
        return out

    # --- principals and keytabs -------------------------------------------------------------

    def qualify(self, name):
        """``name`` with the realm appended when it has none."""
        return name if "@" in name else "%s@%s" % (name, self.realm)

    def add_principal(self, name, maxlife=None, maxrenewlife=None):
        """Add ``name`` with a random key; ``maxlife`` (e.g. "30 seconds") bounds its tickets' lifetime
        (the KDC issues min(requested, principal's, krbtgt's, realm's max_life)), and, unless ``maxrenewlife``
        says otherwise, how long they can be renewed (so nothing outlives ``maxlife`` by surprise).
        -> the full name."""
        full = self.qualify(name)
        opts = "-randkey"
        if maxlife:
            opts += ' -maxlife "%s"' % maxlife
        if maxrenewlife or maxlife:
            opts += ' -maxrenewlife "%s"' % (maxrenewlife or maxlife)
        self.kadmin("addprinc %s %s" % (opts, full))
        return full

    def rotate_key(self, principal):
        """A new random key (``cpw -randkey``: the key version goes up): keytabs written before no longer
        work, as after a password change of the AD account."""
        self.kadmin("cpw -randkey %s" % self.qualify(principal))

    def service_principal(self, host, port):
        """Add SQL Server's SPN ``MSSQLSvc/host:port`` -> its name (without the realm, as clients derive it)."""
        name = "MSSQLSvc/%s:%d" % (host, int(port))
        self.add_principal(name)
        return name

    def keytab(self, principal, path=None):
        """Write ``principal``'s current keys to a keytab (``ktadd -norandkey``: the key version does not
        change, so several copies stay valid) -> the path (mode 0644: a test file, the keys are throwaway)."""
        if path is None:
            safe = principal.replace("/", "_").replace(":", "_").replace("@", "_")
            path = os.path.join(self.workdir, "%s.keytab" % safe)
        if os.path.exists(path):
            os.unlink(path)
        self.kadmin("ktadd -k %s -norandkey %s" % (path, self.qualify(principal)))
        os.chmod(path, 0o644)
        return path

    def keytab_bytes(self, principal):
        """``principal``'s keys as keytab bytes (a fresh copy, same key version)."""
        d = tempfile.mkdtemp(prefix="kt-", dir=self.workdir)
        try:
            with open(self.keytab(principal, os.path.join(d, "k.keytab")), "rb") as f:
                return f.read()
        finally:
            shutil.rmtree(d, True)

    def kinit(self, principal, ccache, keytab=None, lifetime=None, env=None):
        """``kinit -k -t keytab principal`` into ``ccache`` (e.g. FILE:/path) -> CompletedProcess (not
        checked: tests assert the error text)."""
        e = dict(env or os.environ)
        e["KRB5_CONFIG"] = self.krb5_conf
        e["KRB5CCNAME"] = ccache
        argv = ["kinit", "-k", "-t", keytab or self.keytab(principal)]
        if lifetime:
            argv += ["-l", lifetime]
        return subprocess.run(argv + [self.qualify(principal)], env=e, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30)

    # --- process --------------------------------------------------------------------------

    def start(self, clock_offset_seconds=0):
        """Start krb5kdc in the foreground (-n); with a non-zero offset under faketime (a KDC whose clock
        is that many seconds off).  Waits until it answers on TCP."""
        if self.proc is not None:
            raise RuntimeError("the KDC is running; stop() it first")
        self._unhole()
        self.clock_offset = int(clock_offset_seconds)
        argv = [KRB5KDC, "-n", "-r", self.realm]
        if self.clock_offset:
            argv = [FAKETIME, "-f", "%+ds" % self.clock_offset] + argv
        self._log = open(os.path.join(self.workdir, "krb5kdc.stdout"), "a")
        self.proc = subprocess.Popen(argv, env=self._env(), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError("krb5kdc exited: %s" % self._tail())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("krb5kdc did not listen on %d: %s" % (self.port, self._tail()))

    def _tail(self):
        out = []
        for p in (self.log_path, os.path.join(self.workdir, "krb5kdc.stdout")):
            try:
                with open(p) as f:
                    out.append(f.read()[-2000:])
            except OSError:
                pass
        return "\n".join(out)

    def blackhole(self):
        """Stop krb5kdc and hold its port with sockets that take every request and never answer (UDP
        datagrams read and dropped; TCP connections accepted and left silent): a KDC lost behind a
        firewall that drops packets, where a client waits out its own timeouts.  start() ends it."""
        self.stop()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", self.port))
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind(("127.0.0.1", self.port))
        tcp.listen(16)
        self._holes = [udp, tcp]

    def _unhole(self):
        for sock in getattr(self, "_holes", []):
            sock.close()
        self._holes = []

    def stop(self):
        """Stop krb5kdc (SIGTERM, then SIGKILL); the database and configuration stay."""
        self._unhole()
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        except ProcessLookupError:
            pass
        self.proc = None
        self._log.close()

    def close(self):
        """Stop the KDC and remove ``workdir`` if this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
