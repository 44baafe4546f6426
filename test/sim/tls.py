"""TLS as SQL Server speaks it in TDS 7.x: PRELOGIN ENCRYPTION negotiation, the handshake carried in
PRELOGIN (0x12) packets, then TLS records directly on the socket (MS-TDS 2.2.6.5, 3.2.5.2, 3.3.5.2).

The session layer only sees a transport (``packets.SocketIO`` or ``TlsIO`` below) with ``recv``,
``sendall`` and ``readable``; ``packets.Channel.start_tls`` swaps one for the other."""
import ssl

from .packets import socket_readable

ENCRYPT_OFF, ENCRYPT_ON, ENCRYPT_NOT_SUP, ENCRYPT_REQ = 0, 1, 2, 3
ENCRYPT_CLIENT_CERT = 0x80

# server modes: no certificate / certificate (encryption available, off) / --force-encryption
NO_CERT, OPTIONAL, FORCED = "none", "optional", "forced"
# what follows the PRELOGIN reply
PLAIN, LOGIN_ONLY, FULL, CLOSE = "plain", "login-only", "full", "close"

# MS-TDS 2.2.6.5 "Encryption": the value the server returns for the value the client sent, per server
# setting (ENCRYPT_OFF = certificate, not forced; ENCRYPT_ON = forced; ENCRYPT_NOT_SUP = no certificate).
# "(connection terminated)" cells: the server sends that value and closes the connection.
ANSWER = {
    OPTIONAL: {ENCRYPT_OFF: (ENCRYPT_OFF, LOGIN_ONLY), ENCRYPT_ON: (ENCRYPT_ON, FULL),
               ENCRYPT_NOT_SUP: (ENCRYPT_NOT_SUP, PLAIN), ENCRYPT_REQ: (ENCRYPT_ON, FULL)},
    FORCED: {ENCRYPT_OFF: (ENCRYPT_REQ, FULL), ENCRYPT_ON: (ENCRYPT_ON, FULL),
             ENCRYPT_NOT_SUP: (ENCRYPT_REQ, CLOSE), ENCRYPT_REQ: (ENCRYPT_ON, FULL)},
    NO_CERT: {ENCRYPT_OFF: (ENCRYPT_NOT_SUP, PLAIN), ENCRYPT_ON: (ENCRYPT_NOT_SUP, CLOSE),
              ENCRYPT_NOT_SUP: (ENCRYPT_NOT_SUP, PLAIN), ENCRYPT_REQ: (ENCRYPT_NOT_SUP, CLOSE)},
}

# SQL Server's error log entry when it closes the connection of a client that cannot encrypt
# (sys.messages 17835, severity 20; it is logged, not sent: a PRELOGIN reply carries no tokens).
MSG_17835 = ("Error: 17835, Severity: 20, State: 1. Encryption is required to connect to this server but the "
             "client library does not support encryption; the connection has been closed. Please upgrade your "
             "client library.")


def negotiate(client, mode):
    """Client ENCRYPTION byte (None if the option is absent) and server mode -> (answer byte, what follows).

    A client without the option is treated as ENCRYPT_NOT_SUP.  ENCRYPT_CLIENT_CERT (0x80 | x) follows the
    spec's rows for it: with ENCRYPT_NOT_SUP the server answers ENCRYPT_REQ and terminates; certificate
    authentication itself is not modelled (the low bits decide)."""
    if client is None:
        client = ENCRYPT_NOT_SUP
    if client & ENCRYPT_CLIENT_CERT:
        low = client & 0x03
        if low == ENCRYPT_NOT_SUP:
            return ENCRYPT_REQ, CLOSE
        if mode == NO_CERT:
            return ENCRYPT_NOT_SUP, CLOSE
        client = low
    if client not in ANSWER[mode]:
        client = ENCRYPT_OFF
    return ANSWER[mode][client]


def server_context(cert, key):
    """An SSLContext for the server side, TLS 1.2 at most (TDS 7.x; TLS 1.3 breaks FreeTDS 1.3's
    handshake-in-PRELOGIN, and tedious caps at 1.2 too).  Raises on an unreadable certificate or key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


class TlsIO:
    """Transport after the handshake: TLS records directly on the socket (MemoryBIO-driven SSLObject).

    ``login_only``: encryption ends after the first client packet (LOGIN7); ``after_packet`` then hands
    over to a plain transport, without close_notify, keeping raw bytes that were read but not decrypted."""

    def __init__(self, sock, tls, inb, outb, login_only=False):
        self.sock = sock
        self.tls = tls
        self.inb = inb
        self.outb = outb
        self.login_only = login_only

    def recv(self, n):
        """At least one decrypted byte, b"" at EOF or close_notify; OSError (SSLError) on a broken stream."""
        while True:
            try:
                data = self.tls.read(max(n, 16384))
                if data:
                    return data
                return b""
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return b""
            raw = self.sock.recv(65536)
            if not raw:
                return b""
            self.inb.write(raw)

    def readable(self):
        """Is input waiting (decrypted, buffered raw bytes, or on the socket)?"""
        return bool(self.tls.pending() or self.inb.pending or socket_readable(self.sock))

    def sendall(self, data):
        self.tls.write(data)
        self.sock.sendall(self.outb.read())

    def after_packet(self):
        """The transport for what follows one whole client packet."""
        if not self.login_only:
            return self
        from .packets import SocketIO
        return SocketIO(self.sock, self.inb.read())

    def describe(self):
        return "%s %s" % (self.tls.version(), self.tls.cipher()[0])
