/*
 * loss_sql.c
 *     The loss rule for SQL: finalize_internal.loss_ackers, open_loss_ackers,
 *     has_open_loss, ack_reach, acked, loss_blocks and loss_cap are these C
 *     functions over what losses.c reads under the statement's snapshot,
 *     so that explain_verdict, refresh_loss_blocked, acknowledge_loss and
 *     the sensors answer by one rule.
 */
#include "postgres.h"

#include "miscadmin.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "sensor/catalog.h"
#include "sensor/losses.h"

PG_FUNCTION_INFO_V1(finalize_loss_blocks);
PG_FUNCTION_INFO_V1(finalize_loss_cap);
PG_FUNCTION_INFO_V1(finalize_loss_ackers);
PG_FUNCTION_INFO_V1(finalize_open_loss_ackers);
PG_FUNCTION_INFO_V1(finalize_has_open_loss);
PG_FUNCTION_INFO_V1(finalize_ack_reach);
PG_FUNCTION_INFO_V1(finalize_acked);

/*
 * A NULL argument of these functions is a caller's bug: "no loss" would be
 * no proof of anything.
 */
static void
require_args(FunctionCallInfo fcinfo)
{
	for (int i = 0; i < PG_NARGS(); i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument %d of %s must not be NULL", i + 1, get_func_name(fcinfo->flinfo->fn_oid))));
}

/* What the loss rule reads of argument 0's table, under the statement's snapshot. */
static LossData *
read_arg_table(FunctionCallInfo fcinfo)
{
	require_args(fcinfo);
	return loss_data_read(PG_GETARG_INT64(0), catalog_statement_snapshot(), CurrentMemoryContext);
}

/*
 * finalize_internal.loss_blocks(table_id, period_start, period_end):
 * whether a loss holds the period, for SQL that tells a verdict as the
 * sensors do (_final).
 */
Datum
finalize_loss_blocks(PG_FUNCTION_ARGS)
{
	LossData   *d = read_arg_table(fcinfo);

	PG_RETURN_BOOL(loss_data_blocks(d, PG_GETARG_TIMESTAMPTZ(1), PG_GETARG_TIMESTAMPTZ(2)));
}

/*
 * finalize_internal.loss_cap(table_id): where losses stop finalized_until,
 * for SQL that caps a verdict as the sensors do (an event-time table's
 * advance).
 */
Datum
finalize_loss_cap(PG_FUNCTION_ARGS)
{
	LossData   *d = read_arg_table(fcinfo);

	PG_RETURN_TIMESTAMPTZ(loss_data_cap(d));
}

/*
 * finalize_internal.loss_ackers(table_id): every loss the table has or
 * inherits, with each table it must be acknowledged on (loss_id, acker_id,
 * acker_granularity, acker_zone, span_from, span_to): the loss's periods
 * in that table's periods.
 */
Datum
finalize_loss_ackers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LossData   *d = read_arg_table(fcinfo);

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < d->nackers; i++)
	{
		const LossAcker *a = &d->ackers[i];
		const LossTable *t = &d->tables[a->table];
		Datum		values[6];
		bool		nulls[6] = {false, false, false, t->zone < 0, false, false};

		CHECK_FOR_INTERRUPTS();
		values[0] = Int64GetDatum(d->losses[a->loss].loss_id);
		values[1] = Int64GetDatum(t->table_id);
		values[2] = IntervalPGetDatum(&t->periods.granularity);
		values[3] = t->zone < 0 ? (Datum) 0 : CStringGetTextDatum(d->names + t->zone);
		values[4] = TimestampTzGetDatum(a->span_from);
		values[5] = TimestampTzGetDatum(a->span_to);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * finalize_internal.open_loss_ackers(table_id, period_start, period_end):
 * the losses that hold the period, each with every table it has yet to be
 * acknowledged on for it (loss_id, acker_id).
 */
Datum
finalize_open_loss_ackers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LossData   *d = read_arg_table(fcinfo);
	TimestampTz period_start = PG_GETARG_TIMESTAMPTZ(1);
	TimestampTz period_end = PG_GETARG_TIMESTAMPTZ(2);

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < d->nackers; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		CHECK_FOR_INTERRUPTS();
		if (!loss_acker_holds(d, i, period_start, period_end))
			continue;
		values[0] = Int64GetDatum(d->losses[d->ackers[i].loss].loss_id);
		values[1] = Int64GetDatum(d->tables[d->ackers[i].table].table_id);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * finalize_internal.has_open_loss(table_id): whether the table or a table
 * it is built from has a loss that a table it must be acknowledged on has
 * not acknowledged for all its periods.
 */
Datum
finalize_has_open_loss(PG_FUNCTION_ARGS)
{
	LossData   *d = read_arg_table(fcinfo);

	for (int i = 0; i < d->nackers; i++)
		if (loss_acker_open(d, i))
			PG_RETURN_BOOL(true);
	PG_RETURN_BOOL(false);
}

/*
 * finalize_internal.ack_reach(table_id, s, e, since): how far from s the
 * acknowledgements of the table recorded after since reach without a gap
 * (at least e once they cover [s, e)).
 */
Datum
finalize_ack_reach(PG_FUNCTION_ARGS)
{
	int			n;
	LossAck    *acks;

	require_args(fcinfo);
	acks = loss_table_acks(PG_GETARG_INT64(0), catalog_statement_snapshot(), &n);
	PG_RETURN_TIMESTAMPTZ(loss_ack_reach(acks, n, PG_GETARG_TIMESTAMPTZ(1), PG_GETARG_TIMESTAMPTZ(2),
										 PG_GETARG_TIMESTAMPTZ(3)));
}

/*
 * finalize_internal.acked(table_id, s, e, since): whether those
 * acknowledgements cover every instant of [s, e).
 */
Datum
finalize_acked(PG_FUNCTION_ARGS)
{
	int			n;
	LossAck    *acks;

	require_args(fcinfo);
	acks = loss_table_acks(PG_GETARG_INT64(0), catalog_statement_snapshot(), &n);
	PG_RETURN_BOOL(loss_ack_reach(acks, n, PG_GETARG_TIMESTAMPTZ(1), PG_GETARG_TIMESTAMPTZ(2),
								  PG_GETARG_TIMESTAMPTZ(3)) >= PG_GETARG_TIMESTAMPTZ(2));
}
