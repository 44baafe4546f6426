"""The database collation (--collation): its TDS 5-byte form and the ENVCHANGE that reports it.

MS-TDS 2.2.5.1.2 (Collation): LCID (20 bits) | flags fIgnoreCase, fIgnoreAccent, fIgnoreKana,
fIgnoreWidth, fBinary, fBinary2, fUTF8 (bits 20..26) | version (4 bits), then SortId (1 byte,
non-zero for SQL collations).  Only Latin1 (LCID 0x0409) names are modelled."""
import struct

_SQL_SORT_IDS = {"SQL_LATIN1_GENERAL_CP1_CI_AS": 52, "SQL_LATIN1_GENERAL_CP1_CS_AS": 51,
                 "SQL_LATIN1_GENERAL_CP1_CI_AI": 54, "SQL_LATIN1_GENERAL_CP1_BIN": 40}


def collation_bytes(name):
    """5-byte TDS collation of ``name`` (e.g. SQL_Latin1_General_CP1_CS_AS -> 09 04 C0 00 33)."""
    up = name.upper() + "_"
    flags = 0
    if "_CI_" in up:
        flags |= 0x01
    if "_AI_" in up:
        flags |= 0x02
    if "_KS_" not in up:
        flags |= 0x04
    if "_WS_" not in up:
        flags |= 0x08
    if "_BIN2_" in up:
        flags = 0x20
    elif "_BIN_" in up:
        flags = 0x10
    if "_UTF8_" in up:
        flags |= 0x40
    version = 0
    for v, tag in ((1, "_100_"), (2, "_140_")):
        if tag in up:
            version = v
    sort_id = _SQL_SORT_IDS.get(name.upper(), 0)
    info = 0x0409 | (flags << 20) | (version << 28)
    return struct.pack("<I", info) + bytes([sort_id])


def env_change(name):
    """ENVCHANGE type 7 (SQL collation) announcing the database collation at login / USE."""
    coll = collation_bytes(name)
    body = b"\x07" + bytes([len(coll)]) + coll + b"\x00"
    return b"\xE3" + struct.pack("<H", len(body)) + body
