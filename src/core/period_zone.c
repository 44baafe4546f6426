/*
 * period_zone.c
 *     The period arithmetic in the server: PeriodZones read from
 *     PostgreSQL's zone library (pg_localtime, pg_next_dst_boundary), one
 *     per zone and backend, and the errors that the pure module's faults
 *     become, each naming the argument it came from.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/period_zone.h"
#include "core/zone_link.h"

/* Seconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define UNIX_EPOCH_DIFF_SECS ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY)

/* One zone's PeriodZone, kept for the backend's life (pg_tz structs are). */
typedef struct ZoneEntry
{
	const pg_tz *tz;			/* hash key */
	PeriodZone	zone;
} ZoneEntry;

static HTAB *zones = NULL;

/* An instant as the zone library's seconds, rounded down. */
static pg_time_t
to_pg_time(TimestampTz t)
{
	int64		secs = t / USECS_PER_SEC;

	if (t % USECS_PER_SEC < 0)
		secs--;
	return (pg_time_t) (secs + UNIX_EPOCH_DIFF_SECS);
}

/* PeriodZone.offset_at from pg_localtime. */
static int32
tz_offset_at(const PeriodZone *zone, TimestampTz t)
{
	pg_time_t	secs = to_pg_time(t);
	struct pg_tm *tm = pg_localtime(&secs, (const pg_tz *) zone->arg);

	return tm != NULL ? (int32) tm->tm_gmtoff : 0;
}

/*
 * PeriodZone.next_change from pg_next_dst_boundary, skipping boundaries
 * that change only the DST flag (the offset stays).
 */
static bool
tz_next_change(const PeriodZone *zone, TimestampTz after, TimestampTz until, ZoneChange *out)
{
	pg_time_t	t = to_pg_time(after);
	pg_time_t	last = to_pg_time(until);

	for (int i = 0; i < 64; i++)
	{
		long		before_off;
		long		after_off;
		int			before_dst;
		int			after_dst;
		pg_time_t	boundary;

		if (pg_next_dst_boundary(&t, &before_off, &before_dst, &boundary, &after_off, &after_dst,
								 (const pg_tz *) zone->arg) != 1 ||
			boundary > last || boundary <= t)
			return false;
		if (before_off != after_off)
		{
			out->at = (TimestampTz) (boundary - UNIX_EPOCH_DIFF_SECS) * USECS_PER_SEC;
			out->before = (int32) before_off;
			out->after = (int32) after_off;
			return out->at > after;
		}
		t = boundary;
	}
	return false;
}

/*
 * Sets the zone's fixed_after to its last change of offset, when it has
 * one (a zone that stopped changing, as Asia/Seoul in 1988); a zone that
 * goes on changing (DST rules without end) keeps DT_NOEND. first is its
 * first change.
 */
static void
find_last_change(PeriodZone *zone, ZoneChange first)
{
	ZoneChange	change = first;
	ZoneChange	next;

	/* Every zone in use has fewer than 300 changes up to the last. */
	for (int i = 0; i < 1000; i++)
	{
		if (!tz_next_change(zone, change.at, END_TIMESTAMP - 1, &next))
		{
			zone->fixed_after = change.at;
			zone->offset_after = change.after;
			return;
		}
		change = next;
	}
}

/*
 * The PeriodZone of a zone of PostgreSQL's library. A zone that never
 * changed offset (UTC, Etc/GMT-9) is fixed: its arithmetic needs no
 * lookups at all.
 */
