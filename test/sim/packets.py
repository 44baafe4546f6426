"""TDS packet framing (MS-TDS 2.2.3): reading client messages, writing split responses."""
import collections
import select
import socket
import ssl
import struct

from .errors import Attention, ClientGone

HEADER = struct.Struct(">BBHHBB")
# packet types
SQL_BATCH, PRE_TDS7_LOGIN, RPC, REPLY, ATTENTION, BULK, TRANS_MGR, LOGIN7, SSPI, PRELOGIN = \
    0x01, 0x02, 0x03, 0x04, 0x06, 0x07, 0x0E, 0x10, 0x11, 0x12
STATUS_EOM, STATUS_IGNORE, STATUS_RESET = 0x01, 0x02, 0x08


def socket_readable(sock):
    """Whether the socket has input (or EOF) waiting, without blocking: poll(), not select(), which
    refuses descriptors above 1023 (an instance of 1,000 databases holds more)."""
    p = select.poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(0))


class SocketIO:
    """Plain TCP transport (``prefix``: bytes already read from the socket, served first)."""

    def __init__(self, sock, prefix=b""):
        self.sock = sock
        self.prefix = bytearray(prefix)

    def recv(self, n):
        """Some bytes, b"" at EOF (OSError on a socket error)."""
        if self.prefix:
            data = bytes(self.prefix[:n])
            del self.prefix[:n]
            return data
        return self.sock.recv(n)

    def readable(self):
        return bool(self.prefix) or socket_readable(self.sock)

    def sendall(self, data):
        self.sock.sendall(data)

    def after_packet(self):
        return self


