/*
 * judge.h
 *     Turning what was read about a table into its write: facts, a data
 *     loss, a blocked schema change, a resume, or a condition. No I/O.
 */
#ifndef FINALIZE_JUDGE_H
#define FINALIZE_JUDGE_H

#include "utils/jsonb.h"

#include "core/condition.h"
#include "mssql/cdc_reader.h"
#include "worker/clock_check.h"
#include "worker/plan.h"
#include "worker/source_config.h"
#include "worker/worker_state.h"

/* One table's reads in batch 2. */
typedef struct TableJob
{
	const TrackedSource *table;
	TablePlan  *plan;
	CdcRange	seg[2];			/* per segment of the plan */
	CdcInstance *inst[2];		/* per segment, or [0] for RESUME and GAP */
	char	   *error;			/* set when its reads failed */
	bool		event_utc[2];	/* per segment: the event column is a datetimeoffset */
	const char *event_name[2];	/* per segment: the column as the instance spells it */
	Condition	event_condition;	/* why the event column cannot be read (or COND_NONE) */
	char	   *event_problem;
	Timestamp  *splits;			/* a commit-time table's period boundaries in
								 * the server's wall time, its segments split at */
	int			nsplits;
	char	   *unlisted_detail;	/* PLAN_NO_INSTANCE: why (unlisted.c) */
} TableJob;

/* What the cycle does for one table in the write transaction. */
typedef enum WriteKind
{
	WRITE_NONE,
	WRITE_RANGES,
	WRITE_DATA_LOSS,
	WRITE_SCHEMA_BLOCKED,
	WRITE_RESUME,
	WRITE_CONDITION
} WriteKind;

typedef struct TableWrite
{
	WriteKind	kind;
	const TrackedSource *table;
	const char *capture_instance;	/* followed after the write */
	int			nfacts;
	RangeFacts *facts;			/* WRITE_RANGES: a baseline, then each segment's
								 * (one per piece of a split segment) */
	Lsn			event_start;	/* DATA_LOSS, SCHEMA_BLOCKED: the range */
	Lsn			event_end;
	Jsonb	   *detail;
	char	   *state_detail;	/* NULL: the table stays active */
	bool		resume;			/* DATA_LOSS or RESUME: restart at resume_at */
	bool		automatic;
	Lsn			resume_at;
	TimestampTz resume_time;	/* the new offset's commit time (earliest) */
	TimestampTz lost_until;		/* the lost range's end (latest reading) */
	Jsonb	   *resume_detail;
	Condition	condition;		/* WRITE_CONDITION (COND_NONE clears) */
	char	   *condition_detail;
	int64		clock_tolerance;	/* the source's: verdicts and losses hold back by it */
	ClockStep	clock_step;		/* WRITE_RANGES: what the read says of the clock */
	TimestampTz step_first;		/* its earliest commit time (earliest reading) */
	TimestampTz step_until;		/* the latest commit time before or in it */
} TableWrite;

extern void judge_read(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w);
extern void judge_resume(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w);
extern void judge_gap(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w);
extern void write_condition(TableWrite *w, Condition condition, char *detail);

#endif							/* FINALIZE_JUDGE_H */
