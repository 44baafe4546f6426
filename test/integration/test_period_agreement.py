"""Every function that reports finality agrees with is_final, whatever the
session's TimeZone: period arithmetic lives in C, and the SQL functions
(explain_verdict, changes_by_period, the gate's not_finalized check) use it
instead of adding a granularity to a timestamptz (which would be calendar
arithmetic in the session's zone, not the table's).

Watermarks sit at 23:00 UTC on DST days of several zones, recorded with an
hourly granularity; the periods then change (1 day, 2 days, 90 minutes,
25 hours in UTC, and local days, ISO weeks and months in the zones of
PERIOD_ZONES), so the watermark lies off the new period boundaries."""

import datetime
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from storefiles import write_file  # noqa: E402
from pgcluster import cluster_with_source  # noqa: E402

UTC = datetime.timezone.utc
ZONES = ["UTC", "America/New_York", "Australia/Lord_Howe", "Pacific/Kiritimati", "America/St_Johns",
         "Asia/Kathmandu", "Europe/London", "Pacific/Chatham"]
GRANULARITIES = ["1 day", "2 days", "90 minutes", "25 hours"]
# Calendar periods cut in a zone, asked from sessions of every zone above.
PERIODS_IN_ZONES = [("1 day", "America/New_York"), ("1 week", "Europe/London"), ("1 month", "Australia/Lord_Howe"),
                    ("1 day", "Asia/Kathmandu"), ("1 hour", "Australia/Lord_Howe"), ("1 day", "America/Santiago")]
# 23:00 UTC on days whose local length is not 24 hours somewhere in ZONES.
WATERMARKS = {
    "dst.ny_spring": datetime.datetime(2026, 3, 8, 23, tzinfo=UTC),      # New York, St. John's: 23 h
    "dst.ny_autumn": datetime.datetime(2026, 11, 1, 23, tzinfo=UTC),     # 25 h
    "dst.lh_autumn": datetime.datetime(2026, 4, 5, 23, tzinfo=UTC),      # Lord Howe: 24.5 h
    "dst.lh_spring": datetime.datetime(2026, 10, 4, 23, tzinfo=UTC),     # Lord Howe: 23.5 h
    "dst.london": datetime.datetime(2026, 3, 29, 23, tzinfo=UTC),        # London: 23 h
}


@pytest.fixture(scope="module")
def pg():
    cluster = cluster_with_source(conf={"finalize.enabled": "off"})
    for table, wm in WATERMARKS.items():
        cluster.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (table,))
        cluster.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', %s)",
                    (table, wm - datetime.timedelta(days=2)))
        cluster.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', %s, "
                    "1, 0, 0, %s, %s)",
                    (table, wm + datetime.timedelta(minutes=40), wm + datetime.timedelta(minutes=10),
                     wm + datetime.timedelta(minutes=40)))
        assert cluster.sql("SELECT finalize.finalized_until(%s)", (table,))[0][0] == wm
    yield cluster
    cluster.cleanup()


def answers(pg, zone, table, wm):
    """For every instant every 30 minutes within two days of the watermark,
    in a session of the zone: is_final, and what the other functions say of
    the period containing it (finality and bounds)."""
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET TIME ZONE %s", (zone,))
            cur.execute("""
                SELECT i,
                       finalize.is_final(%(t)s, i),
                       finalize.period_start(i, g, z), finalize.period_end(i, g, z),
                       e.is_final, e.period_start, e.period_end,
                       c.is_final, c.period_start, c.period_end
                  FROM generate_series(%(from)s::timestamptz, %(to)s::timestamptz, interval '30 minutes') AS i,
                       (SELECT t.granularity AS g, t.period_zone AS z FROM finalize.tracked_table t
                         WHERE t.table_name = %(t)s AND t.untracked_at IS NULL) AS tt,
                       LATERAL finalize.explain_verdict(%(t)s, i) AS e,
                       LATERAL (SELECT * FROM finalize.changes_by_period(%(t)s, i, i + interval '1 microsecond')
                                 LIMIT 1) AS c
                """, {"t": table, "from": wm - datetime.timedelta(hours=48),
                      "to": wm + datetime.timedelta(hours=48)})
            return cur.fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_sql_functions_agree_with_is_final_in_every_zone(pg, granularity):
    checked = finals = 0
    for table in WATERMARKS:
        pg.sql("SELECT finalize.alter_tracked_table(%s, granularity => %s)", (table, granularity))
    try:
        for table, wm in WATERMARKS.items():
            for zone in ZONES:
                for (i, sensor, ps, pe, explained, e_start, e_end, by_period, c_start,
                     c_end) in answers(pg, zone, table, wm):
                    where = f"{table} {granularity} in {zone} at {i}"
                    assert explained == sensor, f"explain_verdict says {explained}, is_final {sensor}: {where}"
                    assert by_period == sensor, f"changes_by_period says {by_period}, is_final {sensor}: {where}"
                    assert (e_start, e_end) == (ps, pe), f"explain_verdict's period {e_start}..{e_end}: {where}"
                    assert (c_start, c_end) == (ps, pe), f"changes_by_period's period {c_start}..{c_end}: {where}"
                    # The verdict itself: the period ends at or before the watermark.
                    assert sensor == (pe <= wm), where
                    checked += 1
                    finals += sensor
    finally:
        for table in WATERMARKS:
            pg.sql("SELECT finalize.alter_tracked_table(%s, granularity => '1 hour')", (table,))
    # Both answers occur, so agreement is not the agreement of constants.
    assert 0 < finals < checked


