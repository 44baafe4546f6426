"""Date/time values: one canonical text form in sqlite, exact wire conversions.

Every date/time value the simulator stores or computes is text in sqlite:
``YYYY-MM-DD HH:MM:SS.fffffff`` (27 characters; ``datetimeoffset`` appends
`` +HH:MM``).  One fixed width means string order equals time order, so the
SQL engine compares them correctly.  ``datetime`` values (1/300 s ticks) are
rendered to 7 digits (``.0033333``) and converted back to ticks exactly.

Commit instants are integers of 1/300 s since 1900-01-01 ("t300"), so that a
commit's UTC instant and its local ``datetime`` rendering are both exact.
"""
import datetime as _dt
import functools
import re
from zoneinfo import ZoneInfo

TICKS_PER_DAY = 300 * 86400
NS100_PER_DAY = 86400 * 10_000_000
_ORD_1900 = _dt.date(1900, 1, 1).toordinal()
UTC = _dt.timezone.utc

_DT_RE = re.compile(
    r"^\s*(\d{4})-?(\d{2})-?(\d{2})"
    r"(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?\s*(AM|PM)?)?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?\s*$", re.I)


class BadDateTime(ValueError):
    """A string that is not a date/time SQL Server would accept (-> Msg 241)."""


class OutOfRange(ValueError):
    """A date/time outside the target type's range (-> Msg 242)."""


@functools.lru_cache(maxsize=65536)
def parse(text):
    """Parse a T-SQL date/time string -> (days since 0001-01-01, 100ns of day, offset minutes or None).

    Accepts the ISO and ODBC shapes clients send ('2026-11-29 14:00:00.123',
    '2026-11-29T14:00:00Z', '20261129', '...+01:00')."""
    m = _DT_RE.match(text)
    if not m:
        raise BadDateTime(text)
    y, mo, d, hh, mi, ss, frac, ampm, off = m.groups()
    try:
        days = _dt.date(int(y), int(mo), int(d)).toordinal() - 1
    except ValueError:
        raise BadDateTime(text)
    h = int(hh or 0)
    if ampm:
        h = h % 12 + (12 if ampm.upper() == "PM" else 0)
    mins, secs = int(mi or 0), int(ss or 0)
    if h > 23 or mins > 59 or secs > 59:
        raise BadDateTime(text)
    ns = ((h * 60 + mins) * 60 + secs) * 10_000_000
    if frac:
        digits = (frac + "0000000")[:7]
        ns += int(digits)
        if len(frac) > 7 and frac[7] >= "5":
            ns += 1
    offset = None
    if off:
        if off.upper() == "Z":
            offset = 0
        else:
            sign = -1 if off[0] == "-" else 1
            o = off[1:].replace(":", "")
            offset = sign * (int(o[:2]) * 60 + int(o[2:]))
    return days, ns, offset


def canon(days, ns100):
    """(days since 0001-01-01, 100ns of day) -> canonical 27-character text."""
    days += ns100 // NS100_PER_DAY
    ns100 %= NS100_PER_DAY
    d = _dt.date.fromordinal(days + 1)
    secs, frac = divmod(ns100, 10_000_000)
    h, rem = divmod(secs, 3600)
    mi, s = divmod(rem, 60)
    return "%04d-%02d-%02d %02d:%02d:%02d.%07d" % (d.year, d.month, d.day, h, mi, s, frac)


