/*
 * judge.c
 *     Turns the reads of one table into its write: the facts of its ranges
 *     (with instance switches and DDL as events), a data loss, a blocked
 *     schema change, a resume after a loss, or a condition saying why nothing
 *     was recorded. The rules of what a read proves are in plan.c; this file
 *     applies them to results. The DDL seen, and whether it blocks, is
 *     ddl_seen.c's.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/fmt.h"
#include "core/json_build.h"
#include "core/settings.h"
#include "core/timeconv.h"
#include "worker/ddl_seen.h"
#include "worker/event_facts.h"
#include "worker/judge.h"

/* Fills a condition write (COND_NONE clears the table's condition). */
void
write_condition(TableWrite *w, Condition condition, char *detail)
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
 * Where a table restarts after a loss at the instance's min LSN: the new
 * offset's commit time (the earliest reading, as every commit time: the
 * verdict builds on it) and the end of the lost range (the latest reading:
 * in a fall-back hour the lost commits may lie up to an hour after the
 * earliest one, and a period they touch must not be called final). When
 * SQL Server has no time for the min LSN the loss has no known end.
 */
static void
resume_times(TableWrite *w, const CdcInstance *ir, const SourceConfig *cfg, TimestampTz max_instant)
{
	w->resume_time = instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant);
	if (ir->has_min_time)
		w->lost_until = local_to_instant_latest(ir->min_time_local, cfg->tz);
	else
		TIMESTAMP_NOEND(w->lost_until);
}

/*
 * A data loss on the range (start, lost_to] of an instance: the event, and
 * either an automatic restart at lost_to (on_data_loss = resume, no other
 * loss within finalize.data_loss_window) or a stopped table.
 */
static void
data_loss(TableWrite *w, const TrackedSource *t, const char *ci, const Lsn *start, const Lsn *lost_to,
		  const char *cause, const char *explanation)
{
	JsonbParseState *st = NULL;
	Lsn			first;
	/* In 64 bits: the setting allows windows of centuries. */
	int64		window = (int64) finalize_data_loss_window_min * USECS_PER_MINUTE;

	w->kind = WRITE_DATA_LOSS;
	w->capture_instance = ci;
	w->event_start = *start;
	w->event_end = *lost_to;
	(void) lsn_increment(start, &first);
	jb_begin_object(&st, NULL);
	jb_text(&st, "capture_instance", ci);
	jb_text(&st, "lost_from_lsn", fmt_lsn(&first));
	jb_text(&st, "lost_to_lsn", fmt_lsn(lost_to));
	jb_text(&st, "cause", cause);
	w->detail = jb_finish(jb_end_object(&st));

	if (plan_loss_resumes(t, GetCurrentTimestamp(), window))
	{
		w->resume = true;
		w->automatic = true;
		w->resume_at = *lost_to;
		jb_begin_object(&st, NULL);
		jb_text(&st, "capture_instance", ci);
		jb_text(&st, "cause", cause);
		w->resume_detail = jb_finish(jb_end_object(&st));
		return;
	}
	w->state_detail = psprintf("%s Changes from LSN %s to %s cannot be read any more, so the verdict stays "
							   "where it was.%s Once the loss is accounted for (for example by a re-snapshot), "
							   "run SELECT finalize.resume_table(%s); the table then restarts at the capture "
							   "instance's current min LSN and the lost range is kept as an event.",
							   explanation, fmt_lsn(&first), fmt_lsn(lost_to),
							   t->auto_resume
							   ? psprintf(" It is the second loss within finalize.data_loss_window (the previous one "
										  "was recorded at %s), so it is not resumed automatically.",
										  fmt_instant(t->last_loss)) : "",
							   quote_literal_cstr(t->table_name));
}

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
			write_condition(w, COND_NO_ACCESS,
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
		resume_times(w, ir, cfg, max_instant);
		data_loss(w, t, ci, &p->seg[s].start, &lost_to, "retention cleanup",
				  psprintf("CDC cleanup (retention) removed changes of capture instance \"%s\" before "
						   "finalize read them: the instance's minimum LSN is now %s.",
						   ci, fmt_lsn(&ir->min_lsn)));
		return false;
	}
	if (job->error != NULL)
	{
		write_condition(w, COND_READ_FAILED, psprintf("Reading the changes of %s.%s failed: %s",
												  t->source_schema, t->source_name, job->error));
		return false;
	}
	/* Every segment read, and judged complete with min LSNs read after it. */
	for (int s = 0; s < p->nsegments; s++)
	{
		const CdcInstance *ir = job->inst[s];

		if (!job->seg[s].outcome.ok || !ir->outcome.ok || !ir->has_min)
		{
			write_condition(w, COND_READ_FAILED,
						  psprintf("SQL Server returned no result for capture instance \"%s\".",
								   p->seg[s].instance->name));
			return false;
		}
		Assert(judge_range(&p->seg[s].start, &ir->min_lsn) == RANGE_COMPLETE);
	}

	return true;
}