const PeriodZone *
period_zone_of_tz(const pg_tz *tz)
{
	ZoneEntry  *entry;
	bool		found;

	if (zones == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(const pg_tz *);
		ctl.entrysize = sizeof(ZoneEntry);
		ctl.hcxt = TopMemoryContext;
		zones = hash_create("finalize period zones", 16, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	entry = hash_search(zones, &tz, HASH_ENTER, &found);
	if (!found)
	{
		pg_time_t	first = to_pg_time(MIN_TIMESTAMP);
		long		before_off;
		long		after_off;
		int			before_dst;
		int			after_dst;
		pg_time_t	boundary;
		ZoneChange	change;

		entry->zone.offset_at = tz_offset_at;
		entry->zone.next_change = tz_next_change;
		entry->zone.arg = tz;
		entry->zone.fixed = false;
		entry->zone.offset = 0;
		entry->zone.fixed_after = DT_NOEND;
		entry->zone.offset_after = 0;
		/* No change of offset in the whole range of timestamps: fixed. */
		if (pg_next_dst_boundary(&first, &before_off, &before_dst, &boundary, &after_off, &after_dst, tz) == 0 ||
			!tz_next_change(&entry->zone, MIN_TIMESTAMP, END_TIMESTAMP - 1, &change))
		{
			entry->zone.fixed = true;
			entry->zone.offset = (int32) before_off;
		}
		else
			find_last_change(&entry->zone, change);
	}
	return &entry->zone;
}

/*
 * The PeriodZone of a zone name (NULL: UTC, the zone NULL); false when the
 * zone library does not know it.
 */
bool
period_zone_lookup(const char *name, const PeriodZone **zone)
{
	pg_tz	   *tz;

	if (name == NULL)
	{
		*zone = NULL;
		return true;
	}
	tz = pg_tzset(name);
	if (tz == NULL)
		return false;
	*zone = period_zone_of_tz(tz);
	return true;
}

/* The PeriodZone of a zone name, or the error that names the argument. */
const PeriodZone *
period_zone_of(const char *name, const char *argname)
{
	const PeriodZone *zone;

	if (!period_zone_lookup(name, &zone))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument %s: time zone \"%s\" is not recognized", argname, name),
				 errhint("Use an IANA zone name such as 'Asia/Seoul' or 'UTC' (see pg_timezone_names).")));
	return zone;
}

/*
 * Whether a canonical zone name is one of the zone database (the files of
 * the zone directory, as pg_timezone_names lists them), read once per
 * backend: it is asked only when a table's zone is set.
 */
static bool
zone_in_database(const char *canonical)
{
	static HTAB *names = NULL;
	bool		found;

	if (names == NULL)
	{
		HASHCTL		ctl;
		pg_tzenum  *dir;
		pg_tz	   *tz;

		ctl.keysize = TZ_STRLEN_MAX + 1;
		ctl.entrysize = TZ_STRLEN_MAX + 1;
		ctl.hcxt = TopMemoryContext;
		names = hash_create("finalize zone names", 1024, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		dir = pg_tzenumerate_start();
		while ((tz = pg_tzenumerate_next(dir)) != NULL)
		{
			char		key[TZ_STRLEN_MAX + 1];

			strlcpy(key, pg_get_timezone_name(tz), sizeof(key));
			(void) hash_search(names, key, HASH_ENTER, NULL);
		}
		pg_tzenumerate_end(dir);
	}
	if (strlen(canonical) > TZ_STRLEN_MAX)
		return false;
	(void) hash_search(names, canonical, HASH_FIND, &found);
	return found;
}

/*
 * The name of a zone as the zone database spells it ('asia/seoul' is
 * 'Asia/Seoul'), a link by the zone it links to ('ROK' is 'Asia/Seoul':
 * see zone_link.c); NULL when name is none of the database. Only names of
 * the database are taken: not a POSIX rule such as 'XYZ-3' (which the
 * library would read as a zone of its own), nor a zone with leap seconds,
 * which timestamps do not count.
 */
char *
period_zone_name(const char *name)
{
	pg_tz	   *tz = strlen(name) <= TZ_STRLEN_MAX ? pg_tzset(name) : NULL;
	const char *canonical = tz != NULL ? pg_get_timezone_name(tz) : NULL;
	const char *target;

	/*
	 * Not the files of the zone directory that are no zone: the machine's
	 * own (localtime, a link to /etc/localtime, which another host or a
	 * failover changes under the table), the rules' template (posixrules),
	 * the placeholder (Factory), or another copy of the database (posix/,
	 * right/).
	 */
	if (canonical != NULL &&
		(pg_strcasecmp(canonical, "localtime") == 0 || pg_strcasecmp(canonical, "posixrules") == 0 ||
		 pg_strcasecmp(canonical, "Factory") == 0 || pg_strncasecmp(canonical, "posix/", 6) == 0 ||
		 pg_strncasecmp(canonical, "right/", 6) == 0))
		canonical = NULL;
	if (canonical == NULL || !pg_tz_acceptable(tz) || !zone_in_database(canonical))
		return NULL;
	target = zone_link_target(canonical);
	if (strcmp(target, canonical) != 0 && zone_in_database(target) && pg_tzset(target) != NULL)
		canonical = target;
	return pstrdup(canonical);
}

/* period_zone_name, or the error that names the argument. */
char *
period_zone_canonical(const char *name, const char *argname)
{
	char	   *canonical = period_zone_name(name);

	if (canonical == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument %s: \"%s\" is not a time zone name", argname, name),
				 errdetail("Periods are cut in a zone of the IANA database, named like 'Asia/Seoul', "
						   "'America/New_York' or 'UTC'."),
				 errhint("SELECT name FROM pg_timezone_names lists the names this server knows.")));
	return canonical;
}

