/*
 * clock_steps.c
 *     SQL Server's clock: what to tell a person when a cycle's times fail
 *     their checks (clock_check.c's rules), the hold that stops a source's
 *     reads from then until release_source, what a table's read says of the
 *     clock stepped back (clock_step_of, pure), and its record. A step back
 *     up to the source's clock_tolerance costs no verdict (every verdict
 *     holds back by it), but commits stamped in an earlier period than
 *     commits read before them leave those periods' counts open to doubt;
 *     one stamped in a period already final means a verdict ran ahead.
 *     Either way finalize_internal.record_clock_step makes the periods involved
 *     inexact (changes_by_period) and opens an incident.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/fmt.h"
#include "core/period_zone.h"
#include "core/settings.h"
#include "core/timeconv.h"
#include "worker/clock_steps.h"

/*
 * Whether a split segment's pieces, in the order of their periods (judge.c
 * sorted them), went back in LSN order: a commit of an earlier period came
 * after one of a later period within the read.
 */
static bool
pieces_went_back(const CdcRange *sr)
{
	for (int k = 1; k < sr->npieces; k++)
		if (sr->pieces[k].has_first && sr->pieces[k - 1].has_last &&
			lsn_cmp(&sr->pieces[k].first_lsn, &sr->pieces[k - 1].last_lsn) <= 0)
			return true;
	return false;
}

/* The table's periods, false when they cannot be cut. */
static bool
table_spec(const TrackedSource *t, PeriodSpec *spec)
{
	const PeriodZone *zone;
	const char *name = t->period_zone != NULL && strcmp(t->period_zone, "UTC") != 0 ? t->period_zone : NULL;

	return period_zone_lookup(name, &zone) && period_spec_make(&t->granularity, zone, true, spec) == GRANULARITY_OK;
}

/*
 * Whether a read's latest commit time lies in a later period than its max
 * LSN's commit time (end), which a commit with a lower LSN can only have
 * when the clock went back within the read, or a DST fall-back repeated
 * its local times (*sure is false when the server's UTC offset changes
 * within SPLIT_DST_MARGIN of the read's times). changes_by_period finds a
 * range's rows by its end time, so those periods must be marked.
 */
static bool
beyond_end(const SourceConfig *cfg, const PeriodSpec *spec, Timestamp first, Timestamp last, TimestampTz end,
		   bool *sure)
{
	TimestampTz last_start;
	long		min_s;
	long		max_s;

	if (period_floor(spec, local_to_instant_earliest(last, cfg->tz), &last_start) != PERIOD_OK || last_start <= end)
		return false;
	local_offset_range(cfg->tz, local_to_instant_earliest(first, cfg->tz) - 3 * USECS_PER_HOUR,
					   local_to_instant_latest(last, cfg->tz) + 3 * USECS_PER_HOUR, &min_s, &max_s);
	*sure = min_s == max_s;
	return true;
}

/*
 * Whether the local times of a read's rows, first to last, may name two
 * instants: a DST fall-back lies between them (or they are in its repeated
 * hour). An instant is its local time less the UTC offset, so the span
 * from the earliest reading of the first to the latest of the last exceeds
 * their local span just when the offset fell in between (a spring-forward
 * shortens it). In the repeated hour a commit is read as its earliest
 * instant (so that no verdict leads), up to an hour before it happened:
 * its rows may be counted in the period before their own, so no period
 * they may lie in is exact.
 */
static bool
may_repeat(const SourceConfig *cfg, Timestamp first, Timestamp last)
{
	return local_to_instant_latest(last, cfg->tz) - local_to_instant_earliest(first, cfg->tz) > last - first;
}

/*
 * Sets w->clock_step (and the span it concerns) for a table's read that
 * became ranges: from the least and greatest commit time of its rows, the
 * commit time of its max LSN (its last fact's end), that of the previous
 * read's (the table's offset) and its source verdict when the cycle began.
 * A local time is read the late way where the rule asks for a commit that
 * surely lies before an instant, so that a DST fall-back hour never looks
 * like a step back; where it may be one, or where a fall-back may have
 * repeated the local times of the read's rows, the periods are still marked.
 */
