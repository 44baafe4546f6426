/*
 * plan.c
 *     Range planning and judging for one cycle.
 *
 * Everything here is a pure function of what the worker read, so the rules
 * that keep the verdict sound can be read (and tested) in one place:
 *
 *  - a range ends at max_lsn: a commit boundary the capture process has
 *    fully processed, so its facts are complete if no row was cleaned up
 *    before it was read;
 *  - that is checked with the capture instance's min LSN read AFTER the
 *    range (cleanup raises it before deleting rows): a range whose first
 *    possible LSN lies below it may have lost rows and is never recorded;
 *  - min LSN 0x00.. means the instance is gone or the login may not read it,
 *    so nothing is recorded either;
 *  - a source table can have two capture instances. A newer one is followed
 *    from its start LSN: LSNs before it are read from the old instance, LSNs
 *    from it on from the new one. If the old instance disappears before the
 *    worker has read up to the new one's start, the LSNs in between cannot be
 *    read any more: that gap is data loss.
 */
#include "postgres.h"

#include "common/int.h"

#include "core/period.h"
#include "worker/plan.h"

/*
 * Whether an instance captures the table's source table. SQL Server resolved
 * the table's name to an object id with the database's collation, so names
 * are never compared here: under a case-sensitive collation dbo.Orders and
 * dbo.orders are two tables, under the default one they are the same.
 */
static bool
captures(const CaptureInstance *ci, const TrackedSource *table)
{
	return table->object_id != 0 && ci->source_object_id == table->object_id;
}

/*
 * Finds the instance the table followed so far (by name) and the newest
 * instance capture has started for its source table.
 */
static void
find_instances(const TrackedSource *table, const CaptureInstance *instances, int ninstances,
			   const CaptureInstance **current, const CaptureInstance **newest)
{
	*current = NULL;
	*newest = NULL;
	for (int i = 0; i < ninstances; i++)
	{
		const CaptureInstance *ci = &instances[i];

		if (!captures(ci, table))
			continue;
		if (table->capture_instance != NULL && strcmp(ci->name, table->capture_instance) == 0)
			*current = ci;
		if (ci->has_start && (*newest == NULL || lsn_cmp(&ci->start_lsn, &(*newest)->start_lsn) > 0))
			*newest = ci;
	}
}

/* Adds a segment (start, end] of an instance to a plan. */
static void
add_segment(TablePlan *out, const CaptureInstance *ci, const Lsn *start, const Lsn *end, bool switching)
{
	RangeSegment *s = &out->seg[out->nsegments];

	s->instance = ci;
	s->start = *start;
	s->end = *end;
	out->switch_in_seg[out->nsegments] = switching;
	out->nsegments++;
}

/*
 * Whether the instance followed so far now captures another object than
 * the table's name resolves to (a table renamed into its place): its
 * changes are not this table's, and the old table's are not in the newer
 * instances. Then a person decides.
 */
static bool
plan_replaced(const TrackedSource *table, const CaptureInstance *instances, int ninstances, TablePlan *out)
{
	for (int i = 0; table->capture_instance != NULL && table->object_id != 0 && i < ninstances; i++)
		if (strcmp(instances[i].name, table->capture_instance) == 0 &&
			instances[i].source_object_id != table->object_id)
		{
			out->instance = &instances[i];
			out->action = PLAN_SOURCE_REPLACED;
			return true;
		}
	return false;
}

/*
 * A table without an offset starts at max_lsn (its facts begin there),
 * with start_from = 'capture_start' just before the start LSN of its
 * capture instance, or right after start_from's LSN (where the lake's copy
 * ends): that needs every change after it, so an LSN below the instance's
 * start (cleanup may have removed changes after it) or beyond max_lsn (not
 * this database's, or not yet) reads nothing.
 */
static void
plan_first(const TrackedSource *table, const CaptureInstance *newest, const Lsn *max_lsn, TablePlan *out)
{
	Lsn			start;

	out->instance = newest;
	if (newest == NULL)
	{
		out->action = PLAN_NO_INSTANCE;
		return;
	}
	/* An instance capture has not reached yet cannot be read: wait. */
	if (lsn_cmp(&newest->start_lsn, max_lsn) > 0)
	{
		out->action = PLAN_NOTHING;
		return;
	}
	if (table->has_start_lsn)
	{
		if (lsn_range_starts_below(&table->start_lsn, &newest->start_lsn) || lsn_cmp(&table->start_lsn, max_lsn) > 0)
			out->action = PLAN_START_UNREADABLE;
		else if (lsn_cmp(&table->start_lsn, max_lsn) == 0)
			out->action = PLAN_BASELINE;
		else
		{
			out->action = PLAN_READ;
			add_segment(out, newest, &table->start_lsn, max_lsn, false);
		}
		return;
	}
	if (!table->start_at_capture)
	{
		out->action = PLAN_BASELINE;
		return;
	}
	/* (start - 1, max]: the instance's first LSN is the range's first. */
	if (!lsn_decrement(&newest->start_lsn, &start))
		memset(&start, 0, sizeof(start));
	if (lsn_cmp(&start, max_lsn) >= 0)
	{
		out->action = PLAN_BASELINE;
		return;
	}
	out->action = PLAN_READ;
	add_segment(out, newest, &start, max_lsn, false);
}

