/*
 * Unit tests of the period arithmetic (period.c): UTC strides as before,
 * ISO weeks, calendar months, and local periods across DST transitions in
 * real zones. The zones come from the C library's reading of the system's
 * zone database (TZ, localtime_r), an implementation independent of
 * PostgreSQL's that the server uses: the expected boundaries below are
 * written out by hand from the zones' published rules.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/period.h"

#include "tap.h"

/* Seconds between the Unix epoch and PostgreSQL's. */
#define UNIX_DIFF INT64CONST(946684800)

/* A zone of the C library, by name. */
typedef struct LibcZone
{
	PeriodZone	zone;
	const char *name;
} LibcZone;

static const char *current_tz = NULL;

/* Makes name the C library's zone (TZ) if it is not already. */
static void
use_zone(const char *name)
{
	char		value[128];

	if (current_tz != NULL && strcmp(current_tz, name) == 0)
		return;
	snprintf(value, sizeof(value), ":%s", name);
	setenv("TZ", value, 1);
	tzset();
	current_tz = name;
}

/* The offset (seconds east) at a Unix second. */
static int32
libc_offset(const char *name, int64 secs)
{
	time_t		t = (time_t) secs;
	struct tm	tm;

	use_zone(name);
	localtime_r(&t, &tm);
	return (int32) tm.tm_gmtoff;
}

/* PeriodZone.offset_at */
static int32
offset_at(const PeriodZone *zone, TimestampTz t)
{
	int64		secs = t / USECS_PER_SEC - (t % USECS_PER_SEC < 0 ? 1 : 0);

	return libc_offset(((const LibcZone *) zone)->name, secs + UNIX_DIFF);
}

/*
 * PeriodZone.next_change: steps through (after, until] by half hours and
 * bisects to the second where the offset changes (no zone changes twice
 * within half an hour).
 */
static bool
next_change(const PeriodZone *zone, TimestampTz after, TimestampTz until, ZoneChange *out)
{
	const char *name = ((const LibcZone *) zone)->name;
	int64		from = after / USECS_PER_SEC - (after % USECS_PER_SEC < 0 ? 1 : 0) + UNIX_DIFF;
	int64		last = until / USECS_PER_SEC + UNIX_DIFF;
	int32		off = libc_offset(name, from);

	for (int64 s = from; s < last; s += 1800)
	{
		int64		e = s + 1800 < last ? s + 1800 : last;
		int32		off_e = libc_offset(name, e);

		if (off_e != off)
		{
			int64		lo = s;		/* offset off at lo */
			int64		hi = e;		/* offset off_e at hi */

			while (hi - lo > 1)
			{
				int64		mid = lo + (hi - lo) / 2;

				if (libc_offset(name, mid) == off)
					lo = mid;
				else
					hi = mid;
			}
			out->at = (hi - UNIX_DIFF) * USECS_PER_SEC;
			out->before = off;
			out->after = libc_offset(name, hi);
			return out->at > after;
		}
	}
	return false;
}

/* A PeriodZone for a zone of the C library. */
static LibcZone *
libc_zone(const char *name)
{
	LibcZone   *z = calloc(1, sizeof(LibcZone));

	z->zone.offset_at = offset_at;
	z->zone.next_change = next_change;
	z->zone.fixed_after = DT_NOEND;
	z->name = name;
	return z;
}

/* An instant given in UTC. */
static TimestampTz
utc(int y, int mo, int d, int h, int mi)
{
	return (civil_to_days(y, mo, d) * SECS_PER_DAY + h * 3600 + mi * 60) * USECS_PER_SEC;
}

/* The periods of a granularity given as months, days and microseconds. */
static PeriodSpec
spec_of(int32 months, int32 days, int64 usecs, const LibcZone *zone)
{
	Interval	g;
	PeriodSpec	s;

	g.month = months;
	g.day = days;
	g.time = usecs;
	if (period_spec_make(&g, zone ? &zone->zone : NULL, true, &s) != GRANULARITY_OK)
		abort();
	return s;
}

/* Whether the period containing ts is [start, end). */
static bool
period_is(const PeriodSpec *s, TimestampTz ts, TimestampTz start, TimestampTz end)
{
	TimestampTz got;

	if (period_floor(s, ts, &got) != PERIOD_OK || got != start)
	{
		printf("# floor %lld, expected %lld\n", (long long) got, (long long) start);
		return false;
	}
	if (period_end_of(s, got) != end)
	{
		printf("# end %lld, expected %lld\n", (long long) period_end_of(s, got), (long long) end);
		return false;
	}
	return true;
}

