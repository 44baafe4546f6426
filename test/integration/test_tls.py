"""Encrypted, verified connections (issue 13): the worker, through real FreeTDS over real TCP, logs
in to the simulator speaking TLS like SQL Server (PRELOGIN negotiation, the handshake inside TDS
packets). A verified connection works, with full and with login-only encryption; a wrong CA, an
expired certificate and a name mismatch are each refused with the condition tls_failed and GnuTLS's
reason, and the verdict does not move; encrypt 'require' against a server without a certificate
and encrypt 'off' against Force Encryption are refused; trust_server_certificate skips the
verification; and the password never crosses the wire in clear unless encrypt is 'off' (a proxy in
the test records every byte)."""

import os
import shutil
import socket
import sys
import tempfile
import threading

import psycopg2
import pytest

from worker_env import Env, new_cluster, sim_clock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from certs import make_test_pki  # noqa: E402

TABLE = "tls.orders"
PASSWORD = "Passw0rd!"


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="finalize-pki.")
    os.chmod(d, 0o755)
    yield make_test_pki(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


@pytest.fixture
def env(pg):
    e = Env(pg)
    yield e
    e.cleanup()


def tls_sim(cert, force=False):
    """A simulator with a first commit captured, serving cert (a certs.Cert)."""
    sim = sim_clock(start_time="2026-11-02T08:59:00Z", tls_cert=cert.cert, tls_key=cert.key,
                    force_encryption=force).start()
    if not force:       # the test's own control connection is not encrypted
        sim.call("sim.commit", inserts=1)
        sim.call("sim.advance", seconds=10)
    return sim


def source_row(env):
    return env.pg.sql("SELECT condition, last_error FROM finalize.source_status WHERE server_name = 'erp'")


def wait_condition(env, condition):
    """Waits for the source's condition; returns its last_error."""
    env.pg.wait_for(lambda: (source_row(env) or [(None,)])[0][0] == condition,
                    what=lambda: f"condition {condition}: {source_row(env)}")
    return source_row(env)[0][1]


def test_a_verified_connection_works_and_moves_the_verdict(env, pki):
    sim = tls_sim(pki.good)
    try:
        env.add_source("erp", sim, encrypt="require", ca_file=pki.ca)
        env.track(TABLE, "erp")
        env.wait_caught_up(TABLE, sim)
        before = env.one("SELECT finalize.finalized_until(%s)", (TABLE,))
        sim.call("sim.commit", inserts=2)
        sim.call("sim.advance", seconds=3600)
        env.wait_caught_up(TABLE, sim)
        assert env.one("SELECT finalize.finalized_until(%s)", (TABLE,)) > before
        assert source_row(env)[0][0] == "ok"
    finally:
        sim.stop()


def test_login_only_encryption_works(env, pki):
    """encrypt 'request' sends ENCRYPT_OFF: a server without Force Encryption encrypts the login only."""
    sim = tls_sim(pki.good)
    try:
        env.add_source("erp", sim, encrypt="request", ca_file=pki.ca)
        env.track(TABLE, "erp")
        env.wait_caught_up(TABLE, sim)
        assert source_row(env)[0][0] == "ok"
    finally:
        sim.stop()


@pytest.mark.parametrize("cert,reason", [
    ("wrong_ca", "The certificate issuer is unknown"),
    ("expired", "expired"),
    ("wrong_name", "does not name the host \"127.0.0.1\""),
])
def test_a_certificate_that_does_not_verify_is_refused(env, pki, cert, reason):
    sim = tls_sim(getattr(pki, cert))
    try:
        env.add_source("erp", sim, encrypt="require", ca_file=pki.ca)
        env.track(TABLE, "erp")
        error = wait_condition(env, "tls_failed")
        assert reason in error and "TLS" in error, error
        status = env.status(TABLE)
        assert status["finalized_until"] is None and status["offset_lsn"] is None
    finally:
        sim.stop()


def test_trust_server_certificate_skips_verification(env, pki):
    sim = tls_sim(pki.wrong_ca)
    try:
        env.add_source("erp", sim, encrypt="require", trust_server_certificate="true")
        env.track(TABLE, "erp")
        env.wait_caught_up(TABLE, sim)
        assert source_row(env)[0][0] == "ok"
    finally:
        sim.stop()


def test_require_against_a_server_without_a_certificate_is_refused(env):
    sim = sim_clock(start_time="2026-11-02T08:59:00Z").start()
    try:
        sim.call("sim.commit", inserts=1)
        env.add_source("erp", sim, encrypt="require")
        env.track(TABLE, "erp")
        error = wait_condition(env, "tls_failed")
        assert "did not agree to encrypt" in error, error
        assert env.status(TABLE)["finalized_until"] is None
    finally:
        sim.stop()


def test_encrypt_off_against_force_encryption_is_refused(env, pki):
    sim = tls_sim(pki.good, force=True)
    try:
        env.add_source("erp", sim, encrypt="off")
        env.track(TABLE, "erp")
        error = wait_condition(env, "tls_failed")
        assert "requires encryption" in error, error
        assert "17835" in sim.output()
    finally:
        sim.stop()


@pytest.mark.parametrize("ca_file,reason", [
    ("/nonexistent/ca.pem", "cannot be read"),
    ("/dev/zero", "not a regular file"),          # GnuTLS would read it until memory runs out
    ("fifo", "not a regular file"),               # GnuTLS would block the worker on it
])
def test_a_ca_file_that_is_not_a_readable_pem_file_is_named(env, pki, ca_file, reason):
    """The validator refuses what exists and is not a regular file of at most 1 MB; the worker
    checks again before each login (a file missing or replaced since)."""
    path = os.path.join(pki.dir, "replaced.pem")
    sim = tls_sim(pki.good)
    try:
        if ca_file != "/nonexistent/ca.pem":
            bad = ca_file if ca_file == "/dev/zero" else os.path.join(pki.dir, "ca.fifo")
            if bad != "/dev/zero" and not os.path.exists(bad):
                os.mkfifo(bad, 0o644)
            with pytest.raises(psycopg2.Error) as e:
                env.add_source("refused", sim, encrypt="require", ca_file=bad)
            assert "regular file of at most 1 MB" in e.value.diag.message_detail, e.value
            # Replaced after validation: the worker's own check.
            shutil.copy(pki.ca, path)
            os.chmod(path, 0o644)
            env.add_source("erp", sim, encrypt="require", ca_file=path)
            os.remove(path)
            os.mkfifo(path, 0o644) if ca_file == "fifo" else os.symlink("/dev/zero", path)
            ca_file = path
        else:
            env.add_source("erp", sim, encrypt="require", ca_file=ca_file)
        env.track(TABLE, "erp")
        error = wait_condition(env, "configuration")
        assert reason in error and ca_file in error, error
    finally:
        sim.stop()
        if os.path.lexists(path):
            os.remove(path)


class Recorder:
    """A TCP proxy on loopback that forwards to the simulator and keeps every byte both ways."""

    def __init__(self, port):
        self.target = port
        self.data = bytearray()
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    def pump(self, src, dst):
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                with self.lock:
                    self.data += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


class Downgrader(Recorder):
    """A machine in the middle on loopback: rewrites the ENCRYPTION option of the client's PRELOGIN from
    ON to OFF (the server then encrypts the login only) and relays everything else untouched, so the
    server's genuine certificate still verifies."""

    def __init__(self, port):
        self.rewrote = False
        super().__init__(port)

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self.first, args=(client, server), daemon=True).start()

    @staticmethod
    def recvn(sock, n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise OSError("eof")
            data += chunk
        return data

    def first(self, client, server):
        """Rewrites the first client packet when it is a PRELOGIN, then relays both ways."""
        try:
            header = self.recvn(client, 8)
            body = bytearray(self.recvn(client, int.from_bytes(header[2:4], "big") - 8))
            if header[0] == 0x12:           # PRELOGIN: option table of (token, offset, length)
                i = 0
                while body[i] != 0xFF:
                    offset = int.from_bytes(body[i + 1:i + 3], "big")
                    if body[i] == 0x01 and body[offset] == 0x01:
                        body[offset] = 0x00
                        self.rewrote = True
                    i += 5
            server.sendall(header + bytes(body))
        except OSError:
            return
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=self.pump, args=(a, b), daemon=True).start()