/*
 * The fact that marks where a table read from its capture instance's start
 * (start_from = 'capture_start') or from an LSN (start_from '0x...')
 * begins: like any table's first fact, it has no start; the range follows
 * in the same transaction, so the verdict the baseline alone would give is
 * never seen. Its commit time is where the facts' coverage of periods
 * starts (changes_by_period): the instance's min time for capture_start;
 * for an LSN, whose own commit time is not read, the cycle's max instant,
 * so that no period before it reads as covered with changes uncounted (the
 * periods between the LSN and that instant read as not covered: lagging).
 */
static void
baseline_fact(const SourceConfig *cfg, const TableJob *job, TimestampTz max_instant, RangeFacts *b)
{
	const CdcInstance *ir = job->inst[0];
	TimestampTz at = instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant);

	b->table_id = job->table->table_id;
	b->has_start = false;
	b->end = job->plan->seg[0].start;
	b->end_time = job->table->has_start_lsn ? max_instant : Min(at, max_instant);
	b->capture_instance = job->plan->seg[0].instance->name;
}

/* The detail of a segment's event (NULL when it carries none). */
static Jsonb *
event_detail(const TableJob *job, int s, SegmentEvent event, const DdlSeen *seen)
{
	const TrackedSource *t = job->table;
	const TablePlan *p = job->plan;
	JsonbParseState *st = NULL;

	if (event == SEGMENT_NO_EVENT)
		return NULL;
	jb_begin_object(&st, NULL);
	if (event == SEGMENT_INSTANCE_SWITCH)
	{
		jb_text(&st, "from", p->previous ? p->previous->name : (t->capture_instance ? t->capture_instance : ""));
		jb_text(&st, "to", p->seg[s].instance->name);
		jb_text(&st, "at_lsn", fmt_lsn(&p->seg[s].instance->start_lsn));
	}
	if (seen->count > 0)
		push_ddl_seen(&st, seen);
	return jb_finish(jb_end_object(&st));
}

/*
 * The fact of segment s; false (w is then the condition) when the commit
 * times of its rows could not be mapped.
 */