/*
 * A newer instance than the one followed: LSNs before its start are read
 * from the old one, from its start on from the new one; an old instance
 * gone before its part was read is a gap.
 */
static void
plan_switch(const TrackedSource *table, const CaptureInstance *current, const CaptureInstance *newest,
			const Lsn *max_lsn, TablePlan *out)
{
	Lsn			switch_at;

	if (!lsn_decrement(&newest->start_lsn, &switch_at))
		memset(&switch_at, 0, sizeof(switch_at));
	out->previous = current;
	out->instance = newest;
	if (lsn_cmp(&table->offset, &switch_at) >= 0)
	{
		/* Read up to the switch already: continue on the new instance. */
		if (lsn_cmp(&table->offset, max_lsn) == 0)
		{
			out->action = PLAN_NOTHING;
			out->instance = current ? current : newest;
			return;
		}
		out->action = PLAN_READ;
		add_segment(out, newest, &table->offset, max_lsn, true);
		return;
	}
	if (current == NULL)
	{
		/* The old instance is gone before its part was read. */
		out->action = PLAN_INSTANCE_GAP;
		out->gap_end = switch_at;
		return;
	}
	out->action = PLAN_READ;
	if (lsn_cmp(&switch_at, max_lsn) >= 0)
	{
		/* The new instance starts beyond max LSN: the old one still serves. */
		out->instance = current;
		out->previous = NULL;
		add_segment(out, current, &table->offset, max_lsn, false);
		return;
	}
	add_segment(out, current, &table->offset, &switch_at, false);
	add_segment(out, newest, &switch_at, max_lsn, true);
}

/* Decides what to do for one table this cycle. */
void
plan_table(const TrackedSource *table, const CaptureInstance *instances,
		   int ninstances, const Lsn *max_lsn, TablePlan *out)
{
	const CaptureInstance *current;
	const CaptureInstance *newest;

	memset(out, 0, sizeof(*out));
	if (plan_replaced(table, instances, ninstances, out))
		return;
	find_instances(table, instances, ninstances, &current, &newest);

	if (table->resuming)
	{
		out->instance = current ? current : newest;
		out->action = out->instance ? PLAN_RESUME : PLAN_NO_INSTANCE;
		return;
	}
	if (!table->has_offset)
	{
		plan_first(table, newest, max_lsn, out);
		return;
	}
	if (lsn_cmp(&table->offset, max_lsn) > 0)
	{
		out->action = PLAN_LSN_REGRESSED;
		out->instance = current;
		return;
	}
	if (current == NULL && newest == NULL)
	{
		out->action = PLAN_NO_INSTANCE;
		return;
	}
	if (newest != NULL && newest != current &&
		(current == NULL || !current->has_start ||
		 lsn_cmp(&newest->start_lsn, &current->start_lsn) > 0))
	{
		plan_switch(table, current, newest, max_lsn, out);
		return;
	}

	out->instance = current;
	if (lsn_cmp(&table->offset, max_lsn) == 0)
	{
		out->action = PLAN_NOTHING;
		return;
	}
	out->action = PLAN_READ;
	add_segment(out, current, &table->offset, max_lsn, false);
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

/*
 * Whether a DDL statement an instance recorded belongs to a segment and was
 * not reviewed yet: in (start, end], above the schema acknowledgement.
 */
bool
plan_ddl_in_range(const TrackedSource *table, const RangeSegment *seg, const Lsn *ddl_lsn)
{
	if (lsn_cmp(ddl_lsn, &seg->start) <= 0 || lsn_cmp(ddl_lsn, &seg->end) > 0)
		return false;
	return !(table->has_schema_ack && lsn_cmp(ddl_lsn, &table->schema_ack) <= 0);
}

/* Whether c may be part of a SQL Server identifier written without brackets. */
static bool
ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		c == '@' || c == '#' || c == '$' || (unsigned char) c >= 0x80;
}

/*
 * Whether a DDL statement names a column (case-insensitively, as a whole
 * identifier, bare, bracketed or quoted): a schema change that may drop or
 * retype a table's event column. It may say yes for a statement that only
 * mentions the name (a default, another table's column): that blocks the
 * verdict for a person to look, which errs on the safe side.
 */