class Channel:
    """One client socket: reads whole messages and writes responses in packets.

    Responses are cut at the negotiated packet size with EOM only on the last
    packet; between large writes it polls the socket so an ATTENTION can stop
    a running result (``Attention`` is raised to the executor).  Bytes go
    through a transport, ``self.io``: plain TCP, or TLS after ``start_tls``."""

    def __init__(self, sock, spid):
        self.sock = sock
        self.io = SocketIO(sock)
        self.encryption = None      # None (plain), 'full', or 'login' (the LOGIN7 packet only), once TLS started
        self.spid = spid
        self.packet_size = 4096
        self.tds = 0x74000004       # negotiated TDS version (LOGINACK); DONE tokens depend on it
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.packet_id = 1
        self.attention = False      # an ATTENTION packet was seen and not yet acknowledged
        self.pending = []           # whole messages read while polling for attention
        self.in_message = False     # some packets of the current response were sent
        self.sent = 0               # bytes of the current message already sent
        self.written = 0            # bytes of the current message written (sent + buffered)
        self.bounds = collections.deque()   # token boundaries (ends of write() calls) not yet sent

    # --- reading -------------------------------------------------------------

    def _recv(self, n):
        """Read exactly n bytes (ClientGone on EOF or a socket error)."""
        while len(self.rbuf) < n:
            try:
                chunk = self.io.recv(max(65536, n - len(self.rbuf)))
            except OSError as e:
                raise ClientGone(str(e))
            if not chunk:
                raise ClientGone("EOF")
            self.rbuf += chunk
        data = bytes(self.rbuf[:n])
        del self.rbuf[:n]
        return data

    def read_packet(self):
        """One packet -> (type, status, payload)."""
        typ, status, length, _spid, _pid, _win = HEADER.unpack(self._recv(8))
        if length < 8:
            raise ClientGone("bad packet length %d" % length)
        payload = self._recv(length - 8)
        self.io = self.io.after_packet()        # login-only encryption ends after the LOGIN7 packet
        return typ, status, payload

    def read_message(self):
        """A whole client message (packets up to EOM) -> (type, status, payload)."""
        if self.pending:
            return self.pending.pop(0)
        typ, status, payload = self.read_packet()
        parts = [payload]
        while not status & STATUS_EOM and typ != ATTENTION:
            t2, status, payload = self.read_packet()
            if t2 == ATTENTION:
                self.attention = True
                return ATTENTION, STATUS_EOM, b""
            parts.append(payload)
        return typ, status, b"".join(parts)

    def poll(self):
        """Non-blocking check for client input during a response; raises Attention.

        An ATTENTION packet sets the flag; EOF raises ClientGone; any other
        message is kept for later (clients without MARS should not send one)."""
        if self.attention:
            raise Attention()
        while self.rbuf or self.io.readable():
            if len(self.rbuf) < 8:
                try:
                    chunk = self.io.recv(65536)
                except OSError as e:
                    raise ClientGone(str(e))
                if not chunk:
                    raise ClientGone("EOF")
                self.rbuf += chunk
                if len(self.rbuf) < 8:
                    continue
            typ = self.rbuf[0]
            if typ == ATTENTION:
                self.read_packet()
                self.attention = True
                raise Attention()
            self.pending.append(self.read_message())
        return False

    # --- writing -------------------------------------------------------------

    def write(self, data):
        """Queue whole tokens; each packet is sent once full, as SQL Server does: a client's timeout
        (DB-Library's dbsettime) waits for the next packet, never for a whole batch. (Holding 256 KB back
        made a 520-range batch answer nothing for over 30 s on a loaded machine: every attempt timed out.)"""
        self.wbuf += data
        self.written += len(data)
        self.bounds.append(self.written)
        if len(self.wbuf) > self.packet_size - 8:
            self._send_full_packets()

    def _packets(self, data, last, typ=REPLY):
        size = self.packet_size - 8
        out = []
        n = len(data)
        pos = 0
        mv = memoryview(data)
        while pos < n or (last and pos == 0 and n == 0):
            chunk = mv[pos:pos + size]
            pos += len(chunk)
            eom = last and pos >= n
            out.append(HEADER.pack(typ, STATUS_EOM if eom else 0, len(chunk) + 8,
                                   self.spid, self.packet_id, 0))
            out.append(chunk)
            self.packet_id = (self.packet_id + 1) & 0xFF
            if eom:
                break
        return b"".join(out)

    def _sendall(self, data):
        try:
            self.io.sendall(data)
        except OSError as e:
            raise ClientGone(str(e))

    def _send_full_packets(self):
        """Send every complete packet but keep at least one byte for the EOM packet."""
        size = self.packet_size - 8
        n = (len(self.wbuf) - 1) // size * size
        if n <= 0:
            return
        self.poll()
        data = bytes(self.wbuf[:n])
        del self.wbuf[:n]
        self._sendall(self._packets(data, last=False))
        self.in_message = True
        self.sent += n
        while self.bounds and self.bounds[0] < self.sent:
            self.bounds.popleft()

    def flush_partial(self):
        """Send everything buffered as non-final packets (used to cut a result short on purpose)."""
        if self.wbuf:
            data = bytes(self.wbuf)
            self.wbuf.clear()
            self._reset_counters()
            self._sendall(self._packets(data, last=False))

    def end_message(self):
        """Send what is buffered as the final packet(s) of the message (EOM)."""
        data = bytes(self.wbuf)
        self.wbuf.clear()
        self._reset_counters()
        self._sendall(self._packets(data, last=True))
        self.in_message = False

    def _reset_counters(self):
        self.sent = self.written = 0
        self.bounds.clear()

    def discard(self):
        """Drop buffered, unsent tokens (after an attention) but keep the rest of a token
        whose first bytes already went out, so the stream stays parseable."""
        keep = 0
        if self.sent and not (self.bounds and self.bounds[0] == self.sent):
            keep = (self.bounds[0] - self.sent) if self.bounds else len(self.wbuf)
        del self.wbuf[keep:]
        self.written = self.sent + keep
        self.bounds.clear()
        self.bounds.append(self.written)

    def send_message(self, data):
        """Send a complete one-message response."""
        self.wbuf += data
        self.end_message()

    def send_raw_packet(self, typ, payload):
        """Send a single packet with EOM (the PRELOGIN reply)."""
        self._sendall(HEADER.pack(typ, STATUS_EOM, len(payload) + 8, self.spid, 1, 0) + payload)

    # --- TLS ---------------------------------------------------------------------

    def start_tls(self, context, login_only):
        """Server side of the TLS handshake carried in PRELOGIN (0x12) packets, then switch the
        transport to TLS records on the socket (MS-TDS 2.2.6.5, 3.3.5.2).

        Each server flight goes out as one message of 0x12 packets (cut at the packet size, EOM on
        the last), answering the client packet that completed the client's flight: tedious sends one
        PRELOGIN message per flight and reads exactly one message back; FreeTDS reads packets until
        its TLS library is satisfied.  Returns a description (protocol, cipher); ClientGone if the
        handshake fails or the client leaves (e.g. after rejecting the certificate)."""
        inb, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(inb, outb, server_side=True)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                out = outb.read()
                if out:
                    self._sendall(self._packets(out, last=True, typ=PRELOGIN))
                typ, _status, payload = self.read_packet()
                if typ != PRELOGIN:
                    raise ClientGone("expected a TLS handshake packet (0x12), got type 0x%02x" % typ)
                inb.write(payload)
            except ssl.SSLError as e:
                out = outb.read()           # the alert, if any
                if out:
                    try:
                        self._sendall(self._packets(out, last=True, typ=PRELOGIN))
                    except ClientGone:
                        pass
                raise ClientGone("TLS handshake failed: %s" % e)
        out = outb.read()
        if out:
            self._sendall(self._packets(out, last=True, typ=PRELOGIN))
        from .tls import TlsIO
        self.io = TlsIO(self.sock, tls, inb, outb, login_only=login_only)
        self.encryption = "login" if login_only else "full"
        if self.rbuf:                        # raw TLS bytes read along with the last handshake packet
            inb.write(bytes(self.rbuf))
            self.rbuf.clear()
        return self.io.describe()

    def close(self):
        """Close the socket, ignoring errors (the client may be gone already)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
