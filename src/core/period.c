/*
 * period.c
 *     Period arithmetic of the verdict (see period.h for the rules).
 *
 * The grid is laid on local wall time (a Timestamp without zone), its
 * points resolved to instants (TimestampTz). A wall time can be shown by
 * no instant (a DST gap), by one, or by several (a repeated hour). So that
 * every instant lies in exactly one period:
 *
 *   resolve(w)  = the earliest instant whose wall time is w, or the end of
 *                 the gap that skips w;
 *   floor(t)    = resolve(grid_floor(M(t))), where M(t) is the greatest
 *                 wall time shown at or before t (past a fall-back it is
 *                 the wall time just before the clocks went back);
 *   end(start)  = resolve(grid_next(grid_floor(M(start)))).
 *
 * resolve is monotonic, and resolve(g) <= t exactly when g <= M(t), which
 * is why floor is the last boundary at or before t. (That holds while no
 * fall-back shows again, within ZONE_WINDOW, local times that a gap just
 * before it skipped: no zone of the database has such a pair of changes,
 * as a scan of every zone file found at the time of writing.) Nothing here reports
 * errors or allocates: faults are returned, and an end that cannot be
 * computed is +infinity (a period never final), never an earlier instant.
 */
#include "postgres.h"

#include "common/int.h"

#include "core/period.h"

/*
 * How far around an instant the zone's changes are looked at: a wall time
 * is shown by instants at most its largest offset away (offsets have
 * stayed within about 16 hours of UTC), and a fall-back never set clocks
 * back by more than a day.
 */
#define ZONE_WINDOW ((int64) 30 * USECS_PER_HOUR)

/* Most offset changes a zone makes in two windows: more is a broken zone. */
#define MAX_CHANGES 16

/* Monday 2000-01-03 00:00, the origin of strides of whole weeks (ISO weeks). */
#define WEEK_ORIGIN ((Timestamp) 2 * USECS_PER_DAY)

/* Days from 1970-01-01 to 2000-01-01, PostgreSQL's epoch. */
#define EPOCH_DAYS_1970 10957

/*
 * The length of an interval without months in microseconds, with days as
 * 24 hours; false when it has months or years (their length varies) or
 * does not fit in 64 bits. Every fixed-length interval finalize reads
 * (granularities, thresholds, settings) goes through here.
 */
bool
interval_usecs(const Interval *iv, int64 *out)
{
	int64		usecs;

	if (iv->month != 0 ||
		pg_mul_s64_overflow(iv->day, USECS_PER_DAY, &usecs) ||
		pg_add_s64_overflow(usecs, iv->time, &usecs))
		return false;
	*out = usecs;
	return true;
}

/* a / b rounded toward minus infinity, for b > 0. */
static int64
floor_div(int64 a, int64 b)
{
	int64		q = a / b;

	return (a % b != 0 && a < 0) ? q - 1 : q;
}

/*
 * The days of a proleptic Gregorian date since 2000-01-01 (PostgreSQL's
 * date2j, less its epoch): kept here, on plain integers, so that this
 * module needs nothing of the server (H. Hinnant's days_from_civil).
 */
int64
civil_to_days(int year, int month, int day)
{
	int64		y = (int64) year - (month <= 2 ? 1 : 0);
	int64		era = floor_div(y, 400);
	int64		yoe = y - era * 400;
	int64		doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
	int64		doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + doe - 719468 - EPOCH_DAYS_1970;
}

/*
 * The unit of an Iceberg time transform ("year", "month", "day", "hour"),
 * false for any other (identity, bucket[N], truncate[W], void).
 */
bool
epoch_unit_of(const char *transform, EpochUnit *unit)
{
	static const char *const names[] = {"year", "month", "day", "hour"};

	for (int i = 0; i < 4; i++)
		if (strcmp(transform, names[i]) == 0)
		{
			*unit = (EpochUnit) i;
			return true;
		}
	return false;
}

