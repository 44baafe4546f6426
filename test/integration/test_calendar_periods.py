"""Calendar periods in a table's own zone (period_zone), against ground
truth.

1. The period arithmetic (one implementation, src/core/period.c) gives
   the periods an independent reference computes from the rules and
   Python's zoneinfo (test/lib/periods_ref.py): hours, days, ISO weeks,
   months, quarters and years in zones with 23- and 25-hour days, 30-minute
   DST (Lord Howe), offsets of 45 minutes (Kathmandu, Chatham), DST that
   starts at local midnight (Santiago, Havana) and a day that never happened
   (Apia, 2011-12-30).
2. Through the worker: calendar_worker.py, run per zone by
   test_calendar_worker_americas.py and test_calendar_worker_rest.py (two
   files, so that two pytest workers share the zones).
3. A derived table cut in local days over hourly UTC inputs, and a table's
   zone changed under it: the verdict is rounded down, never up."""

import datetime
import os
import random
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from periods_ref import period as ref_period, UTC  # noqa: E402
from pgcluster import cluster_with_source  # noqa: E402

from zoneinfo import ZoneInfo  # noqa: E402

ZONES = ["UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kathmandu", "Asia/Seoul",
         "America/Santiago", "America/Havana", "Pacific/Chatham", "America/St_Johns"]
GRANULARITIES = ["15 minutes", "1 hour", "90 minutes", "1 day", "2 days", "1 week", "168 hours", "1 month",
                 "3 months", "1 year"]


def transitions(zone_name, year=2026):
    """The instants of year at which the zone changes its UTC offset (to the hour)."""
    zone = ZoneInfo(zone_name)
    t = datetime.datetime(year, 1, 1, tzinfo=UTC)
    out = []
    off = t.astimezone(zone).utcoffset()
    while t.year == year:
        nxt = t + datetime.timedelta(hours=1)
        if nxt.astimezone(zone).utcoffset() != off:
            out.append(nxt)
            off = nxt.astimezone(zone).utcoffset()
        t = nxt
    return out


def instants(zone_name, seed):
    """Instants around each of the zone's transitions of 2026 (every 97 minutes over two days), at the ends of
    November and December 2026 in the zone, and a few at random in 2026."""
    rng = random.Random(seed)
    zone = ZoneInfo(zone_name)
    around = transitions(zone_name) + [datetime.datetime(2026, 12, 1, tzinfo=zone).astimezone(UTC),
                                       datetime.datetime(2027, 1, 1, tzinfo=zone).astimezone(UTC)]
    out = []
    for t in around:
        out += [t + datetime.timedelta(minutes=97 * k) for k in range(-15, 16)]
        out += [t, t - datetime.timedelta(microseconds=1)]
    start = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    out += [start + datetime.timedelta(seconds=rng.randrange(365 * 86400)) for _ in range(12)]
    return sorted(set(out))


@pytest.fixture(scope="module")
def pg():
    cluster = cluster_with_source(conf={"finalize.enabled": "off"})
    yield cluster
    cluster.cleanup()


@pytest.mark.every_major
@pytest.mark.parametrize("zone", ZONES)
def test_periods_equal_an_independent_reference(pg, zone):
    """period_start and period_end in the zone, for every granularity, at instants around its transitions,
    equal what periods_ref.py computes from the rules; each start and end is a boundary itself."""
    checked = 0
    lengths = set()
    for granularity in GRANULARITIES:
        ts = instants(zone, hash((zone, granularity)) & 0xffff)
        rows = pg.sql("SELECT i, finalize.period_start(i, %s::interval, %s), finalize.period_end(i, %s::interval, %s) "
                      "FROM unnest(%s::timestamptz[]) AS i ORDER BY i", (granularity, zone, granularity, zone, ts))
        for i, start, end in rows:
            want = ref_period(i, granularity, zone)
            assert (start, end) == want, f"{granularity} in {zone} at {i}: {start}..{end}, reference {want}"
            lengths.add(end - start)
            checked += 1
    assert checked > 500
    if zone not in ("UTC", "Asia/Kathmandu", "Asia/Seoul"):
        # DST zones: days that are not 24 hours long were among them.
        assert {d for d in lengths if datetime.timedelta(hours=22) < d < datetime.timedelta(hours=26)} - \
            {datetime.timedelta(hours=24)}, lengths