/*
 * Every instant of [from, to) stepped by step lies in exactly one period:
 * floor(t) <= t < end, the end is the start of the next period, and the
 * start is a boundary (floor of itself). Also counts periods of each
 * length, for the caller.
 */
static bool
tiles(const PeriodSpec *s, TimestampTz from, TimestampTz to, int64 step)
{
	for (TimestampTz t = from; t < to; t += step)
	{
		TimestampTz start;
		TimestampTz end;
		TimestampTz again;
		TimestampTz before;

		if (period_floor(s, t, &start) != PERIOD_OK)
			return false;
		end = period_end_of(s, start);
		if (!(start <= t && t < end))
		{
			printf("# %lld not in [%lld, %lld)\n", (long long) t, (long long) start, (long long) end);
			return false;
		}
		if (period_floor(s, start, &again) != PERIOD_OK || again != start ||
			period_floor(s, end, &again) != PERIOD_OK || again != end ||
			period_floor(s, start - 1, &before) != PERIOD_OK || period_end_of(s, before) != start)
		{
			printf("# boundaries of [%lld, %lld) do not chain\n", (long long) start, (long long) end);
			return false;
		}
	}
	return true;
}

/* The calendar conversions against dates known by heart. */
static void
test_calendar(void)
{
	int			y;
	int			m;
	int			d;
	bool		round_trip = true;

	check(civil_to_days(2000, 1, 1) == 0, "2000-01-01 is day 0");
	check(civil_to_days(1970, 1, 1) == -10957, "1970-01-01 is day -10957");
	check(civil_to_days(2026, 11, 28) == 9828, "2026-11-28 is day 9828");
	check(civil_to_days(2000, 3, 1) - civil_to_days(2000, 2, 28) == 2, "2000 is a leap year");
	check(civil_to_days(1900, 3, 1) - civil_to_days(1900, 2, 28) == 1, "1900 is not");
	days_to_civil(-1, &y, &m, &d);
	check(y == 1999 && m == 12 && d == 31, "day -1 is 1999-12-31");
	for (int64 day = -800000; day < 800000; day += 37)
	{
		days_to_civil(day, &y, &m, &d);
		if (civil_to_days(y, m, d) != day || m < 1 || m > 12 || d < 1 || d > 31)
			round_trip = false;
	}
	check(round_trip, "days and dates convert both ways over four thousand years");
}

