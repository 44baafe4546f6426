"""A loopback HTTP server that receives the alert webhooks of the delivery worker.

The extension's "finalize alerts" background worker POSTs alerts with libcurl
(see docs/design/alerts.md, "Delivery").  The integration tests point its
targets at this receiver, which runs in a background thread of the test process,
records every request and answers as the test programmed it.  Standard library
only::

    from webhook_receiver import WebhookReceiver, Respond, Stall, Reset

    with WebhookReceiver() as rx:                     # 127.0.0.1, a free port
        rx.set_hmac_key("s3cret")
        rx.respond(500, path="/pd")                   # the next request to /pd gets a 500
        rx.respond(429, headers={"Retry-After": "2"}, path="/pd")
        rx.stall(5, path="/slack")                    # answer /slack 5 s late
        rx.reset(path="/og")                          # drop the next /og connection (RST)
        ...                                           # point the target at rx.url + "/pd"
        [r] = rx.wait_for(lambda r: r.path == "/pd" and r.status == 200)
        assert r.json["event_action"] == "trigger" and r.hmac_ok

* ``WebhookReceiver(port=0, host="127.0.0.1", hmac_key=None, on_request=None)``;
  ``start()`` (returns self) / ``stop()``; also a context manager.  Properties
  ``url`` (``"http://127.0.0.1:PORT"``), ``host``, ``port``; ``url_for(path)``.
* Every request (any path; GET, POST, PUT, PATCH, DELETE) becomes a
  :class:`Request`: ``time``, ``monotonic``, ``method``, ``path`` (with the
  query), ``headers`` (dict; ``header(name)`` looks up case-insensitively),
  ``body`` (bytes, chunked bodies decoded), ``json`` (None if not JSON),
  ``hmac_ok``, ``status`` (the answer given; None while pending or when there
  was no answer), ``outcome`` (``pending``/``answered``/``reset``/
  ``client_closed``/``stopped``), ``action``, ``connection`` (a number per TCP
  connection: equal numbers mean a reused keep-alive connection), ``finished``.
* Behaviour: a queue of one-shot actions, each optionally restricted to a path
  prefix, then the default for the path, then the global default (200 ``ok``):
  ``respond(status, body=b"", headers=None, path=None, times=1)``,
  ``stall(seconds, then=None, path=None, times=1)``, ``reset(path=None, times=1)``,
  ``script(actions, path=None)``, ``set_default(action, path=None)``,
  ``pending()``, ``clear_actions()``.  Actions are :class:`Respond`,
  :class:`Stall` and :class:`Reset` (an int in ``script`` means ``Respond(int)``).
* HMAC: ``set_hmac_key(key)``; a request with ``X-Finalize-Signature:
  sha256=<hex>`` gets ``hmac_ok`` True/False (HMAC-SHA256 of the raw body,
  constant-time compare); None without a key or without the header.
  ``sign(key, body)`` builds such a header value, ``verify_signature`` checks one.
* Waiting: ``wait_for(predicate=None, timeout=30.0, count=1)`` returns the
  matching requests or raises AssertionError listing what arrived;
  ``requests(path_prefix=None)``; ``clear()`` forgets the recorded requests.

Run by hand: ``python3 test/lib/webhook_receiver.py --port 0 [--hmac-key K]``
prints ``listening on http://127.0.0.1:PORT`` and then one JSON line per
request; ``--selftest`` checks every behaviour above and prints ``selftest ok``.
"""
import argparse
import dataclasses
import hashlib
import hmac
import http.server
import itertools
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time

SIGNATURE_HEADER = "X-Finalize-Signature"
MAIN_HEADERS = ("Content-Type", "User-Agent", "Authorization", SIGNATURE_HEADER,
                "Idempotency-Key", "Expect", "Transfer-Encoding")
NO_BODY_STATUSES = (204, 304)