def test_a_day_that_never_happened():
    """Samoa skipped 2011-12-30 (clocks went from 29 December 23:59:59 -10 to 31 December 00:00 +14): local
    days there end where the gap does, and no period is empty."""
    cluster = cluster_with_source(conf={"finalize.enabled": "off"})
    try:
        rows = cluster.sql("SELECT finalize.period_start(i, '1 day', 'Pacific/Apia'), "
                           "finalize.period_end(i, '1 day', 'Pacific/Apia') "
                           "FROM unnest(ARRAY['2011-12-29 12:00-10', '2011-12-31 12:00+14']::timestamptz[]) AS i")
        zone = ZoneInfo("Pacific/Apia")
        d29 = datetime.datetime(2011, 12, 29, tzinfo=zone)
        d31 = datetime.datetime(2011, 12, 31, tzinfo=zone)
        assert rows == [(d29, d31), (d31, datetime.datetime(2012, 1, 1, tzinfo=zone))]
        assert rows[0][1].astimezone(UTC) - rows[0][0].astimezone(UTC) == datetime.timedelta(hours=24)
    finally:
        cluster.cleanup()


@pytest.mark.every_major
def test_tables_cut_their_periods_in_their_zone(pg):
    """is_final, explain_verdict and changes_by_period name a table's periods in its zone, whatever the
    session's TimeZone; finalized_until() is a boundary of them."""
    pg.sql("SELECT finalize.track_table('cal.seoul', 'src', 'dbo.orders', '1 day', period_zone => 'asia/seoul')")
    try:
        assert pg.sql("SELECT period_zone FROM finalize.tracked_table WHERE table_name = 'cal.seoul'") == \
            [("Asia/Seoul",)]
        pg.sql("SELECT finalize.record_range('cal.seoul', NULL, '0x00000000000000000100', '2026-11-26 00:00+00')")
        pg.sql("SELECT finalize.record_range('cal.seoul', '0x00000000000000000100', '0x00000000000000000200', "
               "'2026-11-28 00:30+00', 4, 0, 0, '2026-11-27 14:00+00', '2026-11-27 16:00+00')")
        seoul = ZoneInfo("Asia/Seoul")
        day28 = datetime.datetime(2026, 11, 28, tzinfo=seoul)
        day27 = datetime.datetime(2026, 11, 27, tzinfo=seoul)
        told = set()
        for session_zone in ("UTC", "America/Los_Angeles", "Asia/Kolkata"):
            conn = pg.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute("SET TIME ZONE %s", (session_zone,))
                    cur.execute("SELECT finalize.finalized_until('cal.seoul'), "
                                "finalize.is_final('cal.seoul', '2026-11-27 00:00+09'), "
                                "finalize.is_final('cal.seoul', '2026-11-28 00:00+09'), "
                                "finalize.is_final('cal.seoul', '2026-11-27 23:00+00')")
                    assert cur.fetchone() == (day28, True, False, False), session_zone
                    cur.execute("SELECT period_start, period_end, is_final FROM finalize.explain_verdict("
                                "'cal.seoul', '2026-11-28 03:00+09')")
                    assert cur.fetchone() == (day28, day28 + datetime.timedelta(days=1), False)
                    # The rows committed 23:00-01:00 Seoul straddle the local midnight.
                    cur.execute("SELECT period_start, is_final, straddling_ranges FROM finalize.changes_by_period("
                                "'cal.seoul', '2026-11-27 00:00+09', '2026-11-29 00:00+09')")
                    assert cur.fetchall() == [(day27, True, 1), (day28, False, 1)]
                    # What is written for people names the Seoul day, in Seoul's time, in every session.
                    cur.execute("SET DateStyle = 'German'")
                    cur.execute("SELECT e.reason, e.local_period_start, e.local_finalized_until, "
                                "s.local_finalized_until FROM finalize.explain_verdict('cal.seoul', "
                                "'2026-11-28 03:00+09') e, finalize.status s WHERE s.table_name = 'cal.seoul'")
                    told.add(cur.fetchone())
            finally:
                conn.close()
        (reason, local_start, local_until, status_until), = told
        assert reason.startswith("Period [2026-11-28 00:00:00+09, 2026-11-29 00:00:00+09) is not final yet: "
                                 "SQL Server's capture has reached 2026-11-28 09:30:00+09"), reason
        assert (local_start, local_until, status_until) == ("2026-11-28 00:00:00+09",) * 3
    finally:
        pg.sql("SELECT finalize.untrack_table('cal.seoul', false)")


