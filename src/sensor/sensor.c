/*
 * sensor.c
 *     The verdict functions that sensors poll: finalized_until and is_final,
 *     for one table or for several at once. is_final's answer is
 *     sensor_period_final, which wait_final (wait.c) asks too.
 *
 * A period is final when the watermark has passed it and no loss holds it.
 * The first half comes from verdict_cache.c (no SPI); the second is asked of
 * losses.c (C over the catalog, no SPI either) only while the table's
 * loss_blocked flag is set, which it is only between a data loss and its
 * acknowledgements: then both halves are read again under one snapshot, so
 * that the answer describes one committed state and never runs ahead of
 * it. finalized_until is the watermark, stopped while that flag is set at
 * the first period a loss may hold (loss_cap, read the same way): every
 * period before it must be complete. finalize_internal.sensor_until is the same
 * verdict for SQL that writes or shows one (NOTIFY payloads,
 * finalize.status, explain_verdict).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "core/period_zone.h"
#include "sensor/losses.h"
#include "sensor/sensor.h"
#include "sensor/verdict_cache.h"

PG_FUNCTION_INFO_V1(finalize_finalized_until);
PG_FUNCTION_INFO_V1(finalize_is_final);
PG_FUNCTION_INFO_V1(finalize_finalized_until_all);
PG_FUNCTION_INFO_V1(finalize_is_final_all);
PG_FUNCTION_INFO_V1(finalize_sensor_until);

/*
 * A sensor that passes no table name has a bug: say so rather than answer
 * NULL, which a sensor could read as "not final yet" forever.
 */
void
sensor_require_table_name(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument table_name must not be NULL")));
}

/* The same for period_start, the second argument of is_final and wait_final. */
void
sensor_require_period_start(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument period_start must not be NULL"),
				 errhint("Pass the start (or any instant) of the period to check, for example '2026-11-29 14:00+00'.")));
}

/*
 * The elements of table_names (argument 0) as text datums: a NULL array, an
 * empty or multi-dimensional one, or a NULL element is the caller's bug, and
 * answering would hide it (a NULL name has no verdict to combine).
 */
Datum *
sensor_table_names_arg(FunctionCallInfo fcinfo, int *count)
{
	ArrayType  *names;
	Datum	   *elems;
	bool	   *nulls;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument table_names must not be NULL"),
				 errhint("Pass the names of the tracked tables to check, for example ARRAY['sales.orders', 'sales.lines'].")));
	names = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(names) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument table_names must not be empty"),
				 errdetail("An empty list has nothing to wait for: every period would be final at once."),
				 errhint("Pass the names of the tracked tables to check, for example ARRAY['sales.orders', 'sales.lines'].")));
	if (ARR_NDIM(names) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument table_names must be a one-dimensional array"),
				 errdetail("The array has %d dimensions.", ARR_NDIM(names)),
				 errhint("Pass the names of the tracked tables to check, for example ARRAY['sales.orders', 'sales.lines'].")));
	deconstruct_array(names, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, count);
	for (int i = 0; i < *count; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("element %d of argument table_names must not be NULL", ARR_LBOUND(names)[0] + i),
					 errdetail("A NULL name has no verdict, so the tables' verdict would be unknown."),
					 errhint("Remove the NULL element, or pass only the names of tracked tables.")));
	return elems;
}

/*
 * The periods a sensor computed last, per backend: sensors ask about the
 * same period again and again, and a period of a zone with DST takes a few
 * lookups in the zone's transitions (a UTC one a few divisions). The period containing an instant
 * depends on nothing but the periods and the instant, and a zone's data
 * stays for the backend's life, so an answer can be reused as is.
 */
#define PERIOD_MEMO_SIZE 8

typedef struct PeriodMemo
{
	bool		used;
	PeriodSpec	periods;
	TimestampTz start;
	TimestampTz end;
} PeriodMemo;

