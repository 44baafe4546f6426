/*
 * judge.c
 *     Turns the reads of one table into its write: the facts of its ranges
 *     (with instance switches and DDL as events), a data loss, a blocked
 *     schema change, a resume after a loss, or a condition saying why nothing
 *     was recorded. The rules of what a read proves are in plan.c; this file
 *     applies them to results.
 */
#include "postgres.h"

#include "common/int.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#include "common/settings.h"
#include "common/timeconv.h"
#include "worker/judge.h"

/* Formats an LSN into a palloc'd string. */
char *
lsn_text(const Lsn *lsn)
{
	char	   *text = palloc(LSN_TEXT_LEN + 1);

	lsn_format(lsn, text);
	return text;
}

/* Appends "key": value (a JSON string, or raw JSON when raw) to an object. */
static void
json_kv(StringInfo buf, const char *key, const char *value, bool raw)
{
	if (buf->len > 1)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	if (raw)
		appendStringInfoString(buf, value);
	else
		escape_json(buf, value);
}

/* A local datetime as text, for messages. */
const char *
local_text(Timestamp ts)
{
	return DatumGetCString(DirectFunctionCall1(timestamp_out, TimestampGetDatum(ts)));
}

/* An instant as text in the session's zone, for messages. */
const char *
instant_text(TimestampTz ts)
{
	/* timestamptz_to_str returns a static buffer: copy, so two fit in one message. */
	return pstrdup(timestamptz_to_str(ts));
}

/* Fills a condition write. */
void
set_condition(TableWrite *w, const char *condition, char *detail)
{
	w->kind = WRITE_CONDITION;
	w->condition = condition;
	w->condition_detail = detail;
}

/* The earliest instant of a local time, or a fallback when it is unknown. */
static TimestampTz
instant_or(bool known, Timestamp local, const SourceConfig *cfg, TimestampTz fallback)
{
	return known ? local_to_instant_earliest(local, cfg->tz) : fallback;
}

/*
 * A data loss on the range (start, lost_to] of an instance: the event, and
 * either an automatic restart at lost_to (on_data_loss = resume, no other
 * loss within finalize.data_loss_window) or a stopped table.
 */
static void
data_loss(TableWrite *w, const TrackedSource *t, const char *ci, const Lsn *start, const Lsn *lost_to,
		  const char *cause, const char *explanation, TimestampTz resume_time)
{
	StringInfoData json;
	Lsn			first;
	/* In 64 bits: the setting allows windows of centuries. */
	int64		window = (int64) finalize_data_loss_window_min * USECS_PER_MINUTE;
	int64		since;
	bool		recent = t->has_last_loss &&
		(pg_sub_s64_overflow(GetCurrentTimestamp(), t->last_loss, &since) || since < window);

	w->kind = WRITE_DATA_LOSS;
	w->capture_instance = ci;
	w->event_start = *start;
	w->event_end = *lost_to;
	(void) lsn_increment(start, &first);
	initStringInfo(&json);
	appendStringInfoChar(&json, '{');
	json_kv(&json, "capture_instance", ci, false);
	json_kv(&json, "lost_from_lsn", lsn_text(&first), false);
	json_kv(&json, "lost_to_lsn", lsn_text(lost_to), false);
	json_kv(&json, "cause", cause, false);
	appendStringInfoChar(&json, '}');
	w->detail_json = json.data;

	if (t->auto_resume && !recent)
	{
		w->resume = true;
		w->automatic = true;
		w->resume_at = *lost_to;
		w->resume_time = resume_time;
		initStringInfo(&json);
		appendStringInfoChar(&json, '{');
		json_kv(&json, "capture_instance", ci, false);
		json_kv(&json, "cause", cause, false);
		appendStringInfoChar(&json, '}');
		w->resume_json = json.data;
		return;
	}
	w->state_detail = psprintf("%s Changes from LSN %s to %s cannot be read any more, so the verdict stays "
							   "where it was.%s Once the loss is accounted for (for example by a re-snapshot), "
							   "run SELECT finalize.resume_table(%s); the table then restarts at the capture "
							   "instance's current min LSN and the lost range is kept as an event.",
							   explanation, lsn_text(&first), lsn_text(lost_to),
							   (t->auto_resume && recent)
							   ? psprintf(" It is the second loss within finalize.data_loss_window (the previous one "
										  "was recorded at %s), so it is not resumed automatically.",
										  instant_text(t->last_loss)) : "",
							   quote_literal_cstr(t->table_name));
}

