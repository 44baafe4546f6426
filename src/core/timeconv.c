/*
 * timeconv.c
 *     SQL Server local commit times to instants, conservatively.
 *
 * CDC commit times (tran_end_time) are datetime values of the SQL Server
 * machine's local clock, without an offset. Around a DST change a local time
 * names two instants (fall-back) or none (spring-forward). The verdict may
 * lag but never lead, so a local time always becomes the EARLIEST instant it
 * could denote: of the offsets the zone uses around it, the largest. The one
 * exception is the end of a lost range, which must cover every instant the
 * lost commits may have had: it takes the LATEST.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/timeconv.h"

PG_FUNCTION_INFO_V1(finalize_local_to_instant);

/* A zone changes offset at most a few times a day: 30 h either side covers
 * every offset a local time can be read with (offsets span -12 h..+14 h). */
#define WINDOW_SECS (30 * 60 * 60)
#define MAX_OFFSETS 8

/* Seconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define PG_UNIX_EPOCH_DIFF_SECS \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY)

/* The UTC offset (seconds east) in effect at an instant. */
long
local_offset_at(TimestampTz instant, const pg_tz *tz)
{
	pg_time_t	t = (pg_time_t) (instant / USECS_PER_SEC) + PG_UNIX_EPOCH_DIFF_SECS;
	struct pg_tm *tm = pg_localtime(&t, tz);

	return tm ? tm->tm_gmtoff : 0;
}

/*
 * The earliest (or latest) instant whose local time in tz is `local`; for a
 * local time that does not exist (skipped by a spring-forward), the earliest
 * (or latest) instant any offset in use around it would give.
 */
static TimestampTz
local_to_instant(Timestamp local, const pg_tz *tz, bool latest)
{
	int64		frac = local % USECS_PER_SEC;
	int64		secs = local / USECS_PER_SEC;
	pg_time_t	local_unix;
	long		offsets[MAX_OFFSETS];
	int			noffsets = 0;
	pg_time_t	t;
	pg_time_t	best_valid = 0;
	pg_time_t	best_any = 0;
	bool		have_valid = false;
	TimestampTz result;

	if (frac < 0)
	{
		frac += USECS_PER_SEC;
		secs -= 1;
	}
	local_unix = secs + PG_UNIX_EPOCH_DIFF_SECS;

	/* Collect the offsets in use in the window around the local time. */
	t = local_unix - WINDOW_SECS;
	for (;;)
	{
		long		before_off;
		long		after_off;
		int			before_dst;
		int			after_dst;
		pg_time_t	boundary;
		int			r = pg_next_dst_boundary(&t, &before_off, &before_dst,
											 &boundary, &after_off, &after_dst, tz);

		if (noffsets < MAX_OFFSETS)
			offsets[noffsets++] = before_off;
		if (r != 1 || boundary > local_unix + WINDOW_SECS || noffsets >= MAX_OFFSETS)
		{
			if (r == 1 && boundary <= local_unix + WINDOW_SECS && noffsets < MAX_OFFSETS)
				offsets[noffsets++] = after_off;
			break;
		}
		t = boundary;
	}

	/* The first candidate that really shows this local time, else the first. */
	for (int i = 0; i < noffsets; i++)
	{
		pg_time_t	u = local_unix - offsets[i];
		struct pg_tm *tm = pg_localtime(&u, tz);

		if (i == 0 || (latest ? u > best_any : u < best_any))
			best_any = u;
		if (tm != NULL && tm->tm_gmtoff == offsets[i] &&
			(!have_valid || (latest ? u > best_valid : u < best_valid)))
		{
			best_valid = u;
			have_valid = true;
		}
	}
	t = have_valid ? best_valid : best_any;
	result = (TimestampTz) (t - PG_UNIX_EPOCH_DIFF_SECS) * USECS_PER_SEC + frac;
	/* A local time at either end of the range can denote an instant past it. */
	if (!IS_VALID_TIMESTAMP(result))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("local time %s in zone \"%s\" denotes an instant out of the timestamp range",
						DatumGetCString(DirectFunctionCall1(timestamp_out, TimestampGetDatum(local))),
						pg_get_timezone_name((pg_tz *) tz))));
	return result;
}

/* The earliest instant a local time may denote: what every commit time becomes. */
TimestampTz
local_to_instant_earliest(Timestamp local, const pg_tz *tz)
{
	return local_to_instant(local, tz, false);
}

/*
 * The latest instant a local time may denote: for the end of a range that
 * must not be drawn too short (a lost range's end), where the earliest
 * reading would leave out part of the fall-back hour.
 */
TimestampTz
local_to_instant_latest(Timestamp local, const pg_tz *tz)
{
	return local_to_instant(local, tz, true);
}

/*
 * finalize_internal.local_to_instant(local timestamp, zone text): the conversion the
 * worker applies to SQL Server commit times, exposed for tests and for
 * people checking a source's timezone option.
 */
Datum
finalize_local_to_instant(PG_FUNCTION_ARGS)
{
	Timestamp	local = PG_GETARG_TIMESTAMP(0);
	char	   *zone = text_to_cstring(PG_GETARG_TEXT_PP(1));
	pg_tz	   *tz = pg_tzset(zone);

	if (tz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument zone: time zone \"%s\" is not recognized", zone),
				 errhint("Use an IANA zone name such as Europe/Berlin (see pg_timezone_names).")));
	if (TIMESTAMP_NOT_FINITE(local))
		PG_RETURN_TIMESTAMPTZ(local);
	PG_RETURN_TIMESTAMPTZ(local_to_instant_earliest(local, tz));
}

/*
 * The least and greatest UTC offset (seconds east) tz uses at any instant
 * of [from, to]: how far a difference of two local times in it can be from
 * the difference of their instants. After many transitions (a span of
 * centuries) it gives up and widens to every offset a zone can have, which
 * only errs on the safe side for its callers.
 */
void
local_offset_range(const pg_tz *tz, TimestampTz from, TimestampTz to, long *min_s, long *max_s)
{
	pg_time_t	t = (pg_time_t) (from / USECS_PER_SEC) + PG_UNIX_EPOCH_DIFF_SECS;
	pg_time_t	end = (pg_time_t) (to / USECS_PER_SEC) + PG_UNIX_EPOCH_DIFF_SECS;
	int			i;

	*min_s = *max_s = local_offset_at(from, tz);
	for (i = 0; i < 1000 && t < end; i++)
	{
		long		before;
		long		after;
		int			before_dst;
		int			after_dst;
		pg_time_t	boundary;

		if (pg_next_dst_boundary(&t, &before, &before_dst, &boundary, &after, &after_dst, tz) != 1 ||
			boundary > end || boundary <= t)
			break;
		*min_s = Min(*min_s, Min(before, after));
		*max_s = Max(*max_s, Max(before, after));
		t = boundary;
	}
	if (i == 1000)
	{
		*min_s = -12 * 3600;
		*max_s = 14 * 3600;
	}
}
