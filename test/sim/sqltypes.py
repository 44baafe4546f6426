"""SQL Server data types: declarations, TYPE_INFO bytes and exact value encodings (MS-TDS 2.2.5.4).

A ``SqlType`` is what every result column carries, so the COLMETADATA a client
sees matches what SQL Server would declare, even for a column of NULLs.
``row_encoder`` compiles one fast function per result shape (one struct.pack
per row on the common no-NULL path) so large results stream quickly.
"""
import re
import struct
from dataclasses import dataclass, replace
from decimal import Decimal

from . import timeutil
from .errors import SqlError

COLLATION = bytes([0x09, 0x04, 0xD0, 0x00, 0x34])   # SQL_Latin1_General_CP1_CI_AS
MAX = -1

# TDS versions as LOGIN7/LOGINACK spell them (MS-TDS 2.2.6.4, 2.2.7.14), newest first.
TDS74, TDS73B, TDS73A, TDS72, TDS71 = 0x74000004, 0x730B0003, 0x730A0003, 0x72090002, 0x71000001
TDS_VERSIONS = (TDS74, TDS73B, TDS73A, TDS72, TDS71)
DEFAULT_TEXTSIZE = 4096                 # bytes (SET TEXTSIZE 0 restores it)
UNLIMITED_TEXTSIZE = 2147483647


@dataclass
class Wire:
    """How one session's results are encoded: the negotiated TDS version and the TEXTSIZE.

    Below TDS 7.3 the date/time types of SQL Server 2008 go out as nvarchar; below
    7.2 the (max) types go out as text/ntext/image and UserType is 2 bytes."""
    tds: int = TDS74
    textsize: int = DEFAULT_TEXTSIZE

    @property
    def plp(self):
        """(max) types as PLP (TDS 7.2+); otherwise as text/ntext/image."""
        return self.tds >= TDS72

    @property
    def new_dates(self):
        """date/time/datetime2/datetimeoffset on the wire (TDS 7.3+)."""
        return self.tds >= TDS73A

    @property
    def limit(self):
        """TEXTSIZE in bytes, or None when unlimited."""
        return None if self.textsize < 0 or self.textsize >= UNLIMITED_TEXTSIZE else self.textsize

    def set_textsize(self, n):
        """SET TEXTSIZE n: 0 restores the default 4096, -1 (or 2147483647) means unlimited."""
        n = int(n)
        self.textsize = DEFAULT_TEXTSIZE if n == 0 else max(n, -1)


WIRE74 = Wire(TDS74, UNLIMITED_TEXTSIZE)   # what callers without a session get

_INT_SIZES = {"tinyint": 1, "smallint": 2, "int": 4, "bigint": 8}
_INT_FMT = {1: "B", 2: "h", 4: "i", 8: "q"}
_FIXED_INT_TOKEN = {1: 0x30, 2: 0x34, 4: 0x38, 8: 0x7F}
_STR_TYPES = ("nvarchar", "varchar", "nchar", "char")
_BIN_TYPES = ("binary", "varbinary")


@dataclass(frozen=True)
class SqlType:
    """A T-SQL type.  ``length`` counts characters (strings) or bytes (binary);
    MAX (-1) means (max).  ``nullable`` picks INTN vs INT4 style encodings."""
    name: str
    length: int = 0
    precision: int = 0
    scale: int = 0
    nullable: bool = True
    alias: str = ""          # e.g. 'sysname' for display in catalog procedures

    def decl(self):
        """The type as T-SQL spells it (for captured_columns, help procs, errors)."""
        if self.alias:
            return self.alias
        n = self.name
        if n in _STR_TYPES or n in _BIN_TYPES:
            return "%s(%s)" % (n, "max" if self.length == MAX else self.length)
        if n in ("datetime2", "datetimeoffset", "time"):
            return "%s(%d)" % (n, self.scale)
        if n in ("decimal", "numeric"):
            return "%s(%d,%d)" % (n, self.precision, self.scale)
        return n

    def type_name(self):
        """The name SQL Server's conversion errors use (Msg 206, 245, 257, 529, 8114): the base
        type without length (``nvarchar``, ``binary``), ``(max)`` kept, aliases resolved."""
        n = self.name
        if (n in _STR_TYPES or n in _BIN_TYPES) and self.length == MAX:
            return n + "(max)"
        return n

    def null(self, nullable=True):
        """Same type with a different nullability."""
        return replace(self, nullable=nullable)

    @property
    def is_string(self):
        return self.name in _STR_TYPES

    @property
    def is_binary(self):
        return self.name in _BIN_TYPES

    @property
    def is_temporal(self):
        return self.name in ("datetime", "datetime2", "datetimeoffset", "date", "smalldatetime", "time")

    @property
    def is_integer(self):
        return self.name in _INT_SIZES or self.name == "bit"

    @property
    def is_numeric(self):
        return self.is_integer or self.name in ("decimal", "numeric", "float", "real", "money")

    def sqlite_decl(self):
        """Column declaration for sqlite: a T-SQL name (for humans) with the right affinity."""
        if self.is_string:
            return "TEXT COLLATE NOCASE"
        if self.is_binary:
            return "BLOB"
        if self.is_integer:
            return "INTEGER"
        if self.name in ("decimal", "numeric", "float", "real", "money"):
            return "REAL"
        return "TEXT"


