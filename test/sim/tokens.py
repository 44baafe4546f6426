"""TDS response tokens (MS-TDS 2.2.7): DONE, ERROR/INFO, LOGINACK, ENVCHANGE, RETURNSTATUS."""
import struct

from .sqltypes import COLLATION, TDS72, TDS74

DONE, DONEPROC, DONEINPROC = 0xFD, 0xFE, 0xFF
FINAL, MORE, ERROR, INXACT, COUNT, ATTN, SRVERROR = 0x00, 0x01, 0x02, 0x04, 0x10, 0x20, 0x100
CMD_SELECT, CMD_EXEC, CMD_NONE = 0xC1, 0xE0, 0x00
_DONE = struct.Struct("<BHHQ")
_DONE71 = struct.Struct("<BHHi")


def b_varchar(s):
    """B_VARCHAR: u8 character count + UTF-16LE."""
    s = (s or "")[:255]
    return bytes([len(s)]) + s.encode("utf-16-le")


def us_varchar(s):
    """US_VARCHAR: u16 character count + UTF-16LE."""
    s = s or ""
    return struct.pack("<H", len(s)) + s.encode("utf-16-le")


def done(status=FINAL, curcmd=CMD_NONE, rowcount=0, token=DONE, tds=TDS74):
    """DONE/DONEPROC/DONEINPROC: status u16, curcmd u16, row count (ULONGLONG from TDS 7.2,
    LONG in TDS 7.1; MS-TDS 2.2.7.6)."""
    if tds < TDS72:
        return _DONE71.pack(token, status, curcmd, rowcount)
    return _DONE.pack(token, status, curcmd, rowcount)


def message(number, text, cls, state=1, server="MSSQLSIM", proc="", line=1, tds=TDS74):
    """ERROR (class >= 11) or INFO token with SQL Server's layout; LineNumber is a LONG from TDS 7.2,
    a USHORT in TDS 7.1 (MS-TDS 2.2.7.10)."""
    body = (struct.pack("<iBB", number, state, cls) + us_varchar(text) + b_varchar(server)
            + b_varchar(proc) + struct.pack("<i" if tds >= TDS72 else "<H", line))
    return bytes([0xAA if cls > 10 else 0xAB]) + struct.pack("<H", len(body)) + body


def returnstatus(value):
    """RETURNSTATUS (0x79) of a stored procedure."""
    return struct.pack("<Bi", 0x79, value)


def _envchange(body):
    return b"\xE3" + struct.pack("<H", len(body)) + body


def env_database(new, old):
    return _envchange(b"\x01" + b_varchar(new) + b_varchar(old))


def env_language(new, old=""):
    return _envchange(b"\x02" + b_varchar(new) + b_varchar(old))


def env_packet_size(new, old):
    return _envchange(b"\x04" + b_varchar(str(new)) + b_varchar(str(old)))


def env_collation():
    return _envchange(b"\x07" + bytes([len(COLLATION)]) + COLLATION + b"\x00")


def loginack(prog_name, version, tds=TDS74):
    """LOGINACK: interface 1 (T-SQL), the negotiated TDS version big-endian (e.g. 74 00 00 04,
    MS-TDS 2.2.7.14), program name and version."""
    major, minor, build = version
    body = (b"\x01" + struct.pack(">I", tds) + b_varchar(prog_name)
            + bytes([major, minor, build >> 8, build & 0xFF]))
    return b"\xAD" + struct.pack("<H", len(body)) + body


def featureextack(acks):
    """FEATUREEXTACK (0xAE, MS-TDS 2.2.7.11): (FeatureId, FeatureAckDataLen DWORD, data)* then 0xFF."""
    return b"\xAE" + b"".join(bytes([fid]) + struct.pack("<I", len(d)) + d for fid, d in acks) + b"\xFF"


def env_transaction(kind, descriptor):
    """ENVCHANGE 8 (begin), 9 (commit) or 10 (rollback) with the 8-byte transaction descriptor."""
    if kind == 8:
        body = bytes([8, 8]) + descriptor + b"\x00"
    else:
        body = bytes([kind, 0, 8]) + descriptor
    return _envchange(body)


def sspi(data):
    """SSPI (0xED, MS-TDS 2.2.7.22): USHORT length + the security token (an NTLM CHALLENGE, a Kerberos AP-REP)."""
    return b"\xED" + struct.pack("<H", len(data)) + data
