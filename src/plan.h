/*
 * plan.h
 *     Range planning and judging for one cycle: pure decisions, no I/O.
 */
#ifndef FINALIZE_PLAN_H
#define FINALIZE_PLAN_H

#include "postgres.h"

#include "lsn.h"

/* A capture instance the login may read (sp_cdc_help_change_data_capture). */
typedef struct CaptureInstance
{
	char	   *name;
	char	   *source_schema;
	char	   *source_table;
	bool		has_start;		/* start_lsn is NULL until capture first sees it */
	Lsn			start_lsn;
} CaptureInstance;

/* A tracked table as the worker sees it at the start of a cycle. */
typedef struct TrackedSource
{
	int64		table_id;
	char	   *table_name;
	char	   *source_schema;
	char	   *source_name;
	char	   *capture_instance;	/* the one followed so far, or NULL */
	bool		start_at_capture;	/* start_from = 'capture_start' */
	bool		has_offset;
	Lsn			offset;			/* end of the last recorded range */
} TrackedSource;

typedef enum PlanAction
{
	PLAN_NOTHING,				/* no commit after the offset */
	PLAN_BASELINE,				/* first cycle: tracking starts at max_lsn */
	PLAN_READ,					/* read (start, max_lsn] */
	PLAN_NO_INSTANCE,			/* no readable capture instance */
	PLAN_LSN_REGRESSED			/* the offset is beyond max_lsn */
} PlanAction;

typedef struct TablePlan
{
	PlanAction	action;
	const CaptureInstance *instance;
	Lsn			start;			/* exclusive start of the range to read */
} TablePlan;

typedef enum RangeVerdict
{
	RANGE_COMPLETE,				/* record it */
	RANGE_MAY_HAVE_LOST_ROWS,	/* cleanup passed its start: data loss */
	RANGE_UNREADABLE			/* min LSN 0: instance gone or no permission */
} RangeVerdict;

extern const CaptureInstance *plan_find_instance(const TrackedSource *table,
												 const CaptureInstance *instances,
												 int ninstances);
extern void plan_table(const TrackedSource *table, const CaptureInstance *instances,
					   int ninstances, const Lsn *max_lsn, TablePlan *out);
extern RangeVerdict judge_range(const Lsn *start_exclusive, const Lsn *min_lsn_after_read);

#endif							/* FINALIZE_PLAN_H */
