"""PRELOGIN reply and LOGIN7 decoding (MS-TDS 2.2.6.4, 2.2.6.5)."""
import struct
from dataclasses import dataclass

from .sqltypes import TDS_VERSIONS

ENCRYPT_OFF, ENCRYPT_ON, ENCRYPT_NOT_SUP, ENCRYPT_REQ = 0, 1, 2, 3


def parse_prelogin(payload):
    """Option table -> {token: bytes}.  Tolerant: clients only need our reply."""
    opts, i = {}, 0
    while i < len(payload) and payload[i] != 0xFF:
        if i + 5 > len(payload):
            break
        tok, off, ln = payload[i], *struct.unpack(">HH", payload[i + 1:i + 5])
        opts[tok] = payload[off:off + ln]
        i += 5
    return opts


def prelogin_reply(version=(15, 0, 2000), encryption=ENCRYPT_NOT_SUP):
    """PRELOGIN response: VERSION, ENCRYPTION (the negotiated byte, see tls.negotiate), INSTOPT,
    THREADID, MARS off."""
    major, minor, build = version
    data = [
        (0x00, struct.pack(">BBHH", major, minor, build, 0)),
        (0x01, bytes([encryption])),
        (0x02, b"\x00"),
        (0x03, b""),
        (0x04, b"\x00"),
    ]
    table_len = 5 * len(data) + 1
    table, body, off = b"", b"", table_len
    for tok, d in data:
        table += struct.pack(">BHH", tok, off, len(d))
        body += d
        off += len(d)
    return table + b"\xff" + body


@dataclass
class Login:
    """What the server needs from LOGIN7."""
    tds_version: int
    packet_size: int
    hostname: str
    username: str
    password: str
    appname: str
    servername: str
    client_interface: str
    database: str
    language: str
    sspi: bool                      # OptionFlags2 fIntSecurity (0x80): Windows authentication
    odbc: bool = False              # OptionFlags2 fODBC (0x02): ODBC defaults, among them TEXTSIZE infinite
    features: list = None           # [(FeatureId, FeatureData)] of FeatureExt (TDS 7.4), in the client's order
    sspi_blob: bytes = b""          # the SSPI data (ibSSPI, cbSSPI or cbSSPILong): NTLM NEGOTIATE or an AP-REQ


# LOGIN7 FeatureExt feature ids (MS-TDS 2.2.6.4) and the names the simulator logs them by.
FEATURE_NAMES = {0x01: "SESSIONRECOVERY", 0x02: "FEDAUTH", 0x04: "COLUMNENCRYPTION", 0x05: "GLOBALTRANSACTIONS",
                 0x08: "AZURESQLSUPPORT", 0x09: "DATACLASSIFICATION", 0x0A: "UTF8_SUPPORT",
                 0x0B: "AZURESQLDNSCACHING", 0x0D: "JSONSUPPORT", 0x0E: "VECTORSUPPORT",
                 0x0F: "ENHANCEDROUTINGSUPPORT", 0x10: "USERAGENT"}
UTF8_SUPPORT = 0x0A
FEATURE_TERMINATOR = 0xFF


def feature_name(fid):
    return FEATURE_NAMES.get(fid, "0x%02X" % fid)


