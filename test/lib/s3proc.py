"""Start and drive the S3 test server (test/s3/server.mjs) from Python tests.

The server is s3rver behind a proxy that checks every request's SigV4 signature
with the AWS SDK's signer (see test/s3/README.md). Standard library only::

    from s3proc import S3Server

    with S3Server() as s3:                      # node test/s3/server.mjs on a free port
        s3.create_bucket("lake")
        s3.put("lake", "day=27/hour=08/part 0.csv", b"a,b\\n")
        s3.fault(kind="status", status=503, count=1, match="continuation-token=")
        ...                                     # point the extension at s3.endpoint
        assert all(r["signature_ok"] for r in s3.requests())

* ``S3Server(dir=None, access_key=..., secret_key=..., region=..., session_token=None)``:
  ``dir`` holds s3rver's buckets and ``requests.log`` (a temporary directory,
  removed on ``stop()``, when None).  Properties: ``endpoint``
  (``"http://127.0.0.1:PORT"``), ``host``, ``port``, ``access_key``,
  ``secret_key``, ``region``, ``dir``, ``log_path``.
* ``virtual_host(bucket)`` -> ``"<bucket>.localhost:PORT"``: the Host for
  virtual-hosted style (libcurl resolves ``*.localhost`` to 127.0.0.1 itself);
  ``virtual_endpoint(bucket)`` -> ``"http://<bucket>.localhost:PORT"``.
* ``create_bucket(name)`` (no error if it exists), ``delete_bucket(name)``
  (with its objects), ``put(bucket, key, data)``, ``put_many(bucket, {key: data})``,
  ``delete(bucket, key)``.  Keys are any UTF-8 strings (spaces, ``+ % = /``, non-ASCII).
* ``fault(kind=..., **options)`` injects a fault into the next S3 requests
  (``status``/``malformed``/``stall``/``truncate``; ``count``, ``match``; see the
  README); ``faults()`` lists pending ones; ``clear(what="all")`` drops faults
  and the in-memory request log (``"faults"``/``"requests"`` for one of them).
* ``requests()`` -> list of dicts, one per S3 request: ``method``, ``path``,
  ``query`` (raw), ``host``, ``style``, ``bucket``, ``signature_ok``, ``error``
  (S3 error code or None), ``status``, ``fault``, ``client_closed``, and on a
  signature failure ``canonical_request``/``string_to_sign`` as the server built them.
* ``list_keys(bucket, prefix="")`` lists through the proxy with a SigV4-signed
  ListObjectsV2 (all pages) and returns ``[(key, size, etag), ...]``.
* ``stop()`` (SIGTERM, then kill) / ``kill()``; also a context manager.
"""
import atexit
import datetime
import hashlib
import hmac
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(os.path.dirname(HERE), "s3", "server.mjs")
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
S3_NS = "{http://doc.s3.amazonaws.com/2006-03-01/}"


class S3ControlError(RuntimeError):
    """A control-API call the server refused (HTTP status and its message)."""

    def __init__(self, status, message):
        super().__init__("%s: %s" % (status, message))
        self.status = status


def aws_quote(s, safe=""):
    """AWS URI encoding: everything but A-Z a-z 0-9 - . _ ~ (and ``safe``) as %XX."""
    return urllib.parse.quote(s, safe=safe + "~")