/* UTC strides are date_bin's arithmetic; weeks start on Monday. */
static void
test_utc(void)
{
	PeriodSpec	hour = spec_of(0, 0, USECS_PER_HOUR, NULL);
	PeriodSpec	minutes90 = spec_of(0, 0, 90 * 60 * USECS_PER_SEC, NULL);
	PeriodSpec	week = spec_of(0, 7, 0, NULL);
	PeriodSpec	hours168 = spec_of(0, 0, 168 * USECS_PER_HOUR, NULL);
	PeriodSpec	month = spec_of(1, 0, 0, NULL);
	PeriodSpec	quarter = spec_of(3, 0, 0, NULL);
	PeriodSpec	year = spec_of(12, 0, 0, NULL);
	bool		same = true;
	Interval	g = {0};
	PeriodSpec	s;
	TimestampTz start;

	check(period_is(&hour, utc(2026, 11, 28, 14, 30), utc(2026, 11, 28, 14, 0), utc(2026, 11, 28, 15, 0)),
		  "an hour in UTC");
	for (TimestampTz t = utc(1990, 1, 1, 0, 0); t < utc(2040, 1, 1, 0, 0); t += 7777777777)
	{
		TimestampTz rem = t % (90 * 60 * USECS_PER_SEC);

		if (rem < 0)
			rem += 90 * 60 * USECS_PER_SEC;
		if (period_floor(&minutes90, t, &start) != PERIOD_OK || start != t - rem)
			same = false;
	}
	check(same, "90-minute periods are counted from 2000-01-01 00:00 UTC, as date_bin counts them");
	check(period_is(&week, utc(2026, 12, 3, 9, 0), utc(2026, 11, 30, 0, 0), utc(2026, 12, 7, 0, 0)),
		  "'1 week' is the ISO week, from Monday");
	check(period_is(&hours168, utc(2026, 12, 3, 9, 0), utc(2026, 11, 28, 0, 0), utc(2026, 12, 5, 0, 0)),
		  "'168 hours' is a stride from Saturday 2000-01-01");
	g.day = 7;
	check(period_spec_make(&g, NULL, false, &s) == GRANULARITY_OK &&
		  period_is(&s, utc(2026, 12, 3, 9, 0), utc(2026, 11, 28, 0, 0), utc(2026, 12, 5, 0, 0)),
		  "without ISO weeks (0.2.0's strides) '7 days' counts from Saturday too");
	g.day = 0;
	check(period_is(&month, utc(2026, 2, 14, 0, 0), utc(2026, 2, 1, 0, 0), utc(2026, 3, 1, 0, 0)),
		  "February 2026 has 28 days");
	check(period_is(&month, utc(2024, 2, 29, 23, 59), utc(2024, 2, 1, 0, 0), utc(2024, 3, 1, 0, 0)),
		  "February 2024 has 29");
	check(period_is(&quarter, utc(2026, 11, 28, 0, 0), utc(2026, 10, 1, 0, 0), utc(2027, 1, 1, 0, 0)),
		  "quarters start in January, April, July and October");
	check(period_is(&year, utc(1999, 7, 1, 0, 0), utc(1999, 1, 1, 0, 0), utc(2000, 1, 1, 0, 0)),
		  "a year before the origin");
	check(period_is(&month, utc(1969, 12, 31, 23, 59), utc(1969, 12, 1, 0, 0), utc(1970, 1, 1, 0, 0)),
		  "a month before the origin floors down");
	check(tiles(&month, utc(1995, 1, 1, 0, 0), utc(2005, 1, 1, 0, 0), 86399 * USECS_PER_SEC),
		  "months tile ten years");

	g.month = 5;
	check(period_spec_make(&g, NULL, true, &s) == GRANULARITY_BAD_MONTHS, "5 months do not divide a year");
	g.month = 24;
	check(period_spec_make(&g, NULL, true, &s) == GRANULARITY_OK, "24 months (two years) do");
	g.month = 1;
	g.day = 1;
	check(period_spec_make(&g, NULL, true, &s) == GRANULARITY_MIXED_MONTHS, "a month and a day is no granularity");
	g.month = 0;
	g.day = 0;
	check(period_spec_make(&g, NULL, true, &s) == GRANULARITY_NOT_POSITIVE, "zero is no granularity");
	g.day = INT32_MAX;
	g.time = INT64_MAX;
	check(period_spec_make(&g, NULL, true, &s) == GRANULARITY_OUT_OF_RANGE, "a granularity beyond 64 bits");

	check(period_floor(&hour, DT_NOEND, &start) == PERIOD_INFINITE, "infinity lies in no period");
	check(period_floor(&year, MIN_TIMESTAMP, &start) == PERIOD_BEFORE_RANGE,
		  "a period starting before the timestamp range is refused");
	check(period_end_of(&year, utc(294276, 6, 1, 0, 0)) == DT_NOEND,
		  "a period ending past the range never ends (so it is never final)");
	check(!period_is_final(&hour, utc(2026, 1, 1, 0, 0), false, utc(2027, 1, 1, 0, 0)),
		  "nothing is final without a watermark");
	check(period_is_final(&hour, utc(2026, 1, 1, 0, 0), true, utc(2026, 1, 1, 1, 0)) &&
		  !period_is_final(&hour, utc(2026, 1, 1, 0, 0), true, utc(2026, 1, 1, 0, 59)),
		  "a period is final when it ends at or before the watermark");
}