/* Appends the DDL of an instance in (start, end] not yet reviewed. */
static int
collect_ddl(const TrackedSource *t, const CdcInstance *ir, const RangeSegment *seg,
			StringInfo list, const CdcDdl **first)
{
	int			n = 0;

	for (int i = 0; i < ir->nddl; i++)
	{
		const CdcDdl *d = &ir->ddl[i];
		StringInfoData item;

		if (lsn_cmp(&d->lsn, &seg->start) <= 0 || lsn_cmp(&d->lsn, &seg->end) > 0)
			continue;
		if (t->has_schema_ack && lsn_cmp(&d->lsn, &t->schema_ack) <= 0)
			continue;
		if (*first == NULL || lsn_cmp(&d->lsn, &(*first)->lsn) < 0)
			*first = d;
		initStringInfo(&item);
		appendStringInfoChar(&item, '{');
		json_kv(&item, "command", d->command, false);
		json_kv(&item, "lsn", lsn_text(&d->lsn), false);
		if (d->has_time)
			json_kv(&item, "time_local", local_text(d->time_local), false);
		appendStringInfoChar(&item, '}');
		appendStringInfo(list, "%s%s", list->len > 1 ? ", " : "", item.data);
		n++;
	}
	return n;
}

/* One line naming a DDL statement, for status and state details. */
static char *
ddl_summary(const char *ci, const CdcDdl *d, int count)
{
	return psprintf("%s (capture instance \"%s\", LSN %s%s%s)%s", d->command, ci, lsn_text(&d->lsn),
					d->has_time ? ", at " : "", d->has_time ? local_text(d->time_local) : "",
					count > 1 ? psprintf(" and %d more", count - 1) : "");
}

/* The DDL a table's segments recorded, not yet reviewed. */
typedef struct DdlSeen
{
	StringInfoData list;		/* JSON array of the statements */
	const CdcDdl *first;		/* the earliest */
	const char *instance;		/* its capture instance */
	int			count;
} DdlSeen;

/*
 * Whether the reads of every segment are usable; if not, w is the data
 * loss or the condition that says why.
 */
static bool
reads_usable(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w)
{
	const TrackedSource *t = job->table;
	const TablePlan *p = job->plan;

	/* A min LSN of zeros explains a failure of the statements after it too. */
	for (int s = 0; s < p->nsegments; s++)
		if (job->inst[s]->has_min && lsn_is_zero(&job->inst[s]->min_lsn))
		{
			set_condition(w, "no_access",
						  psprintf("sys.fn_cdc_get_min_lsn(N'%s') returned 0x00000000000000000000: the capture "
								   "instance no longer exists, or the login \"%s\" may not read it (it needs "
								   "SELECT on the captured columns and membership in the instance's gating role).",
								   p->seg[s].instance->name, cfg->conn.username));
			return false;
		}
	/*
	 * A min LSN read after the ranges that passed a segment's start is a
	 * loss, whether or not the segment's read succeeded: the query function
	 * refuses a range that starts below the instance's low water mark
	 * (error 313), which is this very case.
	 */
	for (int s = 0; s < p->nsegments; s++)
	{
		const CdcInstance *ir = job->inst[s];
		const char *ci = p->seg[s].instance->name;
		Lsn			lost_to;

		if (!ir->outcome.ok || !ir->has_min || judge_range(&p->seg[s].start, &ir->min_lsn) != RANGE_MAY_HAVE_LOST_ROWS)
			continue;
		if (!lsn_decrement(&ir->min_lsn, &lost_to))
			lost_to = ir->min_lsn;
		data_loss(w, t, ci, &p->seg[s].start, &lost_to, "retention cleanup",
				  psprintf("CDC cleanup (retention) removed changes of capture instance \"%s\" before "
						   "finalize read them: the instance's minimum LSN is now %s.",
						   ci, lsn_text(&ir->min_lsn)),
				  instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant));
		return false;
	}
	if (job->error != NULL)
	{
		set_condition(w, "read_failed", psprintf("Reading the changes of %s.%s failed: %s",
												  t->source_schema, t->source_name, job->error));
		return false;
	}
	/* Every segment read, and judged complete with min LSNs read after it. */
	for (int s = 0; s < p->nsegments; s++)
	{
		const CdcInstance *ir = job->inst[s];

		if (!job->seg[s].outcome.ok || !ir->outcome.ok || !ir->has_min)
		{
			set_condition(w, "read_failed",
						  psprintf("SQL Server returned no result for capture instance \"%s\".",
								   p->seg[s].instance->name));
			return false;
		}
		Assert(judge_range(&p->seg[s].start, &ir->min_lsn) == RANGE_COMPLETE);
	}

	return true;
}

