/*
 * event_time_sql.c
 *     SQL entry points for event-time tables (docs/design/event_time.md):
 *     the event-time bound drawn from the commit-time verdict, an instant
 *     shifted back by a fixed interval, and the lateness sketches stored as
 *     bytea (merge, quantile, count). The sketch itself is sketch.c; period
 *     arithmetic is period.c: no SQL copy depends on the session's TimeZone.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include <math.h>
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/event_time_sql.h"
#include "core/period_zone.h"
#include "core/sketch.h"

PG_FUNCTION_INFO_V1(finalize_event_bound);
PG_FUNCTION_INFO_V1(finalize_instant_minus);
PG_FUNCTION_INFO_V1(finalize_sketch_merge);
PG_FUNCTION_INFO_V1(finalize_sketch_quantile_ms);
PG_FUNCTION_INFO_V1(finalize_sketch_quantile_bound_ms);
PG_FUNCTION_INFO_V1(finalize_sketch_rows);
PG_FUNCTION_INFO_V1(finalize_sketch_info);

/*
 * A fixed-length interval in microseconds (days as 24 hours), or an error
 * naming the argument: a month has no fixed length, and a lateness
 * allowance or window read in the session's calendar would change with
 * its TimeZone.
 */
static int64
fixed_usecs(Interval *iv, const char *argname)
{
	int64		usecs;

	if (!interval_usecs(iv, &usecs) || usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument %s: \"%s\" is not a fixed, non-negative length of time", argname,
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv)))),
				 errdetail("Months and years have no fixed length; days count as 24 hours."),
				 errhint("Give it in days, hours, minutes or seconds, for example '2 hours'.")));
	return usecs;
}

/*
 * finalize_internal.instant_minus(ts, iv): ts minus a fixed length of time, the
 * same in every session TimeZone; NULL for an infinite ts or one that would
 * leave the timestamp range.
 */
Datum
finalize_instant_minus(PG_FUNCTION_ARGS)
{
	TimestampTz ts = PG_GETARG_TIMESTAMPTZ(0);
	int64		usecs = fixed_usecs(PG_GETARG_INTERVAL_P(1), "interval");
	TimestampTz result;

	if (TIMESTAMP_NOT_FINITE(ts) || pg_sub_s64_overflow(ts, usecs, &result) || !IS_VALID_TIMESTAMP(result))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(result);
}

/*
 * finalize_internal.event_bound(commit_until, allowance, granularity, zone): the
 * event-time verdict a commit-time verdict allows, the greatest period
 * boundary b of the table's periods with b + allowance <= commit_until.
 * Every row whose event time lies before b and whose lateness is within
 * the allowance committed before commit_until, so it is captured. NULL
 * when there is none (an infinite or too early commit_until). A catalog
 * of 0.2.0 declares it without zone (between the new library's start and
 * ALTER EXTENSION UPDATE): its UTC periods then, as 0.2.0 cut them.
 */
Datum
finalize_event_bound(PG_FUNCTION_ARGS)
{
	TimestampTz until = PG_GETARG_TIMESTAMPTZ(0);
	int64		allowance = fixed_usecs(PG_GETARG_INTERVAL_P(1), "allowance");
	bool		zoned = PG_NARGS() > 3;
	PeriodSpec	spec;
	TimestampTz shifted;
	TimestampTz bound;

	period_spec_of(PG_GETARG_INTERVAL_P(2),
				   zoned ? period_zone_of(text_to_cstring(PG_GETARG_TEXT_PP(3)), "zone") : NULL,
				   zoned, "granularity", &spec);
	if (TIMESTAMP_NOT_FINITE(until) || pg_sub_s64_overflow(until, allowance, &shifted) ||
		!IS_VALID_TIMESTAMP(shifted) || period_floor(&spec, shifted, &bound) != PERIOD_OK)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(bound);
}

/* A stored sketch, decoded; an error names the table's column when it is not one. */
static void
sketch_arg(bytea *b, Sketch *s)
{
	if (!sketch_deserialize((const uint8_t *) VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b), s))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("invalid lateness sketch of %d bytes", (int) VARSIZE_ANY_EXHDR(b)),
				 errdetail("Lateness sketches are written by finalize's worker (finalize.fact.sketch, finalize.lateness_hour.sketch)."),
				 errhint("Pass a sketch finalize recorded, or NULL.")));
}