/* New York: days of 23 and 25 hours, hours across both transitions. */
static void
test_new_york(void)
{
	LibcZone   *ny = libc_zone("America/New_York");
	PeriodSpec	day = spec_of(0, 1, 0, ny);
	PeriodSpec	hour = spec_of(0, 0, USECS_PER_HOUR, ny);
	PeriodSpec	half = spec_of(0, 0, 30 * 60 * USECS_PER_SEC, ny);
	PeriodSpec	month = spec_of(1, 0, 0, ny);
	PeriodSpec	week = spec_of(0, 7, 0, ny);

	check(period_is(&day, utc(2026, 3, 8, 12, 0), utc(2026, 3, 8, 5, 0), utc(2026, 3, 9, 4, 0)),
		  "New York, 2026-03-08: a day of 23 hours");
	check(period_is(&day, utc(2026, 11, 1, 12, 0), utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0)),
		  "New York, 2026-11-01: a day of 25 hours");
	check(period_is(&hour, utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 6, 0), utc(2026, 3, 8, 7, 0)),
		  "the hour before the gap ends where the gap does (02:00 does not exist)");
	check(period_is(&hour, utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 8, 0)),
		  "03:00 EDT starts the next hour");
	check(period_is(&hour, utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 7, 0)) &&
		  period_is(&hour, utc(2026, 11, 1, 6, 30), utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 7, 0)),
		  "the repeated 01:00 hour belongs to one period, in both of its passes");
	check(period_is(&half, utc(2026, 11, 1, 6, 10), utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 7, 0)),
		  "half hours in the repeated hour: the second pass belongs to the last period of the first");
	check(period_is(&month, utc(2026, 11, 15, 0, 0), utc(2026, 11, 1, 4, 0), utc(2026, 12, 1, 5, 0)),
		  "November 2026 in New York starts in EDT and ends in EST");
	check(period_is(&week, utc(2026, 3, 11, 0, 0), utc(2026, 3, 9, 4, 0), utc(2026, 3, 16, 4, 0)),
		  "an ISO week in New York starts at local midnight on Monday");
	check(tiles(&hour, utc(2026, 3, 7, 0, 0), utc(2026, 3, 10, 0, 0), 7 * 60 * USECS_PER_SEC) &&
		  tiles(&hour, utc(2026, 10, 31, 0, 0), utc(2026, 11, 3, 0, 0), 7 * 60 * USECS_PER_SEC) &&
		  tiles(&day, utc(2026, 1, 1, 0, 0), utc(2027, 1, 1, 0, 0), 3 * USECS_PER_HOUR + 17),
		  "New York's hours and days tile time across both transitions");
}

/* Zones that are not whole hours, or change by half an hour. */
static void
test_odd_zones(void)
{
	LibcZone   *kathmandu = libc_zone("Asia/Kathmandu");
	LibcZone   *lord_howe = libc_zone("Australia/Lord_Howe");
	LibcZone   *seoul = libc_zone("Asia/Seoul");
	PeriodSpec	kt_hour = spec_of(0, 0, USECS_PER_HOUR, kathmandu);
	PeriodSpec	lh_day = spec_of(0, 1, 0, lord_howe);
	PeriodSpec	lh_hour = spec_of(0, 0, USECS_PER_HOUR, lord_howe);
	PeriodSpec	seoul_day = spec_of(0, 1, 0, seoul);
	PeriodSpec	seoul_month = spec_of(1, 0, 0, seoul);

	check(period_is(&kt_hour, utc(2026, 11, 28, 10, 20), utc(2026, 11, 28, 10, 15), utc(2026, 11, 28, 11, 15)),
		  "hours in Kathmandu (+05:45) start at local :00, UTC :15");
	/* Kathmandu last changed in 1986 (+05:30 to +05:45): past it, arithmetic alone gives the same periods. */
	kathmandu->zone.fixed_after = utc(1986, 1, 1, 0, 0);
	kathmandu->zone.offset_after = 5 * 3600 + 45 * 60;
	check(period_is(&kt_hour, utc(2026, 11, 28, 10, 20), utc(2026, 11, 28, 10, 15), utc(2026, 11, 28, 11, 15)) &&
		  tiles(&kt_hour, utc(1985, 12, 30, 0, 0), utc(1986, 1, 3, 0, 0), 7 * 60 * USECS_PER_SEC),
		  "and without lookups past its last change, across it too");
	/* Lord Howe: +11 until 2026-04-05 02:00 local (15:00 UTC on the 4th), then +10:30. */
	check(period_is(&lh_day, utc(2026, 4, 5, 0, 0), utc(2026, 4, 4, 13, 0), utc(2026, 4, 5, 13, 30)),
		  "Lord Howe, 2026-04-05: a day of 24.5 hours");
	/* and from 2026-10-04 02:00 local (15:30 UTC on the 3rd) +11 again. */
	check(period_is(&lh_day, utc(2026, 10, 4, 0, 0), utc(2026, 10, 3, 13, 30), utc(2026, 10, 4, 13, 0)),
		  "Lord Howe, 2026-10-04: a day of 23.5 hours");
	check(period_is(&lh_hour, utc(2026, 4, 4, 15, 10), utc(2026, 4, 4, 14, 0), utc(2026, 4, 4, 15, 30)),
		  "Lord Howe: the hour before the clocks go back 30 minutes lasts 90 (01:30-02:00 is repeated)");
	check(period_is(&lh_hour, utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 16, 0)),
		  "Lord Howe: the hour after the clocks go forward 30 minutes lasts 30 (02:00-02:30 is skipped)");
	check(tiles(&lh_hour, utc(2026, 4, 3, 0, 0), utc(2026, 4, 6, 0, 0), 11 * 60 * USECS_PER_SEC) &&
		  tiles(&lh_hour, utc(2026, 10, 2, 0, 0), utc(2026, 10, 5, 0, 0), 11 * 60 * USECS_PER_SEC),
		  "Lord Howe's hours tile time across its half-hour transitions");
	check(period_is(&seoul_day, utc(2026, 11, 28, 0, 30), utc(2026, 11, 27, 15, 0), utc(2026, 11, 28, 15, 0)),
		  "Seoul: 2026-11-28 00:30 UTC lies in the local day 2026-11-28");
	check(period_is(&seoul_month, utc(2026, 10, 31, 15, 0), utc(2026, 10, 31, 15, 0), utc(2026, 11, 30, 15, 0)),
		  "Seoul: November 2026 starts at 2026-10-31 15:00 UTC");
}