static PeriodMemo period_memo[PERIOD_MEMO_SIZE];
static int	period_memo_next = 0;

/* Whether two tables' periods are the same (granularity, origin, zone). */
static bool
same_periods(const PeriodSpec *a, const PeriodSpec *b)
{
	return a->unit == b->unit && a->stride == b->stride && a->origin == b->origin &&
		a->months == b->months && a->zone == b->zone;
}

/* The period of a table's periods that contains ts, [start, end). */
static void
period_containing(const PeriodSpec *periods, TimestampTz ts, TimestampTz *start, TimestampTz *end)
{
	PeriodMemo *m;

	for (int i = 0; i < PERIOD_MEMO_SIZE; i++)
	{
		m = &period_memo[i];
		if (m->used && m->start <= ts && ts < m->end && same_periods(&m->periods, periods))
		{
			*start = m->start;
			*end = m->end;
			return;
		}
	}
	*start = period_start_of(periods, ts, "period_start");
	*end = period_end_of(periods, *start);
	m = &period_memo[period_memo_next];
	period_memo_next = (period_memo_next + 1) % PERIOD_MEMO_SIZE;
	m->periods = *periods;
	m->start = *start;
	m->end = *end;
	m->used = true;
}

/*
 * The period of a table's granularity that contains ts, and whether the
 * watermark has passed it: the whole verdict unless v->loss_blocked.
 */
static bool
passed_by_watermark(const TrackedVerdict *v, TimestampTz ts, TimestampTz *start, TimestampTz *end)
{
	period_containing(&v->periods, ts, start, end);
	return v->has_watermark && !TIMESTAMP_NOT_FINITE(*end) && *end <= v->finalized_until;
}

/*
 * The loss path, for a table whose loss flag was set (v, from the cache):
 * whether a loss leaves the period containing ts final. With what the
 * loss rule read together with v (v->losses), computed from it; otherwise
 * the verdict and the losses are read again, both under one fresh
 * snapshot (a cached verdict paired with a later loss state could
 * describe no state at all).
 */
static bool
final_despite_losses(Datum table_name, const TrackedVerdict *v, TimestampTz ts)
{
	Snapshot	snapshot;
	TrackedVerdict fresh;
	TimestampTz start;
	TimestampTz end;
	bool		final;

	if (v->losses != NULL)
		return passed_by_watermark(v, ts, &start, &end) && !loss_data_blocks(v->losses, start, end);
	snapshot = RegisterSnapshot(catalog_fresh_snapshot());
	catalog_read_verdict(table_name, &fresh, snapshot);
	final = passed_by_watermark(&fresh, ts, &start, &end);
	if (final && fresh.loss_blocked)
		final = !loss_blocks(fresh.table_id, start, end, snapshot);
	UnregisterSnapshot(snapshot);
	return final;
}

/*
 * A table's watermark as a boundary of its periods: rounded down, since it
 * may have been set under other periods (alter_tracked_table keeps it as
 * the instant it is). False when it has none, or none that rounds.
 */
static bool
watermark_boundary(const TrackedVerdict *v, TimestampTz *until)
{
	TimestampTz end;

	if (!v->has_watermark)
		return false;
	if (TIMESTAMP_NOT_FINITE(v->finalized_until))
	{
		*until = v->finalized_until;
		return true;
	}
	period_containing(&v->periods, v->finalized_until, until, &end);
	return true;
}

/*
 * The verdict finalized_until answers for a table whose watermark, periods
 * and loss flag (its own, or that of a table it is built from) are v, read
 * under snapshot: the watermark rounded down to a start of its periods,
 * and while the flag is set no later than loss_cap (read under the same
 * snapshot, or kept with v as v->losses). False while nothing is final, which a loss without a start
 * (-infinity) also means. The one
 * rule of every announcement of a verdict: the sensors, and through
 * finalize_internal.sensor_until the NOTIFY payloads, finalize.status and
 * explain_verdict (see docs/design/announcements.md).
 */