# -- actions ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Respond:
    """Answer with ``status``, ``body`` and extra ``headers``.

    ``body`` may be bytes, str (sent as UTF-8) or any other JSON-serialisable
    value (sent as JSON with ``Content-Type: application/json``).
    Content-Length is always sent (except for 204 and 304, which carry no body).
    """
    status: int = 200
    body: object = b"ok"
    headers: dict = None

    def __post_init__(self):
        if not 200 <= int(self.status) <= 599:
            raise ValueError("status must be 200..599, not %r" % (self.status,))

    def encode(self):
        """(body bytes, headers dict) as sent on the wire."""
        headers = dict(self.headers or {})
        body = self.body
        if body is None:
            body = b""
        elif isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
        return bytes(body), headers


@dataclasses.dataclass(frozen=True)
class Stall:
    """Keep the connection open ``seconds`` (None: until stop()), then do ``then``.

    ``then`` is another action; None means the default action for the path.
    The stall ends early, without an answer, when the client closes the
    connection (outcome ``client_closed``) or the receiver stops (``stopped``).
    """
    seconds: float = None
    then: object = None


@dataclasses.dataclass(frozen=True)
class Reset:
    """Close the connection abruptly, without an answer: SO_LINGER 0, then
    close, so the client sees a connection reset (RST)."""


DEFAULT_ACTION = Respond(200, b"ok")


def as_action(action):
    """``action`` itself, ``Respond(action)`` for an int status; a callable
    ``fn(request) -> action`` decides per request."""
    if isinstance(action, bool):
        raise TypeError("not an action: %r" % (action,))
    if isinstance(action, int):
        return Respond(action)
    if isinstance(action, (Respond, Stall, Reset)):
        return action
    if callable(action):        # decided per request: fn(request) -> action
        return action
    raise TypeError("not an action: %r" % (action,))