/*
 * The periods of a granularity in a zone (iso_weeks: see period_spec_make),
 * or the error that names the argument the granularity came from.
 */
void
period_spec_of(const Interval *granularity, const PeriodZone *zone, bool iso_weeks, const char *argname,
			   PeriodSpec *out)
{
	switch (period_spec_make(granularity, zone, iso_weeks, out))
	{
		case GRANULARITY_OK:
			break;
		case GRANULARITY_MIXED_MONTHS:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for argument %s: the granularity mixes months with days or hours", argname),
					 errdetail("A calendar granularity is a whole number of months ('1 month', '3 months', "
							   "'1 year'); any other is a fixed length of time."),
					 errhint("Use '1 month', '3 months' or '1 year', or a length such as '1 day' or '15 minutes'.")));
			break;
		case GRANULARITY_BAD_MONTHS:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for argument %s: %d months do not divide a year", argname,
							granularity->month),
					 errdetail("Calendar periods of months start in January: they are 1, 2, 3, 4 or 6 months "
							   "long, or whole years."),
					 errhint("Use '1 month', '3 months', '6 months' or '1 year'.")));
			break;
		case GRANULARITY_OUT_OF_RANGE:
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("invalid value for argument %s: the granularity is out of range", argname),
					 errhint("A period is at most 106751991 days (about 292,000 years) long.")));
			break;
		case GRANULARITY_NOT_POSITIVE:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for argument %s: the granularity is not positive", argname),
					 errhint("Use a positive interval, for example '1 hour'.")));
			break;
	}
}

/*
 * The start of the period containing ts, or the error that names the
 * argument ts came from.
 */
TimestampTz
period_start_of(const PeriodSpec *spec, TimestampTz ts, const char *argname)
{
	TimestampTz start = 0;

	switch (period_floor(spec, ts, &start))
	{
		case PERIOD_OK:
			break;
		case PERIOD_INFINITE:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for argument %s: an infinite timestamp lies in no period", argname)));
			break;
		case PERIOD_BEFORE_RANGE:
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("invalid value for argument %s: its period starts before the timestamp range", argname)));
			break;
		case PERIOD_ZONE_FAILED:
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("invalid value for argument %s: the zone's offsets around %s could not be read",
							argname, timestamptz_to_str(ts)),
					 errdetail("The zone changes its UTC offset too often there to place period boundaries.")));
			break;
	}
	return start;
}

/*
 * An instant as ISO 8601 in the zone's local time with its offset
 * ("2026-11-28T00:00:00+09:00"), whatever the session's TimeZone and
 * DateStyle: how errors name period boundaries of a table.
 */
