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
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "common/period.h"

PG_FUNCTION_INFO_V1(finalize_period_start);
PG_FUNCTION_INFO_V1(finalize_period_end);
PG_FUNCTION_INFO_V1(finalize_period_final);
PG_FUNCTION_INFO_V1(finalize_check_granularity);
PG_FUNCTION_INFO_V1(finalize_granularity_valid);
PG_FUNCTION_INFO_V1(finalize_periods);

/* Most periods one call of finalize._periods() lists. */
#define MAX_PERIODS 100000

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

/*
 * The rule for a granularity, in one place: it defines periods when it has
 * no months (their length varies), its length fits in 64 bits of
 * microseconds and is positive. Sets *stride to that length when it does.
 */
typedef enum GranularityFault
{
	GRANULARITY_OK,
	GRANULARITY_HAS_MONTHS,
	GRANULARITY_OUT_OF_RANGE,
	GRANULARITY_NOT_POSITIVE,
} GranularityFault;

/*
 * What is wrong with a granularity, if anything (and its length in
 * microseconds): the one rule, raised by period_stride and answered as a
 * boolean by the table's CHECK.
 */
static GranularityFault
granularity_fault(const Interval *granularity, int64 *stride)
{
	if (granularity->month != 0)
		return GRANULARITY_HAS_MONTHS;
	if (!interval_usecs(granularity, stride))
		return GRANULARITY_OUT_OF_RANGE;
	if (*stride <= 0)
		return GRANULARITY_NOT_POSITIVE;
	return GRANULARITY_OK;
}

/*
 * Length of one period in microseconds. A granularity that breaks the rule
 * is an error that names the argument the caller got it from.
 */
int64
period_stride(const Interval *granularity, const char *argname)
{
	int64		stride = 0;

	switch (granularity_fault(granularity, &stride))
	{
		case GRANULARITY_OK:
			break;
		case GRANULARITY_HAS_MONTHS:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for argument %s: the granularity contains months or years", argname),
					 errdetail("Periods are aligned on a fixed origin (2000-01-01 00:00 UTC), and months have no fixed length."),
					 errhint("Use days, hours, minutes or seconds, for example '1 day' or '15 minutes'.")));
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

/*
 * finalize._period_final(ts, granularity, finalized_until): the verdict for
 * the period containing ts, as is_final gives it. The SQL functions that
 * report finality (explain_verdict, changes_by_period, the gate) call this
 * rather than add the granularity to a timestamptz themselves, which would
 * be calendar arithmetic in the session's TimeZone.
 */
Datum
finalize_period_final(PG_FUNCTION_ARGS)
{
	int64		stride;
	TimestampTz start;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments ts and granularity must not be NULL")));
	stride = period_stride(PG_GETARG_INTERVAL_P(1), "granularity");
	start = period_floor(PG_GETARG_TIMESTAMPTZ(0), stride, "ts");
	PG_RETURN_BOOL(period_is_final(start, stride, !PG_ARGISNULL(2),
								   PG_ARGISNULL(2) ? 0 : PG_GETARG_TIMESTAMPTZ(2)));
}

/*
 * finalize._periods(from_time, to_time, granularity): the periods that
 * intersect [from_time, to_time), each as (period_start, period_end), at
 * most MAX_PERIODS of them. Fixed strides on absolute instants, like
 * period_start: a day is always 24 hours, whatever the session's zone.
 */
Datum
finalize_periods(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz from_time;
	TimestampTz to_time;
	TimestampTz start;
	int64		stride;
	int64		span;
	char	   *from_text;
	char	   *to_text;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments from_time, to_time and granularity must not be NULL")));
	from_time = PG_GETARG_TIMESTAMPTZ(0);
	to_time = PG_GETARG_TIMESTAMPTZ(1);
	stride = period_stride(PG_GETARG_INTERVAL_P(2), "granularity");
	if (TIMESTAMP_NOT_FINITE(to_time))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument to_time: it must be finite")));
	start = period_floor(from_time, stride, "from_time");
	/* For messages (timestamptz_to_str returns a static buffer). */
	from_text = pstrdup(timestamptz_to_str(from_time));
	to_text = pstrdup(timestamptz_to_str(to_time));
	if (to_time <= from_time)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid period range from %s to %s", from_text, to_text),
				 errdetail("to_time must be after from_time.")));
	/* Both are valid timestamps, so only their distance can overflow. */
	if (pg_sub_s64_overflow(to_time, start, &span) || (span - 1) / stride >= MAX_PERIODS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid period range from %s to %s", from_text, to_text),
				 errdetail("The range may span at most %d periods of the table's granularity.", MAX_PERIODS)));

	InitMaterializedSRF(fcinfo, 0);
	while (start < to_time)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};
		TimestampTz end = period_end_of(start, stride);

		values[0] = TimestampTzGetDatum(start);
		values[1] = TimestampTzGetDatum(end);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		if (TIMESTAMP_NOT_FINITE(end))
			break;
		start = end;
	}
	return (Datum) 0;
}

/*
 * finalize._check_granularity(granularity, argname): the granularity
 * defines periods (no months, positive, a length that fits), checked by the
 * same code that computes them; the error names the argument.
 */
Datum
finalize_check_granularity(PG_FUNCTION_ARGS)
{
	const char *argname = PG_ARGISNULL(1) ? "granularity" : text_to_cstring(PG_GETARG_TEXT_PP(1));

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument %s must not be NULL", argname)));
	(void) period_stride(PG_GETARG_INTERVAL_P(0), argname);
	PG_RETURN_VOID();
}

/*
 * finalize._granularity_valid(granularity): the same rule as a boolean, for
 * the CHECK constraint of finalize.tracked_table.granularity, so the table
 * and the functions that take a granularity can never disagree.
 */
Datum
finalize_granularity_valid(PG_FUNCTION_ARGS)
{
	int64		stride;

	PG_RETURN_BOOL(granularity_fault(PG_GETARG_INTERVAL_P(0), &stride) == GRANULARITY_OK);
}