# -- a recorded request ---------------------------------------------------------
@dataclasses.dataclass
class Request:
    """One request as the receiver saw it (filled in further once answered)."""
    time: float                 # time.time() when the body had been read
    monotonic: float            # time.monotonic() at the same moment
    method: str
    path: str                   # as sent, query included
    headers: dict               # header name as sent -> value (repeats joined by ", ")
    body: bytes                 # raw body (chunked transfer coding removed)
    json: object                # parsed body, None if it is not JSON
    hmac_ok: object             # True/False, None without key or signature header
    connection: int             # per TCP connection, 1, 2, ...
    client: tuple               # (address, port) of the client
    status: int = None          # the status answered; None while pending or without answer
    outcome: str = "pending"    # pending, answered, reset, client_closed, stopped
    action: object = None       # the action that decided the answer
    finished: float = None      # time.monotonic() when the answer went out (or was dropped)

    def header(self, name, default=None):
        """Value of header ``name``, looked up case-insensitively."""
        name = name.lower()
        for k, v in self.headers.items():
            if k.lower() == name:
                return v
        return default

    @property
    def path_only(self):
        """The path without the query string."""
        return self.path.split("?", 1)[0]

    @property
    def text(self):
        """The body decoded as UTF-8 (invalid bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def summary(self, width=160):
        """One readable line for failure messages."""
        body = json.dumps(self.json) if self.json is not None else repr(self.body)
        if len(body) > width:
            body = body[:width] + "..."
        return "%s %s %s -> %s (%s) conn=%d hmac_ok=%s %s" % (
            time.strftime("%H:%M:%S", time.localtime(self.time)) + ".%03d" % (self.time % 1 * 1000),
            self.method, self.path, self.status, self.outcome, self.connection,
            self.hmac_ok, body)


def _parse_json(body):
    if not body:
        return None
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError:
        return None


def verify_signature(key, body, header):
    """True if ``header`` is ``sha256=<hex HMAC-SHA256(key, body)>`` (constant-time)."""
    if isinstance(key, str):
        key = key.encode()
    scheme, _, given = header.strip().partition("=")
    if scheme.strip().lower() != "sha256":
        return False
    expected = hmac.new(key, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), given.strip().lower().encode("ascii", "replace"))


def sign(key, body):
    """The ``X-Finalize-Signature`` value for ``body`` (for tests and the self-test)."""
    if isinstance(key, str):
        key = key.encode()
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


class BadRequest(Exception):
    """A request whose framing cannot be read (answered 400, connection closed)."""


# -- HTTP plumbing ------------------------------------------------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    """Reads one request after another on a connection and hands each to the
    receiver; HTTP/1.1, so connections stay open unless the client closes."""
    protocol_version = "HTTP/1.1"
    server_version = "finalize-webhook-receiver"
    sys_version = ""

    def setup(self):
        super().setup()
        # Answers go out in two writes (head, body): without TCP_NODELAY the
        # body waits for the client's delayed ACK (40 ms), as no real
        # service's answer does.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.receiver = self.server.receiver
        self.conn_id = self.receiver._connection_opened(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            self.receiver._connection_closed(self.connection)

    def log_message(self, format, *args):
        """Quiet: the receiver's records are the log."""

    def do_request(self):
        try:
            body = self._read_body()
        except BadRequest as e:
            self.close_connection = True
            self._send(Respond(400, str(e).encode()))
            return
        if body is None:                  # the client went away mid-body
            self.close_connection = True
            return
        self.receiver._handle(self, body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_request

    def _read_body(self):
        """The request body, exactly as framed (Content-Length or chunked)."""
        te = self.headers.get("Transfer-Encoding")
        if te is not None:
            if te.strip().lower() != "chunked":
                raise BadRequest("unsupported Transfer-Encoding: %s" % te)
            return self._read_chunked()
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
        except ValueError:
            raise BadRequest("bad Content-Length: %r" % length) from None
        if n < 0:
            raise BadRequest("bad Content-Length: %r" % length)
        data = self.rfile.read(n)
        return data if len(data) == n else None

    def _read_chunked(self):
        chunks = []
        while True:
            line = self.rfile.readline(65537)
            if not line:
                return None
            size = line.split(b";", 1)[0].strip()
            try:
                n = int(size, 16)
            except ValueError:
                raise BadRequest("bad chunk size line: %r" % line) from None
            if n == 0:
                break
            data = self.rfile.read(n)
            if len(data) < n:
                return None
            chunks.append(data)
            if self.rfile.readline(65537).strip() != b"":
                raise BadRequest("chunk not followed by CRLF")
        while True:                       # trailer fields, up to the empty line
            line = self.rfile.readline(65537)
            if not line:
                return None
            if line in (b"\r\n", b"\n"):
                break
        return b"".join(chunks)

    def _send(self, action):
        """Write the answer for a Respond action."""
        body, headers = action.encode()
        status = int(action.status)
        if status in NO_BODY_STATUSES:
            body = b""
        self.send_response(status)
        for k, v in headers.items():
            if k.lower() != "content-length":
                self.send_header(k, str(v))
        if status not in NO_BODY_STATUSES:
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(body)
        self.wfile.flush()

    def _reset(self):
        """Close the socket with SO_LINGER 0: the kernel sends RST, not FIN."""
        self.close_connection = True
        sock = self.connection
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # detach() marks the socket object closed, so nothing later touches
            # the descriptor number; closing it ourselves sends the RST now.
            os.close(sock.detach())
        except OSError:
            pass

    def _wait(self, seconds, stop_event):
        """Sleep up to ``seconds`` (None: forever) on ``stop_event``.

        Returns "stopped" if the receiver stopped, "client_closed" if the peer
        closed the connection meanwhile, None when the time is up."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                return None
            if stop_event.wait(left):
                return "stopped"
            if self._peer_closed():
                return "client_closed"

    def _peer_closed(self):
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


class _Server(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer whose handler threads are daemons and are not
    joined on close (the receiver closes their connections itself)."""
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, receiver):
        self.receiver = receiver
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)) or self.receiver._stopping.is_set():
            return                        # the client or stop() went away: nothing to report
        super().handle_error(request, client_address)


