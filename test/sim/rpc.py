"""Decoding client requests: ALL_HEADERS, SQL batch text, RPC calls and typed parameters."""
import struct
import uuid
from dataclasses import dataclass, field
from decimal import Decimal

from . import sqltypes as T
from . import timeutil

PROC_IDS = {1: "sp_cursor", 2: "sp_cursoropen", 3: "sp_cursorprepare", 4: "sp_cursorexecute",
            5: "sp_cursorprepexec", 6: "sp_cursorunprepare", 7: "sp_cursorfetch", 8: "sp_cursoroption",
            9: "sp_cursorclose", 10: "sp_executesql", 11: "sp_prepare", 12: "sp_execute",
            13: "sp_prepexec", 14: "sp_prepexecrpc", 15: "sp_unprepare"}


class ProtocolError(ValueError):
    """A request that does not follow MS-TDS."""


def skip_all_headers(p):
    """Offset after ALL_HEADERS (TDS 7.2+), skipped whole by its TotalLength."""
    if len(p) < 4:
        return 0
    total = struct.unpack_from("<I", p, 0)[0]
    if 4 <= total <= len(p):
        return total
    return 0


def batch_text(payload, headers=True):
    """SQL batch message -> T-SQL text (``headers``: ALL_HEADERS present, TDS 7.2+)."""
    return payload[skip_all_headers(payload) if headers else 0:].decode("utf-16-le", "replace")


@dataclass
class Param:
    name: str            # lower-case, without '@' ('' for positional)
    value: object
    type: T.SqlType
    output: bool = False


@dataclass
class RpcCall:
    name: str            # procedure name as sent, or sp_executesql for ProcID 10
    proc_id: int
    params: list = field(default_factory=list)