/* Zones whose clocks change at local midnight. */
static void
test_midnight_transitions(void)
{
	LibcZone   *santiago = libc_zone("America/Santiago");
	LibcZone   *havana = libc_zone("America/Havana");
	PeriodSpec	scl_day = spec_of(0, 1, 0, santiago);
	PeriodSpec	hav_day = spec_of(0, 1, 0, havana);
	PeriodSpec	hav_hour = spec_of(0, 0, USECS_PER_HOUR, havana);
	TimestampTz start;

	/* Santiago: at 2026-09-06 00:00 -04 (04:00 UTC) clocks jump to 01:00 -03. */
	check(period_is(&scl_day, utc(2026, 9, 6, 12, 0), utc(2026, 9, 6, 4, 0), utc(2026, 9, 7, 3, 0)),
		  "Santiago, 2026-09-06: local midnight does not exist; the day starts at 01:00, the end of the gap");
	check(period_is(&scl_day, utc(2026, 9, 6, 3, 59), utc(2026, 9, 5, 4, 0), utc(2026, 9, 6, 4, 0)),
		  "and the day before ends there");
	/* Santiago: at 2026-04-05 00:00 -03 (03:00 UTC) clocks go back to 23:00 -04. */
	check(period_is(&scl_day, utc(2026, 4, 5, 3, 30), utc(2026, 4, 4, 3, 0), utc(2026, 4, 5, 4, 0)),
		  "Santiago, 2026-04-04: the repeated 23:00 hour stays in that day (25 hours)");
	/* Havana: at 2026-03-08 00:00 CST (05:00 UTC) clocks jump to 01:00 CDT. */
	check(period_is(&hav_day, utc(2026, 3, 8, 12, 0), utc(2026, 3, 8, 5, 0), utc(2026, 3, 9, 4, 0)),
		  "Havana, 2026-03-08: the day starts at 01:00, after the gap at midnight");
	/*
	 * Havana: at 2026-11-01 01:00 CDT (05:00 UTC) clocks went back to 00:00
	 * CST, midnight happening twice — until tzdata 2026f, where Cuba keeps
	 * CDT: the day is then 24 hours. Which one the system's tzdata says is
	 * asked of libc, the reference these tests compare with.
	 */
	if (libc_offset("America/Havana", (utc(2026, 11, 1, 6, 0) / USECS_PER_SEC) + UNIX_DIFF) !=
		libc_offset("America/Havana", (utc(2026, 11, 1, 3, 0) / USECS_PER_SEC) + UNIX_DIFF))
	{
		check(period_is(&hav_day, utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0)),
			  "Havana, 2026-11-01: local midnight happens twice; the day starts at the first (25 hours)");
		check(period_floor(&hav_hour, utc(2026, 11, 1, 5, 30), &start) == PERIOD_OK &&
			  start == utc(2026, 11, 1, 4, 0),
			  "and the repeated 00:00 hour is one period of two hours");
	}
	else
	{
		check(period_is(&hav_day, utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 4, 0)),
			  "Havana, 2026-11-01 (tzdata 2026f and later: no fall back): a day of 24 hours");
		check(period_floor(&hav_hour, utc(2026, 11, 1, 5, 30), &start) == PERIOD_OK &&
			  start == utc(2026, 11, 1, 5, 0),
			  "and its hours are hours");
	}
	check(tiles(&scl_day, utc(2026, 1, 1, 0, 0), utc(2027, 1, 1, 0, 0), 5 * USECS_PER_HOUR + 3) &&
		  tiles(&hav_day, utc(2026, 1, 1, 0, 0), utc(2027, 1, 1, 0, 0), 5 * USECS_PER_HOUR + 3),
		  "their days tile the year");
}

