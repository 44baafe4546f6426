/*
 * ddl_seen.c
 *     The DDL a table's capture instances recorded in the ranges of a
 *     cycle and not yet reviewed: collected from the segments' reads, told
 *     in an event's detail, and whether it blocks the table's verdict (its
 *     ddl_policy, or a statement that names its event column). No I/O.
 */
#include "postgres.h"

#include "utils/builtins.h"

#include "core/fmt.h"
#include "core/json_build.h"
#include "worker/ddl_seen.h"

/* Adds the unreviewed DDL of an instance in a segment to the list. */
static void
collect_ddl(const TrackedSource *t, const CdcInstance *ir, const RangeSegment *seg,
			JsonbParseState **list, DdlSeen *seen)
{
	for (int i = 0; i < ir->nddl; i++)
	{
		const CdcDdl *d = &ir->ddl[i];

		if (!plan_ddl_in_range(t, seg, &d->lsn))
			continue;
		if (t->event_column != NULL && plan_ddl_mentions(d->command, t->event_column) &&
			(seen->event_ddl == NULL || lsn_cmp(&d->lsn, &seen->event_ddl->lsn) < 0))
			seen->event_ddl = d;
		if (seen->first == NULL || lsn_cmp(&d->lsn, &seen->first->lsn) < 0)
		{
			seen->first = d;
			seen->instance = seg->instance->name;
		}
		jb_begin_object(list, NULL);
		jb_text(list, "command", d->command);
		jb_text(list, "lsn", fmt_lsn(&d->lsn));
		if (d->has_time)
			jb_text(list, "time_local", fmt_local(d->time_local));
		jb_end_object(list);
		seen->count++;
	}
}

/* Collects the DDL the segments recorded that was not reviewed yet. */
void
collect_segments_ddl(const TableJob *job, DdlSeen *seen)
{
	JsonbParseState *st = NULL;

	memset(seen, 0, sizeof(*seen));
	jb_begin_array(&st, NULL);
	for (int s = 0; s < job->plan->nsegments; s++)
		collect_ddl(job->table, job->inst[s], &job->plan->seg[s], &st, seen);
	seen->list = jb_finish(jb_end_array(&st));
}

/* One line naming the DDL seen, for status and state details. */
static char *
ddl_summary(const DdlSeen *seen)
{
	const CdcDdl *d = seen->first;

	return psprintf("%s (capture instance \"%s\", LSN %s%s%s)%s", d->command, seen->instance, fmt_lsn(&d->lsn),
					d->has_time ? ", at " : "", d->has_time ? fmt_local(d->time_local) : "",
					seen->count > 1 ? psprintf(" and %d more", seen->count - 1) : "");
}

/* Adds "summary" and "ddl" for the DDL seen to an event's detail. */
void
push_ddl_seen(JsonbParseState **st, const DdlSeen *seen)
{
	jb_text(st, "summary", ddl_summary(seen));
	jb_jsonb(st, "ddl", seen->list);
}

/*
 * Whether the DDL blocks the table (ddl_policy = block, or whatever the
 * policy a statement that names its event column: it may drop or retype
 * the column every event period is drawn from); then w says so.
 */
bool
ddl_blocks(const TableJob *job, const DdlSeen *seen, TableWrite *w)
{
	const TrackedSource *t = job->table;
	JsonbParseState *st = NULL;

	if (seen->event_ddl != NULL)
	{
		const CdcDdl *d = seen->event_ddl;

		w->kind = WRITE_SCHEMA_BLOCKED;
		w->capture_instance = seen->instance;
		w->event_start = t->offset;
		w->event_end = d->lsn;
		jb_begin_object(&st, NULL);
		jb_text(&st, "ddl_lsn", fmt_lsn(&d->lsn));
		jb_text(&st, "ddl_command", d->command);
		jb_text(&st, "event_time_column", t->event_column);
		push_ddl_seen(&st, seen);
		w->detail = jb_finish(jb_end_object(&st));
		w->state_detail = psprintf("A schema change names the event column \"%s\" of this table (at LSN %s: %s), "
								   "so the event periods of its rows may no longer be what they were; this blocks "
								   "the verdict whatever the ddl_policy. Check that the column still exists in the "
								   "source table (sys.columns: a dropped column stays listed as captured, with NULL "
								   "values) with a date/time type, then run SELECT finalize.resume_table(%s) to go on.",
								   t->event_column, fmt_lsn(&d->lsn), d->command,
								   quote_literal_cstr(t->table_name));
		return true;
	}
	if (!plan_ddl_blocks(t, seen->count))
		return false;
	w->kind = WRITE_SCHEMA_BLOCKED;
	w->capture_instance = seen->instance;
	w->event_start = t->offset;
	w->event_end = seen->first->lsn;
	jb_begin_object(&st, NULL);
	jb_text(&st, "ddl_lsn", fmt_lsn(&seen->first->lsn));
	jb_text(&st, "ddl_command", seen->first->command);
	push_ddl_seen(&st, seen);
	w->detail = jb_finish(jb_end_object(&st));
	w->state_detail = psprintf("A schema change blocks the verdict (ddl_policy = block): %s. Review it, "
							   "then run SELECT finalize.resume_table(%s) to go on.",
							   ddl_summary(seen), quote_literal_cstr(t->table_name));
	return true;
}