/* Years of the units' range: a partition value outside is no period. */
#define EPOCH_MIN_YEAR 1
#define EPOCH_MAX_YEAR 9999

/*
 * The instants [start, end) of the n-th unit since 1970-01-01 00:00 UTC
 * (n < 0 before it): what Iceberg's year, month, day or hour transform
 * value n holds. False when the unit lies outside the years 1 to 9999.
 */
bool
epoch_unit_span(EpochUnit unit, int64 n, TimestampTz *start, TimestampTz *end)
{
	const int64 day0 = civil_to_days(1970, 1, 1);
	int64		lo = civil_to_days(EPOCH_MIN_YEAR, 1, 1) - day0;
	int64		hi = civil_to_days(EPOCH_MAX_YEAR + 1, 1, 1) - day0;
	int64		first;
	int64		next;

	switch (unit)
	{
		case EPOCH_YEAR:
			if (n < EPOCH_MIN_YEAR - 1970 || n > EPOCH_MAX_YEAR - 1970)
				return false;
			*start = (civil_to_days((int) (1970 + n), 1, 1)) * USECS_PER_DAY;
			*end = (civil_to_days((int) (1971 + n), 1, 1)) * USECS_PER_DAY;
			return true;
		case EPOCH_MONTH:
			if (n < (EPOCH_MIN_YEAR - 1970) * 12 || n > (EPOCH_MAX_YEAR - 1970) * 12 + 11)
				return false;
			first = civil_to_days((int) (1970 + floor_div(n, 12)), (int) (n - floor_div(n, 12) * 12) + 1, 1);
			next = civil_to_days((int) (1970 + floor_div(n + 1, 12)), (int) (n + 1 - floor_div(n + 1, 12) * 12) + 1, 1);
			*start = first * USECS_PER_DAY;
			*end = next * USECS_PER_DAY;
			return true;
		case EPOCH_DAY:
			if (n < lo || n >= hi)
				return false;
			*start = (day0 + n) * USECS_PER_DAY;
			*end = *start + USECS_PER_DAY;
			return true;
		case EPOCH_HOUR:
			if (n < lo * 24 || n >= hi * 24)
				return false;
			*start = day0 * USECS_PER_DAY + n * USECS_PER_HOUR;
			*end = *start + USECS_PER_HOUR;
			return true;
	}
	return false;
}

/*
 * Parses a unit as Iceberg writes its partition values in paths and as a
 * release names them: "2026" (year), "2026-11" (month), "2026-11-27"
 * (day), "2026-11-27-08" (hour), into its count since 1970. False for any
 * other text, a date that does not exist or a year outside 1 to 9999.
 */
bool
epoch_unit_parse(EpochUnit unit, const char *text, int64 *n)
{
	/* The shape of each unit: digits, and a '-' at the marked places. */
	static const char *const shapes[] = {"dddd", "dddd-dd", "dddd-dd-dd", "dddd-dd-dd-dd"};
	const char *shape = shapes[unit];
	int			part[4] = {0, 1, 1, 0};
	int			k = 0;
	int			yy;
	int			mm;
	int			dd;
	int64		days;

	if (strlen(text) != strlen(shape))
		return false;
	for (int i = 0; shape[i] != '\0'; i++)
	{
		if (shape[i] == '-')
		{
			if (text[i] != '-')
				return false;
			k++;
			part[k] = 0;
			continue;
		}
		if (text[i] < '0' || text[i] > '9')
			return false;
		part[k] = part[k] * 10 + (text[i] - '0');
	}
	if (part[0] < EPOCH_MIN_YEAR || part[1] < 1 || part[1] > 12 || part[2] < 1 || part[2] > 31 || part[3] > 23)
		return false;
	days = civil_to_days(part[0], part[1], part[2]);
	days_to_civil(days, &yy, &mm, &dd);
	if (yy != part[0] || mm != part[1] || dd != part[2])
		return false;				/* 2026-02-30 */
	days -= civil_to_days(1970, 1, 1);
	if (unit == EPOCH_YEAR)
		*n = (int64) part[0] - 1970;
	else if (unit == EPOCH_MONTH)
		*n = ((int64) part[0] - 1970) * 12 + (part[1] - 1);
	else if (unit == EPOCH_DAY)
		*n = days;
	else
		*n = days * 24 + part[3];
	return true;
}