def test_a_new_zone_or_granularity_rounds_the_verdict_down_never_up(pg):
    """A verdict set in UTC hours reads as the start of its Seoul day once the table's periods are Seoul
    days (never the day's end), and comes back whole when they are hours again."""
    pg.sql("SELECT finalize.track_table('cal.moves', 'src', 'dbo.orders', '1 hour')")
    try:
        pg.sql("SELECT finalize.record_range('cal.moves', NULL, '0x00000000000000000100', '2026-11-26 00:00+00')")
        pg.sql("SELECT finalize.record_range('cal.moves', '0x00000000000000000100', '0x00000000000000000200', "
               "'2026-11-28 10:20+00')")
        at_10 = datetime.datetime(2026, 11, 28, 10, tzinfo=UTC)
        seoul_day = datetime.datetime(2026, 11, 28, tzinfo=ZoneInfo("Asia/Seoul"))
        assert pg.sql("SELECT finalize.finalized_until('cal.moves')")[0][0] == at_10
        pg.sql("SELECT finalize.alter_tracked_table('cal.moves', granularity => '1 day', period_zone => 'Asia/Seoul')")
        assert pg.sql("SELECT finalize.finalized_until('cal.moves'), finalize.is_final('cal.moves', "
                      "'2026-11-27 12:00+09'), finalize.is_final('cal.moves', '2026-11-28 12:00+09')")[0] == \
            (seoul_day, True, False)
        assert pg.sql("SELECT finalized_until FROM finalize.status WHERE table_name = 'cal.moves'")[0][0] == seoul_day
        assert pg.sql("SELECT finalized_until FROM finalize.explain_verdict('cal.moves')")[0][0] == seoul_day
        pg.sql("SELECT finalize.alter_tracked_table('cal.moves', granularity => '1 hour', period_zone => 'UTC')")
        assert pg.sql("SELECT finalize.finalized_until('cal.moves')")[0][0] == at_10
        with pytest.raises(Exception, match='"Mars/Olympus" is not a time zone name'):
            pg.sql("SELECT finalize.alter_tracked_table('cal.moves', period_zone => 'Mars/Olympus')")
        # Not zones: a POSIX rule, the host's own zone (which a failover may change under the table), the
        # rules' template, the placeholder, and copies of the database under other names.
        for name in ("XYZ-3", "localtime", "posixrules", "Factory", "posix/Asia/Seoul", "right/UTC", ""):
            with pytest.raises(Exception, match='is not a time zone name'):
                pg.sql("SELECT finalize.alter_tracked_table('cal.moves', period_zone => %s)", (name,))
        assert pg.sql("SELECT period_zone FROM finalize.tracked_table WHERE table_name = 'cal.moves'") == [("UTC",)]
    finally:
        pg.sql("SELECT finalize.untrack_table('cal.moves', false)")


