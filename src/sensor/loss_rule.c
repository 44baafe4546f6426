/*
 * loss_rule.c
 *     Which periods of a table a data loss holds, told from what losses.c
 *     read (LossData): the rule of finalize_internal.open_loss_ackers,
 *     has_open_loss, loss_blocks and loss_cap. Only computation: the
 *     verdict cache keeps a LossData read with a verdict, so that a sensor
 *     on a table a loss holds answers without reading.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/timestamp.h"

#include "core/period_zone.h"
#include "sensor/losses.h"

/* The start of the period of periods containing ts; an infinite ts stays. */
static TimestampTz
floor_or_infinite(const PeriodSpec *periods, TimestampTz ts)
{
	return TIMESTAMP_NOT_FINITE(ts) ? ts : period_start_of(periods, ts, "ts");
}

/* How far the acknowledgements of acker's table reach from s (loss_ack_reach). */
static TimestampTz
acker_reach(const LossData *d, const LossAcker *a, TimestampTz s, TimestampTz e)
{
	const LossTable *t = &d->tables[a->table];

	return loss_ack_reach(&d->acks[t->first_ack], t->nacks, s, e, d->losses[a->loss].created_at);
}

/*
 * Whether acker (an index into d->ackers) holds the period [period_start,
 * period_end): its loss intersects the period, and its table has not
 * acknowledged all of its periods that share instants with both
 * (finalize_internal.open_loss_ackers).
 */
bool
loss_acker_holds(const LossData *d, int acker, TimestampTz period_start, TimestampTz period_end)
{
	const LossAcker *a = &d->ackers[acker];
	const Loss *l = &d->losses[a->loss];
	const PeriodSpec *periods = &d->tables[a->table].periods;
	/* The period's last instant ([start, end) holds end - 1 microsecond last). */
	TimestampTz last = TIMESTAMP_NOT_FINITE(period_end) ? period_end : period_end - 1;
	TimestampTz from;
	TimestampTz to;

	if (!(l->lost_from < period_end && l->lost_to >= period_start))
		return false;
	from = period_start_of(periods, Max(period_start, l->lost_from), "ts");
	to = period_end_of(periods, period_start_of(periods, Min(last, l->lost_to), "ts"));
	return acker_reach(d, a, from, to) < to;
}

/*
 * Whether acker's table has not acknowledged all the periods of its loss
 * (finalize_internal.has_open_loss asks this of every acker).
 */
bool
loss_acker_open(const LossData *d, int acker)
{
	const LossAcker *a = &d->ackers[acker];

	return acker_reach(d, a, a->span_from, a->span_to) < a->span_to;
}

/*
 * Whether a loss holds the period [period_start, period_end) of the table
 * (finalize_internal.loss_blocks): one of the table or of a table it is
 * built from intersects it, and a table it must be acknowledged on has
 * not acknowledged all of its periods that share instants with both.
 */
bool
loss_data_blocks(const LossData *d, TimestampTz period_start, TimestampTz period_end)
{
	for (int i = 0; i < d->nackers; i++)
	{
		/* Ackers times acknowledgements: seconds on a large catalog. */
		CHECK_FOR_INTERRUPTS();
		if (loss_acker_holds(d, i, period_start, period_end))
			return true;
	}
	return false;
}

/*
 * Where finalized_until must stop for the table (finalize_internal.loss_cap):
 * the start of its earliest period (its own periods) that a loss may
 * still hold, for want of an acknowledgement on a table it needs one on;
 * DT_NOEND when none does (or the table is gone), DT_NOBEGIN when such a
 * loss has no start. It may name an earlier period than the first one a
 * loss holds (acknowledgements count from a period start of the table
 * they are on), never a later one.
 */
TimestampTz
loss_data_cap(const LossData *d)
{
	const LossTable *self = &d->tables[0];
	TimestampTz cap = DT_NOEND;

	for (int i = 0; self->exists && i < d->nackers; i++)
	{
		const LossAcker *a = &d->ackers[i];
		const Loss *l = &d->losses[a->loss];
		TimestampTz reach = acker_reach(d, a, a->span_from, a->span_to);
		TimestampTz held;

		CHECK_FOR_INTERRUPTS();
		if (reach >= a->span_to)
			continue;
		held = Max(floor_or_infinite(&d->tables[a->table].periods, reach), l->lost_from);
		held = floor_or_infinite(&self->periods, held);
		if (held < cap)
			cap = held;
	}
	return cap;
}

/* loss_data_blocks of the table as read under snapshot. */
bool
loss_blocks(int64 table_id, TimestampTz period_start, TimestampTz period_end, Snapshot snapshot)
{
	LossData   *d = loss_data_read(table_id, snapshot, CurrentMemoryContext);
	bool		blocks = loss_data_blocks(d, period_start, period_end);

	pfree(d);
	return blocks;
}

/* loss_data_cap of the table as read under snapshot. */
TimestampTz
loss_cap(int64 table_id, Snapshot snapshot)
{
	LossData   *d = loss_data_read(table_id, snapshot, CurrentMemoryContext);
	TimestampTz cap = loss_data_cap(d);

	pfree(d);
	return cap;
}