/* The inverse of civil_to_days (PostgreSQL's j2date). */
void
days_to_civil(int64 days, int *year, int *month, int *day)
{
	int64		z = days + EPOCH_DAYS_1970 + 719468;
	int64		era = floor_div(z, 146097);
	int64		doe = z - era * 146097;
	int64		yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64		doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64		mp = (5 * doy + 2) / 153;
	int			m = (int) (mp < 10 ? mp + 3 : mp - 9);

	*day = (int) (doy - (153 * mp + 2) / 5 + 1);
	*month = m;
	*year = (int) (yoe + era * 400 + (m <= 2 ? 1 : 0));
}

/*
 * A granularity's periods in a zone (NULL: UTC), or what is wrong with it:
 * the one rule, raised by the server's callers and answered as a boolean
 * by the CHECK of tracked_table.granularity. Months come alone and tile a
 * year (1, 2, 3, 4, 6 months or whole years); any other granularity is a
 * positive length that fits in 64 bits of microseconds. With iso_weeks,
 * whole weeks written in days start on Monday; without, every stride
 * counts from 2000-01-01 (a Saturday), as in 0.2.0, whose catalogs and
 * zoneless callers keep their periods so.
 */
GranularityFault
period_spec_make(const Interval *granularity, const PeriodZone *zone, bool iso_weeks, PeriodSpec *out)
{
	int64		stride;

	memset(out, 0, sizeof(*out));
	out->zone = zone;
	out->granularity = *granularity;
	if (granularity->month != 0)
	{
		if (granularity->day != 0 || granularity->time != 0)
			return GRANULARITY_MIXED_MONTHS;
		if (granularity->month < 0)
			return GRANULARITY_NOT_POSITIVE;
		if (12 % granularity->month != 0 && granularity->month % 12 != 0)
			return GRANULARITY_BAD_MONTHS;
		out->unit = PERIOD_MONTHS;
		out->months = granularity->month;
		return GRANULARITY_OK;
	}
	if (!interval_usecs(granularity, &stride))
		return GRANULARITY_OUT_OF_RANGE;
	if (stride <= 0)
		return GRANULARITY_NOT_POSITIVE;
	out->unit = PERIOD_STRIDE;
	out->stride = stride;
	/* Written as weeks (days only, a multiple of 7): ISO weeks. */
	out->origin = (iso_weeks && granularity->time == 0 && granularity->day % 7 == 0) ? WEEK_ORIGIN : 0;
	return GRANULARITY_OK;
}

/* Whether the periods are cut in UTC, where wall time is the instant. */
bool
period_is_utc(const PeriodSpec *spec)
{
	return spec->zone == NULL || (spec->zone->fixed && spec->zone->offset == 0);
}

/* The UTC offset of the zone at t, in microseconds. */
static int64
offset_usecs(const PeriodZone *zone, TimestampTz t)
{
	if (zone == NULL)
		return 0;
	if (zone->fixed)
		return (int64) zone->offset * USECS_PER_SEC;
	if (t > zone->fixed_after)
		return (int64) zone->offset_after * USECS_PER_SEC;
	return (int64) zone->offset_at(zone, t) * USECS_PER_SEC;
}

/* Whether the zone changes no offset after t (no lookups needed past it). */
static bool
quiet_after(const PeriodZone *zone, TimestampTz t)
{
	return zone == NULL || zone->fixed || t > zone->fixed_after;
}