static bool
verdict_of(const TrackedVerdict *v, Snapshot snapshot, TimestampTz *until)
{
	TimestampTz cap;

	if (!watermark_boundary(v, until))
		return false;
	if (!v->loss_blocked)
		return true;
	cap = v->losses != NULL ? loss_data_cap(v->losses) : loss_cap(v->table_id, snapshot);
	if (TIMESTAMP_IS_NOBEGIN(cap))
		return false;
	if (cap < *until)
		*until = cap;
	return true;
}

/*
 * The verdict finalized_until answers for one table (read as v, from the
 * cache): verdict_of, of v while its loss flag is clear or the cache kept
 * the losses read with it; otherwise of the verdict read again under one
 * fresh snapshot with loss_cap (as final_despite_losses does).
 */
static bool
verdict_until(Datum table_name, const TrackedVerdict *v, TimestampTz *until)
{
	Snapshot	snapshot;
	TrackedVerdict fresh;
	bool		has;

	if (!v->has_watermark || !v->loss_blocked || v->losses != NULL)
		return verdict_of(v, NULL, until);
	snapshot = RegisterSnapshot(catalog_fresh_snapshot());
	catalog_read_verdict(table_name, &fresh, snapshot);
	has = verdict_of(&fresh, snapshot, until);
	UnregisterSnapshot(snapshot);
	return has;
}

/*
 * finalize_internal.sensor_until(table_id, kind, finalized_until, granularity,
 * period_zone, loss_blocked): what finalized_until() answers for the table
 * when its watermark row holds finalized_until and loss_blocked (as it
 * will once the caller's write is done), under the statement's snapshot:
 * how SQL that writes or shows a verdict tells it as the sensors do. Only
 * a derived or sharded table is built from others (derived_input), so
 * only theirs have a lineage to look at; nothing but a loss flag costs
 * more than the rounding.
 */
Datum
finalize_sensor_until(PG_FUNCTION_ARGS)
{
	TrackedVerdict v;
	const PeriodZone *zone = NULL;
	char	   *zone_name;
	char	   *kind;
	Snapshot	snapshot = NULL;
	TimestampTz until;
	bool		has;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments table_id, kind and granularity must not be NULL")));
	if (PG_ARGISNULL(2))
		PG_RETURN_NULL();
	v.table_id = PG_GETARG_INT64(0);
	kind = text_to_cstring(PG_GETARG_TEXT_PP(1));
	v.has_watermark = true;
	v.losses = NULL;
	v.finalized_until = PG_GETARG_TIMESTAMPTZ(2);
	/* 'UTC' and NULL need no zone at all, as catalog.c reads them. */
	zone_name = PG_ARGISNULL(4) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(4));
	if (zone_name != NULL && strcmp(zone_name, "UTC") != 0)
		zone = period_zone_of(zone_name, "period_zone");
	period_spec_of(PG_GETARG_INTERVAL_P(3), zone, true, "granularity", &v.periods);
	/* NULL is no proof that nothing was lost: ask. */
	v.loss_blocked = PG_ARGISNULL(5) || PG_GETARG_BOOL(5);
	if (!v.loss_blocked && strcmp(kind, "source") != 0)
	{
		snapshot = RegisterSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
		v.loss_blocked = catalog_lineage_blocked(v.table_id, snapshot);
	}
	if (v.loss_blocked && snapshot == NULL)
		snapshot = RegisterSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
	has = verdict_of(&v, snapshot, &until);
	if (snapshot != NULL)
		UnregisterSnapshot(snapshot);
	if (!has)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(until);
}

/*
 * finalize.finalized_until(table_name): every period ending at or before the
 * result is complete; NULL while nothing is final. While a loss is not
 * acknowledged everywhere it must be, the result stops at the start of the
 * first period it may hold (later periods it does not hold may be final:
 * is_final says which).
 */