# -- the receiver -------------------------------------------------------------
class WebhookReceiver:
    """An HTTP/1.1 server on loopback in a background thread of this process
    that records the webhooks it receives and answers as programmed."""

    def __init__(self, port=0, host="127.0.0.1", hmac_key=None, on_request=None):
        """``port`` 0 picks a free port; ``on_request(request)`` (optional) is
        called from the handler thread once each request has been answered."""
        self.host = host
        self.port = port
        self.on_request = on_request
        self._hmac_key = hmac_key
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._requests = []
        self._queue = []                  # [(path prefix or None, action)]
        self._defaults = {}               # path prefix (None: any) -> action
        self._connections = {}            # socket -> connection number
        self._conn_ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server = None
        self._thread = None

    # -- lifecycle -------------------------------------------------------
    def start(self):
        """Bind and serve in a daemon thread; returns self."""
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server((self.host, self.port), self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="webhook-receiver:%d" % self.port, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout=5.0):
        """Stop serving and drop open connections; returns promptly even while a
        handler stalls (stalls wait on the event this sets and then give up)."""
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._connections)
        for sock in conns:                # wake handlers blocked reading a kept-alive connection
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._connections and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            self._cond.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self._server = None
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return "http://%s:%d" % (self.host, self.port)

    def url_for(self, path):
        """``url`` + ``path`` (a leading slash is added if missing)."""
        return self.url + (path if path.startswith("/") else "/" + path)

    # -- behaviour -------------------------------------------------------
    def set_hmac_key(self, key):
        """Verify ``X-Finalize-Signature`` with ``key`` (None: stop verifying)."""
        with self._lock:
            self._hmac_key = key

    def _enqueue(self, actions, path):
        with self._lock:
            self._queue.extend((path, as_action(a)) for a in actions)

    def respond(self, status, body=b"", headers=None, path=None, times=1):
        """The next ``times`` requests (under ``path``) get ``status``/``body``/``headers``."""
        self._enqueue([Respond(status, body, headers)] * times, path)

    def stall(self, seconds, then=None, path=None, times=1):
        """The next ``times`` requests (under ``path``) wait ``seconds`` (None: until
        stop() or the client gives up) before ``then`` (default: the default action)."""
        self._enqueue([Stall(seconds, then if then is None else as_action(then))] * times, path)

    def reset(self, path=None, times=1):
        """The next ``times`` requests (under ``path``) get a connection reset."""
        self._enqueue([Reset()] * times, path)

    def script(self, actions, path=None):
        """Queue several one-shot actions in order (ints mean ``Respond(int)``)."""
        self._enqueue(list(actions), path)

    def set_default(self, action, path=None):
        """What requests (under ``path``) get once no queued action applies.
        The longest matching path prefix wins; ``path=None`` is the fallback
        (initially 200 ``ok``).  ``action=None`` removes a path's default."""
        with self._lock:
            if action is None:
                if path is None:
                    self._defaults.pop(None, None)
                else:
                    self._defaults.pop(path, None)
            else:
                self._defaults[path] = as_action(action)

    def pending(self):
        """The queued one-shot actions, [(path prefix, action)], in order."""
        with self._lock:
            return list(self._queue)

    def clear_actions(self):
        """Drop queued actions and defaults (back to 200 ``ok`` for everything)."""
        with self._lock:
            self._queue.clear()
            self._defaults.clear()

    def _default_for(self, path):
        best = None
        for prefix, action in self._defaults.items():
            if prefix is not None and path.startswith(prefix):
                if best is None or len(prefix) > len(best[0]):
                    best = (prefix, action)
        if best is not None:
            return best[1]
        return self._defaults.get(None, DEFAULT_ACTION)

    def _next_action(self, path):
        for i, (prefix, action) in enumerate(self._queue):
            if prefix is None or path.startswith(prefix):
                del self._queue[i]
                return action
        return self._default_for(path)

    # -- recorded requests -----------------------------------------------
    def requests(self, path_prefix=None):
        """A copy of the list of recorded requests (those under ``path_prefix``)."""
        with self._lock:
            return [r for r in self._requests
                    if path_prefix is None or r.path.startswith(path_prefix)]

    def clear(self):
        """Forget the recorded requests (queued actions stay)."""
        with self._lock:
            self._requests.clear()

    def wait_for(self, predicate=None, timeout=30.0, count=1):
        """Wait until at least ``count`` recorded requests satisfy ``predicate``
        (None: any request) and return all the matching ones.  Re-evaluated on
        each arrival and each answer, so a predicate may test ``r.status``.
        On timeout raises AssertionError with a summary of what arrived."""
        pred = predicate or (lambda r: True)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                matches = [r for r in self._requests if pred(r)]
                if len(matches) >= count:
                    return matches
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(self._timeout_message(timeout, count, len(matches)))
                self._cond.wait(left)

    def _timeout_message(self, timeout, count, matched):
        lines = ["no %d matching request(s) within %.1fs at %s (%d matched); %d received%s"
                 % (count, timeout, self.url, matched, len(self._requests),
                    ":" if self._requests else "")]
        shown = self._requests[-40:]
        if len(shown) < len(self._requests):
            lines.append("  ... %d earlier ones left out" % (len(self._requests) - len(shown)))
        lines += ["  " + r.summary() for r in shown]
        if self._queue:
            lines.append("  still queued: %s" % ", ".join("%s %r" % (p or "*", a) for p, a in self._queue))
        return "\n".join(lines)

    # -- called from handler threads -------------------------------------
    def _connection_opened(self, sock):
        with self._lock:
            n = next(self._conn_ids)
            self._connections[sock] = n
            return n

    def _connection_closed(self, sock):
        with self._cond:
            self._connections.pop(sock, None)
            self._cond.notify_all()

    def _settle(self, req, status, outcome):
        """Record how ``req`` ended and wake the waiters."""
        with self._cond:
            req.status, req.outcome, req.finished = status, outcome, time.monotonic()
            self._cond.notify_all()

    def _handle(self, handler, body):
        """Record the request, pick its action and carry it out."""
        headers = {}
        for k, v in handler.headers.items():
            headers[k] = headers[k] + ", " + v if k in headers else v
        with self._cond:
            key = self._hmac_key
            sig = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER.lower()), None)
            req = Request(time=time.time(), monotonic=time.monotonic(), method=handler.command,
                          path=handler.path, headers=headers, body=body, json=_parse_json(body),
                          hmac_ok=None if key is None or sig is None else verify_signature(key, body, sig),
                          connection=handler.conn_id, client=tuple(handler.client_address[:2]))
            self._requests.append(req)
            action = self._next_action(req.path)
            if callable(action):
                action = as_action(action(req))
            req.action = action
            self._cond.notify_all()
        # The record is settled before the answer goes out, so a client that
        # has its answer (or its reset) always finds the request complete.
        try:
            while req.outcome == "pending":
                if isinstance(action, Stall):
                    outcome = handler._wait(action.seconds, self._stopping)
                    if outcome is None:
                        with self._lock:
                            action = action.then or self._default_for(req.path)
                    else:
                        handler.close_connection = True
                        self._settle(req, None, outcome)
                elif isinstance(action, Reset):
                    self._settle(req, None, "reset")
                    handler._reset()
                else:
                    if self._stopping.is_set():
                        handler.close_connection = True
                    self._settle(req, int(action.status), "answered")
                    handler._send(action)
        except BaseException:
            if req.outcome in ("pending", "answered"):     # the answer could not be written
                self._settle(req, req.status, "client_closed")
            raise
        finally:
            if self.on_request is not None:
                try:
                    self.on_request(req)
                except Exception as e:    # a broken callback must not break the server
                    print("webhook_receiver: on_request failed: %r" % (e,), file=sys.stderr)