/* The local wall time of instant t in the zone. */
Timestamp
period_wall_time(const PeriodZone *zone, TimestampTz t)
{
	return t + offset_usecs(zone, t);
}

/*
 * The zone's changes of offset in (after, until], at most MAX_CHANGES;
 * their number, or -1 for more (a broken zone).
 */
static int
changes_between(const PeriodZone *zone, TimestampTz after, TimestampTz until, ZoneChange *out)
{
	int			n = 0;

	if (quiet_after(zone, after))
		return 0;
	while (zone->next_change(zone, after, until, &out[n]))
	{
		if (out[n].at <= after || n + 1 >= MAX_CHANGES)
			return -1;
		after = out[n].at;
		n++;
	}
	return n;
}

/*
 * M(t): the greatest wall time shown at or before t. Past a fall-back
 * within the window it is the wall time just before the clocks went back.
 */
static PeriodFault
max_wall_before(const PeriodZone *zone, TimestampTz t, Timestamp *out)
{
	ZoneChange	changes[MAX_CHANGES];
	int			n;

	*out = period_wall_time(zone, t);
	if (quiet_after(zone, t - ZONE_WINDOW))
		return PERIOD_OK;
	n = changes_between(zone, t - ZONE_WINDOW, t, changes);
	if (n < 0)
		return PERIOD_ZONE_FAILED;
	for (int i = 0; i < n; i++)
		if (changes[i].before > changes[i].after)
		{
			Timestamp	last = changes[i].at + (int64) changes[i].before * USECS_PER_SEC - 1;

			if (last > *out)
				*out = last;
		}
	return PERIOD_OK;
}

/*
 * The instant a wall time resolves to: the earliest that shows it, or the
 * end of the gap that skips it.
 */
PeriodFault
period_resolve_wall(const PeriodZone *zone, Timestamp wall, TimestampTz *out)
{
	ZoneChange	changes[MAX_CHANGES];
	int32		offsets[MAX_CHANGES + 1];
	int			n;
	bool		found = false;

	if (zone == NULL || zone->fixed)
	{
		*out = wall - offset_usecs(zone, 0);
		return PERIOD_OK;
	}
	if (quiet_after(zone, wall - ZONE_WINDOW))
	{
		/* Every instant that can show it lies past the zone's last change. */
		*out = wall - (int64) zone->offset_after * USECS_PER_SEC;
		return PERIOD_OK;
	}
	n = changes_between(zone, wall - ZONE_WINDOW, wall + ZONE_WINDOW, changes);
	if (n < 0)
		return PERIOD_ZONE_FAILED;
	if (n == 0)
	{
		/* One offset around: one instant shows it. */
		*out = wall - offset_usecs(zone, wall);
		return PERIOD_OK;
	}
	/* Every offset in use around it; the earliest instant that really shows it. */
	offsets[0] = changes[0].before;
	for (int i = 0; i < n; i++)
		offsets[i + 1] = changes[i].after;
	for (int i = 0; i <= n; i++)
	{
		TimestampTz t = wall - (int64) offsets[i] * USECS_PER_SEC;

		if (offset_usecs(zone, t) == (int64) offsets[i] * USECS_PER_SEC && (!found || t < *out))
		{
			*out = t;
			found = true;
		}
	}
	if (found)
		return PERIOD_OK;
	/* Skipped: the clocks jumped over it at a change. */
	for (int i = 0; i < n; i++)
		if (changes[i].after > changes[i].before &&
			changes[i].at + (int64) changes[i].before * USECS_PER_SEC <= wall &&
			wall < changes[i].at + (int64) changes[i].after * USECS_PER_SEC)
		{
			*out = changes[i].at;
			return PERIOD_OK;
		}
	return PERIOD_ZONE_FAILED;
}