void
judge_clock_step(const SourceConfig *cfg, const TableJob *job, TableWrite *w)
{
	const TrackedSource *t = job->table;
	bool		any = false;
	bool		back_within = false;
	Timestamp	first = 0;
	Timestamp	last = 0;
	TimestampTz prev_start = 0;
	bool		has_prev;
	bool		has_spec;
	bool		sure = false;
	bool		beyond;
	PeriodSpec	spec;

	w->clock_step = CLOCK_STEADY;
	if (w->kind != WRITE_RANGES || w->nfacts == 0)
		return;
	for (int s = 0; s < job->plan->nsegments; s++)
	{
		const CdcRange *sr = &job->seg[s];

		if (sr->inserts + sr->updates + sr->deletes == 0 || !sr->has_first || !sr->has_last)
			continue;
		first = any ? Min(first, sr->first_local) : sr->first_local;
		last = any ? Max(last, sr->last_local) : sr->last_local;
		any = true;
		back_within = back_within || pieces_went_back(sr);
	}
	if (!any)
		return;
	has_spec = table_spec(t, &spec);
	has_prev = has_spec && t->has_offset && t->offset_time != 0 &&
		period_floor(&spec, t->offset_time, &prev_start) == PERIOD_OK;
	beyond = has_spec && beyond_end(cfg, &spec, first, last, w->facts[w->nfacts - 1].end_time, &sure);
	w->clock_step = clock_step_of(local_to_instant_latest(first, cfg->tz), has_prev, prev_start,
								  t->has_source_until, t->source_until, back_within || (beyond && sure));
	/* Maybe only a fall-back hour: the periods are marked, no incident is opened. */
	if (w->clock_step == CLOCK_STEADY && (beyond || may_repeat(cfg, first, last)))
		w->clock_step = CLOCK_OUT_OF_ORDER;
	if (w->clock_step == CLOCK_STEADY)
		return;
	w->step_first = local_to_instant_earliest(first, cfg->tz);
	w->step_until = local_to_instant_latest(last, cfg->tz);
	if (t->has_offset && t->offset_time != 0)
		w->step_until = Max(w->step_until, t->offset_time);
	/* the last period the verdict had called final is one of them */
	if (w->clock_step == CLOCK_RAN_AHEAD)
		w->step_until = Max(w->step_until, t->source_until - 1);
}

/*
 * Records a clock that went back for the table of a write whose ranges were
 * just recorded (finalize_internal.record_clock_step), in the write's
 * subtransaction: with the write's first range start and the table's
 * source verdict before it, so that a commit-time table's changes stamped
 * in periods already final are kept as late data.
 */
void
record_clock_step(const TableWrite *w)
{
	Oid			types[8] = {INT8OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, BOOLOID, TEXTOID,
	TIMESTAMPTZOID};
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = Int64GetDatum(w->table->table_id);
	values[1] = db_lsn_datum(&w->facts[w->nfacts - 1].end);
	values[2] = TimestampTzGetDatum(w->step_first);
	values[3] = TimestampTzGetDatum(w->step_until);
	values[4] = BoolGetDatum(w->clock_step == CLOCK_RAN_AHEAD);
	values[5] = BoolGetDatum(w->clock_step != CLOCK_OUT_OF_ORDER);
	values[6] = w->facts[0].has_start ? db_lsn_datum(&w->facts[0].start) : (Datum) 0;
	nulls[6] = w->facts[0].has_start ? ' ' : 'n';
	values[7] = TimestampTzGetDatum(w->table->source_until);
	nulls[7] = w->table->has_source_until ? ' ' : 'n';
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".record_clock_step($1, $2, $3, $4, $5, $6, $7, $8)", 8, types,
					 values, nulls);
}

/*
 * Marks the periods of a source's tables that commits may now be stamped
 * in, SQL Server's clock having been found at clock_at, behind commit
 * times read before by more than the clock_tolerance, in the transaction
 * that records the failed cycle (the source is held: nothing is read until
 * release_source; see finalize_internal.clock_went_back).
 */
void
record_clock_went_back(const char *server_name, TimestampTz clock_at)
{
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2];

	values[0] = CStringGetTextDatum(server_name);
	values[1] = TimestampTzGetDatum(clock_at);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".clock_went_back($1, $2)", 2, types, values, NULL);
}

/* Sets *message, returns condition: the two results of time_problem. */
static Condition
time_failure(char **message, Condition condition, char *text)
{
	*message = text;
	return condition;
}

/*
 * The condition and message of a cycle whose times failed their checks
 * (clock_check.c), saying what to do; COND_NONE when they passed.
 */
