/*
 * loss_sweep.c
 *     The pure part of the loss rule (see loss_sweep.h): losses.c reads the
 *     acknowledgements, this says what they cover. Both loops are linear
 *     in the acknowledgements given, which their reader has capped and
 *     read with interrupts checked.
 */
#include "postgres.h"

#include "sensor/loss_sweep.h"

/* Orders acknowledgements by the start of what they cover. */
static int
ack_cmp(const void *a, const void *b)
{
	TimestampTz x = ((const LossAck *) a)->from;
	TimestampTz y = ((const LossAck *) b)->from;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/* Sorts acknowledgements by their start, as loss_ack_reach needs them. */
void
loss_acks_sort(LossAck *acks, int n)
{
	if (n > 1)
		qsort(acks, n, sizeof(LossAck), ack_cmp);
}

/*
 * How far from s the acknowledgements (sorted by loss_acks_sort) recorded
 * after since reach without a gap, adjacent or overlapping ones joined: at
 * least e once they cover every instant of [s, e)
 * (finalize_internal.ack_reach). One sweep in order of their starts: the
 * ones starting at or before the reach are all that can extend it, and
 * each is looked at once.
 */
TimestampTz
loss_ack_reach(const LossAck *acks, int n, TimestampTz s, TimestampTz e, TimestampTz since)
{
	TimestampTz reach = s;
	TimestampTz best = s;
	int			i = 0;

	while (reach < e)
	{
		for (; i < n && acks[i].from <= reach; i++)
			if (acks[i].at > since && acks[i].to > best)
				best = acks[i].to;
		if (best <= reach)
			return reach;
		reach = best;
	}
	return reach;
}

/*
 * When a loss recorded at created_at was last acknowledged where it
 * happened by an acknowledgement recorded after it that meets its periods
 * there, [span_from, span_to) (finalize_internal.loss_ackers compares
 * max(acknowledged_at)): a required consumer declared before then may have
 * built periods from the incomplete data. False while none is.
 */
bool
loss_last_repair(const LossAck *acks, int n, TimestampTz created_at, TimestampTz span_from,
				 TimestampTz span_to, TimestampTz *at)
{
	bool		any = false;

	for (int i = 0; i < n; i++)
		if (acks[i].at > created_at && acks[i].from < span_to && acks[i].to > span_from &&
			(!any || acks[i].at > *at))
		{
			*at = acks[i].at;
			any = true;
		}
	return any;
}