class S3Server:
    """One server.mjs subprocess on a free loopback port."""

    def __init__(self, dir=None, access_key="finalizetest", secret_key="finalizetestsecret",
                 region="us-east-1", session_token=None, node=None, start=True):
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.session_token = session_token
        self.node = node or os.environ.get("NODE") or shutil.which("node") or "node"
        self._own_dir = dir is None
        self.dir = os.path.abspath(dir) if dir else tempfile.mkdtemp(prefix="s3proc-")
        self.host = "127.0.0.1"
        self.port = None
        self.proc = None
        self._stderr = None
        if start:
            self.start()

    # -- lifecycle ---------------------------------------------------------
    def start(self, timeout=30):
        os.makedirs(self.dir, exist_ok=True)
        cmd = [self.node, SERVER, "--port", "0", "--dir", self.dir,
               "--access-key", self.access_key, "--secret-key", self.secret_key,
               "--region", self.region, "--parent-pid", str(os.getpid())]
        if self.session_token:
            cmd += ["--session-token", self.session_token]
        self._stderr = open(os.path.join(self.dir, "server.stderr"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise RuntimeError("S3 server did not start in %ss: %s" % (timeout, self._stderr_text()))
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self.proc.wait()
                    raise RuntimeError("S3 server exited (%s): %s" % (self.proc.returncode, self._stderr_text()))
                buf += chunk
        line = buf.split(b"\n", 1)[0].decode()
        prefix = "s3-server listening on 127.0.0.1:"
        if not line.startswith(prefix):
            self.kill()
            raise RuntimeError("unexpected first line from the S3 server: %r" % line)
        self.port = int(line[len(prefix):])
        atexit.register(self.stop)
        return self

    def _stderr_text(self):
        try:
            with open(os.path.join(self.dir, "server.stderr"), "rb") as f:
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after ``timeout`` seconds; removes a temporary dir."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if self._stderr:
            self._stderr.close()
            self._stderr = None
        if self._own_dir and os.path.isdir(self.dir) and not os.environ.get("KEEP_WORKDIR"):
            shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode if self.proc else None

    def kill(self):
        """SIGKILL (a vanished server)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- addresses ---------------------------------------------------------
    @property
    def endpoint(self):
        return "http://%s:%d" % (self.host, self.port)

    @property
    def log_path(self):
        return os.path.join(self.dir, "requests.log")

    def virtual_host(self, bucket):
        return "%s.localhost:%d" % (bucket, self.port)

    def virtual_endpoint(self, bucket):
        return "http://" + self.virtual_host(bucket)

    # -- control API -------------------------------------------------------
    def _control(self, method, route, params=None, body=None, timeout=60):
        url = self.endpoint + "/__control/" + route
        if params:
            url += "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
        data = body
        headers = {}
        if body is not None and not isinstance(body, (bytes, bytearray)):
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                text = json.loads(text).get("error", text)
            except ValueError:
                pass
            raise S3ControlError(e.code, text) from None

    def health(self):
        return self._control("GET", "health")

    def create_bucket(self, name):
        return self._control("POST", "bucket", {"name": name})

    def delete_bucket(self, name):
        return self._control("DELETE", "bucket", {"name": name})

    def put(self, bucket, key, data, content_type=None):
        if isinstance(data, str):
            data = data.encode()
        params = {"bucket": bucket, "key": key}
        if content_type:
            params["content_type"] = content_type
        return self._control("PUT", "object", params, bytes(data))

    def put_many(self, bucket, objects):
        """``objects``: {key: bytes} (or {key: int} for that many bytes of 'x')."""
        import base64
        items = []
        for key, data in objects.items():
            if isinstance(data, int):
                items.append({"key": key, "size": data})
            else:
                if isinstance(data, str):
                    data = data.encode()
                items.append({"key": key, "base64": base64.b64encode(bytes(data)).decode()})
        return self._control("POST", "objects", {"bucket": bucket}, {"objects": items}, timeout=600)

    def delete(self, bucket, key):
        return self._control("DELETE", "object", {"bucket": bucket, "key": key})

    def fault(self, **kwargs):
        """E.g. ``fault(kind="status", status=503, code="SlowDown", count=2, match="prefix=")``."""
        return self._control("POST", "fault", None, kwargs)

    def faults(self):
        return self._control("GET", "faults")

    def clear(self, what="all"):
        return self._control("POST", "clear", {"what": what})

    def requests(self):
        return self._control("GET", "requests")

    # -- a signed client (Python's own SigV4, for checks from tests) --------
    def signed_request(self, method, path, query=(), body=b"", headers=None, host=None):
        """One SigV4-signed request through the proxy. ``path`` is the raw
        (decoded) path, e.g. "/bucket/a b"; ``query`` a list of (name, value).
        Returns (status, headers, body)."""
        host = host or "%s:%d" % (self.host, self.port)
        cpath = aws_quote(path, safe="/")
        cquery = "&".join("%s=%s" % kv for kv in sorted((aws_quote(k), aws_quote(v)) for k, v in query))
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        payload = hashlib.sha256(body).hexdigest()
        hdrs = {"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload}
        if self.session_token:
            hdrs["x-amz-security-token"] = self.session_token
        for k, v in (headers or {}).items():
            hdrs[k.lower()] = v
        names = sorted(hdrs)
        canonical = "\n".join([method, cpath, cquery] + ["%s:%s" % (n, " ".join(str(hdrs[n]).split())) for n in names]
                              + ["", ";".join(names), payload])
        scope = "%s/%s/s3/aws4_request" % (amz_date[:8], self.region)
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + self.secret_key).encode()
        for part in (amz_date[:8], self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        hdrs["authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (
            self.access_key, scope, ";".join(names), sig)
        url = self.endpoint + cpath + ("?" + cquery if cquery else "")
        req = urllib.request.Request(url, data=body if body else None, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def list_keys(self, bucket, prefix=""):
        """Every object under ``prefix`` as (key, size, etag), through signed ListObjectsV2 pages."""
        out, token = [], None
        while True:
            query = [("list-type", "2"), ("prefix", prefix)]
            if token:
                query.append(("continuation-token", token))
            status, _, body = self.signed_request("GET", "/" + bucket, query)
            if status != 200:
                raise S3ControlError(status, body.decode(errors="replace"))
            root = ET.fromstring(body)
            for c in root.iter(S3_NS + "Contents"):
                out.append((c.findtext(S3_NS + "Key"), int(c.findtext(S3_NS + "Size")), c.findtext(S3_NS + "ETag")))
            if root.findtext(S3_NS + "IsTruncated") != "true":
                return out
            token = root.findtext(S3_NS + "NextContinuationToken")


def _selftest():
    """Exercised by test/s3/s3proc.test.mjs: python3 test/lib/s3proc.py --self-test."""
    keys = {"plain": b"1", "with space/a b": b"22", "plus+eq=pct%/x": b"333", "ünï/日本 語.csv": b"4444"}
    with S3Server(region="eu-west-1", access_key="AKPY", secret_key="pysecret") as s3:
        assert s3.endpoint == "http://127.0.0.1:%d" % s3.port
        assert s3.health()["region"] == "eu-west-1"
        assert s3.create_bucket("py-bucket")["created"] is True
        assert s3.create_bucket("py-bucket")["created"] is False
        for k, v in keys.items():
            s3.put("py-bucket", k, v)
        s3.put_many("py-bucket", {"many/%04d" % i: i % 3 for i in range(1100)})
        listed = s3.list_keys("py-bucket")
        assert len(listed) == len(keys) + 1100, len(listed)
        got = {k: size for k, size, _ in listed}
        for k, v in keys.items():
            assert got[k] == len(v), (k, got.get(k))
        for k, v in keys.items():
            status, _, body = s3.signed_request("GET", "/py-bucket/" + k)
            assert status == 200 and body == v, (k, status, body)
        s3.delete("py-bucket", "plain")
        assert "plain" not in {k for k, _, _ in s3.list_keys("py-bucket")}
        s3.clear()
        s3.fault(kind="status", status=503, count=1)
        assert len(s3.faults()) == 1
        status, _, body = s3.signed_request("GET", "/py-bucket", [("list-type", "2")])
        assert status == 503 and b"<Code>SlowDown</Code>" in body, (status, body)
        reqs = s3.requests()
        assert [(r["status"], r["fault"], r["signature_ok"]) for r in reqs] == [(503, "status", True)], reqs
        try:
            s3.put("no-such-bucket", "k", b"x")
        except S3ControlError as e:
            assert e.status == 404, e
        else:
            raise AssertionError("put into a missing bucket succeeded")
        d = s3.dir
        assert os.path.exists(os.path.join(d, "requests.log"))
        rc = s3.stop()
        assert rc == 0, rc
        assert os.environ.get("KEEP_WORKDIR") or not os.path.exists(d)   # kept on request
    print("s3proc self-test ok")


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--self-test"]:
        _selftest()
    else:
        print(__doc__)