class _Reader:
    def __init__(self, data, pos=0):
        self.d, self.p = data, pos

    def take(self, n):
        if self.p + n > len(self.d):
            raise ProtocolError("truncated RPC")
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack("<H", self.take(2))[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def b_varchar(self):
        n = self.u8()
        return self.take(n * 2).decode("utf-16-le")


def _plp(r):
    total = struct.unpack("<Q", r.take(8))[0]
    if total == 0xFFFFFFFFFFFFFFFF:
        return None
    parts = []
    while True:
        n = r.u32()
        if n == 0:
            break
        parts.append(r.take(n))
    return b"".join(parts)


def _read_typed_value(r):
    """TYPE_INFO + value -> (python value, SqlType)."""
    tok = r.u8()
    fixed = {0x30: (1, "tinyint"), 0x32: (1, "bit"), 0x34: (2, "smallint"), 0x38: (4, "int"),
             0x7F: (8, "bigint"), 0x3E: (8, "float"), 0x3B: (4, "real"), 0x3D: (8, "datetime"),
             0x3A: (4, "smalldatetime"), 0x3C: (8, "money"), 0x7A: (4, "smallmoney")}
    if tok == 0x1F:
        return None, T.INT
    if tok in fixed:
        n, name = fixed[tok]
        return _convert_fixed(name, r.take(n))
    if tok in (0x26, 0x68, 0x6D, 0x6F, 0x6E, 0x24):
        r.u8()
        n = r.u8()
        if n == 0:
            kind = {0x26: T.BIGINT, 0x68: T.BIT, 0x6D: T.FLOAT, 0x6F: T.DATETIME,
                    0x6E: T.SqlType("decimal", precision=19, scale=4), 0x24: T.nvarchar(36)}[tok]
            return None, kind
        raw = r.take(n)
        if tok == 0x26:
            return int.from_bytes(raw, "little", signed=n > 1), {1: T.TINYINT, 2: T.SMALLINT,
                                                                  4: T.INT, 8: T.BIGINT}[n]
        if tok == 0x68:
            return raw[0], T.BIT
        if tok == 0x6D:
            return _convert_fixed("float" if n == 8 else "real", raw)
        if tok == 0x6F:
            return _convert_fixed("datetime" if n == 8 else "smalldatetime", raw)
        if tok == 0x6E:
            return _convert_fixed("money" if n == 8 else "smallmoney", raw)
        return str(uuid.UUID(bytes_le=raw)), T.nvarchar(36)
    if tok in (0x6A, 0x6C, 0x37, 0x3F):
        r.u8()
        prec, scale = r.u8(), r.u8()
        n = r.u8()
        t = T.SqlType("decimal", precision=prec, scale=scale)
        if n == 0:
            return None, t
        raw = r.take(n)
        v = Decimal(int.from_bytes(raw[1:], "little")).scaleb(-scale)
        return (v if raw[0] else -v), t
    if tok == 0x28:
        n = r.u8()
        if n == 0:
            return None, T.DATE
        days = int.from_bytes(r.take(3), "little")
        return timeutil.canon(days, 0)[:10], T.DATE
    if tok in (0x29, 0x2A, 0x2B):
        scale = r.u8()
        n = r.u8()
        t = {0x29: T.SqlType("time", scale=scale), 0x2A: T.datetime2(scale),
             0x2B: T.datetimeoffset(scale)}[tok]
        if n == 0:
            return None, t
        raw = r.take(n)
        tl = 3 if scale <= 2 else 4 if scale <= 4 else 5
        units = int.from_bytes(raw[:tl], "little") * 10 ** (7 - scale)
        if tok == 0x29:
            return timeutil.canon(0, units)[11:], t
        days = int.from_bytes(raw[tl:tl + 3], "little")
        if tok == 0x2A:
            return timeutil.canon(days, units), t
        off = struct.unpack("<h", raw[tl + 3:tl + 5])[0]
        total = days * timeutil.NS100_PER_DAY + units + off * 600_000_000
        local = timeutil.canon(total // timeutil.NS100_PER_DAY, total % timeutil.NS100_PER_DAY)
        return timeutil.dto_text(local, off), t
    if tok in (0xA5, 0xAD, 0xA7, 0xAF, 0xE7, 0xEF):
        maxlen = r.u16()
        if tok in (0xA7, 0xAF, 0xE7, 0xEF):
            r.take(5)
        is_max = maxlen == 0xFFFF
        if is_max:
            raw = _plp(r)
        else:
            n = r.u16()
            raw = None if n == 0xFFFF else r.take(n)
        if tok in (0xA5, 0xAD):
            t = T.VARBINARY_MAX if is_max else T.SqlType("varbinary" if tok == 0xA5 else "binary", maxlen)
            return (None if raw is None else bytes(raw)), t
        if tok in (0xE7, 0xEF):
            t = T.NVARCHAR_MAX if is_max else T.nvarchar(max(1, maxlen // 2))
            return (None if raw is None else raw.decode("utf-16-le", "replace")), t
        t = T.SqlType("varchar", T.MAX if is_max else max(1, maxlen))
        return (None if raw is None else raw.decode("cp1252", "replace")), t
    if tok in (0x22, 0x23, 0x63):
        return _read_text_param(r, tok)
    raise ProtocolError("unsupported parameter type 0x%02X" % tok)


def _read_text_param(r, tok):
    """IMAGE/TEXT/NTEXT parameter: LONGLEN maximum, collation (text types), then a LONG length
    (-1 = NULL) and the data; parameters carry no TableName or TextPtr (MS-TDS 2.2.6.6)."""
    r.u32()
    if tok in (0x23, 0x63):
        r.take(5)
    n = struct.unpack("<i", r.take(4))[0]
    if n < 0:
        return None, T.NVARCHAR_MAX if tok != 0x22 else T.VARBINARY_MAX
    raw = r.take(n)
    if tok == 0x22:
            return raw, T.VARBINARY_MAX
    return raw.decode("utf-16-le" if tok == 0x63 else "cp1252", "replace"), T.NVARCHAR_MAX


def _convert_fixed(name, raw):
    if name in ("tinyint",):
        return raw[0], T.TINYINT
    if name == "bit":
        return raw[0], T.BIT
    if name in ("smallint", "int", "bigint"):
        return int.from_bytes(raw, "little", signed=True), T.parse_type(name)
    if name == "float":
        return struct.unpack("<d", raw)[0], T.FLOAT
    if name == "real":
        return struct.unpack("<f", raw)[0], T.FLOAT
    if name == "datetime":
        days, ticks = struct.unpack("<iI", raw)
        return timeutil.t300_text(days * timeutil.TICKS_PER_DAY + ticks), T.DATETIME
    if name == "smalldatetime":
        days, mins = struct.unpack("<HH", raw)
        return timeutil.t300_text(days * timeutil.TICKS_PER_DAY + mins * 18000), T.SqlType("smalldatetime")
    if name in ("money", "smallmoney"):
        if len(raw) == 8:
            hi, lo = struct.unpack("<iI", raw)
            v = (hi << 32) | lo
        else:
            v = struct.unpack("<i", raw)[0]
        return Decimal(v).scaleb(-4), T.SqlType("decimal", precision=19, scale=4)
    raise ProtocolError(name)


def parse_rpc(payload, headers=True):
    """RPC request message -> RpcCall (one call; batched calls are not supported).
    ``headers``: the message starts with ALL_HEADERS (TDS 7.2+)."""
    r = _Reader(payload, skip_all_headers(payload) if headers else 0)
    n = r.u16()
    if n == 0xFFFF:
        proc_id = r.u16()
        name = PROC_IDS.get(proc_id, "proc#%d" % proc_id)
    else:
        proc_id = 0
        name = r.take(n * 2).decode("utf-16-le")
    r.u16()    # option flags
    call = RpcCall(name, proc_id)
    while r.p < len(r.d):
        if r.d[r.p] in (0x80, 0xFF, 0xFE):
            break
        pname = r.b_varchar()
        status = r.u8()
        value, t = _read_typed_value(r)
        call.params.append(Param(pname.lstrip("@").lower(), value, t, bool(status & 0x01)))
    return call
