"""Calendar periods in a table's own zone (period_zone), against ground
truth.

1. The period arithmetic (one implementation, src/core/period.c) gives
   the periods an independent reference computes from the rules and
   Python's zoneinfo (test/lib/periods_ref.py): hours, days, ISO weeks,
   months, quarters and years in zones with 23- and 25-hour days, 30-minute
   DST (Lord Howe), offsets of 45 minutes (Kathmandu, Chatham), DST that
   starts at local midnight (Santiago, Havana) and a day that never happened
   (Apia, 2011-12-30).
2. Through the worker over real FreeTDS, the simulator's truth says which
   periods are complete: across both DST transitions and month ends, no
   function calls a local day, week or month final before the truth has
   passed its end, and the verdict does reach the periods the truth has
   passed. The counts per local day equal the truth's.
3. A derived table cut in local days over hourly UTC inputs, and a table's
   zone changed under it: the verdict is rounded down, never up."""

import datetime
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from periods_ref import period as ref_period, periods as ref_periods, UTC  # noqa: E402
from pgcluster import cluster_with_source  # noqa: E402
from worker_env import Env, as_utc, new_cluster, sim_clock, truth_watermark  # noqa: E402

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
            finally:
                conn.close()
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
            # The derived table follows in the scheduler's next round; take that step now.
            pg.sql("SELECT finalize._refresh_derived()")
            inputs = min(pg.sql("SELECT finalize.finalized_until(%s)", (t,))[0][0] for t in ("cal.h1", "cal.h2"))
            final, until = pg.sql("SELECT finalize.is_final('cal.ny_daily', %s), "
                                  "finalize.finalized_until('cal.ny_daily')", (mar8,))[0]
            assert final == (mar9 <= inputs), (at, inputs)
            assert until == ref_period(inputs, "1 day", "America/New_York")[0], (at, until, inputs)
            seen.add(final)
        assert seen == {True, False}
        # Inputs in different zones: the derived table's zone must be said.
        pg.sql("SELECT finalize.alter_tracked_table('cal.h2', period_zone => 'Asia/Seoul')")
        with pytest.raises(Exception, match="cut their periods in different zones"):
            pg.sql("SELECT finalize.track_derived('cal.mixed', ARRAY['cal.h1', 'cal.h2'])")
    finally:
        pg.sql("SELECT finalize.untrack_table('cal.h1', false, true)")
        pg.sql("SELECT finalize.untrack_table('cal.h2', false, true)")


# --- 2. Through the worker: the simulator's truth ---------------------------------------------------

# Per zone: windows (UTC start, hours) to step through, each across a DST transition or a month end of the
# zone; tables of day, ISO week and month periods cut in the zone (and hours where the zone's offset is
# not whole hours).
WORKER_CASES = {
    "America/New_York": [("2026-03-07T00:00:00Z", 60), ("2026-10-30T12:00:00Z", 60)],   # and the month end
    "Europe/London": [("2026-03-28T00:00:00Z", 48), ("2026-10-24T00:00:00Z", 48)],
    "Australia/Lord_Howe": [("2026-03-30T00:00:00Z", 160), ("2026-10-02T12:00:00Z", 48)],   # with the month end
    "Asia/Kathmandu": [("2026-10-30T00:00:00Z", 60)],
    "Asia/Seoul": [("2026-10-30T00:00:00Z", 60)],
    "America/Santiago": [("2026-04-03T12:00:00Z", 48), ("2026-09-05T00:00:00Z", 48)],
    "America/Havana": [("2026-03-07T00:00:00Z", 48), ("2026-10-30T12:00:00Z", 60)],
}


def period_starts(zone, granularity, lo, hi):
    return [s for s, _ in ref_periods(lo, hi, granularity, zone)]


@pytest.fixture(scope="module")
def worker_pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