/* The last grid point at or before wall time w; false when it would overflow. */
static bool
grid_floor(const PeriodSpec *spec, Timestamp w, Timestamp *g)
{
	if (spec->unit == PERIOD_STRIDE)
	{
		int64		rem = (w - spec->origin) % spec->stride;

		if (rem < 0)
			rem += spec->stride;
		return !pg_sub_s64_overflow(w, rem, g);
	}
	else
	{
		int			y;
		int			m;
		int			d;
		int64		index;
		int64		first;

		days_to_civil(floor_div(w, USECS_PER_DAY), &y, &m, &d);
		index = ((int64) y - 2000) * 12 + (m - 1);
		first = floor_div(index, spec->months) * spec->months;
		return !pg_mul_s64_overflow(civil_to_days((int) (2000 + floor_div(first, 12)),
												  (int) (first - floor_div(first, 12) * 12) + 1, 1),
									USECS_PER_DAY, g);
	}
}

/* The grid point after grid point g; false when it would overflow. */
static bool
grid_next(const PeriodSpec *spec, Timestamp g, Timestamp *next)
{
	if (spec->unit == PERIOD_STRIDE)
		return !pg_add_s64_overflow(g, spec->stride, next);
	else
	{
		int			y;
		int			m;
		int			d;
		int64		index;

		days_to_civil(floor_div(g, USECS_PER_DAY), &y, &m, &d);
		index = ((int64) y - 2000) * 12 + (m - 1) + spec->months;
		if (2000 + floor_div(index, 12) > 300000)
			return false;
		return !pg_mul_s64_overflow(civil_to_days((int) (2000 + floor_div(index, 12)),
												  (int) (index - floor_div(index, 12) * 12) + 1, 1),
									USECS_PER_DAY, next);
	}
}

/*
 * The start of the period containing ts: the last boundary at or before
 * it. Infinite instants lie in no period; a period starting before the
 * timestamp range is refused.
 */
PeriodFault
period_floor(const PeriodSpec *spec, TimestampTz ts, TimestampTz *start)
{
	Timestamp	m;
	Timestamp	g;
	PeriodFault f;

	if (TIMESTAMP_NOT_FINITE(ts))
		return PERIOD_INFINITE;
	if ((f = max_wall_before(spec->zone, ts, &m)) != PERIOD_OK)
		return f;
	if (!grid_floor(spec, m, &g))
		return PERIOD_BEFORE_RANGE;
	if (period_is_utc(spec))
		*start = g;
	else if ((f = period_resolve_wall(spec->zone, g, start)) != PERIOD_OK)
		return f;
	if (!IS_VALID_TIMESTAMP(*start))
		return PERIOD_BEFORE_RANGE;
	return PERIOD_OK;
}

/*
 * The end (exclusive) of the period starting at start: the next boundary.
 * +infinity when it lies past the timestamp range or the zone cannot say,
 * so such a period is simply never final.
 */
TimestampTz
period_end_of(const PeriodSpec *spec, TimestampTz start)
{
	Timestamp	m;
	Timestamp	g;
	Timestamp	next;
	TimestampTz end;

	if (TIMESTAMP_NOT_FINITE(start) ||
		max_wall_before(spec->zone, start, &m) != PERIOD_OK ||
		!grid_floor(spec, m, &g) || !grid_next(spec, g, &next))
		return DT_NOEND;
	if (period_is_utc(spec))
		end = next;
	else if (period_resolve_wall(spec->zone, next, &end) != PERIOD_OK)
		return DT_NOEND;
	if (!IS_VALID_TIMESTAMP(end) || end <= start)
		return DT_NOEND;
	return end;
}

/*
 * The verdict itself: a period is final iff it ends at or before the
 * watermark. No watermark yet means nothing is final.
 */
bool
period_is_final(const PeriodSpec *spec, TimestampTz period_start,
				bool have_watermark, TimestampTz finalized_until)
{
	TimestampTz end;

	if (!have_watermark)
		return false;
	end = period_end_of(spec, period_start);
	if (TIMESTAMP_NOT_FINITE(end))
		return false;
	return end <= finalized_until;
}