@pytest.mark.parametrize("granularity,period_zone", PERIODS_IN_ZONES)
def test_calendar_periods_agree_with_is_final_in_every_session_zone(pg, granularity, period_zone):
    """The same agreement with the tables' periods cut in a zone: explain_verdict and changes_by_period
    name the periods of the table's zone, whatever the session's, and call them final exactly when
    is_final does; the periods are those of the reference (test/lib/periods_ref.py)."""
    from periods_ref import period as ref_period
    checked = finals = 0
    for table in WATERMARKS:
        pg.sql("SELECT finalize.alter_tracked_table(%s, granularity => %s, period_zone => %s)",
               (table, granularity, period_zone))
    try:
        for table, wm in WATERMARKS.items():
            for zone in ZONES[:5]:
                for (i, sensor, ps, pe, explained, e_start, e_end, by_period, c_start,
                     c_end) in answers(pg, zone, table, wm):
                    where = f"{table} {granularity} {period_zone} in a {zone} session at {i}"
                    assert (ps, pe) == ref_period(i, granularity, period_zone), where
                    assert explained == sensor and by_period == sensor, where
                    assert (e_start, e_end) == (c_start, c_end) == (ps, pe), where
                    assert sensor == (pe <= wm), where
                    checked += 1
                    finals += sensor
    finally:
        for table in WATERMARKS:
            pg.sql("SELECT finalize.alter_tracked_table(%s, granularity => '1 hour', period_zone => 'UTC')",
                   (table,))
    assert 0 < finals < checked


@pytest.mark.parametrize("zone", ["America/New_York", "Australia/Lord_Howe", "Pacific/Kiritimati"])
def test_the_gate_agrees_with_is_final_in_every_zone(pg, store, zone):
    """release_gate's not_finalized check, for the day periods around each
    watermark (one of them straddles it), from a session in the zone. A
    partition's period_start is its period's start (any other instant is
    refused: test_gate_periods.py)."""
    write_file(store, "p/f", b"x")
    seen = set()
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET TIME ZONE %s", (zone,))
            for table, wm in WATERMARKS.items():
                cur.execute("SELECT finalize.alter_tracked_table(%s, granularity => '1 day')", (table,))
                cur.execute("SELECT finalize.register_partition(%s, 'p', 'p/')", (table,))
                for hours in (-30, -23, -1, 0, 1, 23, 30):
                    at = pg.sql("SELECT finalize.period_start(%s, '1 day')",
                                (wm + datetime.timedelta(hours=hours),))[0][0]
                    manifest = {"table": table, "partition": "p", "generation": f"g{hours}",
                                "store": "file://" + store, "prefix": "p/", "files": {"p/f": 1},
                                "period_start": at.isoformat()}
                    cur.execute("SELECT finalize.is_final(%s, %s)", (table, at))
                    final = cur.fetchone()[0]
                    cur.execute("SELECT released, problems FROM finalize.release_gate(%s)", (json.dumps(manifest),))
                    released, problems = cur.fetchone()
                    codes = [p["code"] for p in problems]
                    assert ("not_finalized" not in codes) == final, f"{table} at {at} in {zone}: {problems}"
                    assert released == final, f"{table} at {at} in {zone}: {problems}"
                    seen.add(final)
                cur.execute("SELECT finalize.alter_tracked_table(%s, granularity => '1 hour')", (table,))
    finally:
        conn.close()
    assert seen == {True, False}
