/*
 * period.c
 *     Period arithmetic of the verdict.
 *
 * A period of granularity g is [origin + k*g, origin + (k+1)*g) with origin
 * 2000-01-01 00:00 UTC, which is PostgreSQL's timestamp epoch, so the
 * arithmetic is plain integer arithmetic on microseconds (like date_bin).
 * Everything works on absolute instants: time zones and DST never enter.
 */
#include "postgres.h"

#include "common/int.h"
#include "fmgr.h"
#include "utils/timestamp.h"

#include "period.h"

PG_FUNCTION_INFO_V1(finalize_period_start);
PG_FUNCTION_INFO_V1(finalize_period_end);

/*
 * Length of one period in microseconds. Months have no fixed length, so a
 * granularity with months or years is refused, as is one that is not
 * positive; the error names the argument the caller got it from.
 */
int64
period_stride(const Interval *granularity, const char *argname)
{
	int64		stride;

	if (granularity->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument %s: the granularity contains months or years", argname),
				 errdetail("Periods are aligned on a fixed origin (2000-01-01 00:00 UTC), and months have no fixed length."),
				 errhint("Use days, hours, minutes or seconds, for example '1 day' or '15 minutes'.")));

	if (pg_mul_s64_overflow(granularity->day, USECS_PER_DAY, &stride) ||
		pg_add_s64_overflow(stride, granularity->time, &stride))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("invalid value for argument %s: the granularity is out of range", argname)));

	if (stride <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument %s: the granularity is not positive", argname),
				 errhint("Use a positive interval, for example '1 hour'.")));
	return stride;
}

/*
 * Start of the period containing ts. Infinite instants have no period.
 */
TimestampTz
period_floor(TimestampTz ts, int64 stride, const char *argname)
{
	int64		rem;

	if (TIMESTAMP_NOT_FINITE(ts))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument %s: an infinite timestamp lies in no period", argname)));

	/* C's % truncates toward zero; periods before the origin floor down. */
	rem = ts % stride;
	if (rem < 0)
		rem += stride;
	if (!IS_VALID_TIMESTAMP(ts - rem))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("invalid value for argument %s: its period starts before the timestamp range", argname)));
	return ts - rem;
}

/*
 * End (exclusive) of the period starting at start, saturating at +infinity
 * so a period at the end of the timestamp range is simply never final.
 */
TimestampTz
period_end_of(TimestampTz start, int64 stride)
{
	TimestampTz end;

	if (pg_add_s64_overflow(start, stride, &end) || !IS_VALID_TIMESTAMP(end))
		TIMESTAMP_NOEND(end);
	return end;
}

/*
 * The verdict itself: a period is final iff it ends at or before the
 * watermark. No watermark yet means nothing is final.
 */
bool
period_is_final(TimestampTz period_start, int64 stride,
				bool have_watermark, TimestampTz finalized_until)
{
	TimestampTz end = period_end_of(period_start, stride);

	if (!have_watermark || TIMESTAMP_NOT_FINITE(end))
		return false;
	return end <= finalized_until;
}

/*
 * finalize.period_start(ts, granularity)
 */
Datum
finalize_period_start(PG_FUNCTION_ARGS)
{
	TimestampTz ts = PG_GETARG_TIMESTAMPTZ(0);
	int64		stride = period_stride(PG_GETARG_INTERVAL_P(1), "granularity");

	PG_RETURN_TIMESTAMPTZ(period_floor(ts, stride, "ts"));
}

/*
 * finalize.period_end(ts, granularity)
 */
Datum
finalize_period_end(PG_FUNCTION_ARGS)
{
	TimestampTz ts = PG_GETARG_TIMESTAMPTZ(0);
	int64		stride = period_stride(PG_GETARG_INTERVAL_P(1), "granularity");

	PG_RETURN_TIMESTAMPTZ(period_end_of(period_floor(ts, stride, "ts"), stride));
}