def test_a_derived_local_day_table_over_hourly_utc_inputs(pg):
    """A derived table cut in New York days is final for a day only when its hourly UTC inputs are final to the
    day's end (a 23-hour day on 2026-03-08), and its verdict is that day's start."""
    pg.sql("SELECT finalize.track_table('cal.h1', 'src', 'dbo.orders', '1 hour')")
    pg.sql("SELECT finalize.track_table('cal.h2', 'src', 'dbo.lines', '1 hour')")
    try:
        pg.sql("SELECT finalize.track_derived('cal.ny_daily', ARRAY['cal.h1', 'cal.h2'], '1 day', "
               "'America/New_York')")
        ny = ZoneInfo("America/New_York")
        mar8 = datetime.datetime(2026, 3, 8, tzinfo=ny).astimezone(UTC)
        mar9 = datetime.datetime(2026, 3, 9, tzinfo=ny).astimezone(UTC)
        assert mar9 - mar8 == datetime.timedelta(hours=23)
        for t in ("cal.h1", "cal.h2"):
            pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-03-07 00:00+00')", (t,))
        lsn = {"cal.h1": 0x100, "cal.h2": 0x100}
        seen = set()
        for hour in range(0, 36):
            at = datetime.datetime(2026, 3, 8, 5, tzinfo=UTC) + datetime.timedelta(hours=hour)
            for t in ("cal.h1", "cal.h2") if hour % 3 else ("cal.h1",):
                pg.sql("SELECT finalize.record_range(%s, %s, %s, %s)",
                       (t, "0x%020X" % lsn[t], "0x%020X" % (lsn[t] + 0x100), at + datetime.timedelta(minutes=5)))
                lsn[t] += 0x100
            inputs = min(pg.sql("SELECT finalize.finalized_until(%s)", (t,))[0][0] for t in ("cal.h1", "cal.h2"))
            expected = ref_period(inputs, "1 day", "America/New_York")[0]
            # The derived table follows in the scheduler's next round; take that step now. The scheduler's own
            # round may hold the derived table's row at that moment (refresh_derived skips it, the round
            # commits the same step a moment later): the verdict may lag, never lead.
            deadline = time.monotonic() + 30
            while True:
                pg.sql("SELECT finalize_internal.refresh_derived()")
                final, until = pg.sql("SELECT finalize.is_final('cal.ny_daily', %s), "
                                      "finalize.finalized_until('cal.ny_daily')", (mar8,))[0]
                assert until <= expected and (not final or mar9 <= inputs), (at, until, inputs)
                if until == expected:
                    break
                assert time.monotonic() < deadline, (at, until, inputs)
                time.sleep(0.1)
            assert final == (mar9 <= inputs), (at, inputs)
            seen.add(final)
        assert seen == {True, False}
        # Inputs in different zones: the derived table's zone must be said.
        pg.sql("SELECT finalize.alter_tracked_table('cal.h2', period_zone => 'Asia/Seoul')")
        with pytest.raises(Exception, match="cut their periods in different zones"):
            pg.sql("SELECT finalize.track_derived('cal.mixed', ARRAY['cal.h1', 'cal.h2'])")
    finally:
        pg.sql("SELECT finalize.untrack_table('cal.h1', false, true)")
        pg.sql("SELECT finalize.untrack_table('cal.h2', false, true)")


def zone_of_link(name):
    """The zone a name of the system's zone database names, as its files say (Debian installs links as
    symbolic links to the zone's file): the reference for what finalize stores. Etc/UTC is spelt UTC."""
    root = "/usr/share/zoneinfo"
    zone = os.path.relpath(os.path.realpath(os.path.join(root, name)), os.path.realpath(root))
    return "UTC" if zone == "Etc/UTC" else zone