/* Collects the DDL the segments recorded that was not reviewed yet. */
static void
collect_segments_ddl(const TableJob *job, DdlSeen *seen)
{
	const TrackedSource *t = job->table;
	const TablePlan *p = job->plan;

	memset(seen, 0, sizeof(*seen));
	initStringInfo(&seen->list);
	appendStringInfoChar(&seen->list, '[');
	for (int s = 0; s < p->nsegments; s++)
	{
		const CdcDdl *before = seen->first;

		seen->count += collect_ddl(t, job->inst[s], &p->seg[s], &seen->list, &seen->first);
		if (seen->first != before)
			seen->instance = p->seg[s].instance->name;
	}
	appendStringInfoChar(&seen->list, ']');
}

/* Whether the DDL blocks the table (ddl_policy = block); then w says so. */
static bool
ddl_blocks(const TableJob *job, const DdlSeen *seen, TableWrite *w)
{
	const TrackedSource *t = job->table;

	if (seen->count > 0 && t->ddl_block)
	{
		StringInfoData json;
		char	   *summary = ddl_summary(seen->instance, seen->first, seen->count);

		w->kind = WRITE_SCHEMA_BLOCKED;
		w->capture_instance = seen->instance;
		w->event_start = t->offset;
		w->event_end = seen->first->lsn;
		initStringInfo(&json);
		appendStringInfoChar(&json, '{');
		json_kv(&json, "ddl_lsn", lsn_text(&seen->first->lsn), false);
		json_kv(&json, "ddl_command", seen->first->command, false);
		json_kv(&json, "summary", summary, false);
		json_kv(&json, "ddl", seen->list.data, true);
		appendStringInfoChar(&json, '}');
		w->detail_json = json.data;
		w->state_detail = psprintf("A schema change blocks the verdict (ddl_policy = block): %s. Review it, "
								   "then run SELECT finalize.resume_table(%s) to go on.",
								   summary, quote_literal_cstr(t->table_name));
		return true;
	}
	return false;
}

/*
 * Turns the reads of a table's segments into its write: the facts (with the
 * instance switch and DDL as events), a data loss, a blocked schema change,
 * or a condition saying why nothing was recorded.
 */
void
judge_read(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w)
{
	const TrackedSource *t = job->table;
	const TablePlan *p = job->plan;
	DdlSeen		seen;

	w->table = t;
	w->capture_instance = p->instance->name;
	if (!reads_usable(cfg, job, max_instant, w))
		return;
	collect_segments_ddl(job, &seen);
	if (ddl_blocks(job, &seen, w))
		return;

	/*
	 * Record the segments. A table read from its capture instance's start
	 * (start_from = 'capture_start') has no facts yet: its first fact marks
	 * where they begin, without a start, like any table's; the range follows
	 * in the same transaction, so the verdict the baseline alone would give
	 * is never seen.
	 */
	w->kind = WRITE_RANGES;
	w->nfacts = 0;
	if (!t->has_offset)
	{
		RangeFacts *b = &w->facts[w->nfacts++];
		const CdcInstance *ir = job->inst[0];
		TimestampTz at = instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant);

		b->table_id = t->table_id;
		b->has_start = false;
		b->end = p->seg[0].start;
		b->end_time = Min(at, max_instant);
		b->capture_instance = p->seg[0].instance->name;
	}
	for (int s = 0; s < p->nsegments; s++)
	{
		RangeFacts *f = &w->facts[w->nfacts++];
		const CdcRange *sr = &job->seg[s];
		bool		last = s == p->nsegments - 1;

		f->table_id = t->table_id;
		f->has_start = true;
		f->start = p->seg[s].start;
		f->end = p->seg[s].end;
		f->inserts = sr->inserts;
		f->updates = sr->updates;
		f->deletes = sr->deletes;
		f->has_rows = sr->inserts + sr->updates + sr->deletes > 0;
		f->capture_instance = p->seg[s].instance->name;
		if (f->has_rows)
		{
			if (!sr->has_first || !sr->has_last)
			{
				set_condition(w, "read_failed",
							  psprintf("The commit times of the rows read from capture instance \"%s\" could not "
									   "be mapped (sys.fn_cdc_map_lsn_to_time returned NULL).",
									   f->capture_instance));
				return;
			}
			f->first_time = local_to_instant_earliest(sr->first_local, cfg->tz);
			f->last_time = local_to_instant_earliest(sr->last_local, cfg->tz);
			if (f->first_time > f->last_time)
				f->first_time = f->last_time;
		}
		/*
		 * The last segment ends at max LSN. One that ends at an instance
		 * switch does not end on a mapped commit: its last row's commit time
		 * (or the offset's) is the latest it is known to cover.
		 */
		if (last)
			f->end_time = max_instant;
		else
			f->end_time = f->has_rows ? f->last_time : (t->offset_time != 0 ? t->offset_time : max_instant);

		if (p->switch_in_seg[s])
		{
			StringInfoData json;

			f->event = "instance_switch";
			initStringInfo(&json);
			appendStringInfoChar(&json, '{');
			json_kv(&json, "from", p->previous ? p->previous->name : (t->capture_instance ? t->capture_instance : ""), false);
			json_kv(&json, "to", p->seg[s].instance->name, false);
			json_kv(&json, "at_lsn", lsn_text(&p->seg[s].instance->start_lsn), false);
			if (seen.count > 0)
			{
				json_kv(&json, "summary", ddl_summary(seen.instance, seen.first, seen.count), false);
				json_kv(&json, "ddl", seen.list.data, true);
			}
			appendStringInfoChar(&json, '}');
			f->detail_json = json.data;
		}
		else if (seen.count > 0 && (last || p->nsegments == 1))
		{
			StringInfoData json;

			f->event = "schema_change";
			initStringInfo(&json);
			appendStringInfoChar(&json, '{');
			json_kv(&json, "summary", ddl_summary(seen.instance, seen.first, seen.count), false);
			json_kv(&json, "ddl", seen.list.data, true);
			appendStringInfoChar(&json, '}');
			f->detail_json = json.data;
		}
	}
}

