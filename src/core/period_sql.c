/*
 * period_sql.c
 *     The period arithmetic as SQL functions: every SQL function of
 *     finalize that names a period (explain_verdict, changes_by_period, the
 *     consumers' and derived tables' verdicts, losses, the gate's catalog)
 *     calls these rather than add a granularity to a timestamptz, which
 *     would be calendar arithmetic in the session's TimeZone.
 *
 * Each takes the zone its table's periods are cut in; the forms without
 * one are UTC (and are what catalogs of 0.1.0 call, with the same C
 * symbols). The zone of a call site is constant, so its PeriodZone is kept
 * in fn_extra.
 */
#include "postgres.h"

#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "core/period_zone.h"

PG_FUNCTION_INFO_V1(finalize_period_start);
PG_FUNCTION_INFO_V1(finalize_period_end);
PG_FUNCTION_INFO_V1(finalize_period_final);
PG_FUNCTION_INFO_V1(finalize_check_granularity);
PG_FUNCTION_INFO_V1(finalize_granularity_valid);
PG_FUNCTION_INFO_V1(finalize_periods);
PG_FUNCTION_INFO_V1(finalize_check_zone);
PG_FUNCTION_INFO_V1(finalize_zone_valid);
PG_FUNCTION_INFO_V1(finalize_check_period_span);
PG_FUNCTION_INFO_V1(finalize_local_time);

/* Most periods one call of finalize_internal.periods() lists. */
#define MAX_PERIODS 100000

/* The zone a call site names, looked up once (fn_extra). */
typedef struct ZoneMemo
{
	text	   *name;			/* as last seen */
	const PeriodZone *zone;
} ZoneMemo;

/*
 * The zone of argument argno (NULL or absent: UTC), or the error that
 * names it.
 */
static const PeriodZone *
zone_arg(FunctionCallInfo fcinfo, int argno)
{
	ZoneMemo   *memo = (ZoneMemo *) fcinfo->flinfo->fn_extra;
	text	   *name;
	text	   *copy;
	const PeriodZone *zone;

	if (argno >= PG_NARGS() || PG_ARGISNULL(argno))
		return NULL;
	name = PG_GETARG_TEXT_PP(argno);
	if (memo != NULL && VARSIZE_ANY_EXHDR(name) == VARSIZE_ANY_EXHDR(memo->name) &&
		memcmp(VARDATA_ANY(name), VARDATA_ANY(memo->name), VARSIZE_ANY_EXHDR(name)) == 0)
		return memo->zone;
	/* Looked up first: an unknown zone is an error, and the memo stays as it was. */
	zone = period_zone_of(text_to_cstring(name), "zone");
	copy = (text *) MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, VARSIZE_ANY(name));
	memcpy(copy, name, VARSIZE_ANY(name));
	if (memo == NULL)
		memo = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(ZoneMemo));
	else
		pfree(memo->name);
	memo->name = copy;
	memo->zone = zone;
	fcinfo->flinfo->fn_extra = memo;
	return zone;
}

/*
 * The periods of argument granularity_arg in the zone of zone_arg. The
 * forms without a zone are 0.2.0's, which catalogs of 0.1.0 and 0.2.0
 * call and user code may too: UTC strides all from 2000-01-01 (whole weeks
 * too), so that their answers stay what they were.
 */
static void
spec_args(FunctionCallInfo fcinfo, int granularity_arg, int zone_argno, PeriodSpec *spec)
{
	period_spec_of(PG_GETARG_INTERVAL_P(granularity_arg), zone_arg(fcinfo, zone_argno), zone_argno < PG_NARGS(),
				   "granularity", spec);
}

/*
 * finalize.period_start(ts, granularity [, zone]): the start of the
 * period containing ts.
 */
Datum
finalize_period_start(PG_FUNCTION_ARGS)
{
	PeriodSpec	spec;

	spec_args(fcinfo, 1, 2, &spec);
	PG_RETURN_TIMESTAMPTZ(period_start_of(&spec, PG_GETARG_TIMESTAMPTZ(0), "ts"));
}