char *
period_format_local(const PeriodZone *zone, TimestampTz ts)
{
	Timestamp	wall;
	int64		offset;
	int64		secs;
	int64		frac;
	int			y;
	int			mo;
	int			d;
	char		sign;

	if (TIMESTAMP_NOT_FINITE(ts))
		return pstrdup(TIMESTAMP_IS_NOBEGIN(ts) ? "-infinity" : "infinity");
	wall = period_wall_time(zone, ts);
	offset = (wall - ts) / USECS_PER_SEC;
	secs = wall / USECS_PER_SEC - (wall % USECS_PER_SEC < 0 ? 1 : 0);
	frac = wall - secs * USECS_PER_SEC;
	days_to_civil(secs / SECS_PER_DAY - (secs % SECS_PER_DAY < 0 ? 1 : 0), &y, &mo, &d);
	secs -= (secs / SECS_PER_DAY - (secs % SECS_PER_DAY < 0 ? 1 : 0)) * SECS_PER_DAY;
	sign = offset < 0 ? '-' : '+';
	offset = offset < 0 ? -offset : offset;
	return psprintf("%04d-%02d-%02dT%02d:%02d:%02d%s%c%02d:%02d", y, mo, d, (int) (secs / 3600),
					(int) (secs / 60 % 60), (int) (secs % 60),
					frac != 0 ? psprintf(".%06d", (int) frac) : "", sign, (int) (offset / 3600),
					(int) (offset / 60 % 60));
}

/*
 * Whether [start, end) is a span of whole periods of spec (without end:
 * the one period at start), the one rule of a partition's periods, which
 * register_partition and the gate's manifests both keep: start and end
 * are boundaries, end after start. Sets *span_end to its end; where a
 * bound is off, *near to the start of the period that bound lies in.
 */
PeriodSpanFault
period_span_check(const PeriodSpec *spec, TimestampTz start, bool has_end, TimestampTz end,
				  TimestampTz *span_end, TimestampTz *near)
{
	*near = period_start_of(spec, start, "period_start");
	if (*near != start)
		return SPAN_START_OFF;
	*span_end = period_end_of(spec, start);
	if (!has_end)
		return SPAN_OK;
	if (TIMESTAMP_NOT_FINITE(end) || end <= start)
		return SPAN_END_NOT_AFTER;
	*near = period_start_of(spec, end, "period_end");
	if (*near != end)
		return SPAN_END_OFF;
	*span_end = end;
	return SPAN_OK;
}

/*
 * "periods are 1 day long in zone Asia/Seoul: the nearest boundaries are
 * ... and ...", for errors about an instant inside the period at near.
 */
char *
period_nearest_text(const PeriodSpec *spec, const char *zone_name, TimestampTz near)
{
	return psprintf("periods are %s long in zone %s: the nearest boundaries are %s and %s",
					DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(&spec->granularity))),
					zone_name, period_format_local(spec->zone, near),
					period_format_local(spec->zone, period_end_of(spec, near)));
}

/*
 * The end of a span of whole periods of spec (whose zone is named
 * zone_name) that starts at start and ends at end (or, without one, at the
 * end of the period at start), or the error that names the argument
 * (start_name, end_name), the object (what) and the nearest boundaries
 * (period_span_check's rule). A partition holds whole periods: a start
 * inside a period would let the gate check the wrong one.
 */
TimestampTz
period_span_end(const PeriodSpec *spec, const char *zone_name, TimestampTz start, bool has_end, TimestampTz end,
				const char *start_name, const char *end_name, const char *what)
{
	TimestampTz span_end = 0;
	TimestampTz near = 0;
	PeriodSpanFault fault = period_span_check(spec, start, has_end, end, &span_end, &near);

	switch (fault)
	{
		case SPAN_OK:
			break;
		case SPAN_START_OFF:
		case SPAN_END_OFF:
			{
				bool		at_start = fault == SPAN_START_OFF;
				const char *argname = at_start ? start_name : end_name;

				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid value for %s of %s: %s is not a period boundary", argname, what,
								period_format_local(spec->zone, at_start ? start : end)),
						 errdetail("Its %s.", period_nearest_text(spec, zone_name, near)),
						 errhint(at_start ? "A partition holds whole periods: give the start of the first one."
								 : "A partition holds whole periods: give the end (exclusive) of the last one.")));
			}
			break;
		case SPAN_END_NOT_AFTER:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for %s of %s: %s is not after %s %s", end_name, what,
							period_format_local(spec->zone, end), start_name, period_format_local(spec->zone, start)),
					 errhint("Give the end (exclusive) of the last period the partition holds, such as %s.",
							 period_format_local(spec->zone, span_end))));
			break;
	}
	return span_end;
}