@pytest.mark.parametrize("zone", sorted(WORKER_CASES))
def test_calendar_verdicts_never_lead_the_simulators_truth(worker_pg, zone):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    env = Env(worker_pg)
    tables = {"day": "1 day", "week": "1 week", "month": "1 month"}
    if zone in ("Asia/Kathmandu", "Australia/Lord_Howe"):
        tables["hour"] = "1 hour"
    first = WORKER_CASES[zone][0][0]
    start = as_utc(datetime.datetime.fromisoformat(first.replace("Z", "+00:00"))) - datetime.timedelta(days=3)
    try:
        with sim_clock(timezone=zone, start_time=start.strftime("%Y-%m-%dT%H:%M:%SZ"), pollinginterval=300,
                       dummy_interval=1800) as sim:
            sim.call("sim.commit", inserts=1)
            sim.call("sim.advance", seconds=10)
            env.add_source("erp", sim, timezone=zone)
            for kind, g in tables.items():
                env.sql("SELECT finalize.track_table(%s, 'erp', 'dbo.orders', %s, period_zone => %s)",
                        (f"z.{kind}", g, zone))
            for kind in tables:
                env.wait_caught_up(f"z.{kind}", sim)
            finals = {kind: 0 for kind in tables}
            checks = 0
            for window_start, hours in WORKER_CASES[zone]:
                ws = as_utc(datetime.datetime.fromisoformat(window_start.replace("Z", "+00:00")))
                clock = as_utc(sim.call("sim.state")[0][0]["clock_utc"])
                if ws > clock:
                    sim.call("sim.advance", to=ws)
                end = ws + datetime.timedelta(hours=hours)
                while as_utc(sim.call("sim.state")[0][0]["clock_utc"]) < end:
                    clock = as_utc(sim.call("sim.state")[0][0]["clock_utc"])
                    step = rng.randint(2 * 3600, 7 * 3600)
                    for _ in range(rng.randint(0, 3)):
                        when = clock + datetime.timedelta(seconds=rng.uniform(0, step))
                        sim.call("sim.commit", at=when, inserts=rng.randint(1, 3))
                        clock = when
                    sim.call("sim.advance", seconds=step)
                    for kind in tables:
                        env.wait_caught_up(f"z.{kind}", sim)
                    truth = truth_watermark(sim)
                    now = as_utc(sim.call("sim.state")[0][0]["clock_utc"])
                    for kind, g in tables.items():
                        back = datetime.timedelta(days=40 if kind in ("week", "month") else 3)
                        starts = period_starts(zone, g, now - back, now + datetime.timedelta(days=1))
                        rows = env.sql("SELECT p, finalize.is_final(%s, p), e.is_final, e.period_start, e.period_end "
                                       "FROM unnest(%s::timestamptz[]) AS p, "
                                       "LATERAL finalize.explain_verdict(%s, p) AS e ORDER BY p",
                                       (f"z.{kind}", starts, f"z.{kind}"))
                        for p, final, explained, e_start, e_end in rows:
                            want = ref_period(p, g, zone)
                            assert (e_start, e_end) == want, (kind, p, e_start, e_end, want)
                            assert explained == final, (kind, p)
                            # Never ahead of the truth.
                            assert not final or want[1] <= truth, f"{kind} {want} final, truth {truth} ({zone})"
                            finals[kind] += final
                            checks += 1
                        # And the verdict does follow it: every period ending a capture cycle and a dummy row
                        # before the truth is final.
                        slack = datetime.timedelta(seconds=1800 + 300 + 60)
                        due = [s for s, e in ref_periods(now - back, now, g, zone) if e <= truth - slack]
                        if due:
                            assert env.one("SELECT finalize.is_final(%s, %s)", (f"z.{kind}", due[-1])), \
                                (kind, due[-1], truth)
                        until = env.one("SELECT finalize.finalized_until(%s)", (f"z.{kind}",))
                        assert until is None or (ref_period(until, g, zone)[0] == until and until <= truth), \
                            (kind, until, truth)
                    # The other functions that answer for a period: the multi-table sensor, wait_final and the
                    # facts per period (with the notification's watermark: finalized_until above).
                    names = [f"z.{kind}" for kind in tables]
                    days = period_starts(zone, "1 day", now - datetime.timedelta(days=2), now)
                    for p, all_final, waited, by_facts in env.sql(
                            "SELECT p, finalize.is_final(%s::text[], p), finalize.wait_final('z.day', p, '0'), "
                            "(SELECT c.is_final FROM finalize.changes_by_period('z.day', p, p + interval '1 second') c) "
                            "FROM unnest(%s::timestamptz[]) AS p", (names, days)):
                        assert waited == by_facts == env.one("SELECT finalize.is_final('z.day', %s)", (p,)), p
                        assert not all_final or all(ref_period(p, g, zone)[1] <= truth for g in tables.values()), \
                            (p, truth)
            # Counts per local day: exact where the facts say so, as the truth counts them.
            commits = sim.call("sim.truth_commits")[0]
            for day_start, day_end in ref_periods(start + datetime.timedelta(days=3),
                                                  truth - datetime.timedelta(days=1), "1 day", zone):
                got = env.sql("SELECT inserts, exact FROM finalize.changes_by_period('z.day', %s, %s)",
                              (day_start, day_end))
                truth_rows = sum(r["inserts"] for r in commits
                                 if day_start <= as_utc(r["commit_time_utc"]) < day_end and r["captured"])
                assert len(got) == 1
                if got[0][1]:
                    assert got[0][0] == truth_rows, (day_start, got, truth_rows)
            assert checks > 50 and finals["day"] > 0, (checks, finals)
    finally:
        env.cleanup()
