"""An independent reference for finalize's periods (src/core/period.c),
written from the rules, not from the C: Python's zoneinfo reads the zone
database, and the period containing an instant is found among the resolved
grid points around it (the C code computes it from the greatest wall time
shown so far instead).

Rules: a period's boundaries are points of a grid of local wall times (a
stride counted from 2000-01-01 00:00, whole weeks written in days from
Monday 2000-01-03, or the first of every n-th month from January 2000),
each resolved to the earliest instant that shows it, or, when no instant
does (a DST gap), to the instant the gap ends."""

import datetime

from zoneinfo import ZoneInfo

UTC = datetime.timezone.utc
ORIGIN = datetime.datetime(2000, 1, 1)
WEEK_ORIGIN = datetime.datetime(2000, 1, 3)
SECOND = datetime.timedelta(seconds=1)


class Granularity:
    """A granularity as finalize reads an interval: months alone, or a
    length; days (multiples of 7, nothing else) make ISO weeks."""

    def __init__(self, months=0, days=0, seconds=0):
        self.months, self.days, self.seconds = months, days, seconds
        self.stride = datetime.timedelta(days=days, seconds=seconds)
        self.origin = WEEK_ORIGIN if months == 0 and seconds == 0 and days % 7 == 0 else ORIGIN

    @classmethod
    def parse(cls, text):
        """'1 hour', '15 minutes', '1 day', '1 week', '1 month', '3 months', '1 year', '90 minutes', '168 hours'."""
        n, unit = text.split()
        n = int(n)
        unit = unit.rstrip("s")
        if unit in ("month", "mon"):
            return cls(months=n)
        if unit == "year":
            return cls(months=12 * n)
        if unit == "week":
            return cls(days=7 * n)
        if unit == "day":
            return cls(days=n)
        return cls(seconds=n * {"hour": 3600, "minute": 60, "second": 1}[unit])

    def grid(self, wall, before, after):
        """Grid points from `before` steps below the one at or before wall to `after` steps above it."""
        if self.months:
            index = (wall.year - 2000) * 12 + wall.month - 1
            first = index - index % self.months
            return [datetime.datetime(2000 + (first + k * self.months) // 12, (first + k * self.months) % 12 + 1, 1)
                    for k in range(-before, after + 1)]
        k0 = (wall - self.origin) // self.stride
        return [self.origin + (k0 + k) * self.stride for k in range(-before, after + 1)]


def wall_of(instant, zone):
    """The local wall time of an instant (naive)."""
    return instant.astimezone(zone).replace(tzinfo=None)


def resolve(wall, zone):
    """The earliest instant showing wall time `wall` in zone, or the end of the gap that skips it."""
    shown = []
    for fold in (0, 1):
        u = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        if wall_of(u, zone) == wall:
            shown.append(u)
    if shown:
        return min(shown)
    # In a gap: fold=1 reads it with the offset after the change (an instant
    # before the gap ends), fold=0 with the one before (an instant after).
    lo = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    hi = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if lo > hi:
        lo, hi = hi, lo
    off_lo = lo.astimezone(zone).utcoffset()
    while hi - lo > SECOND:
        mid = lo + (hi - lo) / 2
        mid = mid.replace(microsecond=0)
        if mid <= lo:
            break
        if mid.astimezone(zone).utcoffset() == off_lo:
            lo = mid
        else:
            hi = mid
    return hi


def period(instant, granularity, zone_name):
    """(start, end) of the period of `granularity` in zone `zone_name` that contains `instant`."""
    zone = ZoneInfo(zone_name)
    g = Granularity.parse(granularity) if isinstance(granularity, str) else granularity
    if g.months:
        steps = 2
    else:
        steps = int(datetime.timedelta(hours=3) / g.stride) + 2
    points = sorted({resolve(w, zone) for w in g.grid(wall_of(instant, zone), steps, steps)})
    start = max(p for p in points if p <= instant)
    end = min(p for p in points if p > instant)
    return start, end


def periods(from_instant, to_instant, granularity, zone_name):
    """Every period intersecting [from_instant, to_instant), as (start, end)."""
    out = []
    start, end = period(from_instant, granularity, zone_name)
    out.append((start, end))
    while end < to_instant:
        start, end = period(end, granularity, zone_name)
        out.append((start, end))
    return out
