"""TLS like SQL Server: PRELOGIN ENCRYPTION negotiation (MS-TDS 2.2.6.5), the handshake inside PRELOGIN
packets, full and login-only encryption, certificate checks by FreeTDS (tsql) and tedious, and what
crosses the wire."""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

import pymssql
import pytest
from pymssql import _mssql

from simtest_util import one
from tdsraw import Raw, crypt, prelogin_options, tokens

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
from certs import make_test_pki  # noqa: E402
from simproc import Simulator  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OFF, ON, NOT_SUP, REQ = 0, 1, 2, 3
START = "2026-03-01T00:00:00Z"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(str(tmp_path_factory.mktemp("pki")))


def start(**options):
    options.setdefault("clock", "sim")
    options.setdefault("start_time", START)
    options.setdefault("cleanup_time", "")
    options.setdefault("log_level", "INFO")
    return Simulator(**options).start()


@pytest.fixture(scope="module")
def tls_sim(pki):
    """A server with a certificate, encryption not forced."""
    s = start(tls_cert=pki.good.cert, tls_key=pki.good.key)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def forced_sim(pki):
    """A server with a certificate and Force Encryption."""
    s = start(tls_cert=pki.good.cert, tls_key=pki.good.key, force_encryption=True)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def plain_sim():
    """A server without a certificate (log at INFO too)."""
    s = start()
    yield s
    s.stop()


def conf(tmp_path, port, encryption, ca=None, host="127.0.0.1", name="simtls"):
    """A private freetds.conf with one section; the dump file (errors only) tells why TLS failed."""
    lines = ["[global]", "[%s]" % name, "\thost = %s" % host, "\tport = %d" % port, "\ttds version = 7.4",
             "\tclient charset = UTF-8", "\tencryption = %s" % encryption,
             "\tdump file = %s" % (tmp_path / "tds.log"), "\tdebug flags = 0x6"]
    if ca:
        lines += ["\tca file = %s" % ca, "\tcheck certificate hostname = yes"]
    path = tmp_path / ("freetds-%s.conf" % encryption)
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def tsql(conf_path, script="SELECT 1 AS one\ngo\n", user="sa", password="Passw0rd!", section="simtls"):
    env = dict(os.environ, FREETDSCONF=conf_path)
    p = subprocess.run(["tsql", "-S", section, "-U", user, "-P", password], input=script,
                       capture_output=True, text=True, timeout=30, env=env)
    return p.stdout + p.stderr


def dump(tmp_path):
    try:
        return (tmp_path / "tds.log").read_text(errors="replace")
    except OSError:
        return ""


