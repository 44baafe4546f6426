/*
 * sensor.c
 *     The verdict functions that sensors poll: finalized_until and is_final.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/timestamp.h"

#include "common/period.h"
#include "sensor/verdict_cache.h"

PG_FUNCTION_INFO_V1(finalize_finalized_until);
PG_FUNCTION_INFO_V1(finalize_is_final);

/*
 * A sensor that passes no table name has a bug: say so rather than answer
 * NULL, which a sensor could read as "not final yet" forever.
 */
static void
require_table_name(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument table_name must not be NULL")));
}

/*
 * finalize.finalized_until(table_name): every period ending at or before the
 * result is complete; NULL while nothing is final.
 */
Datum
finalize_finalized_until(PG_FUNCTION_ARGS)
{
	TrackedVerdict v;

	require_table_name(fcinfo);
	verdict_cache_read(PG_GETARG_DATUM(0), &v);
	if (!v.has_watermark)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(v.finalized_until);
}

/*
 * finalize.is_final(table_name, period_start): true iff the whole period
 * containing period_start ends at or before finalized_until. Never NULL for a
 * tracked table, so NULL arguments are errors rather than NULL answers.
 */
Datum
finalize_is_final(PG_FUNCTION_ARGS)
{
	TrackedVerdict v;
	int64		stride;
	TimestampTz start;

	require_table_name(fcinfo);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument period_start must not be NULL"),
				 errhint("Pass the start (or any instant) of the period to check, for example '2026-11-29 14:00+00'.")));

	verdict_cache_read(PG_GETARG_DATUM(0), &v);
	stride = period_stride(&v.granularity, "granularity");
	start = period_floor(PG_GETARG_TIMESTAMPTZ(1), stride, "period_start");
	PG_RETURN_BOOL(period_is_final(start, stride, v.has_watermark, v.finalized_until));
}
