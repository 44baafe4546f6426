"""A minimal raw TDS 7.1-7.4 client for byte-level checks of the simulator's responses (optionally over
TLS negotiated in PRELOGIN, like SQL Server clients do)."""
import socket
import ssl
import struct


def _b_varchar(s):
    return bytes([len(s)]) + s.encode("utf-16-le")


def crypt(pw):
    out = bytearray()
    for b in pw.encode("utf-16-le"):
        out.append((((b << 4) & 0xF0) | (b >> 4)) ^ 0xA5)
    return bytes(out)


class Raw:
    """Speaks just enough TDS: PRELOGIN, LOGIN7, batches, attention; returns raw packets."""

    def __init__(self, port, packet_size=4096, tds=0x74000004):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.packet_size = packet_size
        self.tds = tds              # TDSVersion sent in LOGIN7 (ALL_HEADERS and LOGIN7 size follow it)
        self.tls = None             # ssl.SSLObject once start_tls() is done (None again after login-only)
        self.login_only = False
        self.plain = bytearray()    # decrypted bytes not yet consumed
        self.wire_in = bytearray()  # every raw byte received from the socket
        self.handshake_messages = []    # per server flight: list of (type, status, length) of its packets

    def _send_raw(self, data):
        if self.tls is not None:
            self.tls.write(data)
            data = self._outb.read()
        self.sock.sendall(data)

    def _sock_recv(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("server closed")
        self.wire_in += chunk
        return chunk

    def send(self, typ, payload, status=1):
        self._send_raw(struct.pack(">BBHHBB", typ, status, len(payload) + 8, 0, 1, 0) + payload)
        if self.login_only and typ == 0x10:
            self.tls = None         # login-only encryption: only the LOGIN7 packet goes through TLS

    def recv_exact(self, n):
        while len(self.plain) < n:
            if self.tls is None:
                self.plain += self._sock_recv()
                continue
            try:
                self.plain += self.tls.read(65536)
            except ssl.SSLWantReadError:
                self._inb.write(self._sock_recv())
        data = bytes(self.plain[:n])
        del self.plain[:n]
        return data

    def start_tls(self, cafile=None, hostname=None, login_only=False):
        """Client side of the TLS handshake in PRELOGIN (0x12) packets, after prelogin() got an answer
        that agrees on encryption: each flight goes out as one 0x12 packet, each server flight is read
        as one message (kept in ``handshake_messages``).  Verifies against ``cafile`` (and ``hostname``)
        if given.  Returns (protocol, cipher)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        if cafile:
            ctx.load_verify_locations(cafile)
            ctx.check_hostname = hostname is not None
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        self._inb, self._outb = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(self._inb, self._outb, server_hostname=hostname)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                out = self._outb.read()
                if out:
                    self.send(0x12, out)
                pkts, payload = self.message()
                self.handshake_messages.append([p[:3] for p in pkts])
                self._inb.write(payload)
        out = self._outb.read()
        if out:
            self.send(0x12, out)
        self.tls = tls
        self.login_only = login_only
        return tls.version(), tls.cipher()[0]

    def packet(self):
        """-> (type, status, length, spid, payload)"""
        hdr = self.recv_exact(8)
        typ, status, length, spid, _, _ = struct.unpack(">BBHHBB", hdr)
        return typ, status, length, spid, self.recv_exact(length - 8)

    def message(self):
        """All packets of one message -> (packets list, payload)."""
        pkts = []
        while True:
            p = self.packet()
            pkts.append(p)
            if p[1] & 1:
                return pkts, b"".join(x[4] for x in pkts)

    def prelogin(self, encryption=0x02):
        """Send PRELOGIN with that ENCRYPTION byte (None: without the option) -> the reply packet."""
        opts = [(0, b"\x0f\x00\x07\xd0\x00\x00"), (1, bytes([encryption or 0])), (2, b"\x00"),
                (3, b"\x00\x00\x00\x00"), (4, b"\x00")]
        if encryption is None:
            del opts[1]
        off = 5 * len(opts) + 1
        table, data = b"", b""
        for tok, d in opts:
            table += struct.pack(">BHH", tok, off + len(data), len(d))
            data += d
        self.send(0x12, table + b"\xff" + data)
        return self.packet()

    def login(self, user="sa", password="Passw0rd!", database="demo", flags2=0x03, features=None, feature_ext=None,
              sspi=None):
        """LOGIN7 with SQL authentication; ``flags2`` is OptionFlags2 (default fLanguage + fODBC, as FreeTDS,
        the ODBC and the JDBC drivers send it).  ``features`` [(FeatureId, data)] adds a FeatureExt (TDS 7.4:
        fExtension in OptionFlags3, ibExtension pointing to its offset, TERMINATOR appended); ``feature_ext``
        gives the FeatureExt bytes as they are (to send a malformed one).  ``sspi`` (bytes): a Windows login,
        fIntSecurity (0x80) in OptionFlags2 and the blob at ibSSPI/cbSSPI."""
        if features is not None:
            feature_ext = b"".join(bytes([f]) + struct.pack("<I", len(d)) + d for f, d in features) + b"\xff"
        fields = [("host", "rawhost"), ("user", user), ("pw", None), ("app", "raw"), ("server", "x"),
                  ("ext", ""), ("lib", "raw"), ("lang", ""), ("db", database)]
        var = b""
        offs = []
        pos = fixed = 94 if self.tds >= 0x72000000 else 86
        for name, val in fields:
            raw = crypt(password) if name == "pw" else (val or "").encode("utf-16-le")
            if name == "ext" and feature_ext is not None:
                raw = b"\x00\x00\x00\x00"          # the DWORD offset of FeatureExt, filled in below
            offs.append((pos + len(var), len(raw) if name == "ext" else len(raw) // 2))
            var += raw
        sspi_at = (pos + len(var), len(sspi)) if sspi else (0, 0)
        if sspi:
            flags2 |= 0x80
            var += sspi
        ext_at = None
        if feature_ext is not None:
            ext_at = offs[5][0] - pos
            var = var[:ext_at] + struct.pack("<I", pos + len(var)) + var[ext_at + 4:] + feature_ext
        head = struct.pack("<IIIIII", 0, self.tds, self.packet_size, 7, 1234, 0)
        head += bytes([0xE0, flags2, 0, 0x10 if feature_ext is not None else 0]) + struct.pack("<iI", 0, 0x409)
        for o, n in offs:
            head += struct.pack("<HH", o, n)
        head += b"\x00" * 6 + struct.pack("<HH", *sspi_at) + struct.pack("<HH", 0, 0)
        if fixed == 94:
            head += struct.pack("<HH", 0, 0) + struct.pack("<I", 0)
        assert len(head) == fixed, len(head)
        payload = head + var
        payload = struct.pack("<I", len(payload)) + payload[4:]
        self.send(0x10, payload)
        return self.message()

    def batch(self, sql):
        """Send a SQL batch (with ALL_HEADERS from TDS 7.2, as clients do)."""
        headers = struct.pack("<IIHQI", 22, 18, 2, 0, 1) if self.tds >= 0x72000000 else b""
        self.send(0x01, headers + sql.encode("utf-16-le"))

    def attention(self):
        self.send(0x06, b"")

    def close(self):
        self.sock.close()


def prelogin_options(payload):
    """PRELOGIN option table -> {token: bytes}."""
    i, opts = 0, {}
    while payload[i] != 0xFF:
        tok, off, ln = payload[i], *struct.unpack(">HH", payload[i + 1:i + 5])
        opts[tok] = payload[off:off + ln]
        i += 5
    return opts


def loginack_version(payload):
    """The TDS version a login response's LOGINACK (0xAD) announces, as the 32-bit value of its
    big-endian bytes (e.g. 0x74000004), or None without a LOGINACK."""
    i = 0
    while i < len(payload) and payload[i] in (0xAA, 0xAB, 0xAD, 0xE3):
        n = struct.unpack_from("<H", payload, i + 1)[0]
        if payload[i] == 0xAD:
            return struct.unpack_from(">I", payload, i + 4)[0]
        i += 3 + n
    return None


def tokens(payload, done_size=13):
    """Very small token walker for DONE tokens: -> list of (token, status) for DONE/DONEPROC/DONEINPROC
    found at token positions (assumes only tokens the tests produce).  ``done_size`` is 9 for TDS 7.1
    (4-byte row count)."""
    out = []
    i = 0
    while i < len(payload):
        t = payload[i]
        if t in (0xFD, 0xFE, 0xFF):
            status = struct.unpack_from("<H", payload, i + 1)[0]
            out.append((t, status))
            i += done_size
        elif t in (0xAA, 0xAB, 0xAD, 0xE3, 0xA9):
            n = struct.unpack_from("<H", payload, i + 1)[0]
            out.append((t, None))
            i += 3 + n
        elif t == 0x79:
            out.append((t, None))
            i += 5
        else:
            raise ValueError("token walker cannot skip 0x%02x at %d" % (t, i))
    return out
