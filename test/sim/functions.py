"""Python functions registered in every session's sqlite connection (``sim_*``).

They implement T-SQL semantics sqlite lacks: LSN arithmetic, permission-aware
fn_cdc_get_min_lsn, date/time parts and arithmetic on the canonical text
form, CAST/CONVERT, catalog lookups.  A function that must raise a SQL Server
error stores it on the session (``udf_error``) and raises; the executor then
reports that error instead of sqlite's generic one."""
import datetime as _dt
import functools
import uuid

from . import lsn as L
from . import permissions as P
from . import sqltypes as T
from . import timeutil
from .catalog import fold
from .errors import SqlError
from .tsql.builtins import MAP_OPS

_PARTS = {"year": "year", "yy": "year", "yyyy": "year", "quarter": "quarter", "qq": "quarter", "q": "quarter",
          "month": "month", "mm": "month", "m": "month", "dayofyear": "dayofyear", "dy": "dayofyear",
          "y": "dayofyear", "day": "day", "dd": "day", "d": "day", "week": "week", "wk": "week", "ww": "week",
          "weekday": "weekday", "dw": "weekday", "hour": "hour", "hh": "hour", "minute": "minute", "mi": "minute",
          "n": "minute", "second": "second", "ss": "second", "s": "second", "millisecond": "millisecond",
          "ms": "millisecond", "microsecond": "microsecond", "mcs": "microsecond", "nanosecond": "nanosecond",
          "ns": "nanosecond", "tzoffset": "tzoffset", "tz": "tzoffset", "iso_week": "iso_week", "isowk": "iso_week",
          "isoww": "iso_week"}
_UNIT = {"day": 864_000_000_000, "hour": 36_000_000_000, "minute": 600_000_000, "second": 10_000_000,
         "millisecond": 10_000, "microsecond": 10, "nanosecond": 1}


class UdfFailure(Exception):
    """Raised inside a sqlite function after the SQL error was stored on the session."""