/*
 * finalize.period_end(ts, granularity [, zone]): the end (exclusive) of
 * the period containing ts.
 */
Datum
finalize_period_end(PG_FUNCTION_ARGS)
{
	PeriodSpec	spec;

	spec_args(fcinfo, 1, 2, &spec);
	PG_RETURN_TIMESTAMPTZ(period_end_of(&spec, period_start_of(&spec, PG_GETARG_TIMESTAMPTZ(0), "ts")));
}

/*
 * finalize_internal.period_final(ts, granularity, zone, finalized_until), and the
 * UTC form without zone: the verdict for the period containing ts, as
 * is_final gives it (false while there is no watermark).
 */
Datum
finalize_period_final(PG_FUNCTION_ARGS)
{
	int			until_arg = PG_NARGS() - 1;
	PeriodSpec	spec;
	TimestampTz start;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments ts and granularity must not be NULL")));
	spec_args(fcinfo, 1, PG_NARGS() > 3 ? 2 : 99, &spec);
	start = period_start_of(&spec, PG_GETARG_TIMESTAMPTZ(0), "ts");
	PG_RETURN_BOOL(period_is_final(&spec, start, !PG_ARGISNULL(until_arg),
								   PG_ARGISNULL(until_arg) ? 0 : PG_GETARG_TIMESTAMPTZ(until_arg)));
}

/*
 * finalize_internal.periods(from_time, to_time, granularity [, zone]): the
 * periods that intersect [from_time, to_time), each as (period_start,
 * period_end), at most MAX_PERIODS of them.
 */
Datum
finalize_periods(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz from_time;
	TimestampTz to_time;
	TimestampTz start;
	PeriodSpec	spec;
	char	   *from_text;
	char	   *to_text;
	int			n = 0;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments from_time, to_time and granularity must not be NULL")));
	from_time = PG_GETARG_TIMESTAMPTZ(0);
	to_time = PG_GETARG_TIMESTAMPTZ(1);
	spec_args(fcinfo, 2, 3, &spec);
	if (TIMESTAMP_NOT_FINITE(to_time))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument to_time: it must be finite")));
	start = period_start_of(&spec, from_time, "from_time");
	/* For messages (timestamptz_to_str returns a static buffer). */
	from_text = pstrdup(timestamptz_to_str(from_time));
	to_text = pstrdup(timestamptz_to_str(to_time));
	if (to_time <= from_time)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid period range from %s to %s", from_text, to_text),
				 errdetail("to_time must be after from_time.")));

	InitMaterializedSRF(fcinfo, 0);
	while (start < to_time)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};
		TimestampTz end = period_end_of(&spec, start);

		if (++n > MAX_PERIODS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid period range from %s to %s", from_text, to_text),
					 errdetail("The range may span at most %d periods of the table's granularity.", MAX_PERIODS)));
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
 * finalize_internal.check_granularity(granularity, argname): the granularity
 * defines periods, checked by the same code that computes them; the error
 * names the argument.
 */
Datum
finalize_check_granularity(PG_FUNCTION_ARGS)
{
	const char *argname = PG_ARGISNULL(1) ? "granularity" : text_to_cstring(PG_GETARG_TEXT_PP(1));
	PeriodSpec	spec;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument %s must not be NULL", argname)));
	period_spec_of(PG_GETARG_INTERVAL_P(0), NULL, true, argname, &spec);
	PG_RETURN_VOID();
}

/*
 * finalize_internal.granularity_valid(granularity): the same rule as a boolean,
 * for the CHECK constraint of finalize.tracked_table.granularity, so the
 * table and the functions that take a granularity can never disagree.
 */
Datum
finalize_granularity_valid(PG_FUNCTION_ARGS)
{
	PeriodSpec	spec;

	PG_RETURN_BOOL(period_spec_make(PG_GETARG_INTERVAL_P(0), NULL, true, &spec) == GRANULARITY_OK);
}