/* The write for a table asked to resume after a loss. */
void
judge_resume(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w)
{
	const TrackedSource *t = job->table;
	const CdcInstance *ir = job->inst[0];
	const char *ci = job->plan->instance->name;
	StringInfoData json;

	w->table = t;
	w->capture_instance = ci;
	if (job->error != NULL || !ir->outcome.ok || !ir->has_min)
	{
		set_condition(w, "read_failed", psprintf("Reading the min LSN of capture instance \"%s\" failed: %s",
												  ci, job->error ? job->error : "no result"));
		return;
	}
	if (lsn_is_zero(&ir->min_lsn))
	{
		set_condition(w, "no_access",
					  psprintf("sys.fn_cdc_get_min_lsn(N'%s') returned 0x00000000000000000000: the table cannot "
							   "resume until the login \"%s\" may read the instance.", ci, cfg->conn.username));
		return;
	}
	w->kind = WRITE_RESUME;
	if (!lsn_decrement(&ir->min_lsn, &w->resume_at))
		w->resume_at = ir->min_lsn;
	w->resume_time = instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant);
	initStringInfo(&json);
	appendStringInfoChar(&json, '{');
	json_kv(&json, "capture_instance", ci, false);
	json_kv(&json, "min_lsn", lsn_text(&ir->min_lsn), false);
	appendStringInfoChar(&json, '}');
	w->resume_json = json.data;
}

/* The write for a table whose followed instance vanished before the switch. */
void
judge_gap(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w)
{
	const TrackedSource *t = job->table;
	const CdcInstance *ir = job->inst[0];
	const TablePlan *p = job->plan;
	Lsn			lost_to = p->gap_end;

	w->table = t;
	if (job->error != NULL || !ir->outcome.ok || !ir->has_min || lsn_is_zero(&ir->min_lsn))
	{
		set_condition(w, "read_failed",
					  psprintf("Capture instance \"%s\" is gone and the min LSN of \"%s\" could not be read: %s",
							   t->capture_instance ? t->capture_instance : "?", p->instance->name,
							   job->error ? job->error : "no result"));
		return;
	}
	/* Cleanup may have moved the new instance's start on as well. */
	{
		Lsn			below_min;

		if (lsn_decrement(&ir->min_lsn, &below_min) && lsn_cmp(&below_min, &lost_to) > 0)
			lost_to = below_min;
	}
	data_loss(w, t, p->instance->name, &t->offset, &lost_to, "capture instance dropped",
			  psprintf("Capture instance \"%s\" was dropped before finalize read up to the start of the newer "
					   "instance \"%s\" (LSN %s).", t->capture_instance ? t->capture_instance : "?",
					   p->instance->name, lsn_text(&p->instance->start_lsn)),
			  instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant));
}
