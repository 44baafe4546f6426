"""Fault injection, armed from the control channel and consumed by other sessions.

Each fault fires on the next matching statement (case-insensitive substring
``pattern`` of the statement text or RPC procedure name; NULL matches
anything) of any session except control calls (``sim.*``), ``count`` times
(-1 = until sim.fault_clear).  ``database`` (NULL = any) limits it to sessions
whose current database is that one (for login faults: the database the login
asks for).  Faults that hold a connection (a stall, a login never answered, a
TLS handshake never completed) end when their time is up or when
sim.fault_clear releases them."""
import threading
from dataclasses import dataclass, field


@dataclass(eq=False)
class Fault:
    kind: str                 # error | stall | drop | purge | refuse_login | hang_login | stall_tls
    pattern: str = None
    count: int = 1
    number: int = 50000
    message: str = ""
    cls: int = 16
    state: int = 1
    seconds: float = 0.0      # stall, hang_login, stall_tls: how long (None: until sim.fault_clear)
    after_rows: int = 0
    low_lsn: bytes = None
    retention: int = None
    capture_instance: str = None
    database: str = None
    fired: int = 0
    released: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    def matches(self, text, database=None):
        if self.database is not None and (database or "").lower() != self.database.lower():
            return False
        return self.pattern is None or self.pattern.lower() in (text or "").lower()


HOLDING = ("stall", "hang_login", "stall_tls")


class Faults:
    """Armed faults of a server (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.armed = []
        self.holding = {}             # fault -> sessions it holds (a stall, a login never answered)
        self.history = []

    def arm(self, fault):
        with self.lock:
            self.armed.append(fault)
        return fault

    def clear(self):
        """Disarm every fault and release the connections held by one; -> how many were armed."""
        with self.lock:
            n = len(self.armed)
            for f in self.armed + list(self.holding):
                f.released.set()
            self.armed = []
            self.holding = {}
            return n

    def take(self, kind, text=None, pred=None, database=None):
        """Consume and return the first armed fault of ``kind`` matching ``text`` and ``database`` (or None)."""
        with self.lock:
            for f in self.armed:
                if f.kind == kind and f.matches(text, database) and (pred is None or pred(f)):
                    f.fired += 1
                    if f.count > 0:
                        f.count -= 1
                        if f.count == 0:
                            self.armed.remove(f)
                    if kind in HOLDING:
                        self.holding[f] = self.holding.get(f, 0) + 1
                    self.history.append((kind, text))
                    return f
        return None

    def done(self, fault):
        """A hold ended."""
        with self.lock:
            n = self.holding.get(fault, 0) - 1
            if n > 0:
                self.holding[fault] = n
            else:
                self.holding.pop(fault, None)

    def has(self, kind):
        with self.lock:
            return any(f.kind == kind for f in self.armed)
