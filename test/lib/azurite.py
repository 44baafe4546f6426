"""Start Azurite (Microsoft's Azure Storage emulator, npm ``azurite`` pinned in test/package.json)
for the Azure tests: its Blob service only, in memory, on a free loopback port, over HTTPS with a
certificate of a test CA (test/lib/certs.py), with ``--oauth basic`` so that bearer tokens are
accepted beside Shared Key and SAS. Standard library only::

    from azurite import Azurite

    with Azurite(pki_dir) as az:               # az.endpoint = "https://127.0.0.1:PORT/devstoreaccount1"
        az.ca                                   # the PEM of the CA its certificate chains to
        az.account, az.key                      # the emulator's well-known account and key
        az.connection_string()                  # for azure-storage-blob (with connection_verify=az.ca)
        az.token(...)                           # an Entra ID-shaped bearer token (a JWT) Azurite accepts

Azurite checks Shared Key signatures and SAS tokens; with ``--oauth basic`` it checks a bearer
token's issuer, audience and lifetime, not its signature (so ``token()`` makes one without a key).
"""
import atexit
import base64
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from certs import make_test_pki  # noqa: E402

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"


def free_port():
    """A port free on loopback now (Azurite takes no port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Azurite:
    """One azurite-blob process; a context manager. ``dir`` holds its certificates and log."""

    def __init__(self, dir=None, node=None):
        self.node = node or os.environ.get("NODE") or shutil.which("node") or "node"
        self._own_dir = dir is None
        self.dir = os.path.abspath(dir) if dir else tempfile.mkdtemp(prefix="azurite-")
        os.chmod(self.dir, 0o755)
        self.account, self.key = ACCOUNT, KEY
        self.proc = None
        self.port = None

    def start(self, timeout=60):
        pki = make_test_pki(os.path.join(self.dir, "pki"))
        self.ca = pki.ca
        main = os.path.join(TOP, "test", "node_modules", "azurite", "dist", "src", "blob", "main.js")
        self.port = free_port()
        cmd = [self.node, main, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
               "--inMemoryPersistence", "--extentMemoryLimit", "256", "--silent", "--skipApiVersionCheck",
               "--disableTelemetry", "--oauth", "basic", "--cert", pki.good.cert, "--key", pki.good.key]
        self._log = open(os.path.join(self.dir, "azurite.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL,
                                     cwd=self.dir, start_new_session=True)
        deadline = time.monotonic() + timeout
        buf = b""
        while b"successfully listens on" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                text = self._log_text()
                self.stop()
                raise RuntimeError("Azurite did not start: %r %s" % (buf[-2000:], text))
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    continue
                buf += chunk
        atexit.register(self.stop)
        return self

    def _log_text(self):
        try:
            with open(os.path.join(self.dir, "azurite.log"), "rb") as f:
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""

    @property
    def endpoint(self):
        return f"https://127.0.0.1:{self.port}/{self.account}"

    def connection_string(self):
        return (f"DefaultEndpointsProtocol=https;AccountName={self.account};AccountKey={self.key};"
                f"BlobEndpoint={self.endpoint};")

    def token(self, lifetime=3600, audience="https://storage.azure.com", tenant=TENANT):
        """A bearer token shaped as Entra ID issues them (a JWT: issuer, audience, lifetime)."""
        now = int(time.time())
        claims = {"aud": audience, "iss": f"https://sts.windows.net/{tenant}/", "iat": now - 60,
                  "nbf": now - 60, "exp": now + lifetime, "oid": "00000000-0000-0000-0000-000000000001",
                  "tid": tenant, "appid": "finalize-test"}
        header = {"alg": "RS256", "typ": "JWT"}
        return ".".join([b64url(json.dumps(header).encode()), b64url(json.dumps(claims).encode()),
                         b64url(b"not-checked-by-azurite-basic")])

    def stop(self, timeout=10):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if self._own_dir and os.path.isdir(self.dir):
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