Datum
finalize_finalized_until(PG_FUNCTION_ARGS)
{
	TrackedVerdict v;
	TimestampTz until;

	sensor_require_table_name(fcinfo);
	verdict_cache_read(PG_GETARG_DATUM(0), &v);
	if (!verdict_until(PG_GETARG_DATUM(0), &v, &until))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(until);
}

/*
 * finalize.is_final(table_name, period_start): true iff the whole period
 * containing period_start ends at or before finalized_until and no loss
 * holds it. Never NULL for a tracked table, so NULL arguments are errors
 * rather than NULL answers.
 */
Datum
finalize_is_final(PG_FUNCTION_ARGS)
{
	Datum		name;

	sensor_require_table_name(fcinfo);
	sensor_require_period_start(fcinfo);
	name = PG_GETARG_DATUM(0);
	PG_RETURN_BOOL(sensor_period_final(&name, 1,
									   PG_GETARG_TIMESTAMPTZ(1), NULL));
}

/*
 * finalize.finalized_until(table_names text[]): the least verdict of the
 * tables as finalized_until(text) answers each (losses included), NULL if
 * any has none (nothing is final in all of them). Every name is checked, in
 * order, before any answer, so that a misspelt name is an error whatever
 * the verdicts are; losses are asked only when every table has a verdict.
 */
Datum
finalize_finalized_until_all(PG_FUNCTION_ARGS)
{
	int			count;
	Datum	   *names = sensor_table_names_arg(fcinfo, &count);
	TrackedVerdict *v;
	TimestampTz least = DT_NOEND;

	v = palloc(sizeof(TrackedVerdict) * count);
	for (int i = 0; i < count; i++)
		verdict_cache_read(names[i], &v[i]);
	for (int i = 0; i < count; i++)
		if (!v[i].has_watermark)
			PG_RETURN_NULL();
	for (int i = 0; i < count; i++)
	{
		TimestampTz until;

		if (!verdict_until(names[i], &v[i], &until))
			PG_RETURN_NULL();
		if (until < least)
			least = until;
	}
	PG_RETURN_TIMESTAMPTZ(least);
}

/*
 * Whether the period containing ts is final in every one of the tables (in
 * each one's own granularity): is_final's answer, for one table or several,
 * and the one wait_final waits for. Every name is read first (errors in
 * order, as finalized_until); losses are asked only when every watermark
 * has passed, so one table that is behind answers from the cache. When the
 * answer is false and holding is not NULL, it is set to the id of a table
 * that holds the period back: the first one behind, else the first one a
 * loss holds.
 */
bool
sensor_period_final(const Datum *names, int count, TimestampTz ts, int64 *holding)
{
	TrackedVerdict one;
	TrackedVerdict *v = count == 1 ? &one : palloc(sizeof(TrackedVerdict) * count);
	TimestampTz start;
	TimestampTz end;
	int			behind = -1;

	for (int i = 0; i < count; i++)
		verdict_cache_read(names[i], &v[i]);
	for (int i = 0; i < count; i++)
		if (!passed_by_watermark(&v[i], ts, &start, &end) && behind < 0)
			behind = i;
	if (behind < 0)
		for (int i = 0; i < count && behind < 0; i++)
			if (v[i].loss_blocked && !final_despite_losses(names[i], &v[i], ts))
				behind = i;
	if (behind >= 0 && holding != NULL)
		*holding = v[behind].table_id;
	return behind < 0;
}

/*
 * finalize.is_final(table_names text[], period_start): true iff the period
 * of each table's own granularity containing period_start is final in that
 * table.
 */
Datum
finalize_is_final_all(PG_FUNCTION_ARGS)
{
	int			count;
	Datum	   *names = sensor_table_names_arg(fcinfo, &count);

	sensor_require_period_start(fcinfo);
	PG_RETURN_BOOL(sensor_period_final(names, count,
									   PG_GETARG_TIMESTAMPTZ(1), NULL));
}