def wait_log(sim, text, timeout=5):
    """The simulator's output once it contains ``text`` (sessions log after the client saw the answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = sim.output()
        if text in out:
            return out
        time.sleep(0.05)
    return sim.output()


# --- PRELOGIN negotiation, byte level ------------------------------------------------------------

def answer(port, client):
    """-> (ENCRYPTION byte of the reply, reply packet type, Raw) after sending ``client``."""
    r = Raw(port)
    typ, status, _, _, payload = r.prelogin(client)
    assert status & 1
    return prelogin_options(payload)[1][0], typ, r


def closed(r, timeout=3):
    """True if the server closes the connection (EOF/reset) within ``timeout`` seconds."""
    r.sock.settimeout(timeout)
    try:
        return r.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


# MS-TDS 2.2.6.5: client value -> (server answer, what follows), per server setting
TABLE = {
    "none": {OFF: (NOT_SUP, "plain"), ON: (NOT_SUP, "close"), NOT_SUP: (NOT_SUP, "plain"), REQ: (NOT_SUP, "close"),
             None: (NOT_SUP, "plain")},
    "optional": {OFF: (OFF, "login"), ON: (ON, "full"), NOT_SUP: (NOT_SUP, "plain"), REQ: (ON, "full"),
                 None: (NOT_SUP, "plain")},
    "forced": {OFF: (REQ, "full"), ON: (ON, "full"), NOT_SUP: (REQ, "close"), REQ: (ON, "full"),
               None: (REQ, "close")},
}


@pytest.mark.parametrize("mode", ["none", "optional", "forced"])
def test_prelogin_encryption_table(mode, plain_sim, tls_sim, forced_sim, pki):
    """Every client ENCRYPTION byte against each server setting: the answer, then a login in clear, over
    login-only or full TLS (checked on the wire), or the connection closed."""
    sim = {"none": plain_sim, "optional": tls_sim, "forced": forced_sim}[mode]
    for client, (want, then) in TABLE[mode].items():
        got, typ, r = answer(sim.port, client)
        assert (typ, got) == (0x04, want), (mode, client)
        if then == "close":
            assert closed(r), (mode, client)
            r.close()
            continue
        if then != "plain":
            proto, _cipher = r.start_tls(cafile=pki.ca, hostname="127.0.0.1", login_only=then == "login")
            assert proto == "TLSv1.2"
            # every server flight: one message of PRELOGIN (0x12) packets, EOM on its last packet only
            assert r.handshake_messages and all(
                [p[0] for p in m] == [0x12] * len(m) and [p[1] & 1 for p in m] == [0] * (len(m) - 1) + [1]
                for m in r.handshake_messages), r.handshake_messages
        mark = len(r.wire_in)
        pkts, payload = r.login()
        assert tokens(payload)[-1] == (0xFD, 0), (mode, client)
        reply = bytes(r.wire_in[mark:mark + 3])
        if then == "full":
            assert reply == b"\x17\x03\x03"           # a TLS 1.2 application-data record
        else:
            assert reply[:1] == b"\x04"                # the login response in clear (login-only too)
        mark = len(r.wire_in)
        r.batch("SELECT 7")
        _, payload = r.message()
        assert payload[-13] == 0xFD and struct.pack("<i", 7) in payload     # ... ROW 7, DONE
        assert (bytes(r.wire_in[mark:mark + 1]) == b"\x17") == (then == "full")
        r.close()


def test_client_cert_bit_with_not_sup_is_refused(tls_sim):
    got, _, r = answer(tls_sim.port, 0x82)         # ENCRYPT_CLIENT_CERT | ENCRYPT_NOT_SUP
    assert got == REQ and closed(r)
    r.close()


def test_server_handshake_flights_are_cut_at_4096(tmp_path, pki):
    """A certificate chain bigger than one packet: the server flight spans several 0x12 packets of at
    most 4096 bytes, EOM only on the last."""
    chain = tmp_path / "chain.pem"
    with open(pki.good.cert) as a, open(pki.ca) as b, open(pki.other_ca) as c:
        chain.write_text(a.read() + (b.read() + c.read()) * 2)
    s = start(tls_cert=str(chain), tls_key=pki.good.key)
    try:
        _, _, r = answer(s.port, ON)
        r.start_tls(cafile=pki.ca, hostname="localhost")
        first = r.handshake_messages[0]
        assert len(first) >= 2 and all(p[2] <= 4096 for p in first) and first[0][2] == 4096
        assert [p[1] & 1 for p in first] == [0] * (len(first) - 1) + [1]
        _, payload = r.login()
        assert tokens(payload)[-1] == (0xFD, 0)
        r.close()
    finally:
        s.stop()


# --- FreeTDS (tsql) ----------------------------------------------------------------------------

def test_tsql_full_tls_with_verified_certificate(tls_sim, pki, tmp_path):
    out = tsql(conf(tmp_path, tls_sim.port, "require", ca=pki.ca), "SELECT 1 AS one, N'Zürich' AS s\ngo\n")
    assert "1\tZürich" in out, out
    assert "encryption full" in wait_log(tls_sim, "encryption full")


def test_tsql_by_dns_name_checks_the_dns_san(tls_sim, pki, tmp_path):
    out = tsql(conf(tmp_path, tls_sim.port, "require", ca=pki.ca, host="localhost"))
    if "Unknown host" in out or "20012" in out:
        pytest.skip("localhost does not resolve to 127.0.0.1 here")
    assert "\n1\n" in out, out


def test_tsql_request_gets_login_only_encryption(tls_sim, pki, tmp_path):
    before = tls_sim.output().count("encryption login")
    out = tsql(conf(tmp_path, tls_sim.port, "request", ca=pki.ca), "SELECT 2 AS two\ngo\n")
    assert "\n2\n" in out, out
    deadline = time.monotonic() + 5
    while tls_sim.output().count("encryption login") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tls_sim.output().count("encryption login") == before + 1


@pytest.mark.parametrize("which,reason", [
    ("wrong_ca", "Certificate status: 66"),             # issuer unknown (66 = INVALID | SIGNER_NOT_FOUND)
    ("expired", "Certificate status: 1026"),            # 1026 = INVALID | EXPIRED
    ("wrong_name", "Certificate hostname does not match"),
])
def test_tsql_refuses_bad_certificates(which, reason, pki, tmp_path):
    cert = getattr(pki, which)
    s = start(tls_cert=cert.cert, tls_key=cert.key)
    try:
        out = tsql(conf(tmp_path, s.port, "require", ca=pki.ca))
        assert "Adaptive Server connection failed" in out and "\n1\n" not in out, out
        assert reason in dump(tmp_path), dump(tmp_path)
        assert one(s, "SELECT 5") == 5                  # the server keeps serving
    finally:
        s.stop()


def test_tsql_require_against_server_without_certificate(plain_sim, pki, tmp_path):
    out = tsql(conf(tmp_path, plain_sim.port, "require", ca=pki.ca))
    assert "Adaptive Server connection failed" in out and "\n1\n" not in out, out
    assert "requires encryption" in wait_log(plain_sim, "requires encryption")


def test_tsql_encryption_off_against_force_encryption(forced_sim, tmp_path):
    """FreeTDS sends NOT_SUP for 'encryption = off'; the server answers REQ and closes (error 17835 in its
    log, as SQL Server does); FreeTDS would go on with TLS but finds the connection closed."""
    out = tsql(conf(tmp_path, forced_sim.port, "off"))
    assert "Adaptive Server connection failed" in out and "\n1\n" not in out, out
    assert "17835" in wait_log(forced_sim, "17835")


def test_tsql_request_against_force_encryption_is_fully_encrypted(forced_sim, pki, tmp_path):
    before = forced_sim.output().count("encryption full")
    out = tsql(conf(tmp_path, forced_sim.port, "request", ca=pki.ca), "SELECT 3 AS three\ngo\n")
    assert "\n3\n" in out, out
    deadline = time.monotonic() + 5
    while forced_sim.output().count("encryption full") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert forced_sim.output().count("encryption full") > before


# --- FreeTDS DB-Library (pymssql): the rest of the simulator over TLS ---------------------------------

@pytest.fixture
def tls_conf_global(tmp_path, pki, monkeypatch):
    """FREETDSCONF whose [global] requires verified TLS (pymssql addresses servers as host:port)."""
    path = tmp_path / "global-tls.conf"
    path.write_text("[global]\n\ttds version = 7.4\n\tclient charset = UTF-8\n\tencryption = require\n"
                    "\tca file = %s\n\tcheck certificate hostname = yes\n" % pki.ca)
    monkeypatch.setenv("FREETDSCONF", str(path))
    return str(path)


def test_dblib_over_full_tls_cancel_faults_and_kill(forced_sim, tls_conf_global):
    sim = forced_sim
    c = _mssql.connect(server=sim.server, user="sa", password="Passw0rd!", database="demo")
    # a long result cancelled mid-stream: ATTENTION read while the server writes TLS records
    c.execute_query("EXEC sim.stream_constant @rows = 2000000")
    n = 0
    for _ in c:
        n += 1
        if n == 300:
            break
    c.cancel()
    assert c.execute_scalar("SELECT 42") == 42
    # cancel while the server waits
    threading.Timer(0.3, c.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(_mssql.MSSQLDatabaseException):
        c.execute_non_query("WAITFOR DELAY '00:01:00'")
    assert time.monotonic() - t0 < 20
    assert c.execute_scalar("SELECT 43") == 43
    # a large result in full, split over many packets and TLS records
    c.execute_query("EXEC sim.stream_constant @rows = 20000")
    assert sum(1 for _ in c) == 20000
    # the drop fault: partial packets, then the socket closes
    sim.call("sim.commit", inserts=300)
    sim.call("sim.fault_drop", after_rows=50, pattern="FROM dbo.orders")
    d = sim.connect()
    cur = d.cursor()
    got = []
    with pytest.raises(pymssql.Error):
        cur.execute("SELECT order_id FROM dbo.orders")
        for row in cur:
            got.append(row)
    assert len(got) <= 50
    # kill_sessions closes the other TLS sessions
    killed = sim.query("EXEC sim.kill_sessions")[0]["killed"]
    assert killed >= 1
    with pytest.raises(_mssql.MSSQLException):
        c.execute_scalar("SELECT 44")
    assert one(sim, "SELECT 45") == 45


# --- tedious -----------------------------------------------------------------------------------

def tedious(**args):
    if not shutil.which("node"):
        pytest.skip("node is not installed")
    p = subprocess.run(["node", os.path.join(HERE, "tedious_tls.mjs"), json.dumps(args)],
                       capture_output=True, text=True, timeout=40)
    assert p.stdout.strip(), p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_tedious_over_tls(tls_sim, forced_sim, plain_sim, pki):
    for sim in (tls_sim, forced_sim):
        r = tedious(port=sim.port, encrypt=True, ca=pki.ca, sql="SELECT 1 AS one, N'ß' AS s")
        assert r == {"ok": True, "rows": [[1, "ß"]]}, r
    # the certificate is checked: untrusted issuer
    r = tedious(port=tls_sim.port, encrypt=True, ca=pki.other_ca)
    assert not r["ok"] and r["code"] == "ESOCKET" and "verify" in r["message"], r
    # the name is checked: serverName that is not in the certificate
    r = tedious(port=tls_sim.port, encrypt=True, ca=pki.ca, serverName="db.example")
    assert not r["ok"] and "db.example" in r["message"], r
    # encrypt: false against Force Encryption: REQ in the PRELOGIN answer
    r = tedious(port=forced_sim.port, encrypt=False)
    assert r["code"] == "EENCRYPT" and r["message"] == \
        "Server requires encryption, set 'encrypt' config option to true.", r
    # encrypt: true against a server that cannot encrypt: NOT_SUP, connection terminated
    r = tedious(port=plain_sim.port, encrypt=True, ca=pki.ca)
    assert not r["ok"], r
    # encrypt: false against a server with a certificate (not forced): clear text
    r = tedious(port=tls_sim.port, encrypt=False)
    assert r == {"ok": True, "rows": [[1]]}, r


# --- what crosses the wire ---------------------------------------------------------------------

class Proxy:
    """A TCP proxy that records what the client sends."""

    def __init__(self, port):
        self.target = port
        self.sent = bytearray()
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4)
        self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            s = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(c, s, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, False), daemon=True).start()

    def _pump(self, src, dst, record):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record:
                    self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for x in (src, dst):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.lsock.close()


PASSWORD = "Wire-Secr3t!pw"
QUERY = "SELECT N'marker-in-clear' AS m"


@pytest.mark.parametrize("mode,encryption,password_seen,query_seen", [
    ("plain", "off", True, True),            # no TLS: the obfuscated password is on the wire (proves the search)
    ("tls", "request", False, True),         # login-only: LOGIN7 encrypted, the rest in clear
    ("tls", "require", False, False),        # full: nothing readable
])
def test_password_on_the_wire(mode, encryption, password_seen, query_seen, plain_sim, tls_sim, pki, tmp_path):
    sim = plain_sim if mode == "plain" else tls_sim
    sim.call("sim.create_login", login="wire_%s" % encryption, password=PASSWORD)
    proxy = Proxy(sim.port)
    try:
        out = tsql(conf(tmp_path, proxy.port, encryption, ca=pki.ca if mode == "tls" else None),
                   QUERY + "\ngo\n", user="wire_%s" % encryption, password=PASSWORD)
        assert "marker-in-clear" in out, out
    finally:
        proxy.close()
    wire = bytes(proxy.sent)
    assert (crypt(PASSWORD) in wire) == password_seen
    assert PASSWORD.encode("utf-16-le") not in wire and PASSWORD.encode() not in wire
    assert ("marker-in-clear".encode("utf-16-le") in wire) == query_seen
    first = struct.unpack(">H", wire[2:4])[0]                 # the PRELOGIN packet, then ...
    if encryption != "off":                                   # ... a ClientHello in a PRELOGIN packet
        assert wire[first] == 0x12 and wire[first + 8:first + 10] == b"\x16\x03", wire[:first + 16]
    else:
        assert wire[first] == 0x10                            # ... LOGIN7 in clear


# --- command line --------------------------------------------------------------------------------

def test_cli_refuses_force_without_certificate_and_bad_files(pki, tmp_path):
    sim = os.path.join(HERE, "..", "..", "mssql-sim")
    for args in (["--force-encryption"], ["--tls-cert", str(tmp_path / "missing.crt")],
                 ["--tls-cert", pki.good.cert, "--tls-key", pki.ca_key],
                 ["--tls-key", pki.good.key]):
        p = subprocess.run(["/usr/bin/python3", sim, "--port", "0"] + args, capture_output=True, text=True,
                           timeout=20)
        assert p.returncode == 2 and "mssql-sim:" in p.stderr, (args, p.stderr)