Condition
time_problem(TimeProblem problem, const SourceTimes *t, const SourceConfig *cfg, const CdcState *snap,
			 char **message)
{
	*message = NULL;
	switch (problem)
	{
		case TIMES_OK:
			break;
		case TIMES_ZONE_MISMATCH:
			return time_failure(message, COND_TIMEZONE_MISMATCH,
						psprintf("SQL Server's clock is at UTC%+03lld:%02lld, but the timezone option \"%s\" of server "
								 "\"%s\" gives UTC%+03lld:%02lld at that instant. Commit times cannot be converted "
								 "safely; set the option to the zone of the SQL Server machine "
								 "(ALTER SERVER \"%s\" OPTIONS (SET timezone '...')).",
								 (long long) (t->reported_offset_s / 3600),
								 (llabs((long long) (t->reported_offset_s % 3600)) / 60),
								 cfg->timezone, cfg->server_name, (long long) (t->expected_offset_s / 3600),
								 (llabs((long long) (t->expected_offset_s % 3600)) / 60), cfg->server_name));
		case TIMES_COMMIT_AHEAD:
			return time_failure(message, COND_COMMIT_TIME_AHEAD,
						psprintf("The commit time of SQL Server's max LSN %s (%s local, %s with the timezone option "
								 "\"%s\") is later than SQL Server's own clock (%s) by more than the clock_tolerance "
								 "of server \"%s\" (%s): commit times are not stamped in the zone the server's clock "
								 "reports, or the clock was stepped back by more than the tolerance, so none of them "
								 "can be trusted and nothing is recorded. Check the time zone SQL Server's machine "
								 "and instance use for commits (cdc.lsn_time_mapping.tran_end_time) against "
								 "SYSDATETIMEOFFSET(), and the machine's clock, then run SELECT "
								 "finalize.release_source(%s).",
								 fmt_lsn(&snap->max_lsn), fmt_local(snap->max_time_local),
								 fmt_instant(t->max_instant), cfg->timezone, fmt_instant(t->server_now),
								 cfg->server_name, fmt_usecs(t->tolerance_usecs),
								 quote_literal_cstr(cfg->server_name)));
		case TIMES_CLOCK_BACK:
			return time_failure(message, COND_COMMIT_TIME_AHEAD,
						psprintf("SQL Server's clock (%s) is behind the commit time %s of its max LSN read before by "
								 "more than the clock_tolerance of server \"%s\" (%s): the clock was stepped back "
								 "(NTP, a virtual machine resumed or moved), so new commits may be stamped in periods "
								 "already final, and nothing is recorded. Once the clock is right, check the "
								 "periods between the two times (a commit stamped in a final period opens a "
								 "clock_stepped_back incident and makes them inexact), then run SELECT "
								 "finalize.release_source(%s).",
								 fmt_instant(t->server_now), fmt_instant(t->previous_max),
								 cfg->server_name, fmt_usecs(t->tolerance_usecs),
								 quote_literal_cstr(cfg->server_name)));
		case TIMES_CLOCK_SKEW:
			return time_failure(message, COND_CLOCK_SKEW,
						psprintf("SQL Server's clock (%s) is ahead of PostgreSQL's (%s) by more than "
								 "finalize.max_clock_skew (%d s): its commit times cannot be trusted not to lie in "
								 "the future, so nothing is recorded. Synchronize the clocks (NTP) of both machines.",
								 fmt_instant(t->server_now), fmt_instant(t->pg_now), finalize_max_clock_skew_s));
	}
	return COND_NONE;
}

/*
 * Whether a hold keeps the source's cycle from reading (*out says why): one
 * in the catalog, which release_source ends; or one this worker found but
 * could not record yet (its failed cycle's write failed: a lock timeout, an
 * error). The reading that showed the step is gone then (a hold starts
 * afresh), so no later cycle could find it again: nothing is read until
 * the hold is recorded, and each failure tries again (worker.c).
 */
bool
hold_refuses(SourceRun *run, const SourceConfig *cfg, CycleOutcome *out)
{
	if (cfg->held_by != COND_NONE)
	{
		/* What was read before the hold is not compared with SQL Server's clock after it. */
		run->has_previous_max = false;
		run->hold_pending = false;
		out->condition = cfg->held_by;
		out->message = psprintf("Server \"%s\" is held by %s since %s: commit times of SQL Server's max LSN were "
								"seen later than SQL Server's own clock by more than its clock_tolerance, so commit "
								"times are stamped in another zone than its clock reports, or the clock was stepped "
								"back by more than the tolerance, and none of them can be trusted; nothing is "
								"recorded. Once SQL Server stamps commits in its clock's zone (and the periods a "
								"step back reopened are checked), run SELECT finalize.release_source(%s).",
								cfg->server_name, condition_name(cfg->held_by), fmt_instant(cfg->held_since),
								quote_literal_cstr(cfg->server_name));
		return true;
	}
	if (run->hold_pending)
	{
		out->clock_went_back = true;
		out->clock_at = run->hold_clock_at;
		out->condition = COND_COMMIT_TIME_AHEAD;
		out->message = psprintf("Server \"%s\" is to be held by commit_time_ahead (SQL Server's clock was found at "
								"%s, behind commit times read before or later than them by more than its "
								"clock_tolerance), but the hold could not be recorded yet; nothing is read until "
								"it is.", cfg->server_name, fmt_instant(run->hold_clock_at));
		return true;
	}
	return false;
}