static bool
segment_fact(const SourceConfig *cfg, const TableJob *job, int s, const DdlSeen *seen,
			 TimestampTz max_instant, RangeFacts *f, TableWrite *w)
{
	const CdcRange *sr = &job->seg[s];
	const TablePlan *p = job->plan;
	SegmentEvent event = plan_segment_event(p, s, seen->count > 0);

	f->table_id = job->table->table_id;
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
			write_condition(w, COND_READ_FAILED,
							psprintf("The commit times of the rows read from capture instance \"%s\" could not "
									 "be mapped (sys.fn_cdc_map_lsn_to_time returned NULL).",
									 f->capture_instance));
			return false;
		}
		f->first_time = local_to_instant_earliest(sr->first_local, cfg->tz);
		f->last_time = local_to_instant_earliest(sr->last_local, cfg->tz);
		/* Times out of LSN order (a clock that went back): the span is widened, never narrowed. */
		if (f->first_time > f->last_time)
		{
			TimestampTz t = f->first_time;

			f->first_time = f->last_time;
			f->last_time = t;
		}
	}
	f->end_time = plan_segment_end_time(p, s, job->table, f->has_rows, f->last_time, max_instant);
	f->event = event == SEGMENT_INSTANCE_SWITCH ? "instance_switch"
		: event == SEGMENT_SCHEMA_CHANGE ? "schema_change" : NULL;
	f->detail = event_detail(job, s, event, seen);
	if (sr->events != NULL && f->has_rows)
	{
		char	   *problem = event_facts_build(sr->events, job->table, cfg->tz, f);

		if (problem != NULL)
		{
			write_condition(w, COND_READ_FAILED, problem);
			return false;
		}
	}
	return true;
}

/* Orders a split range's pieces by index. */
static int
piece_cmp(const void *a, const void *b)
{
	int64		x = ((const CdcPiece *) a)->index;
	int64		y = ((const CdcPiece *) b)->index;

	return x < y ? -1 : x > y;
}

/*
 * Whether a split range's pieces can be facts of their own: in the order of
 * their periods their LSNs follow each other (piece k's first row after
 * piece k - 1's last), their counts add up to the range's, and their rows'
 * commit times map. SQL Server's commit times follow LSN order, so this
 * holds unless its clock went back: then the range stays one fact
 * (straddling its boundaries: those periods read as inexact, never wrong).
 */
static bool
pieces_chain(const CdcRange *sr)
{
	int64		ins = 0;
	int64		upd = 0;
	int64		del = 0;

	for (int k = 0; k < sr->npieces; k++)
	{
		const CdcPiece *p = &sr->pieces[k];

		if (!p->has_first || !p->has_last || p->first_local > p->last_local ||
			lsn_cmp(&p->first_lsn, &p->last_lsn) > 0 ||
			(k > 0 && (p->index <= sr->pieces[k - 1].index ||
					   lsn_cmp(&p->first_lsn, &sr->pieces[k - 1].last_lsn) <= 0)))
			return false;
		ins += p->inserts;
		upd += p->updates;
		del += p->deletes;
	}
	return ins == sr->inserts && upd == sr->updates && del == sr->deletes &&
		lsn_cmp(&sr->pieces[sr->npieces - 1].last_lsn, &sr->end) <= 0 &&
		lsn_cmp(&sr->pieces[0].first_lsn, &sr->start) > 0;
}

/*
 * Replaces the fact of a segment read split at its periods' boundaries
 * (f[0], made whole by segment_fact) by one fact per piece, in LSN order:
 * piece k covers (the end of piece k - 1, its last row], the last one up
 * to the segment's end with its end time, so the facts still chain and the
 * watermark is the segment's. The first piece keeps the segment's event.
 * Returns how many facts f now holds (1 when the segment stays whole).
 */
static int
split_segment_fact(const SourceConfig *cfg, CdcRange *sr, RangeFacts *f)
{
	RangeFacts	whole = f[0];

	if (sr->npieces < 2 || sr->events != NULL)
		return 1;
	qsort(sr->pieces, sr->npieces, sizeof(CdcPiece), piece_cmp);
	if (!pieces_chain(sr))
		return 1;
	for (int k = 0; k < sr->npieces; k++)
	{
		const CdcPiece *p = &sr->pieces[k];
		RangeFacts *x = &f[k];
		bool		last = k == sr->npieces - 1;

		*x = whole;
		x->start = k == 0 ? whole.start : sr->pieces[k - 1].last_lsn;
		x->end = last ? whole.end : p->last_lsn;
		x->inserts = p->inserts;
		x->updates = p->updates;
		x->deletes = p->deletes;
		x->has_rows = p->inserts + p->updates + p->deletes > 0;
		/* The least and greatest commit time of the piece's rows (split_aggregate). */
		x->first_time = local_to_instant_earliest(p->first_local, cfg->tz);
		x->last_time = local_to_instant_earliest(p->last_local, cfg->tz);
		x->end_time = last ? whole.end_time : x->last_time;
		/*
		 * An instance switch happens at the segment's start; a schema change
		 * goes with the fact that moves the verdict past it (the last).
		 */
		if ((whole.event != NULL && strcmp(whole.event, "instance_switch") == 0) ? k > 0 : !last)
		{
			x->event = NULL;
			x->detail = NULL;
		}
	}
	return sr->npieces;
}

