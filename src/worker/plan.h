/*
 * plan.h
 *     Range planning and judging for one cycle: pure decisions, no I/O.
 */
#ifndef FINALIZE_PLAN_H
#define FINALIZE_PLAN_H

#include "datatype/timestamp.h"

#include "core/lsn.h"
#include "core/period.h"
#include "mssql/cdc_reader.h"

/* A tracked table as the worker sees it at the start of a cycle. */
typedef struct TrackedSource
{
	int64		table_id;
	char	   *table_name;
	char	   *source_schema;
	char	   *source_name;
	int64		object_id;		/* OBJECT_ID SQL Server resolved for source_schema.source_name
								 * this cycle, with the database's collation (0: not visible) */
	char	   *capture_instance;	/* the one followed so far, or NULL */
	bool		start_at_capture;	/* start_from = 'capture_start' */
	bool		has_start_lsn;	/* start_from is an LSN: facts begin right after it */
	Lsn			start_lsn;
	bool		resuming;		/* resume_table() asked to restart after a loss */
	bool		ddl_block;		/* ddl_policy = 'block' */
	bool		auto_resume;	/* on_data_loss = 'resume' */
	bool		has_offset;
	Lsn			offset;			/* end of the last recorded range */
	TimestampTz offset_time;	/* its commit time */
	bool		has_schema_ack;
	Lsn			schema_ack;		/* DDL up to here was reviewed */
	bool		has_last_loss;
	TimestampTz last_loss;		/* when the previous data loss was recorded */
	char	   *event_column;	/* event_time_column, or NULL: partitioned by commit time */
	char	   *event_zone;		/* event_time_zone, or NULL: the server's timezone option */
	Interval	granularity;	/* its periods: granularity in period_zone */
	char	   *period_zone;
	bool		has_source_until;
	TimestampTz source_until;	/* its source verdict when the cycle began */
} TrackedSource;

typedef enum PlanAction
{
	PLAN_NOTHING,				/* no commit after the offset */
	PLAN_BASELINE,				/* first cycle: tracking starts at max_lsn */
	PLAN_READ,					/* read the segments */
	PLAN_NO_INSTANCE,			/* no readable capture instance */
	PLAN_LSN_REGRESSED,			/* the offset is beyond max_lsn */
	PLAN_INSTANCE_GAP,			/* the followed instance was dropped before the
								 * newer one's start was reached: data loss */
	PLAN_RESUME,				/* restart after a loss at the instance's min LSN */
	PLAN_START_UNREADABLE,		/* start_from's LSN starts below the newest
								 * instance's start LSN, or is beyond max_lsn:
								 * nothing is read from it */
	PLAN_SOURCE_REPLACED		/* the followed instance captures another object
								 * than the table's name now resolves to */
} PlanAction;

/* A range (start, end] of one capture instance. */
typedef struct RangeSegment
{
	const CaptureInstance *instance;
	Lsn			start;
	Lsn			end;
} RangeSegment;

typedef struct TablePlan
{
	PlanAction	action;
	const CaptureInstance *instance;	/* followed after this cycle */
	const CaptureInstance *previous;	/* followed before, if it switches */
	int			nsegments;		/* PLAN_READ: 1, or 2 across a switch */
	RangeSegment seg[2];
	bool		switch_in_seg[2];	/* this segment starts the newer instance */
	Lsn			gap_end;		/* PLAN_INSTANCE_GAP: end of the unreadable range */
} TablePlan;

typedef enum RangeVerdict
{
	RANGE_COMPLETE,				/* record it */
	RANGE_MAY_HAVE_LOST_ROWS,	/* cleanup passed its start: data loss */
	RANGE_UNREADABLE			/* min LSN 0: instance gone or no permission */
} RangeVerdict;

/* What a segment's fact carries besides its counts. */
typedef enum SegmentEvent
{
	SEGMENT_NO_EVENT,
	SEGMENT_INSTANCE_SWITCH,	/* it starts the newer instance (with any DDL seen) */
	SEGMENT_SCHEMA_CHANGE		/* DDL seen in the table's range */
} SegmentEvent;

/* What a consumer's reported LSN needs this cycle. */
typedef enum ConsumerAction
{
	CONSUMER_NOTHING,			/* already resolved for the reported LSN */
	CONSUMER_AT_MAX,			/* reported max_lsn itself: max_lsn's commit time */
	CONSUMER_LOOKUP,			/* the mapping row at or below the reported LSN */
	CONSUMER_AHEAD				/* reported beyond max_lsn: pending, not resolved */
} ConsumerAction;

extern void plan_table(const TrackedSource *table, const CaptureInstance *instances,
					   int ninstances, const Lsn *max_lsn, TablePlan *out);
extern RangeVerdict judge_range(const Lsn *start_exclusive, const Lsn *min_lsn_after_read);
extern bool plan_ddl_in_range(const TrackedSource *table, const RangeSegment *seg, const Lsn *ddl_lsn);
extern bool plan_ddl_blocks(const TrackedSource *table, int nddl);
extern bool plan_ddl_mentions(const char *command, const char *column);
extern SegmentEvent plan_segment_event(const TablePlan *plan, int s, bool ddl_seen);
extern TimestampTz plan_segment_end_time(const TablePlan *plan, int s, const TrackedSource *table,
										 bool has_rows, TimestampTz last_row_time, TimestampTz max_instant);
extern bool plan_loss_resumes(const TrackedSource *table, TimestampTz now, int64 window_usecs);
extern int	plan_period_splits(const PeriodSpec *spec, TimestampTz after, TimestampTz until, int32 offset_seconds,
							   Timestamp *out, int max);
extern ConsumerAction plan_consumer(const Lsn *reported, const Lsn *resolved_for, const Lsn *max_lsn,
									Lsn *target);

#endif							/* FINALIZE_PLAN_H */
