"""Server clock: the wall clock, or a simulated clock moved only by the control channel."""
import datetime as _dt
import threading

from . import timeutil


class Clock:
    """UTC clock.  ``sim`` mode starts at ``start`` and moves only through ``set``."""

    def __init__(self, mode="real", start=None):
        self.mode = mode
        self._lock = threading.Lock()
        if start is None:
            start = _dt.datetime.now(timeutil.UTC).replace(microsecond=0)
        self._t = start

    @property
    def simulated(self):
        return self.mode == "sim"

    def now(self):
        """Current UTC instant (aware datetime)."""
        if self.mode == "real":
            return _dt.datetime.now(timeutil.UTC)
        with self._lock:
            return self._t

    def set(self, t):
        """Move the simulated clock (never backwards)."""
        with self._lock:
            if t > self._t:
                self._t = t


def parse_utc(text):
    """'2026-11-29 14:00:00' / '...Z' / '...+01:00' -> aware UTC datetime."""
    days, ns, off = timeutil.parse(text)
    naive = _dt.datetime.fromordinal(days + 1) + _dt.timedelta(microseconds=ns // 10)
    if off:
        naive -= _dt.timedelta(minutes=off)
    return naive.replace(tzinfo=timeutil.UTC)
