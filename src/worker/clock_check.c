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
 * The first problem with a cycle's times:
 *  - commit times are local: if the timezone option disagrees with the
 *    offset SQL Server reports, conversions could lead;
 *  - a commit cannot be later than the clock of the server that made it: a
 *    max LSN commit time ahead of SQL Server's own clock means commits are
 *    stamped in another zone than SYSDATETIMEOFFSET() reports (the caller
 *    converts with the earliest reading of an ambiguous local time, so a
 *    fall-back hour never raises this falsely);
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
	if (pg_sub_s64_overflow(t->max_instant, t->server_now, &ahead) ||
		ahead > (int64) COMMIT_AHEAD_TOLERANCE_S * USECS_PER_SEC)
		return TIMES_COMMIT_AHEAD;
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