/*
 * Iceberg's time transforms: the n-th year, month, day or hour since
 * 1970-01-01 UTC, from the values pyiceberg writes (day 20419 is
 * 2025-11-27; hour 490064 is 2025-11-27 08:00) and back from their text.
 */
static void
test_epoch_units(void)
{
	TimestampTz s;
	TimestampTz e;
	int64		n;
	EpochUnit	u;
	TimestampTz day_2025_11_27 = civil_to_days(2025, 11, 27) * USECS_PER_DAY;

	check(epoch_unit_of("day", &u) && u == EPOCH_DAY, "day is a time transform");
	check(!epoch_unit_of("identity", &u) && !epoch_unit_of("bucket[16]", &u), "identity and bucket are not");
	check(epoch_unit_span(EPOCH_DAY, 20419, &s, &e) && s == day_2025_11_27 && e - s == USECS_PER_DAY,
		  "day 20419 is 2025-11-27");
	check(epoch_unit_span(EPOCH_HOUR, 20419 * 24 + 8, &s, &e) && s == day_2025_11_27 + 8 * USECS_PER_HOUR &&
		  e - s == USECS_PER_HOUR, "hour 490064 is 2025-11-27 08:00");
	check(epoch_unit_span(EPOCH_MONTH, 55 * 12 + 1, &s, &e) && s == civil_to_days(2025, 2, 1) * USECS_PER_DAY &&
		  e == civil_to_days(2025, 3, 1) * USECS_PER_DAY, "month 661 is February 2025 (28 days)");
	check(epoch_unit_span(EPOCH_MONTH, -1, &s, &e) && s == civil_to_days(1969, 12, 1) * USECS_PER_DAY &&
		  e == civil_to_days(1970, 1, 1) * USECS_PER_DAY, "month -1 is December 1969");
	check(epoch_unit_span(EPOCH_YEAR, 56, &s, &e) && s == civil_to_days(2026, 1, 1) * USECS_PER_DAY &&
		  e == civil_to_days(2027, 1, 1) * USECS_PER_DAY, "year 56 is 2026");
	check(!epoch_unit_span(EPOCH_YEAR, 9000, &s, &e) && !epoch_unit_span(EPOCH_DAY, INT64CONST(1) << 40, &s, &e) &&
		  !epoch_unit_span(EPOCH_HOUR, -(INT64CONST(1) << 50), &s, &e), "units past the year 9999 are refused");
	check(epoch_unit_parse(EPOCH_DAY, "2025-11-27", &n) && n == 20419, "\"2025-11-27\" is day 20419");
	check(epoch_unit_parse(EPOCH_HOUR, "2025-11-27-08", &n) && n == 20419 * 24 + 8, "\"2025-11-27-08\" is hour 490064");
	check(epoch_unit_parse(EPOCH_MONTH, "1969-12", &n) && n == -1, "\"1969-12\" is month -1");
	check(epoch_unit_parse(EPOCH_YEAR, "2026", &n) && n == 56, "\"2026\" is year 56");
	check(!epoch_unit_parse(EPOCH_DAY, "2026-02-30", &n) && !epoch_unit_parse(EPOCH_DAY, "2026-11-7", &n) &&
		  !epoch_unit_parse(EPOCH_DAY, "2026-11-27-08", &n) && !epoch_unit_parse(EPOCH_MONTH, "2026-13", &n) &&
		  !epoch_unit_parse(EPOCH_HOUR, "2026-11-27-24", &n) && !epoch_unit_parse(EPOCH_YEAR, "0000", &n) &&
		  !epoch_unit_parse(EPOCH_YEAR, "+202", &n), "texts that are no unit are refused");
}

int
main(void)
{
	test_calendar();
	test_epoch_units();
	test_utc();
	test_new_york();
	test_odd_zones();
	test_midnight_transitions();
	return tap_done();
}