/*
 * Turns the reads of a table's segments into its write: the facts (with the
 * instance switch and DDL as events), a data loss, a blocked schema change,
 * or a condition saying why nothing was recorded.
 */
void
judge_read(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w)
{
	DdlSeen		seen;

	w->table = job->table;
	w->capture_instance = job->plan->instance->name;
	if (!reads_usable(cfg, job, max_instant, w))
		return;
	collect_segments_ddl(job, &seen);
	if (ddl_blocks(job, &seen, w))
		return;

	w->kind = WRITE_RANGES;
	w->nfacts = 0;
	/* A baseline, and one fact per segment, or per piece of a split one. */
	w->facts = palloc0(sizeof(RangeFacts) * (1 + job->seg[0].npieces + job->seg[1].npieces + 2));
	if (!job->table->has_offset)
		baseline_fact(cfg, job, max_instant, &w->facts[w->nfacts++]);
	for (int s = 0; s < job->plan->nsegments; s++)
	{
		if (!segment_fact(cfg, job, s, &seen, max_instant, &w->facts[w->nfacts], w))
			return;
		w->nfacts += split_segment_fact(cfg, &job->seg[s], &w->facts[w->nfacts]);
	}
}

/* The write for a table asked to resume after a loss. */
void
judge_resume(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w)
{
	const TrackedSource *t = job->table;
	const CdcInstance *ir = job->inst[0];
	const char *ci = job->plan->instance->name;
	JsonbParseState *st = NULL;

	w->table = t;
	w->capture_instance = ci;
	if (job->error != NULL || !ir->outcome.ok || !ir->has_min)
	{
		write_condition(w, COND_READ_FAILED, psprintf("Reading the min LSN of capture instance \"%s\" failed: %s",
												  ci, job->error ? job->error : "no result"));
		return;
	}
	if (lsn_is_zero(&ir->min_lsn))
	{
		write_condition(w, COND_NO_ACCESS,
					  psprintf("sys.fn_cdc_get_min_lsn(N'%s') returned 0x00000000000000000000: the table cannot "
							   "resume until the login \"%s\" may read the instance.", ci, cfg->conn.username));
		return;
	}
	w->kind = WRITE_RESUME;
	if (!lsn_decrement(&ir->min_lsn, &w->resume_at))
		w->resume_at = ir->min_lsn;
	resume_times(w, ir, cfg, max_instant);
	jb_begin_object(&st, NULL);
	jb_text(&st, "capture_instance", ci);
	jb_text(&st, "min_lsn", fmt_lsn(&ir->min_lsn));
	w->resume_detail = jb_finish(jb_end_object(&st));
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
		write_condition(w, COND_READ_FAILED,
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
	resume_times(w, ir, cfg, max_instant);
	data_loss(w, t, p->instance->name, &t->offset, &lost_to, "capture instance dropped",
			  psprintf("Capture instance \"%s\" was dropped before finalize read up to the start of the newer "
					   "instance \"%s\" (LSN %s).", t->capture_instance ? t->capture_instance : "?",
					   p->instance->name, fmt_lsn(&p->instance->start_lsn)));
}