def register(conn, session):
    """Register every sim_* function on ``conn`` for ``session`` (login, database, error slot)."""
    db = session.db

    def fail(err):
        session.udf_error = err
        raise UdfFailure(err.message)

    def part_of(p):
        k = _PARTS.get(str(p).lower())
        if k is None:
            fail(SqlError(155, "'%s' is not a recognized datepart option." % p, 15, 1))
        return k

    def parse(x):
        if x is None:
            return None
        if not isinstance(x, str):
            fail(SqlError(206, "Operand type clash: %s is incompatible with datetime" % T.value_type_name(x), 16, 2))
        try:
            return timeutil.parse(x)
        except ValueError:
            fail(SqlError(241, "Conversion failed when converting date and/or time from character string.", 16, 1))

    def lsn_add(b, n):
        if b is None:
            return None
        if not isinstance(b, bytes):
            fail(SqlError(257, "Implicit conversion from data type %s to binary is not allowed. Use the CONVERT "
                          "function to run this query." % T.value_type_name(b), 16, 3))
        return L.increment(b) if n > 0 else L.decrement(b)

    def min_lsn(ci):
        if ci is None or not db.cdc_enabled:
            return L.ZERO
        inst = db.instances.get(fold(str(ci)))
        if inst is None or not P.can_access_instance(session.login, inst) or inst.start_lsn is None:
            return L.ZERO
        return inst.start_lsn

    def dtnorm(x, kind):
        if x is None:
            return None
        if not isinstance(x, str):
            fail(SqlError(241, "Conversion failed when converting date and/or time from character string.", 16, 1))
        try:
            return _TO_KIND.get(kind, timeutil.to_datetime2)(x)
        except timeutil.OutOfRange:
            fail(SqlError(242, "The conversion of a varchar data type to a %s data type resulted in an "
                          "out-of-range value." % kind, 16, 3))
        except ValueError:
            fail(SqlError(241, "Conversion failed when converting date and/or time from character string.", 16, 1))

    def datepart(p, x):
        k = part_of(p)
        v = parse(x)
        if v is None:
            return None
        days, ns, off = v
        d = _dt.date.fromordinal(days + 1)
        secs = ns // 10_000_000
        if k == "year":
            return d.year
        if k == "quarter":
            return (d.month - 1) // 3 + 1
        if k == "month":
            return d.month
        if k == "dayofyear":
            return d.timetuple().tm_yday
        if k == "day":
            return d.day
        if k == "week":
            jan1 = _dt.date(d.year, 1, 1)
            return ((d - jan1).days + (jan1.isoweekday() % 7)) // 7 + 1
        if k == "weekday":
            return d.isoweekday() % 7 + 1
        if k == "hour":
            return secs // 3600
        if k == "minute":
            return secs // 60 % 60
        if k == "second":
            return secs % 60
        if k == "millisecond":
            return ns % 10_000_000 // 10_000
        if k == "microsecond":
            return ns % 10_000_000 // 10
        if k == "nanosecond":
            return ns % 10_000_000 * 100
        if k == "tzoffset":
            return off or 0
        if k == "iso_week":
            return d.isocalendar()[1]
        return None

    def dateadd(p, n, x, decl):
        k = part_of(p)
        v = parse(x)
        if v is None or n is None:
            return None
        days, ns, off = v
        n = int(n)
        if k in ("year", "quarter", "month"):
            months = n * (12 if k == "year" else 3 if k == "quarter" else 1)
            d = _dt.date.fromordinal(days + 1)
            m = d.year * 12 + d.month - 1 + months
            y, mo = divmod(m, 12)
            import calendar
            day = min(d.day, calendar.monthrange(y, mo + 1)[1])
            days = _dt.date(y, mo + 1, day).toordinal() - 1
        elif k in ("day", "dayofyear", "weekday"):
            days += n
        elif k == "week":
            days += 7 * n
        elif k in _UNIT:
            total = days * timeutil.NS100_PER_DAY + ns + n * _UNIT[k]
            days, ns = divmod(total, timeutil.NS100_PER_DAY)
        else:
            fail(SqlError(9810, "The datepart %s is not supported by date function dateadd for data type %s."
                          % (p, decl), 16, 1))
        text = timeutil.canon(days, ns)
        if decl == "datetime":
            text = timeutil.to_datetime(text)
        elif decl == "smalldatetime":
            try:
                text = timeutil.to_smalldatetime(text)
            except timeutil.OutOfRange:
                fail(SqlError(517, "Adding a value to a 'smalldatetime' column caused an overflow.", 16, 1))
        if decl.startswith("datetimeoffset"):
            text = timeutil.dto_text(text, off or 0)
        return text

    def datediff(p, a, b):
        k = part_of(p)
        va, vb = parse(a), parse(b)
        if va is None or vb is None:
            return None

        def utc(v):
            days, ns, off = v
            total = days * timeutil.NS100_PER_DAY + ns - (off or 0) * 600_000_000
            return total

        ta, tb = utc(va), utc(vb)
        if k in ("year", "quarter", "month"):
            da = _dt.date.fromordinal(ta // timeutil.NS100_PER_DAY + 1)
            dbb = _dt.date.fromordinal(tb // timeutil.NS100_PER_DAY + 1)
            if k == "year":
                return dbb.year - da.year
            ma, mb = da.year * 12 + da.month - 1, dbb.year * 12 + dbb.month - 1
            return (mb // 3 - ma // 3) if k == "quarter" else mb - ma
        if k in ("dayofyear", "weekday"):
            k = "day"
        if k == "week":
            return (tb // timeutil.NS100_PER_DAY + 1) // 7 - (ta // timeutil.NS100_PER_DAY + 1) // 7
        if k in _UNIT:
            return tb // _UNIT[k] - ta // _UNIT[k]
        fail(SqlError(9810, "The datepart %s is not supported by date function datediff." % p, 16, 1))

    def todto(x, off):
        v = parse(x)
        if v is None or off is None:
            return None
        if isinstance(off, str):
            sign = -1 if off.strip().startswith("-") else 1
            hh, mm = off.strip().lstrip("+-").split(":")
            off = sign * (int(hh) * 60 + int(mm))
        return timeutil.dto_text(timeutil.canon(v[0], v[1]), int(off))

    def switchoffset(x, off):
        v = parse(x)
        if v is None:
            return None
        days, ns, old = v
        if isinstance(off, str):
            sign = -1 if off.strip().startswith("-") else 1
            hh, mm = off.strip().lstrip("+-").split(":")
            off = sign * (int(hh) * 60 + int(mm))
        total = days * timeutil.NS100_PER_DAY + ns + (int(off) - (old or 0)) * 600_000_000
        return timeutil.dto_text(timeutil.canon(*divmod(total, timeutil.NS100_PER_DAY)), int(off))

    def cast(x, target, source, style):
        try:
            return convert(x, _type(target), _type(source) if source else None, style)
        except SqlError as e:
            fail(e)

    def visible(t):
        """Metadata visibility: the caller has some permission on ``t``."""
        return t if t is not None and P.can_see(session.login, t) else None

    def object_id(name):
        """OBJECT_ID: the id of a table the caller can see (else NULL)."""
        if name is None:
            return None
        from .tsql.lexer import tokenize
        try:
            parts = [t.value for t in tokenize(str(name)) if t.kind in ("word", "qid")]
        except SqlError:
            return None
        if len(parts) == 3:
            if parts[0].lower() != session.database.lower():
                return None
            parts = parts[1:]
        if len(parts) == 1:
            parts = ["dbo"] + parts
        if len(parts) != 2:
            return None
        if session.database.lower() != db.name.lower() and parts[0].lower() != "sys":
            return None
        t = visible(db.table(parts[0], parts[1]))
        return t.object_id if t else None

    def object_name(oid):
        """OBJECT_NAME of a visible object."""
        t = visible(db.by_oid.get(oid)) if oid is not None else None
        return t.name if t else None

    def object_schema_name(oid):
        """OBJECT_SCHEMA_NAME of a visible object."""
        t = visible(db.by_oid.get(oid)) if oid is not None else None
        return t.schema if t else None

    def schema_name(sid):
        for n, i in db.schemas.items():
            if i == sid:
                return n
        return None

    inst = db.instance

    def db_name(i):
        if i == 1:
            return "master"
        d = inst.by_id.get(i)
        return d.name if d is not None else None

    def db_id(name):
        if name is None:
            return None
        if str(name).lower() == "master":
            return 1
        d = inst.database(str(name))
        return d.db_id if d is not None else None

    def is_bit_set(pos, mask):
        if pos is None or mask is None:
            return None
        pos = int(pos)
        if pos < 1 or pos > len(mask) * 8:
            return 0
        return (int.from_bytes(mask, "big") >> (pos - 1)) & 1

    def column_ordinal(ci, col):
        inst = db.instances.get(fold(str(ci))) if ci is not None else None
        if inst is None or col is None:
            return None
        for i, c in enumerate(inst.captured, 1):
            if fold(c.name) == fold(str(col)):
                return i
        return None

    def map_op(op):
        o = (op or "").strip().lower() if isinstance(op, str) else None
        if o not in MAP_OPS:
            fail(SqlError(313, "An insufficient number of arguments were supplied for the procedure or function "
                          "sys.fn_cdc_map_time_to_lsn.", 16, 3))
        return o

    def serverproperty(name):
        v = {"productversion": session.server.version_string, "edition": "Developer Edition (64-bit)",
             "engineedition": "3", "servername": "MSSQLSIM", "machinename": "MSSQLSIM",
             "productmajorversion": session.server.version_string.split(".")[0], "collation":
             "SQL_Latin1_General_CP1_CI_AS"}
        return v.get(str(name).lower()) if name is not None else None

    def databasepropertyex(name, prop):
        """DATABASEPROPERTYEX(db, 'Collation' | 'Status' | 'Updateability' | ...)."""
        if name is None or prop is None:
            return None
        other = inst.database(str(name))
        if other is None and str(name).lower() != "master":
            return None
        user_db = other is not None
        v = {"collation": other.collation if user_db else "SQL_Latin1_General_CP1_CI_AS", "status": "ONLINE",
             "updateability": "READ_WRITE", "useraccess": "MULTI_USER", "recovery": "FULL",
             "version": 904, "isautoshrink": 0, "comparisonstyle": 196608 if user_db and other.case_sensitive
             else 196609}
        return v.get(str(prop).lower())

    def nonzero(x):
        """Divisor guard: Msg 8134 instead of sqlite's NULL for x / 0 and x % 0."""
        if x is not None and x == 0:
            fail(SqlError(8134, "Divide by zero error encountered.", 16, 1))
        return x

    def log(x, base):
        """LOG: Msg 3623 where SQL Server's floating point operation is invalid."""
        if x is None:
            return None
        if x <= 0 or (base is not None and (base <= 0 or base == 1)):
            fail(SqlError(3623, "An invalid floating point operation occurred.", 16, 1))
        return math.log(x) if base is None else math.log(x) / math.log(base)

    def binconcat(a, b):
        if a is None or b is None:
            return None
        return bytes(a) + bytes(b)

    import math
    fns = [("sim_lsn_add", 2, lsn_add), ("sim_min_lsn", 1, min_lsn), ("sim_dtnorm", 2, dtnorm),
           ("sim_datepart", 2, datepart), ("sim_dateadd", 4, dateadd), ("sim_datediff", 3, datediff),
           ("sim_todto", 2, todto), ("sim_switchoffset", 2, switchoffset), ("sim_cast", 4, cast),
           ("sim_object_id", 1, object_id), ("sim_object_name", 1, object_name),
           ("sim_object_schema_name", 1, object_schema_name), ("sim_schema_name", 1, schema_name),
           ("sim_db_name", 1, db_name), ("sim_db_id", 1, db_id), ("sim_is_bit_set", 2, is_bit_set),
           ("sim_column_ordinal", 2, column_ordinal), ("sim_map_op", 1, map_op),
           ("sim_serverproperty", 1, serverproperty), ("sim_binconcat", 2, binconcat),
           ("sim_databasepropertyex", 2, databasepropertyex), ("sim_nonzero", 1, nonzero),
           ("sim_reverse", 1, lambda s: None if s is None else str(s)[::-1]),
           ("sim_replicate", 3, lambda s, n, limit: None if s is None or n is None or n < 0 else
            (str(s) * int(n))[:limit] if limit else str(s) * int(n)),
           ("sim_ceiling", 1, lambda x: None if x is None else math.ceil(x)),
           ("sim_floor", 1, lambda x: None if x is None else math.floor(x)),
           ("sim_log", 2, log),
           ("sim_newid", 0, lambda: str(uuid.uuid4()).upper())]
    for name, n, f in fns:
        conn.create_function(name, n, f, deterministic=name not in ("sim_newid",))


def convert(x, t, source=None, style=None):
    """CAST/CONVERT of a stored value to type ``t`` (raising SQL Server's conversion errors)."""
    if x is None:
        return None
    style = int(style) if style is not None else 0
    n = t.name
    try:
        if t.is_integer:
            if isinstance(x, bytes):
                return int.from_bytes(x[-(8 if n == "bigint" else 4):], "big", signed=True) if x else 0
            if isinstance(x, str):
                s = x.strip()
                return int(s) if n != "bit" else (1 if s.lower() in ("1", "true") else 0)
            return (1 if x else 0) if n == "bit" else int(x)
        if n in ("decimal", "numeric", "float"):
            if isinstance(x, bytes):
                return float(int.from_bytes(x, "big"))
            v = float(x)
            return round(v, t.scale) if n != "float" else v
        if t.is_string:
            if isinstance(x, bytes):
                if style == 1:
                    s = "0x" + x.hex().upper()
                elif style == 2:
                    s = x.hex().upper()
                else:
                    s = x.decode("utf-16-le" if source is not None and source.name.startswith("n") else "latin-1",
                                 "replace")
            elif source is not None and source.name in ("datetime", "smalldatetime") and isinstance(x, str):
                s = _datetime_display(x)
            elif isinstance(x, float) and x.is_integer() and (source is None or source.name != "float"):
                s = str(int(x))
            else:
                s = str(x)
            return s if t.length == T.MAX else s[:t.length]
        if t.is_binary:
            if isinstance(x, str):
                if style in (1, 2) or x.lower().startswith("0x") and style == 1:
                    h = x[2:] if x.lower().startswith("0x") else x
                    b = bytes.fromhex(h)
                else:
                    b = x.encode("utf-16-le" if source is None or source.name.startswith("n") else "cp1252")
            elif isinstance(x, int):
                b = x.to_bytes(8 if source is not None and source.name == "bigint" else 4, "big", signed=True)
                if n == "binary" and len(b) < t.length:
                    return bytes(t.length - len(b)) + b
            else:
                b = bytes(x)
            if t.length != T.MAX:
                b = b[:t.length]
                if n == "binary":
                    b = b + bytes(t.length - len(b))
            return b
        if t.is_temporal:
            if not isinstance(x, str):
                raise SqlError(529, "Explicit conversion from data type %s to %s is not allowed."
                               % (source.type_name() if source else T.value_type_name(x), t.type_name()), 16, 2)
            if n == "datetime":
                return timeutil.to_datetime(x)
            if n == "smalldatetime":
                return timeutil.to_smalldatetime(x)
            if n == "date":
                return timeutil.to_date(x)
            if n == "datetime2" and t.scale == 7 and len(x) == 27 and x[19] == "." and x[10] == " ":
                return x                    # already canonical datetime2(7) (a datetime2(7) column)
            if n == "datetimeoffset":
                days, ns, off = timeutil.parse(x)
                return timeutil.dto_text(timeutil.canon(days, timeutil.round_ns(ns, t.scale)), off or 0)
            if n == "time":
                return timeutil.to_datetime2("1900-01-01 " + x if len(x) < 19 else x, t.scale)[11:]
            return timeutil.to_datetime2(x, t.scale)
    except timeutil.OutOfRange:
        raise SqlError(242, "The conversion of a %s data type to a %s data type resulted in an out-of-range "
                       "value." % (source.type_name() if source else T.value_type_name(x), t.type_name()), 16, 3)
    except (ValueError, OverflowError):
        if t.is_temporal:
            raise SqlError(241, "Conversion failed when converting date and/or time from character string.", 16, 1)
        src = source.type_name() if source else T.value_type_name(x)
        if n in ("decimal", "numeric", "float"):
            raise SqlError(8114, "Error converting data type %s to %s." % (src, "float" if n == "float" else "numeric"),
                           16, 5)
        raise SqlError(245, "Conversion failed when converting the %s value '%s' to data type %s."
                       % (src, x, t.type_name()), 16, 1)
    raise SqlError(529, "Explicit conversion to %s is not supported by the simulator." % t.type_name(), 16, 2)


@functools.lru_cache(maxsize=1024)
def _type(text):
    """T.parse_type of a type text the translator wrote (cached: CONVERT runs once per row)."""
    return T.parse_type(text)


_TO_KIND = {"datetime": timeutil.to_datetime, "smalldatetime": timeutil.to_smalldatetime, "date": timeutil.to_date}


def _datetime_display(x):
    """datetime as CONVERT(varchar, x, 121) shows it: yyyy-mm-dd hh:mi:ss.mmm."""
    _, ticks = timeutil.datetime_wire(x)
    ms = (ticks % 300 * 1000 + 150) // 300
    return "%s.%03d" % (timeutil.to_datetime(x)[:19], ms)