INT = SqlType("int")
BIGINT = SqlType("bigint")
SMALLINT = SqlType("smallint")
TINYINT = SqlType("tinyint")
BIT = SqlType("bit")
FLOAT = SqlType("float")
DATETIME = SqlType("datetime")
DATE = SqlType("date")
LSN = SqlType("binary", 10)
SYSNAME = SqlType("nvarchar", 128, alias="sysname")
NVARCHAR_MAX = SqlType("nvarchar", MAX)
VARBINARY_MAX = SqlType("varbinary", MAX)


def datetime2(scale=7):
    return SqlType("datetime2", scale=scale)


def datetimeoffset(scale=7):
    return SqlType("datetimeoffset", scale=scale)


def nvarchar(n):
    return SqlType("nvarchar", n)


def varbinary(n):
    return SqlType("varbinary", n)


def value_type_name(v):
    """SQL Server's type name for a runtime value whose declared type is unknown (for errors)."""
    if isinstance(v, bool):
        return "bit"
    if isinstance(v, int):
        return "int" if -2**31 <= v < 2**31 else "bigint"
    if isinstance(v, float):
        return "float"
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "varbinary"
    if isinstance(v, Decimal):
        return "numeric"
    return "nvarchar"


def check_implicit(source, target):
    """Raise Msg 257 where SQL Server has no implicit conversion: character data (char, varchar,
    nchar, nvarchar, text, ntext) to binary/varbinary; CONVERT/CAST is required."""
    if source is None or not target.is_binary:
        return
    if source.is_string or source.name in ("text", "ntext"):
        raise SqlError(257, "Implicit conversion from data type %s to %s is not allowed. Use the CONVERT function "
                       "to run this query." % (source.type_name(), target.type_name()), 16, 3)


_TYPE_RE = re.compile(r"^\s*([a-z0-9_]+)\s*(?:\(\s*(max|\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$", re.I)


class UnknownType(ValueError):
    """A type name the simulator does not implement."""


def parse_type(text):
    """'binary(10)', 'nvarchar(max)', 'decimal(12,2)', 'sysname', ... -> SqlType."""
    m = _TYPE_RE.match(text.strip().strip("[]") if "(" not in text else text)
    if not m:
        raise UnknownType(text)
    name, a, b = m.group(1).lower(), m.group(2), m.group(3)
    n = (MAX if a and a.lower() == "max" else int(a)) if a else None
    if name == "sysname":
        return SYSNAME
    if name in _INT_SIZES or name in ("bit", "float", "date", "datetime", "smalldatetime"):
        return SqlType(name)
    if name == "real":
        return FLOAT
    if name in ("datetime2", "datetimeoffset", "time"):
        return SqlType(name, scale=7 if n is None else n)
    if name in ("decimal", "numeric", "money", "smallmoney"):
        if name in ("money", "smallmoney"):
            return SqlType("decimal", precision=19, scale=4)
        return SqlType("decimal", precision=18 if n is None else n, scale=int(b or 0))
    if name in _STR_TYPES or name in _BIN_TYPES:
        return SqlType(name, 1 if n is None else n)
    if name in ("text", "ntext"):
        return SqlType("nvarchar", MAX)
    if name == "image":
        return VARBINARY_MAX
    raise UnknownType(text)


# --- TYPE_INFO ---------------------------------------------------------------

