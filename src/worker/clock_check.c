/*
 * clock_check.c
 *     Whether SQL Server's times can be trusted this cycle. A verdict moved
 *     by a commit time that lies in the future could never move back, so
 *     every doubt stops the cycle (it lags) instead of recording.
 */
#include "postgres.h"

#include "common/int.h"

#include "worker/clock_check.h"

/*
 * Whether a commit time lies later than a clock reading by more than a
 * clock stepped back within the tolerance (or a datetime's rounding)
 * explains; an overflowing difference counts as later.
 */
static bool
beyond_tolerance(TimestampTz commit_time, TimestampTz clock, int64 tolerance)
{
	int64		ahead;

	return pg_sub_s64_overflow(commit_time, clock, &ahead) ||
		ahead > tolerance + DATETIME_ROUNDING_USECS;
}

/*
 * The first problem with a cycle's times:
 *  - commit times are local: if the timezone option disagrees with the
 *    offset SQL Server reports, conversions could lead;
 *  - a commit cannot be later than the clock of the server that made it
 *    by more than the clock_tolerance: a max LSN commit time further ahead
 *    of SQL Server's own clock means commits are stamped in another zone
 *    than SYSDATETIMEOFFSET() reports, or the clock was stepped back by
 *    more than the tolerance that every verdict holds back by (the caller
 *    converts with the earliest reading of an ambiguous local time, so a
 *    fall-back hour never raises this falsely);
 *  - nor by more than that later than a max LSN commit time an earlier
 *    cycle read: the clock went back between the two reads, and a commit
 *    may now be stamped in a period already final;
 *  - commit times cannot be later than SQL Server's clock; if that clock is
 *    far ahead of PostgreSQL's, so may be the commit times.
 * An overflowing difference counts as a failure.
 */
TimeProblem
check_source_times(const SourceTimes *t)
{
	int64		ahead;

	if (t->expected_offset_s != t->reported_offset_s)
		return TIMES_ZONE_MISMATCH;
	if (beyond_tolerance(t->max_instant, t->server_now, t->tolerance_usecs))
		return TIMES_COMMIT_AHEAD;
	if (t->has_previous && beyond_tolerance(t->previous_max, t->server_now, t->tolerance_usecs))
		return TIMES_CLOCK_BACK;
	if (pg_sub_s64_overflow(t->server_now, t->pg_now, &ahead) || ahead > t->max_skew_usecs)
		return TIMES_CLOCK_SKEW;
	return TIMES_OK;
}

/*
 * Whether the capture looks stopped. A capture that stopped and an idle
 * database both freeze max LSN, but an idle database still gets dummy
 * mapping rows: a commit time that lags SQL Server's own clock by more
 * than the threshold is a stall.
 */
bool
capture_stalled(const SourceTimes *t)
{
	int64		lag;

	return pg_sub_s64_overflow(t->server_now, t->max_instant, &lag) || lag > t->stall_usecs;
}

/*
 * What one table's read says of SQL Server's clock, from the latest
 * instant its earliest commit time may denote (an ambiguous local time of
 * a fall-back hour read the late way, so that it never looks like a step
 * back): stamped before the source verdict of the table as it stood, a
 * commit landed in a period already final (the clock went back by more
 * than the tolerance); stamped in an earlier period than the previous
 * read's max LSN commit time (previous_period: that period's start), or
 * out of order across a boundary within the read (back_within), the clock
 * went back across a boundary, and the periods involved are not exact.
 */
ClockStep
clock_step_of(TimestampTz first_latest, bool has_previous, TimestampTz previous_period, bool has_verdict,
			  TimestampTz verdict, bool back_within)
{
	if (has_verdict && first_latest < verdict)
		return CLOCK_RAN_AHEAD;
	if (back_within || (has_previous && first_latest < previous_period))
		return CLOCK_WENT_BACK;
	return CLOCK_STEADY;
}