def round_ns(ns100, scale):
    """Round 100ns units to datetime2(scale) precision, half up like SQL Server."""
    unit = 10 ** (7 - scale)
    return (ns100 + unit // 2) // unit * unit


def to_datetime2(text, scale=7):
    """Normalise a date/time string to canonical datetime2(scale) text (offset dropped)."""
    days, ns, _ = parse(text)
    return canon(days, round_ns(ns, scale))


def to_date(text):
    """Canonical text of the date part (time 00:00): conversion to date truncates."""
    days, _, _ = parse(text)
    return canon(days, 0)


_SDT_MIN = _dt.date(1900, 1, 1).toordinal() - 1
_SDT_MAX = _dt.date(2079, 6, 6).toordinal() - 1


def to_smalldatetime(text):
    """Canonical text at smalldatetime precision: the nearest minute (SQL Server's smalldatetime docs: 29.998
    seconds or less round down, 29.999 or more up; the value is first taken to the millisecond), within
    1900-01-01 .. 2079-06-06 23:59 (else OutOfRange)."""
    days, ns, _ = parse(text)
    ms = (ns + 5_000) // 10_000
    minute = ms // 60_000 + (1 if ms % 60_000 >= 29_999 else 0)
    days += minute // 1440
    minute %= 1440
    if not _SDT_MIN <= days <= _SDT_MAX:
        raise OutOfRange(text)
    return canon(days, minute * 600_000_000)


def smalldatetime_wire(text):
    """Canonical text -> (days since 1900-01-01, minutes of day) for SMALLDATETIME / DATETIMN(4)."""
    days, ns, _ = parse(text)
    return days - _SDT_MIN, ns // 600_000_000


# --- datetime (1/300 s) ---------------------------------------------------

def ticks_of(ns100):
    """100ns of day -> nearest 1/300 s tick (half up), as SQL Server rounds datetime."""
    return (ns100 * 3 + 50_000) // 100_000


def ns_of_ticks(ticks):
    """1/300 s ticks -> 100ns units rounded to 7 digits (exactly invertible by ticks_of)."""
    return (ticks * 10_000_000 * 2 + 300) // 600


def to_datetime(text):
    """Normalise a date/time string to canonical text at datetime precision."""
    days, ns, _ = parse(text)
    t = ticks_of(ns)
    return canon(days, ns_of_ticks(t))


def datetime_wire(text):
    """Canonical text -> (days since 1900-01-01, 1/300 s ticks of day) for DATETIMN."""
    days, ns, _ = parse(text)
    t = ticks_of(ns)
    if t >= TICKS_PER_DAY:
        days, t = days + 1, t - TICKS_PER_DAY
    return days + 1 - _ORD_1900, t


def t300_text(t300):
    """An instant in 1/300 s since 1900-01-01 -> canonical text."""
    days, t = divmod(t300, TICKS_PER_DAY)
    return canon(days + _ORD_1900 - 1, ns_of_ticks(t))


def t300_of(naive):
    """A naive datetime -> nearest 1/300 s instant since 1900-01-01."""
    days = naive.toordinal() - _ORD_1900
    ns = ((naive.hour * 60 + naive.minute) * 60 + naive.second) * 10_000_000 + naive.microsecond * 10
    return days * TICKS_PER_DAY + ticks_of(ns)


def t300_to_naive(t300):
    """1/300 s instant -> naive datetime (floored to the microsecond)."""
    days, t = divmod(t300, TICKS_PER_DAY)
    us = t * 1_000_000 // 300
    return _dt.datetime.fromordinal(days + _ORD_1900) + _dt.timedelta(microseconds=us)


def text_to_t300(text):
    """Canonical or literal text -> 1/300 s instant (rounded like datetime)."""
    days, ns, _ = parse(text)
    return (days + 1 - _ORD_1900) * TICKS_PER_DAY + ticks_of(ns)


# --- zones ------------------------------------------------------------------

def zone(name):
    """IANA name -> tzinfo (UTC fast path)."""
    return UTC if name.upper() in ("UTC", "ETC/UTC", "Z") else ZoneInfo(name)


def offset_minutes(tz, utc_naive):
    """UTC offset in minutes of ``tz`` at the UTC instant ``utc_naive``."""
    aware = utc_naive.replace(tzinfo=UTC).astimezone(tz)
    return int(aware.utcoffset().total_seconds() // 60)


def local_t300(tz, utc_t300):
    """UTC 1/300 s instant -> local 1/300 s instant (the zone's offset at that instant)."""
    return utc_t300 + offset_minutes(tz, t300_to_naive(utc_t300)) * 60 * 300


def naive_text(dt):
    """A naive datetime -> canonical text (microsecond precision)."""
    return canon(dt.toordinal() - 1, ((dt.hour * 60 + dt.minute) * 60 + dt.second) * 10_000_000
                 + dt.microsecond * 10)


def text_to_naive(text):
    """Canonical text -> naive datetime (microsecond precision)."""
    days, ns, _ = parse(text)
    return _dt.datetime.fromordinal(days + 1) + _dt.timedelta(microseconds=ns // 10)


def dto_text(local_text, offset_min):
    """Local canonical text + offset -> canonical datetimeoffset text."""
    sign = "-" if offset_min < 0 else "+"
    o = abs(offset_min)
    return "%s %s%02d:%02d" % (local_text, sign, o // 60, o % 60)


def parse_dto(text):
    """datetimeoffset text -> (utc days since 0001-01-01, utc 100ns of day, offset minutes)."""
    days, ns, off = parse(text)
    off = off or 0
    total = days * NS100_PER_DAY + ns - off * 60 * 10_000_000
    return total // NS100_PER_DAY, total % NS100_PER_DAY, off