def _decimal_size(p):
    return 5 if p <= 9 else 9 if p <= 19 else 13 if p <= 28 else 17


def type_info(t):
    """The TYPE_INFO bytes of COLMETADATA for a column of type ``t``."""
    n = t.name
    if n in _INT_SIZES:
        size = _INT_SIZES[n]
        return bytes([0x26, size]) if t.nullable else bytes([_FIXED_INT_TOKEN[size]])
    if n == "bit":
        return b"\x68\x01" if t.nullable else b"\x32"
    if n == "float":
        return b"\x6D\x08" if t.nullable else b"\x3E"
    if n == "datetime":
        return b"\x6F\x08" if t.nullable else b"\x3D"
    if n == "smalldatetime":
        return b"\x6F\x04" if t.nullable else b"\x3A"
    if n == "date":
        return b"\x28"
    if n == "datetime2":
        return bytes([0x2A, t.scale])
    if n == "datetimeoffset":
        return bytes([0x2B, t.scale])
    if n == "time":
        return bytes([0x29, t.scale])
    if n in ("decimal", "numeric"):
        return bytes([0x6A, _decimal_size(t.precision), t.precision, t.scale])
    if n == "binary":
        return b"\xAD" + struct.pack("<H", t.length)
    if n == "varbinary":
        return b"\xA5" + struct.pack("<H", 0xFFFF if t.length == MAX else t.length)
    if n in ("nvarchar", "nchar"):
        tok = 0xE7 if n == "nvarchar" else 0xEF
        return bytes([tok]) + struct.pack("<H", 0xFFFF if t.length == MAX else t.length * 2) + COLLATION
    if n in ("varchar", "char"):
        tok = 0xA7 if n == "varchar" else 0xAF
        return bytes([tok]) + struct.pack("<H", 0xFFFF if t.length == MAX else t.length) + COLLATION
    if n in _TEXT_TOKENS:
        return _text_type_info(n)
    raise UnknownType(n)


_TEXT_TOKENS = {"text": 0x23, "ntext": 0x63, "image": 0x22}
_DOWNLEVEL_MAX = {"nvarchar": "ntext", "varchar": "text", "varbinary": "image"}
_NEW_DATES = ("date", "time", "datetime2", "datetimeoffset")


def _text_type_info(n):
    """TYPE_INFO of TEXTTYPE/NTEXTTYPE/IMAGETYPE in COLMETADATA (MS-TDS 2.2.5.4.2): LONGLEN maximum
    length, collation (text/ntext) and TableName, a US_VARCHAR in TDS 7.1 (empty: an expression).
    Only TDS 7.1 sessions get these types (7.2+ send the (max) types as PLP)."""
    info = bytes([_TEXT_TOKENS[n]]) + struct.pack("<I", 0x7FFFFFFE if n == "ntext" else 0x7FFFFFFF)
    if n != "image":
        info += COLLATION
    return info + b"\x00\x00"


def date_string_length(t):
    """Characters of the string a down-level client gets for date (10), time(s) (8),
    datetime2(s) (19), datetimeoffset(s) (26), plus 1 + s fractional positions when s > 0."""
    frac = t.scale + 1 if t.scale else 0
    return {"date": 10, "time": 8 + frac, "datetime2": 19 + frac, "datetimeoffset": 26 + frac}[t.name]


def date_string(v, t):
    """A date/time value in the default string literal format down-level clients receive:
    yyyy-MM-dd, hh:mm:ss[.n], yyyy-MM-dd hh:mm:ss[.n], yyyy-MM-dd hh:mm:ss[.n] {+|-}hh:mm."""
    if v is None:
        return None
    if t.name == "time" and len(v) < 19:
        v = "1900-01-01 " + v
    days, ns, off = timeutil.parse(v)
    if t.name == "date":
        return timeutil.canon(days, 0)[:10]
    text = timeutil.canon(days, timeutil.round_ns(ns, t.scale))
    text = text[:19] + ("." + text[20:20 + t.scale] if t.scale else "")
    if t.name == "time":
        return text[11:]
    if t.name == "datetimeoffset":
        return timeutil.dto_text(text, off or 0)
    return text