def test_links_of_the_zone_database_are_stored_as_their_zone(pg):
    """'ROK', 'US/Eastern', 'Zulu' (links of the tz database) are stored as the zones they name wherever
    a table takes a zone: track_table (period_zone and event_time_zone), alter_tracked_table,
    track_sharded and its shards, track_derived; a derived table's inputs given the same zone under two
    names are in one zone. A server's timezone option, which a validator cannot rewrite, refuses a link
    and names the zone to use."""
    links = {"ROK": "Asia/Seoul", "US/Eastern": "America/New_York", "Zulu": "UTC", "Asia/Calcutta": "Asia/Kolkata",
             "Europe/Kiev": "Europe/Kyiv", "Etc/UTC": "UTC", "Japan": "Asia/Tokyo"}
    for link, zone in links.items():
        assert zone_of_link(link) == zone, (link, zone_of_link(link))

    def zones(table):
        return pg.sql("SELECT period_zone, event_time_zone FROM finalize.tracked_table "
                      "WHERE table_name = %s AND untracked_at IS NULL", (table,))[0]
    try:
        pg.sql("SELECT finalize.track_table('cal.rok', 'src', 'dbo.orders', '1 day', period_zone => 'rok', "
               "event_time_column => 'created_at', event_time_zone => 'US/Eastern')")
        assert zones("cal.rok") == (zone_of_link("ROK"), zone_of_link("US/Eastern"))
        pg.sql("SELECT finalize.track_table('cal.seoul2', 'src', 'dbo.items', '1 day', period_zone => 'Asia/Seoul')")
        # Two names of one zone: the derived table's inputs agree.
        pg.sql("SELECT finalize.track_derived('cal.rok_daily', ARRAY['cal.rok', 'cal.seoul2'])")
        assert zones("cal.rok_daily")[0] == "Asia/Seoul"
        pg.sql("SELECT finalize.track_derived('cal.zulu_daily', ARRAY['cal.rok'], period_zone => 'Zulu')")
        assert zones("cal.zulu_daily")[0] == zone_of_link("Zulu")
        pg.sql("SELECT finalize.alter_tracked_table('cal.seoul2', period_zone => 'Europe/Kiev')")
        assert zones("cal.seoul2")[0] == zone_of_link("Europe/Kiev")
        pg.sql("SELECT finalize.alter_tracked_table('cal.zulu_daily', period_zone => 'Japan')")
        assert zones("cal.zulu_daily")[0] == zone_of_link("Japan")
        pg.sql("SELECT finalize.track_sharded('cal.sharded', '1 day', period_zone => 'Asia/Calcutta')")
        pg.sql("SELECT finalize.add_shard('cal.sharded', 'db01', 'src', 'dbo.shard01')")
        assert zones("cal.sharded")[0] == zone_of_link("Asia/Calcutta")
        assert pg.sql("SELECT period_zone FROM finalize.tracked_table WHERE shard = 'db01' "
                      "AND untracked_at IS NULL") == [(zone_of_link("Asia/Calcutta"),)]
        # The periods are the zone's, as before.
        assert pg.sql("SELECT finalize.period_start('2026-11-28 03:00+09', '1 day', 'ROK')")[0][0] == \
            datetime.datetime(2026, 11, 28, tzinfo=ZoneInfo("Asia/Seoul"))
        with pytest.raises(Exception, match=r'"ROK" is another name of zone Asia/Seoul(.|\n)*'
                                            r"HINT:  Use timezone 'Asia/Seoul'"):
            pg.sql("CREATE SERVER cal_rok FOREIGN DATA WRAPPER finalize_mssql "
                   "OPTIONS (host '127.0.0.1', database 'demo', timezone 'ROK')")
        with pytest.raises(Exception, match="Use timezone 'Europe/Berlin'"):
            pg.sql("ALTER SERVER src OPTIONS (ADD timezone 'europe/berlin')")
        pg.sql("ALTER SERVER src OPTIONS (ADD timezone 'Asia/Seoul')")
        pg.sql("ALTER SERVER src OPTIONS (DROP timezone)")
    finally:
        for t in ("cal.rok_daily", "cal.zulu_daily", "cal.sharded", "cal.rok", "cal.seoul2"):
            pg.sql("SELECT finalize.untrack_table(%s, false, true) FROM finalize.tracked_table "
                   "WHERE table_name = %s AND untracked_at IS NULL", (t, t))
