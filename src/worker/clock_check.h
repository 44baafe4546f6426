/*
 * clock_check.h
 *     The checks of SQL Server's times before any of them is used: its zone
 *     against the timezone option, its commits against its clock, its clock
 *     against PostgreSQL's, and a stalled capture. Pure: no I/O.
 */
#ifndef FINALIZE_CLOCK_CHECK_H
#define FINALIZE_CLOCK_CHECK_H

#include "datatype/timestamp.h"

/*
 * A commit time is a datetime, rounded to 1/300 s (half up): it may lie up
 * to half a tick after the instant it was taken, so a commit time may lead
 * the clock read after it by that much without any step of the clock.
 */
#define DATETIME_ROUNDING_USECS 1667

/* What one cycle read about time, and the limits it is checked against. */
typedef struct SourceTimes
{
	TimestampTz server_now;		/* SQL Server's clock, read after max LSN */
	int64		reported_offset_s;	/* its UTC offset, from DATEPART(TZOFFSET) */
	int64		expected_offset_s;	/* the timezone option's offset at server_now */
	TimestampTz max_instant;	/* commit time of max LSN, as an instant */
	TimestampTz pg_now;			/* PostgreSQL's clock */
	int64		max_skew_usecs; /* finalize.max_clock_skew */
	int64		stall_usecs;	/* the server's capture_stall_threshold */
	int64		tolerance_usecs;	/* the server's clock_tolerance */
	bool		has_previous;	/* an earlier cycle read previous_max */
	TimestampTz previous_max;	/* the greatest max LSN commit time read before */
} SourceTimes;

/* The first check that fails, in the order they are made. */
typedef enum TimeProblem
{
	TIMES_OK,
	TIMES_ZONE_MISMATCH,		/* the timezone option is not SQL Server's zone */
	TIMES_COMMIT_AHEAD,			/* a commit later than the clock that made it */
	TIMES_CLOCK_BACK,			/* the clock behind a commit time read before */
	TIMES_CLOCK_SKEW			/* SQL Server's clock ahead of PostgreSQL's */
} TimeProblem;

/* What the commit times of one table's read say of SQL Server's clock. */
typedef enum ClockStep
{
	CLOCK_STEADY,				/* nothing went back across a period boundary */
	CLOCK_WENT_BACK,			/* commits stamped in an earlier period than
								 * commits read before them: those periods'
								 * counts are not exact */
	CLOCK_RAN_AHEAD,			/* commits stamped in a period already final */
	CLOCK_OUT_OF_ORDER			/* a commit in a later period than the read's
								 * max LSN, maybe only as a DST fall-back
								 * repeats local times, or local times a
								 * fall-back may have repeated: periods
								 * inexact, no incident */
} ClockStep;

extern TimeProblem check_source_times(const SourceTimes *t);
extern bool capture_stalled(const SourceTimes *t);
extern ClockStep clock_step_of(TimestampTz first_latest, bool has_previous, TimestampTz previous_period,
							   bool has_verdict, TimestampTz verdict, bool back_within);

#endif							/* FINALIZE_CLOCK_CHECK_H */