bool
plan_ddl_mentions(const char *command, const char *column)
{
	size_t		n = strlen(column);

	if (n == 0)
		return false;
	for (const char *p = command; *p; p++)
	{
		if (pg_strncasecmp(p, column, n) != 0)
			continue;
		if ((p == command || !ident_char(p[-1])) && !ident_char(p[n]))
			return true;
	}
	return false;
}

/*
 * Whether unreviewed DDL stops the table (ddl_policy = block): then nothing
 * of its range is recorded, so the verdict stays before the change.
 */
bool
plan_ddl_blocks(const TrackedSource *table, int nddl)
{
	return table->ddl_block && nddl > 0;
}

/*
 * The event segment s carries. The segment that starts a newer instance
 * carries the switch; DDL seen in any segment is reported once, on the
 * last one (inside its switch event when it is the switch), so the event
 * is recorded with the fact that moves the verdict past it.
 */
SegmentEvent
plan_segment_event(const TablePlan *plan, int s, bool ddl_seen)
{
	if (plan->switch_in_seg[s])
		return SEGMENT_INSTANCE_SWITCH;
	if (ddl_seen && s == plan->nsegments - 1)
		return SEGMENT_SCHEMA_CHANGE;
	return SEGMENT_NO_EVENT;
}

/*
 * The commit time up to which segment s is known complete. The last
 * segment ends at max LSN, whose commit time SQL Server mapped. One that
 * ends at an instance switch does not end on a mapped commit: its last
 * row's commit time (else the table's offset's) is the latest it is known
 * to cover; never later than max LSN's.
 */
TimestampTz
plan_segment_end_time(const TablePlan *plan, int s, const TrackedSource *table,
					  bool has_rows, TimestampTz last_row_time, TimestampTz max_instant)
{
	TimestampTz t;

	if (s == plan->nsegments - 1)
		return max_instant;
	if (has_rows)
		t = last_row_time;
	else
		t = table->offset_time != 0 ? table->offset_time : max_instant;
	return Min(t, max_instant);
}

/*
 * Whether a data loss restarts the table by itself: on_data_loss = resume
 * and no other loss within the window (two in a row need a person).
 */
bool
plan_loss_resumes(const TrackedSource *table, TimestampTz now, int64 window_usecs)
{
	int64		since;
	bool		recent = table->has_last_loss &&
		(pg_sub_s64_overflow(now, table->last_loss, &since) || since < window_usecs);

	return table->auto_resume && !recent;
}

/*
 * What a consumer that reported an LSN needs this cycle; *target is the
 * LSN its resolution is for, which is what the worker stores as
 * resolved_for:
 *  - a report beyond max_lsn is pending (CONSUMER_AHEAD, target the
 *    report): the consumers were read before max_lsn, so the pipeline
 *    claims changes SQL Server had not captured when it reported. Such a
 *    claim is a bug or another database's LSN, and resolving it to
 *    max_lsn would let the verdict follow the source without the
 *    pipeline: it stays where its last resolution put it (the condition
 *    report_ahead says why) until max_lsn reaches the report;
 *  - a report of max_lsn itself takes max_lsn's commit time, no query;
 *  - below max_lsn, the greatest mapping row at or below it is looked up;
 *  - resolved already for the report: nothing (one query per report).
 * resolved_for is NULL when the consumer was never resolved.
 */
ConsumerAction
plan_consumer(const Lsn *reported, const Lsn *resolved_for, const Lsn *max_lsn, Lsn *target)
{
	int			c = lsn_cmp(reported, max_lsn);

	*target = *reported;
	if (c > 0)
		return CONSUMER_AHEAD;
	if (resolved_for != NULL && lsn_cmp(resolved_for, target) == 0)
		return CONSUMER_NOTHING;
	return c == 0 ? CONSUMER_AT_MAX : CONSUMER_LOOKUP;
}

/*
 * The boundaries of a commit-time table's periods in (after, until], at
 * most max, as the server's wall times (each instant plus offset_seconds,
 * the server's UTC offset, constant over the span): where the next read
 * splits its range on the server, so that each period's counts are their
 * own fact (changes_by_period exact). Splitting anywhere is safe (each
 * piece's counts and commit times are read, not guessed); a boundary that
 * cannot be computed is simply not split at.
 */
int
plan_period_splits(const PeriodSpec *spec, TimestampTz after, TimestampTz until, int32 offset_seconds,
				   Timestamp *out, int max)
{
	TimestampTz start;
	int			n = 0;

	if (after >= until || period_floor(spec, after, &start) != PERIOD_OK)
		return 0;
	for (TimestampTz b = period_end_of(spec, start); b > start && b <= until && n < max;
		 start = b, b = period_end_of(spec, b))
		out[n++] = b + (int64) offset_seconds * USECS_PER_SEC;
	return n;
}
