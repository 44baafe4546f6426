"""A reverse proxy in front of an Iceberg REST catalog whose faults a test switches at run time (stdlib only).

    p = FaultProxy(cat.uri)              # listens on 127.0.0.1, a free port: p.uri
    p.set_status(503)                    # every request (or those matching match=) -> an Iceberg error JSON
    p.set_stall()                        # requests are read and left unanswered until the mode changes
    p.set_malformed("no_metadata")       # loadTable answers spoiled (see MALFORMED)
    p.set_delay(2.0)                     # answered, late
    p.set_lost_answer(match=COMMIT)      # forwarded (the catalog applies it), the answer never sent
    p.set_pass()                         # forwarded as they are
    p.require_oauth("id", "secret", expires_in=60)   # POST /v1/oauth/tokens, then Bearer tokens only
    p.require_oauth("id", "secret", token="e")       # every token it hands out is "e"
    p.require_token("static-token")      # a static bearer token only
    p.require_sigv4("AKID", "secret", "eu-west-1", "glue")   # AWS SigV4 only (check_sigv4)
    p.no_auth()
    p.set_etag(True)                     # emulate ETag / If-None-Match -> 304 on loadTable (the real one has none)
    p.count("/v1/namespaces/ns/tables/t"), p.counts, p.last_headers, p.requests (with their bodies), p.reset()
    p.stop()

Faults (pass, status, stall, delay, malformed, lost) and authentication (none, token, oauth) are independent.
A fault applies to the requests its match (a regular expression searched in "METHOD /path?query"; default
every request, for malformed the loadTable ones) selects, the token endpoint included; status and stall
come first, as from a load balancer; then authentication (401 unless authorized); then the request is
forwarded (and its answer spoiled under malformed, tagged under set_etag). The token endpoint is served by
the proxy itself only under require_oauth; otherwise it is forwarded like the rest (the real server hands
a token to anybody).

Errors are the Iceberg REST ErrorModel, {"error": {"message", "type", "code"}}; the OAuth token endpoint's
own errors are the spec's OAuthError, {"error": "invalid_client", "error_description": ...}."""
import base64
import calendar
import hashlib
import hmac
import http.client
import http.server
import json
import re
import secrets
import socketserver
import threading
import time
import urllib.parse

TOKEN_PATH = "/v1/oauth/tokens"
LOAD_TABLE = r"^GET /v1/(?:[^/]+/)?namespaces/[^/]+/tables/[^/?]+(?:\?.*)?$"
COMMIT = r"^POST /v1/(?:[^/]+/)?namespaces/[^/]+/tables/[^/?]+$"
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
       "transfer-encoding", "upgrade", "content-length", "host", "accept-encoding"}
ERROR_TYPES = {400: "BadRequestException", 401: "NotAuthorizedException", 403: "ForbiddenException",
               404: "NoSuchTableException", 405: "MethodNotAllowed", 406: "UnsupportedOperationException",
               409: "CommitFailedException", 419: "AuthenticationTimeoutException",
               500: "InternalServerError", 501: "NotImplementedException", 502: "BadGateway",
               503: "ServiceUnavailableException", 504: "GatewayTimeout"}
# set_malformed(kind): what a loadTable answer (200) becomes.
MALFORMED = {
    "not_json": "a 200 whose body is not JSON (an HTML error page)",
    "truncated": "the first half of the real body (valid Content-Length, invalid JSON)",
    "empty": "a 200 with an empty body",
    "no_metadata": "JSON without the 'metadata' member",
    "metadata_not_object": "'metadata' is a string",
    "snapshots_not_list": "metadata.snapshots is an object, not a list",
    "snapshot_not_object": "each element of metadata.snapshots is a number",
    "summary_not_object": "each snapshot's 'summary' is a string",
    "snapshot_id_string": "each snapshot's snapshot-id is a string",
    "refs_not_object": "metadata.refs is a list",
    "no_snapshots": "metadata without 'snapshots' (and without 'refs' and current-snapshot-id)",
    "json_array": "the body is a JSON array",
}


def error_body(code, message=None, type_=None):
    return {"error": {"message": message or "injected by the fault proxy: HTTP %d" % code,
                      "type": type_ or ERROR_TYPES.get(code, "RESTException"), "code": code}}


