"""Calendar periods through the worker over real FreeTDS, against the simulator's truth: across both DST
transitions and month ends, no function calls a local day, week or month final before the truth has
passed its end, and the verdict does reach the periods the truth has passed. The counts per local day
equal the truth's. Run per zone by test_calendar_worker_americas.py and test_calendar_worker_rest.py."""

import datetime
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from periods_ref import period as ref_period, periods as ref_periods  # noqa: E402
from worker_env import Env, as_utc, sim_clock, truth_watermark  # noqa: E402


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


def check_zone(worker_pg, zone):
    """Steps the simulator through the zone's windows with random commits, checking every function that
    answers for a period against the truth after each step."""
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