def start(**options):
    """Shortcut: WebhookReceiver(**options).start()."""
    return WebhookReceiver(**options).start()


# -- command line -------------------------------------------------------------
def _mask(name, value):
    """Hide secrets in printed headers (keep the scheme word)."""
    if name.lower() == "authorization":
        scheme, _, rest = value.partition(" ")
        return scheme + " ***" if rest else "***"
    return value


def _json_line(req):
    """The line ``__main__`` prints for a request."""
    out = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(req.time)) + ".%03dZ" % (req.time % 1 * 1000),
        "method": req.method,
        "path": req.path,
        "status": req.status,
        "outcome": req.outcome,
        "connection": req.connection,
        "headers": {h: _mask(h, req.header(h)) for h in MAIN_HEADERS if req.header(h) is not None},
        "hmac_ok": req.hmac_ok,
    }
    if req.json is not None:
        out["json"] = req.json
    elif req.body:
        out["body"] = req.text
    return json.dumps(out, ensure_ascii=False)


def _serve(port, hmac_key):
    """Serve until SIGTERM/SIGINT, printing one JSON line per request."""
    def printer(req):
        sys.stdout.write(_json_line(req) + "\n")
        sys.stdout.flush()

    # Blocked before the server threads exist (they inherit the mask), so the
    # signals stay pending until sigwait() takes them in the main thread.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    with WebhookReceiver(port=port, hmac_key=hmac_key, on_request=printer) as rx:
        print("listening on %s" % rx.url, flush=True)
        signal.sigwait(stop_signals)
    return 0