/* A sketch as bytea, its lowest buckets collapsed to stay a few hundred bytes. */
bytea *
sketch_bytea(Sketch *s)
{
	/* 1 + 5 varints of 10 bytes + a (delta, count) pair per stored bucket */
	size_t		cap = 64 + (size_t) SKETCH_STORED_BUCKETS * 20;
	bytea	   *out = palloc(VARHDRSZ + cap);
	int			len;

	sketch_collapse_low(s, SKETCH_STORED_BUCKETS);
	len = sketch_serialize(s, (uint8_t *) VARDATA(out), cap);
	if (len < 0)
		elog(ERROR, "lateness sketch does not fit in %zu bytes", cap);
	SET_VARSIZE(out, VARHDRSZ + len);
	return out;
}

/*
 * finalize_internal.sketch_merge(a, b): the sketch of both (the state function of
 * the aggregate finalize_internal.sketch_union); NULL counts as empty.
 */
Datum
finalize_sketch_merge(PG_FUNCTION_ARGS)
{
	Sketch	   *a = palloc(sizeof(Sketch));
	Sketch	   *b = palloc(sizeof(Sketch));

	if (PG_ARGISNULL(0) && PG_ARGISNULL(1))
		PG_RETURN_NULL();
	if (PG_ARGISNULL(0))
		PG_RETURN_BYTEA_P(PG_GETARG_BYTEA_PP(1));
	if (PG_ARGISNULL(1))
		PG_RETURN_BYTEA_P(PG_GETARG_BYTEA_PP(0));
	sketch_arg(PG_GETARG_BYTEA_PP(0), a);
	sketch_arg(PG_GETARG_BYTEA_PP(1), b);
	sketch_merge(a, b);
	PG_RETURN_BYTEA_P(sketch_bytea(a));
}

/*
 * The q-quantile (argument 1) of the lateness in the sketch (argument 0),
 * in milliseconds, within SKETCH_ALPHA of the truth; rows whose event lies
 * after their commit count as 0. False for an empty sketch.
 */
static bool
quantile_arg(FunctionCallInfo fcinfo, double *ms)
{
	Sketch	   *s = palloc(sizeof(Sketch));
	double		q = PG_GETARG_FLOAT8(1);

	if (!(q > 0 && q <= 1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument quantile: %g", q),
				 errhint("A quantile lies in (0, 1], for example 0.999.")));
	sketch_arg(PG_GETARG_BYTEA_PP(0), s);
	return sketch_quantile(s, q, ms);
}

/*
 * finalize_internal.sketch_quantile_ms(sketch, q): the q-quantile of the lateness
 * in milliseconds, within 1% of the truth (for people: finalize.lateness).
 * NULL for an empty sketch.
 */
Datum
finalize_sketch_quantile_ms(PG_FUNCTION_ARGS)
{
	double		ms;

	if (!quantile_arg(fcinfo, &ms))
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) llround(ms));
}

/*
 * finalize_internal.sketch_quantile_bound_ms(sketch, q): the same quantile raised
 * to the upper bound of its bucket, at or above the true value: what a
 * lateness allowance is drawn from, so that it errs long, never short.
 * The estimate of bucket i is gamma^i (1 - alpha), its upper bound
 * gamma^i; an estimate capped at the exact maximum is raised the same
 * way, which only errs long.
 */
Datum
finalize_sketch_quantile_bound_ms(PG_FUNCTION_ARGS)
{
	double		ms;

	if (!quantile_arg(fcinfo, &ms))
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) ceil(ms / (1.0 - SKETCH_ALPHA)));
}

/* finalize_internal.sketch_rows(sketch): how many rows it describes. */
Datum
finalize_sketch_rows(PG_FUNCTION_ARGS)
{
	Sketch	   *s = palloc(sizeof(Sketch));

	sketch_arg(PG_GETARG_BYTEA_PP(0), s);
	PG_RETURN_INT64((int64) sketch_count(s));
}

/*
 * finalize_internal.sketch_info(sketch): rows, rows with an event after their
 * commit, rows with zero lateness, and the least and greatest lateness in
 * milliseconds, for views and tests.
 */
Datum
finalize_sketch_info(PG_FUNCTION_ARGS)
{
	Sketch	   *s = palloc(sizeof(Sketch));
	TupleDesc	desc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};
	uint64		n;

	sketch_arg(PG_GETARG_BYTEA_PP(0), s);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "finalize_internal.sketch_info must return a composite type");
	n = sketch_count(s);
	values[0] = Int64GetDatum((int64) n);
	values[1] = Int64GetDatum((int64) s->negative);
	values[2] = Int64GetDatum((int64) s->zero);
	values[3] = Int64GetDatum(s->min_ms);
	values[4] = Int64GetDatum(s->max_ms);
	nulls[3] = nulls[4] = n == 0;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