def parse_feature_ext(p):
    """LOGIN7 FeatureExt (MS-TDS 2.2.6.4): when OptionFlags3 has fExtension (0x10), ibExtension/cbExtension
    point to a DWORD holding the offset of FeatureExt: FeatureOpt* (FeatureId BYTE, FeatureDataLen DWORD,
    FeatureData) ended by TERMINATOR 0xFF.  -> [(id, data)] or None without fExtension; ValueError when the
    structure does not hold (offsets outside the packet, no terminator)."""
    if not p[27] & 0x10:
        return None
    ib, cb = struct.unpack("<HH", p[56:60])
    if cb != 4 or ib + 4 > len(p):
        raise ValueError("LOGIN7 fExtension with cbExtension %d at %d" % (cb, ib))
    off = struct.unpack("<I", p[ib:ib + 4])[0]
    out = []
    while True:
        if off >= len(p):
            raise ValueError("LOGIN7 FeatureExt without TERMINATOR")
        fid = p[off]
        if fid == FEATURE_TERMINATOR:
            return out
        if off + 5 > len(p):
            raise ValueError("LOGIN7 FeatureExt truncated")
        n = struct.unpack("<I", p[off + 1:off + 5])[0]
        if off + 5 + n > len(p):
            raise ValueError("LOGIN7 FeatureExt data of feature 0x%02X past the packet" % fid)
        out.append((fid, bytes(p[off + 5:off + 5 + n])))
        off += 5 + n


def feature_acks(features):
    """FeatureAckOpt list the simulator answers in FEATUREEXTACK (MS-TDS 2.2.7.11: optional, and only for
    features the client asked for): UTF8_SUPPORT with 0x01 (the server supports UTF-8 collations, as SQL
    Server 2019 and 2022 do).  Everything else goes unacknowledged, which tells the client the server does
    not support it: SESSIONRECOVERY (no connection resiliency: the simulator keeps no session state to
    recover), COLUMNENCRYPTION (no Always Encrypted), DATACLASSIFICATION, GLOBALTRANSACTIONS, the Azure
    features, JSON/VECTOR (SQL Server 2025), USERAGENT."""
    asked = {fid for fid, _ in features or ()}
    return [(UTF8_SUPPORT, b"\x01")] if UTF8_SUPPORT in asked else []


def decode_password(raw):
    """Undo LOGIN7 password obfuscation: per byte x ^= 0xA5, then swap nibbles."""
    out = bytearray()
    for x in raw:
        x ^= 0xA5
        out.append(((x << 4) | (x >> 4)) & 0xFF)
    return out.decode("utf-16-le", "replace")


def negotiate(client_version):
    """LOGIN7 TDSVersion -> the version LOGINACK announces: the highest the server speaks that is
    not above the client's (7.4 for newer clients), or None for a client below TDS 7.1."""
    for v in TDS_VERSIONS:
        if client_version >= v:
            return v
    return None


def parse_login7(p):
    """LOGIN7 payload -> Login (offsets/lengths are relative to the payload start).

    The fixed part is 86 bytes up to TDS 7.1 and 94 bytes (ChangePassword, cbSSPILong) from 7.2."""
    if len(p) < 86:
        raise ValueError("LOGIN7 too short")
    tds_version, packet_size = struct.unpack("<II", p[4:12])
    flags2 = p[25]

    def field(pos, password=False):
        off, cch = struct.unpack("<HH", p[pos:pos + 4])
        raw = p[off:off + cch * 2]
        return decode_password(raw) if password else raw.decode("utf-16-le", "replace")

    sspi_off, sspi_len = struct.unpack("<HH", p[78:82])
    if sspi_len == 0xFFFF and tds_version >= 0x72090002 and len(p) >= 94:
        sspi_len = struct.unpack("<I", p[90:94])[0]        # cbSSPILong (TDS 7.2+) when cbSSPI is USHRT_MAX
    if sspi_off + sspi_len > len(p):
        raise ValueError("LOGIN7 SSPI data past the packet")
    return Login(
        tds_version=tds_version,
        packet_size=packet_size,
        hostname=field(36),
        username=field(40),
        password=field(44, password=True),
        appname=field(48),
        servername=field(52),
        client_interface=field(60),
        language=field(64),
        database=field(68),
        sspi=bool(flags2 & 0x80),
        sspi_blob=bytes(p[sspi_off:sspi_off + sspi_len]),
        odbc=bool(flags2 & 0x02),
        features=parse_feature_ext(p) if tds_version >= 0x74000004 else None,
    )