def wire_type(t, wire):
    """(type as sent to this client, value adapter or None): down-level conversions of MS-TDS.

    Below TDS 7.3 date/time/datetime2/datetimeoffset become nvarchar(string length); below 7.2
    nvarchar(max)/varchar(max)/varbinary(max) become ntext/text/image."""
    if t.name in _NEW_DATES and not wire.new_dates:
        return SqlType("nvarchar", date_string_length(t)), (lambda v, t=t: date_string(v, t))
    if t.length == MAX and t.name in _DOWNLEVEL_MAX and not wire.plp:
        return SqlType(_DOWNLEVEL_MAX[t.name], MAX), None
    return t, None


def colmetadata(columns, wire=None):
    """COLMETADATA token (0x81) for [(name, SqlType)]: UserType (u32; u16 in TDS 7.1), Flags u16,
    TYPE_INFO, name; types as ``wire`` (default TDS 7.4) carries them."""
    wire = wire or WIRE74
    head = struct.Struct("<IH" if wire.tds >= TDS72 else "<HH").pack
    out = [b"\x81", struct.pack("<H", len(columns))]
    for name, t in columns:
        wt, _ = wire_type(t, wire)
        flags = 0x0001 if wt.nullable else 0x0000
        nm = (name or "")[:128]
        out.append(head(0, flags) + type_info(wt) + bytes([len(nm)]) + nm.encode("utf-16-le"))
    return b"".join(out)


# --- value encoders ------------------------------------------------------------

_H = struct.Struct("<H").pack
_Q = struct.Struct("<Q").pack
_I = struct.Struct("<I").pack
_PLP_NULL = b"\xff" * 8


_TEXTPTR = bytes([16]) + b"dummy textptr\x00\x00\x00" + b"dummyTS\x00"   # TextPtr + Timestamp


def _plp(data):
    """PLP body (MS-TDS 2.2.5.2.3): total length, one chunk, terminator."""
    if not data:
        return _Q(0) + _I(0)
    return _Q(len(data)) + _I(len(data)) + data + _I(0)


def _text(data):
    """TEXTTYPE/NTEXTTYPE/IMAGETYPE row value: TextPtr, Timestamp, LONG length, data (2.2.4.2.1.2)."""
    return _TEXTPTR + _I(len(data)) + data


def _cut(data, limit, unit=1):
    """``data`` cut to TEXTSIZE ``limit`` bytes (whole ``unit``-byte characters); None = unlimited."""
    if limit is None or len(data) <= limit:
        return data
    return data[:limit - limit % unit]


def _long_encoder(t, limit):
    """Encoder of a (max) or text/ntext/image type: PLP or text form, cut to TEXTSIZE."""
    n = t.name
    if n in ("nvarchar", "ntext"):
        raw, unit = (lambda v: _to_str(v).encode("utf-16-le")), 2
    elif n in ("varchar", "text"):
        raw, unit = (lambda v: _to_str(v).encode("cp1252", "replace")), 1
    else:
        raw, unit = _to_bytes, 1
    if n in _TEXT_TOKENS:
        return lambda v: b"\x00" if v is None else _text(_cut(raw(v), limit, unit))
    return lambda v: _PLP_NULL if v is None else _plp(_cut(raw(v), limit, unit))


def _to_bytes(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bool) or isinstance(v, int):
        return int(v).to_bytes(8, "big", signed=True)
    raise ValueError("cannot convert %r to binary" % (v,))


def _to_str(v):
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return "0x" + bytes(v).hex().upper()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _to_int(v):
    if isinstance(v, str):
        return int(v.strip())
    return int(v)


_dt_cache = {}


def _datetime_bytes(v):
    b = _dt_cache.get(v)
    if b is None:
        days, ticks = timeutil.datetime_wire(v)
        b = struct.pack("<Bil", 8, days, ticks)
        if len(_dt_cache) > 100_000:
            _dt_cache.clear()
        _dt_cache[v] = b
    return b


def _time_len(scale):
    return 3 if scale <= 2 else 4 if scale <= 4 else 5


def _dt2_parts(v, scale):
    days, ns, _ = timeutil.parse(v)
    ns = timeutil.round_ns(ns, scale)
    if ns >= timeutil.NS100_PER_DAY:
        days, ns = days + 1, ns - timeutil.NS100_PER_DAY
    units = ns // 10 ** (7 - scale)
    return units.to_bytes(_time_len(scale), "little") + days.to_bytes(3, "little")