def spoil(kind, status, body):
    """A loadTable answer made malformed -> (status, bytes)."""
    if kind == "not_json":
        return 200, b"<html><body><h1>502 Bad Gateway</h1></body></html>"
    if kind == "empty":
        return 200, b""
    if kind == "truncated":
        return 200, body[: max(1, len(body) // 2)]
    try:
        doc = json.loads(body)
    except ValueError:
        return status, body
    if kind == "json_array":
        return 200, json.dumps([doc]).encode()
    md = doc.get("metadata") if isinstance(doc, dict) else None
    if kind == "no_metadata":
        doc.pop("metadata", None)
    elif kind == "metadata_not_object":
        doc["metadata"] = "metadata"
    elif isinstance(md, dict):
        snaps = md.get("snapshots") or []
        if kind == "snapshots_not_list":
            md["snapshots"] = {"snapshot": snaps[0] if snaps else None}
        elif kind == "snapshot_not_object":
            md["snapshots"] = [i for i, _ in enumerate(snaps, 1)]
        elif kind == "summary_not_object":
            for s in snaps:
                s["summary"] = "operation=append"
        elif kind == "snapshot_id_string":
            for s in snaps:
                s["snapshot-id"] = str(s.get("snapshot-id"))
        elif kind == "refs_not_object":
            md["refs"] = [dict(v, name=k) for k, v in (md.get("refs") or {}).items()]
        elif kind == "no_snapshots":
            for k in ("snapshots", "refs", "current-snapshot-id", "snapshot-log"):
                md.pop(k, None)
    return 200, json.dumps(doc).encode()


def _uri_encode(text, slash):
    """AWS's URI encoding: every byte but unreserved ones (and '/' when slash) as %XX."""
    return urllib.parse.quote(text, safe="-_.~" + ("/" if slash else ""))


def check_sigv4(auth, method, path, query, headers, body):
    """None when the request carries a valid AWS SigV4 signature for the credentials, else why not.
    Per AWS's "Create a signed AWS API request": the canonical request (path segments encoded twice
    for services other than s3), the string to sign over the credential scope, and the signing key
    derived from the secret; the signature must be within 15 minutes and sign host and x-amz-date."""
    _, access_key, secret_key, region, service, session_token = auth
    value = headers.get("Authorization") or ""
    m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, *"
                 r"SignedHeaders=([^,]+), *Signature=([0-9a-f]{64})$", value)
    if not m:
        return "missing or malformed AWS4-HMAC-SHA256 authorization"
    key_id, day, reg, svc, signed, signature = m.groups()
    if key_id != access_key:
        return "unknown access key"
    if (reg, svc) != (region, service):
        return "credential scope %s/%s, expected %s/%s" % (reg, svc, region, service)
    lower = {k.lower(): v for k, v in headers.items()}
    amz_date = lower.get("x-amz-date", "")
    try:
        when = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        return "missing x-amz-date"
    if abs(time.time() - when) > 900 or amz_date[:8] != day:
        return "request time too skewed"
    names = signed.split(";")
    if "host" not in names or "x-amz-date" not in names:
        return "host and x-amz-date must be signed"
    if session_token is not None and lower.get("x-amz-security-token") != session_token:
        return "missing or wrong security token"
    segments = path if service == "s3" else "/".join(_uri_encode(seg, False) for seg in path.split("/"))
    canonical_uri = _uri_encode(segments, True) if service != "s3" else path
    pairs = sorted((_uri_encode(urllib.parse.unquote(k), False), _uri_encode(urllib.parse.unquote(v), False))
                   for k, _, v in (p.partition("=") for p in query.split("&") if p))
    canonical_query = "&".join("%s=%s" % kv for kv in pairs)
    canonical_headers = "".join("%s:%s\n" % (n, " ".join(lower.get(n, "").split())) for n in names)
    payload = hashlib.sha256(body or b"").hexdigest()
    creq = "\n".join([method, canonical_uri, canonical_query, canonical_headers, signed, payload])
    scope = "%s/%s/%s/aws4_request" % (day, region, service)
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
    k = ("AWS4" + secret_key).encode()
    for part in (day, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(hmac.new(k, sts.encode(), hashlib.sha256).hexdigest(), signature):
        return "The request signature we calculated does not match the signature you provided."
    return None


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FaultProxy:
    def __init__(self, upstream, host="127.0.0.1", port=0, timeout=30):
        u = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = u.hostname, u.port or 80
        self.upstream_prefix = u.path.rstrip("/")
        self.timeout = timeout
        self._cond = threading.Condition()
        self._gen = 0                   # bumped on every mode change: wakes stalled requests
        self._stopped = False
        self.fault = ("pass",)
        self.match = None
        self.auth = None                # None | ("token", token) | ("oauth", id, secret, expires_in, token)
        self.etag = False
        self.tokens = {}                # issued token -> expiry (time.time())
        self.counts = {}
        self.requests = []              # dicts: method, path, query, headers, status, time
        self.last_headers = {}
        self.stalled = 0                # requests waiting in a stall right now
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                proxy._handle(self)

            do_POST = do_DELETE = do_HEAD = do_PUT = do_GET

        self.server = _Server((host, port), Handler)
        self.host, self.port = self.server.server_address[:2]
        self.uri = "http://%s:%d%s" % (self.host, self.port, self.upstream_prefix)
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-proxy", daemon=True)
        self._thread.start()

    # -- modes (each wakes the requests a stall holds)
    def _set(self, **kw):
        with self._cond:
            for k, v in kw.items():
                setattr(self, k, v)
            self._gen += 1
            self._cond.notify_all()

    def set_pass(self):
        self._set(fault=("pass",), match=None)

    def set_status(self, code, body=None, message=None, type=None, match=None, headers=None):
        """Answers code with body (a dict/str/bytes; default the Iceberg ErrorModel for code)."""
        self._set(fault=("status", code, body, message, type, headers or {}), match=match)

    def set_stall(self, match=None):
        """Reads each request and answers nothing until the mode changes (then the new mode answers it)
        or stop() (then the connection is closed unanswered)."""
        self._set(fault=("stall",), match=match)

    def set_lost_answer(self, match=None):
        """Forwards each request to the catalog, then closes the connection without its answer: a
        commit the catalog applied whose client never hears so (a load balancer's timeout)."""
        self._set(fault=("lost",), match=match)

    def set_delay(self, seconds, match=None):
        self._set(fault=("delay", seconds), match=match)

    def set_malformed(self, kind="not_json", match=LOAD_TABLE):
        if kind not in MALFORMED:
            raise ValueError("malformed kind %r: one of %s" % (kind, ", ".join(MALFORMED)))
        self._set(fault=("malformed", kind), match=match)

    def require_oauth(self, client_id, client_secret, expires_in=3600, token=None):
        """token: the access_token every answer hands out (by default a new random one each time)."""
        self._set(auth=("oauth", client_id, client_secret, expires_in, token))

    def require_token(self, token):
        self._set(auth=("token", token))

    def require_sigv4(self, access_key, secret_key, region, service, session_token=None):
        """AWS Signature Version 4 only (as AWS Glue's and S3 Tables' Iceberg endpoints check it)."""
        self._set(auth=("sigv4", access_key, secret_key, region, service, session_token))

    def no_auth(self):
        self._set(auth=None)

    def set_etag(self, on=True):
        self._set(etag=on)

    def expire_tokens(self):
        with self._cond:
            for t in self.tokens:
                self.tokens[t] = 0

    # -- what was asked
    def count(self, path=None, method=None):
        """Requests so far (whose path is path, whose method is method)."""
        with self._cond:
            return sum(1 for r in self.requests if (path is None or r["path"] == path)
                       and (method is None or r["method"] == method))

    def reset(self):
        with self._cond:
            self.counts = {}
            self.requests = []
            self.last_headers = {}

    def stop(self):
        with self._cond:
            self._stopped = True
            self._gen += 1
            self._cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- the handler
    def _handle(self, h):
        path, _, query = h.path.partition("?")
        body = self._read_body(h)
        headers = {k: v for k, v in h.headers.items()}
        rec = {"method": h.command, "path": path, "query": query, "headers": headers, "body": body, "status": None,
               "time": time.time()}
        with self._cond:
            self.counts[path] = self.counts.get(path, 0) + 1
            self.last_headers = headers
            self.requests.append(rec)
        try:
            status, out_headers, out = self._answer(h, path, query, body, headers)
        except _Drop:
            h.close_connection = True
            rec["status"] = "dropped"
            return
        rec["status"] = status
        rec["answered"] = time.time()      # "time" is when it arrived: a slow upstream lies between
        self._send(h, status, out_headers, out)

    def _read_body(self, h):
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(h.rfile.read(size))
                h.rfile.readline()
        n = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(n) if n else b""

    def _send(self, h, status, headers, body):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = dict(headers, **{"Content-Type": "application/json"})
        elif isinstance(body, str):
            body = body.encode()
        try:
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            if h.command != "HEAD" and status not in (204, 304):
                h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True

    def _auth_error(self, message):
        return 401, {"WWW-Authenticate": 'Bearer realm="iceberg"'}, error_body(401, message,
                                                                             "NotAuthorizedException")

    def _answer(self, h, path, query, body, headers):
        while True:
            with self._cond:
                if self._stopped:
                    raise _Drop()
                auth, fault, match, etag, gen = self.auth, self.fault, self.match, self.etag, self._gen
            line = "%s %s%s" % (h.command, path, "?" + query if query else "")
            kind = fault[0] if match is None or re.search(match, line) else "pass"
            # 1. the fault (as a load balancer or a sick server would: before any authentication)
            if kind == "stall":
                with self._cond:
                    self.stalled += 1
                    try:
                        while self._gen == gen and not self._stopped:
                            self._cond.wait(1.0)
                    finally:
                        self.stalled -= 1
                continue                       # the new mode answers it
            if kind == "status":
                _, code, custom, message, type_, extra = fault
                out = custom if custom is not None else error_body(code, message, type_)
                hdrs = dict(extra)
                if isinstance(out, (bytes, str)):
                    hdrs.setdefault("Content-Type", "application/json")
                return code, hdrs, out
            if kind == "delay":
                time.sleep(fault[1])
            # 2. authentication
            if auth and auth[0] == "oauth" and path == self.upstream_prefix + TOKEN_PATH and h.command == "POST":
                return self._token(auth, body, headers)
            if auth and auth[0] == "sigv4":
                denied = check_sigv4(auth, h.command, path, query, headers, body)
                if denied:
                    return 403, {"Content-Type": "application/json"}, json.dumps(
                        {"error": {"message": denied, "type": "SignatureDoesNotMatch", "code": 403}}).encode()
            elif auth:
                denied = self._check_bearer(auth, headers)
                if denied:
                    return self._auth_error(denied)
            # 3. the catalog's answer, spoiled or tagged as asked
            status, rh, rb = self._forward(h, path, query, body, headers)
            if kind == "lost":
                raise _Drop()
            if kind == "malformed" and status == 200:
                status, rb = spoil(fault[1], status, rb)
                rh = {k: v for k, v in rh.items() if k.lower() != "content-encoding"}
            if etag and status == 200 and re.search(LOAD_TABLE, line):
                tag = '"%s"' % hashlib.sha256(rb).hexdigest()[:32]
                rh["ETag"] = tag
                inm = headers.get("If-None-Match")
                if inm and (inm.strip() == "*" or tag in [t.strip() for t in inm.split(",")]):
                    return 304, {"ETag": tag}, b""
            return status, rh, rb

    def _check_bearer(self, auth, headers):
        value = headers.get("Authorization") or ""
        if not value.lower().startswith("bearer "):
            return "missing bearer token" if not value else "not a bearer token"
        tok = value[7:].strip()
        if auth[0] == "token":
            return None if tok == auth[1] else "invalid token"
        with self._cond:
            exp = self.tokens.get(tok)
        if exp is None:
            return "unknown token"
        if time.time() >= exp:
            return "token expired"
        return None

    def _token(self, auth, body, headers):
        _, client_id, client_secret, expires_in, fixed = auth
        form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}
        basic = headers.get("Authorization") or ""
        if basic.lower().startswith("basic "):
            try:
                cid, _, csec = base64.b64decode(basic[6:]).decode().partition(":")
                form.setdefault("client_id", urllib.parse.unquote(cid))
                form.setdefault("client_secret", urllib.parse.unquote(csec))
            except ValueError:
                pass
        if form.get("grant_type") != "client_credentials":
            return 400, {}, {"error": "unsupported_grant_type",
                             "error_description": "grant_type %r is not client_credentials" % form.get("grant_type")}
        if form.get("client_id") != client_id or form.get("client_secret") != client_secret:
            return 401, {}, {"error": "invalid_client", "error_description": "unknown client or wrong secret"}
        tok = fixed if fixed is not None else secrets.token_hex(16)
        with self._cond:
            self.tokens[tok] = time.time() + expires_in
        out = {"access_token": tok, "token_type": "bearer", "expires_in": expires_in,
               "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}
        if form.get("scope"):
            out["scope"] = form["scope"]
        return 200, {"Cache-Control": "no-store"}, out

    def _forward(self, h, path, query, body, headers):
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=self.timeout)
        try:
            fwd = {k: v for k, v in headers.items() if k.lower() not in HOP}
            conn.request(h.command, path + ("?" + query if query else ""), body=body or None, headers=fwd)
            r = conn.getresponse()
            data = r.read()
            rh = {k: v for k, v in r.getheaders() if k.lower() not in HOP}
            return r.status, rh, data
        except OSError as e:
            return 502, {}, error_body(502, "fault proxy: upstream %s:%d: %s" % (self.upstream_host,
                                                                             self.upstream_port, e), "BadGateway")
        finally:
            conn.close()


class _Drop(Exception):
    pass
