"""Log sequence numbers: 80-bit unsigned integers shown as binary(10)."""

LSN_MAX = (1 << 80) - 1
ZERO = bytes(10)


def to_bytes(value):
    """LSN integer -> the 10 big-endian bytes SQL Server shows (so memcmp = order)."""
    return int(value).to_bytes(10, "big")


def from_bytes(raw):
    """binary(10) (shorter values are zero-padded on the right like binary(n)) -> int."""
    raw = bytes(raw)
    if len(raw) < 10:
        raw = raw + bytes(10 - len(raw))
    return int.from_bytes(raw[:10], "big")


def text(value):
    """Debezium-style '0000002d:00000e58:0003' form, for logs and README examples."""
    h = "%020x" % (value if isinstance(value, int) else from_bytes(value))
    return "%s:%s:%s" % (h[:8], h[8:16], h[16:])


def hexlit(value):
    """T-SQL literal form 0x0000002D00000E580003."""
    b = to_bytes(value) if isinstance(value, int) else bytes(value)
    return "0x" + b.hex().upper()


def increment(raw):
    """sys.fn_cdc_increment_lsn: the next 80-bit value (documented contract: nothing in between)."""
    if raw is None:
        return None
    return to_bytes(min(from_bytes(raw) + 1, LSN_MAX))


def decrement(raw):
    """sys.fn_cdc_decrement_lsn: the previous 80-bit value."""
    if raw is None:
        return None
    return to_bytes(max(from_bytes(raw) - 1, 0))
