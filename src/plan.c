/*
 * plan.c
 *     Range planning and judging for one cycle.
 *
 * Everything here is a pure function of what the worker read, so the rules
 * that keep the verdict sound can be read (and tested) in one place:
 *
 *  - a range is (offset, max_lsn]: it ends on a commit boundary the capture
 *    process has fully processed, so its facts are complete if no row was
 *    cleaned up before it was read;
 *  - that is checked with the capture instance's min LSN read AFTER the
 *    range (cleanup raises it before deleting rows): a range whose first
 *    possible LSN lies below it may have lost rows and is never recorded;
 *  - min LSN 0x00.. means the instance is gone or the login may not read it,
 *    so nothing is recorded either.
 */
#include "postgres.h"

#include "plan.h"

/*
 * The capture instance to read a table from: the one it followed so far if
 * it is still there, else (a table being tracked for the first time) the
 * newest instance of its source table that capture has started. SQL Server
 * compares names case-insensitively under its default collation.
 */
const CaptureInstance *
plan_find_instance(const TrackedSource *table, const CaptureInstance *instances,
				   int ninstances)
{
	const CaptureInstance *best = NULL;

	for (int i = 0; i < ninstances; i++)
	{
		const CaptureInstance *ci = &instances[i];

		if (pg_strcasecmp(ci->source_schema, table->source_schema) != 0 ||
			pg_strcasecmp(ci->source_table, table->source_name) != 0)
			continue;
		if (table->capture_instance != NULL)
		{
			if (strcmp(ci->name, table->capture_instance) == 0)
				return ci;
			continue;
		}
		if (!ci->has_start)
			continue;
		if (best == NULL || lsn_cmp(&ci->start_lsn, &best->start_lsn) > 0)
			best = ci;
	}
	return best;
}

/*
 * Decides what to do for one table this cycle. A table without an offset
 * starts at max_lsn (its facts begin there), or, with start_from =
 * 'capture_start', just before the start LSN of its capture instance.
 */
void
plan_table(const TrackedSource *table, const CaptureInstance *instances,
		   int ninstances, const Lsn *max_lsn, TablePlan *out)
{
	memset(out, 0, sizeof(*out));
	out->instance = plan_find_instance(table, instances, ninstances);
	if (out->instance == NULL)
	{
		out->action = PLAN_NO_INSTANCE;
		return;
	}

	if (!table->has_offset)
	{
		/*
		 * An instance capture has not reached yet (its start beyond max_lsn)
		 * cannot be read from max_lsn or from its start yet: wait.
		 */
		if (lsn_cmp(&out->instance->start_lsn, max_lsn) > 0)
		{
			out->action = PLAN_NOTHING;
			return;
		}
		if (!table->start_at_capture)
		{
			out->action = PLAN_BASELINE;
			return;
		}
		/* (start - 1, max]: the instance's first LSN is the range's first. */
		if (!lsn_decrement(&out->instance->start_lsn, &out->start))
			memset(&out->start, 0, sizeof(out->start));
	}
	else
		out->start = table->offset;

	if (lsn_cmp(&out->start, max_lsn) > 0)
		out->action = PLAN_LSN_REGRESSED;
	else if (lsn_cmp(&out->start, max_lsn) == 0)
		out->action = table->has_offset ? PLAN_NOTHING : PLAN_BASELINE;
	else
		out->action = PLAN_READ;
}

/*
 * Judges a range after it was read, from the instance's min LSN read after
 * the read.
 */
RangeVerdict
judge_range(const Lsn *start_exclusive, const Lsn *min_lsn_after_read)
{
	if (lsn_is_zero(min_lsn_after_read))
		return RANGE_UNREADABLE;
	if (lsn_range_starts_below(start_exclusive, min_lsn_after_read))
		return RANGE_MAY_HAVE_LOST_ROWS;
	return RANGE_COMPLETE;
}
