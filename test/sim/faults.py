"""Fault injection, armed from the control channel and consumed by other sessions.

Each fault fires on the next matching statement (case-insensitive substring
``pattern`` of the statement text or RPC procedure name; NULL matches
anything) of any session except control calls (``sim.*``), ``count`` times
(-1 = until sim.fault_clear)."""
import threading
from dataclasses import dataclass


@dataclass
class Fault:
    kind: str                 # error | stall | drop | purge | refuse_login
    pattern: str = None
    count: int = 1
    number: int = 50000
    message: str = ""
    cls: int = 16
    state: int = 1
    seconds: float = 0.0
    after_rows: int = 0
    low_lsn: bytes = None
    retention: int = None
    capture_instance: str = None
    fired: int = 0

    def matches(self, text):
        return self.pattern is None or self.pattern.lower() in (text or "").lower()


class Faults:
    """Armed faults of a server (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.armed = []
        self.history = []

    def arm(self, fault):
        with self.lock:
            self.armed.append(fault)
        return fault

    def clear(self):
        with self.lock:
            n = len(self.armed)
            self.armed = []
            return n

    def take(self, kind, text=None, pred=None):
        """Consume and return the first armed fault of ``kind`` matching ``text`` (or None)."""
        with self.lock:
            for f in self.armed:
                if f.kind == kind and f.matches(text) and (pred is None or pred(f)):
                    f.fired += 1
                    if f.count > 0:
                        f.count -= 1
                        if f.count == 0:
                            self.armed.remove(f)
                    self.history.append((kind, text))
                    return f
        return None

    def has(self, kind):
        with self.lock:
            return any(f.kind == kind for f in self.armed)