# -- self-test ----------------------------------------------------------------
def _selftest():
    """Exercise each behaviour against a real receiver with http.client/urllib."""
    import http.client
    import urllib.error
    import urllib.request

    def post(rx, path, body=b"{}", headers=None, timeout=10):
        req = urllib.request.Request(rx.url_for(path), data=body, method="POST",
                                     headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    with WebhookReceiver() as rx:
        assert rx.url == "http://127.0.0.1:%d" % rx.port and rx.port > 0

        # default 200 "ok"; JSON parsed; case-insensitive header lookup
        st, _, body = post(rx, "/any?x=1", b'{"a": 1}')
        assert (st, body) == (200, b"ok"), (st, body)
        [r] = rx.wait_for(lambda r: r.path == "/any?x=1")
        assert r.json == {"a": 1} and r.method == "POST" and r.path_only == "/any"
        assert r.header("content-type") == "application/json" and r.hmac_ok is None

        # 500, then 429 with Retry-After, restricted to a path; other paths unaffected
        rx.respond(500, b"boom", path="/pd")
        rx.respond(429, headers={"Retry-After": "2"}, path="/pd")
        assert post(rx, "/slack")[0] == 200
        st, _, body = post(rx, "/pd")
        assert (st, body) == (500, b"boom"), (st, body)
        st, hdrs, _ = post(rx, "/pd")
        assert st == 429 and hdrs.get("Retry-After") == "2", (st, hdrs)
        assert post(rx, "/pd")[0] == 200
        assert [r.status for r in rx.requests("/pd")] == [500, 429, 200]

        # script and per-path default
        rx.script([503, Respond(201, {"id": 7})], path="/og")
        rx.set_default(Respond(202, "accepted"), path="/og")
        assert [post(rx, "/og")[0] for _ in range(3)] == [503, 201, 202]
        assert post(rx, "/slack")[0] == 200
        rx.clear_actions()
        assert post(rx, "/og")[0] == 200

        # stall 1 s: the request is recorded at once, answered a second later
        rx.stall(1.0, path="/slow")
        t0 = time.monotonic()
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("r", post(rx, "/slow")))
        th.start()
        [r] = rx.wait_for(lambda r: r.path == "/slow", timeout=5)
        assert r.outcome == "pending" and r.status is None
        th.join(10)
        elapsed = time.monotonic() - t0
        assert box["r"][0] == 200 and 0.9 <= elapsed < 5, (box, elapsed)
        assert r.status == 200 and r.outcome == "answered" and r.finished - r.monotonic >= 0.9

        # reset: the client sees a connection error, no HTTP answer
        rx.reset(path="/rst")
        try:
            post(rx, "/rst")
        except (ConnectionError, urllib.error.URLError) as e:
            assert isinstance(getattr(e, "reason", e), ConnectionResetError), repr(e)
        else:
            raise AssertionError("reset: the client got an answer")
        [r] = rx.wait_for(lambda r: r.path == "/rst" and r.outcome != "pending")
        assert r.outcome == "reset" and r.status is None

        # HMAC: good, bad, absent, no key
        rx.set_hmac_key("k3y")
        payload = b'{"alert": 1}'
        post(rx, "/h/good", payload, {SIGNATURE_HEADER: sign("k3y", payload)})
        post(rx, "/h/bad", payload, {SIGNATURE_HEADER: sign("other", payload)})
        post(rx, "/h/junk", payload, {SIGNATURE_HEADER: "md5=abc"})
        post(rx, "/h/none", payload)
        rx.set_hmac_key(None)
        post(rx, "/h/nokey", payload, {SIGNATURE_HEADER: sign("k3y", payload)})
        got = {r.path: r.hmac_ok for r in rx.wait_for(lambda r: r.path.startswith("/h/"), count=5)}
        assert got == {"/h/good": True, "/h/bad": False, "/h/junk": False,
                       "/h/none": None, "/h/nokey": None}, got

        # chunked request body, then keep-alive: several requests on one connection
        conn = http.client.HTTPConnection("127.0.0.1", rx.port, timeout=10)
        conn.request("POST", "/chunked", body=iter([b'{"par', b't": ', b'"two"}']),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, b"ok")
        rx.respond(500, path="/ka")
        for expected in (500, 200):
            conn.request("PUT", "/ka", body=b"x" * 3000, headers={"Content-Type": "text/plain"})
            resp = conn.getresponse()
            assert resp.status == expected and resp.getheader("Content-Length") is not None
            resp.read()
        conn.request("GET", "/ka/get")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == b"ok"
        conn.close()
        [c] = rx.requests("/chunked")
        assert c.json == {"part": "two"} and c.header("transfer-encoding") == "chunked", c
        ka = rx.requests("/ka")
        assert [r.status for r in ka] == [500, 200, 200] and [r.method for r in ka] == ["PUT", "PUT", "GET"]
        assert len({r.connection for r in ka + [c]}) == 1, [r.connection for r in ka + [c]]
        assert all(r.body == b"x" * 3000 for r in ka[:2])

        # Expect: 100-continue (libcurl sends it for large bodies)
        conn = http.client.HTTPConnection("127.0.0.1", rx.port, timeout=10)
        conn.putrequest("POST", "/expect")
        conn.putheader("Content-Length", "5")
        conn.putheader("Expect", "100-continue")
        conn.endheaders()
        conn.sock.settimeout(5)
        assert conn.sock.recv(1024).startswith(b"HTTP/1.1 100")
        conn.send(b"hello")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == b"ok"
        conn.close()
        assert rx.requests("/expect")[0].body == b"hello"

        # wait_for timeout: a readable AssertionError
        try:
            rx.wait_for(lambda r: r.path == "/never", timeout=0.2)
        except AssertionError as e:
            assert "0 matched" in str(e) and "/expect" in str(e), str(e)
        else:
            raise AssertionError("wait_for did not time out")

        rx.clear()
        assert rx.requests() == []

        # stop() returns promptly while a handler stalls indefinitely and a
        # kept-alive connection sits idle
        idle = http.client.HTTPConnection("127.0.0.1", rx.port, timeout=10)
        idle.request("GET", "/idle")
        idle.getresponse().read()
        rx.stall(None, path="/forever")
        th = threading.Thread(target=lambda: box.setdefault("f", _swallow(post, rx, "/forever")))
        th.start()
        [r] = rx.wait_for(lambda r: r.path == "/forever", timeout=5)
        t0 = time.monotonic()
        rx.stop()
        assert time.monotonic() - t0 < 2, time.monotonic() - t0
        th.join(5)
        assert r.outcome == "stopped" and r.status is None, r
        idle.close()

    # a stall ends when the client gives up
    with WebhookReceiver() as rx:
        rx.stall(None)
        _swallow(post, rx, "/gone", timeout=0.5)
        [r] = rx.wait_for(lambda r: r.outcome != "pending", timeout=5)
        assert r.outcome == "client_closed", r

    print("selftest ok")
    return 0


def _swallow(fn, *args, **kw):
    """fn(*args, **kw), or the exception it raised."""
    try:
        return fn(*args, **kw)
    except Exception as e:
        return e


def main(argv=None):
    ap = argparse.ArgumentParser(description="Loopback webhook receiver for the finalize tests.")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    ap.add_argument("--hmac-key", help="verify X-Finalize-Signature with this key")
    ap.add_argument("--selftest", action="store_true", help="check the receiver and exit")
    args = ap.parse_args(argv)
    if args.selftest:
        return _selftest()
    return _serve(args.port, args.hmac_key)


if __name__ == "__main__":
    sys.exit(main())