def encoder(t, limit=None):
    """A function value -> wire bytes (including length prefix / NULL marker) for type ``t``;
    ``limit`` is the TEXTSIZE in bytes for (max) and text types (None = unlimited)."""
    n = t.name
    if t.length == MAX or n in _TEXT_TOKENS:
        return _long_encoder(t, limit)
    if n in _INT_SIZES:
        size = _INT_SIZES[n]
        st = struct.Struct("<" + _INT_FMT[size])
        if not t.nullable:
            return lambda v: st.pack(_to_int(v))
        pre = bytes([size])
        return lambda v: b"\x00" if v is None else pre + st.pack(_to_int(v))
    if n == "bit":
        if not t.nullable:
            return lambda v: b"\x01" if v else b"\x00"
        return lambda v: b"\x00" if v is None else (b"\x01\x01" if _to_int(v) else b"\x01\x00")
    if n == "float":
        if not t.nullable:
            return lambda v: struct.pack("<d", float(v))
        return lambda v: b"\x00" if v is None else struct.pack("<Bd", 8, float(v))
    if n == "datetime":
        if not t.nullable:
            return lambda v: _datetime_bytes(v)[1:]
        return lambda v: b"\x00" if v is None else _datetime_bytes(v)
    if n == "smalldatetime":
        def enc_sdt(v):
            body = struct.pack("<HH", *timeutil.smalldatetime_wire(v)) if v is not None else None
            if not t.nullable:
                return body
            return b"\x00" if body is None else b"\x04" + body
        return enc_sdt
    if n == "date":
        def enc_date(v):
            if v is None:
                return b"\x00"
            days, _, _ = timeutil.parse(v)
            return b"\x03" + days.to_bytes(3, "little")
        return enc_date
    if n == "datetime2":
        s = t.scale

        def enc_dt2(v):
            if v is None:
                return b"\x00"
            body = _dt2_parts(v, s)
            return bytes([len(body)]) + body
        return enc_dt2
    if n == "time":
        s = t.scale

        def enc_time(v):
            if v is None:
                return b"\x00"
            body = _dt2_parts("1900-01-01 " + v if len(v) < 19 else v, s)[:_time_len(s)]
            return bytes([len(body)]) + body
        return enc_time
    if n == "datetimeoffset":
        s = t.scale

        def enc_dto(v):
            if v is None:
                return b"\x00"
            days, ns, off = timeutil.parse_dto(v)
            body = _dt2_parts(timeutil.canon(days, ns), s) + struct.pack("<h", off)
            return bytes([len(body)]) + body
        return enc_dto
    if n in ("decimal", "numeric"):
        size, scale = _decimal_size(t.precision), t.scale
        q = Decimal(1).scaleb(-scale)

        def enc_dec(v):
            if v is None:
                return b"\x00"
            d = Decimal(str(v)).quantize(q)
            i = int(d.scaleb(scale))
            return bytes([size, 0 if i < 0 else 1]) + abs(i).to_bytes(size - 1, "little")
        return enc_dec
    if n == "binary":
        length = t.length

        def enc_bin(v):
            if v is None:
                return b"\xff\xff"
            b = _to_bytes(v)[:length]
            return _H(length) + b + bytes(length - len(b))
        return enc_bin
    if n == "varbinary":
        length = t.length

        def enc_vbin(v):
            if v is None:
                return b"\xff\xff"
            b = _to_bytes(v)[:length]
            return _H(len(b)) + b
        return enc_vbin
    if n in ("nvarchar", "nchar"):
        cap = t.length * 2

        def enc_nv(v):
            if v is None:
                return b"\xff\xff"
            b = _to_str(v).encode("utf-16-le")[:cap]
            return _H(len(b)) + b
        return enc_nv
    if n in ("varchar", "char"):
        cap = t.length

        def enc_v(v):
            if v is None:
                return b"\xff\xff"
            b = _to_str(v).encode("cp1252", "replace")[:cap]
            return _H(len(b)) + b
        return enc_v
    raise UnknownType(n)


# --- compiled row encoders ------------------------------------------------------