/*
 * finalize_internal.check_zone(zone, argname): the zone's name as the zone
 * database spells it, or the error that names the argument.
 */
Datum
finalize_check_zone(PG_FUNCTION_ARGS)
{
	const char *argname = PG_ARGISNULL(1) ? "period_zone" : text_to_cstring(PG_GETARG_TEXT_PP(1));

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument %s must not be NULL", argname),
				 errhint("Pass an IANA zone name such as 'Asia/Seoul', or 'UTC'.")));
	PG_RETURN_TEXT_P(cstring_to_text(period_zone_canonical(text_to_cstring(PG_GETARG_TEXT_PP(0)), argname)));
}

/*
 * finalize_internal.zone_valid(zone): for the CHECK of tracked_table.period_zone,
 * a zone the library knows, spelt as it spells it (what _check_zone
 * returns); cheap, since the CHECK runs on every update of a row.
 */
Datum
finalize_zone_valid(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	pg_tz	   *tz = strlen(name) <= TZ_STRLEN_MAX ? pg_tzset(name) : NULL;

	PG_RETURN_BOOL(tz != NULL && strcmp(pg_get_timezone_name(tz), name) == 0);
}

/*
 * finalize_internal.check_period_span(period_start, period_end, granularity, zone,
 * what): the end of a span of whole periods that starts at period_start
 * (a boundary) and ends at period_end (a later boundary; NULL: the end of
 * the one period at period_start), or the error that says which boundary
 * is off and names the nearest ones. what names the object in the error
 * ("partition \"dt=2026-11-28\" of \"sales.orders\"").
 */
Datum
finalize_check_period_span(PG_FUNCTION_ARGS)
{
	PeriodSpec	spec;
	const char *what = PG_ARGISNULL(4) ? "the partition" : text_to_cstring(PG_GETARG_TEXT_PP(4));

	if (PG_ARGISNULL(0) || PG_ARGISNULL(2) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments period_start, granularity and zone must not be NULL")));
	spec_args(fcinfo, 2, 3, &spec);
	PG_RETURN_TIMESTAMPTZ(period_span_end(&spec, text_to_cstring(PG_GETARG_TEXT_PP(3)),
										  PG_GETARG_TIMESTAMPTZ(0), !PG_ARGISNULL(1),
										  PG_ARGISNULL(1) ? 0 : PG_GETARG_TIMESTAMPTZ(1),
										  "period_start", "period_end", what));
}

/*
 * finalize_internal.local_time(ts, zone): an instant as PostgreSQL writes a
 * timestamptz in ISO style with TimeZone set to zone ("2026-12-06
 * 00:00:00+09"), whatever the session's TimeZone and DateStyle: how
 * finalize.status and explain_verdict show a table's verdict in the zone
 * its periods are cut in.
 */
Datum
finalize_local_time(PG_FUNCTION_ARGS)
{
	TimestampTz ts = PG_GETARG_TIMESTAMPTZ(0);
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(1));
	pg_tz	   *tz = strlen(name) <= TZ_STRLEN_MAX ? pg_tzset(name) : NULL;
	struct pg_tm tm;
	fsec_t		fsec;
	int			offset;
	const char *abbrev;
	char		buf[MAXDATELEN + 1];

	if (tz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for argument zone: time zone \"%s\" is not recognized", name),
				 errhint("Use an IANA zone name such as 'Asia/Seoul' or 'UTC' (see pg_timezone_names).")));
	if (TIMESTAMP_NOT_FINITE(ts))
		EncodeSpecialTimestamp(ts, buf);
	else if (timestamp2tm(ts, &offset, &tm, &fsec, &abbrev, tz) == 0)
		EncodeDateTime(&tm, fsec, true, offset, abbrev, USE_ISO_DATES, buf);
	else
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	PG_RETURN_TEXT_P(cstring_to_text(buf));
}