def test_a_downgrade_to_login_only_encryption_is_refused(env, pki):
    """FreeTDS 1.3 accepts ENCRYPT_OFF in answer to encrypt 'require' and then talks in plaintext after the
    login; finalize checks that the replies after the login are TLS records and refuses otherwise."""
    sim = tls_sim(pki.good)
    mitm = Downgrader(sim.port)
    try:
        env.add_source("erp", sim, port=mitm.port, encrypt="require", ca_file=pki.ca)
        env.track(TABLE, "erp")
        error = wait_condition(env, "tls_failed")
        assert mitm.rewrote and "not encrypted" in error and "encrypted only the login" in error, error
        status = env.status(TABLE)
        assert status["finalized_until"] is None and status["offset_lsn"] is None
    finally:
        mitm.close()
        sim.stop()


def obfuscated(password):
    """The password as a TDS LOGIN7 carries it: UTF-16LE, each byte's nibbles swapped, XOR 0xA5."""
    return bytes((((b << 4) & 0xF0) | (b >> 4)) ^ 0xA5 for b in password.encode("utf-16-le"))


@pytest.mark.parametrize("encrypt,visible", [("off", True), ("request", False), ("require", False)])
def test_the_password_crosses_the_wire_in_clear_only_when_encrypt_is_off(env, pki, encrypt, visible):
    sim = tls_sim(pki.good)
    proxy = Recorder(sim.port)
    try:
        options = {"encrypt": encrypt}
        if encrypt != "off":
            options["ca_file"] = pki.ca
        env.add_source("erp", sim, port=proxy.port, **options)
        env.track(TABLE, "erp")
        env.wait_caught_up(TABLE, sim)
        with proxy.lock:
            wire = bytes(proxy.data)
        assert len(wire) > 0
        assert PASSWORD.encode("utf-16-le") not in wire
        assert (obfuscated(PASSWORD) in wire) == visible, f"encrypt {encrypt}"
    finally:
        proxy.close()
        sim.stop()


def test_a_ca_file_without_a_pem_certificate_is_named(env, pki):
    empty = os.path.join(pki.dir, "empty.pem")
    open(empty, "w").close()
    os.chmod(empty, 0o644)
    sim = tls_sim(pki.good)
    try:
        env.add_source("erp", sim, encrypt="require", ca_file=empty)
        env.track(TABLE, "erp")
        error = wait_condition(env, "tls_failed")
        assert "holds no PEM certificate" in error and empty in error, error
    finally:
        sim.stop()