def _fast_piece(i, t):
    """(struct format, argument expressions, needs-None-check) for the no-NULL fast path,
    or None when the column needs its generic encoder."""
    n, v = t.name, "v%d" % i
    if n in _INT_SIZES:
        size = _INT_SIZES[n]
        if t.nullable:
            return "B" + _INT_FMT[size], [str(size), v], True
        return _INT_FMT[size], [v], False
    if n == "bit" and t.nullable:
        return "BB", ["1", "1 if %s else 0" % v], True
    if n == "binary":
        return "H%ds" % t.length, [str(t.length), v], True
    return None


def _adapted(enc, adapt):
    """``enc`` applied after ``adapt`` (a down-level value conversion), or ``enc`` itself."""
    if adapt is None:
        return enc
    return lambda v: enc(adapt(v))


def row_encoder(types, wire=None):
    """Compile ``encode(rows) -> bytes`` emitting ROW tokens (0xD1) for ``types`` as ``wire``
    (TDS version, TEXTSIZE; default TDS 7.4, unlimited) carries them.

    The generated code packs all fixed-width columns of a row with one
    precompiled struct; variable-width columns call their encoder; any row the
    fast path cannot take (a NULL, an unexpected Python type) goes through the
    generic per-column encoders."""
    wire = wire or WIRE74
    sent = [wire_type(t, wire) for t in types]
    types = [wt for wt, _ in sent]
    encs = [_adapted(encoder(wt, wire.limit), adapt) for wt, adapt in sent]
    env = {"_encs": encs, "_struct": struct}
    names = ["v%d" % i for i in range(len(types))]
    parts, fmt, args, checks = [], "<B", ["0xD1"], []

    def close_struct():
        nonlocal fmt, args
        if args:
            key = "_S%d" % len(env)
            env[key] = struct.Struct(fmt).pack
            parts.append("%s(%s)" % (key, ", ".join(args)))
        fmt, args = "<", []

    for i, t in enumerate(types):
        piece = _fast_piece(i, t)
        if piece:
            f, a, check = piece
            fmt += f
            args += a
            if check:
                checks.append(names[i])
        else:
            close_struct()
            parts.append("_encs[%d](%s)" % (i, names[i]))
    close_struct()
    unpack = (", ".join(names) + ("," if len(names) == 1 else "")) if names else "_"
    none_test = " or ".join("%s is None" % c for c in checks) or "False"
    src = (
        "def encode(rows):\n"
        "    out = []\n"
        "    ap = out.append\n"
        "    for r in rows:\n"
        "        %s = r\n"
        "        if %s:\n"
        "            ap(_slow(r))\n"
        "            continue\n"
        "        try:\n"
        "            ap(%s)\n"
        "        except Exception:\n"
        "            ap(_slow(r))\n"
        "    return b''.join(out)\n"
    ) % (unpack, none_test, " + ".join(parts) if parts else "b'\\xd1'")

    def slow(r):
        return b"\xd1" + b"".join(e(v) for e, v in zip(encs, r))
    env["_slow"] = slow
    exec(compile(src, "<row_encoder>", "exec"), env)
    return env["encode"]


def infer_type(value):
    """Type for a value whose column type is unknown (dynamic fallback)."""
    if value is None:
        return INT
    if isinstance(value, bool):
        return BIT
    if isinstance(value, int):
        return INT if -2**31 <= value < 2**31 else BIGINT
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, (bytes, bytearray)):
        return varbinary(max(1, len(value))) if len(value) <= 8000 else VARBINARY_MAX
    s = str(value)
    return nvarchar(max(1, len(s))) if len(s) <= 4000 else NVARCHAR_MAX


def returnvalue(ordinal, name, t, value, wire=None):
    """RETURNVALUE token (0xAC, MS-TDS 2.2.7.19) of an output parameter: ParamOrdinal (its position in the
    RPC, 0-based), ParamName (B_VARCHAR), Status 0x01 (output parameter), UserType (ULONG; USHORT in TDS 7.1),
    Flags (nullable), TYPE_INFO and the value, encoded as a column of ``t`` would be."""
    wire = wire or WIRE74
    wt, adapt = wire_type(t.null(True), wire)
    nm = (name or "")[:128]
    head = struct.pack("<I" if wire.tds >= TDS72 else "<H", 0) + struct.pack("<H", 0x0001)
    return (b"\xAC" + struct.pack("<H", ordinal) + bytes([len(nm)]) + nm.encode("utf-16-le") + b"\x01" + head
            + type_info(wt) + _adapted(encoder(wt, wire.limit), adapt)(value))
