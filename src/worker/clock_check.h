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
 * How far a commit time may lie after SQL Server's clock reading (taken
 * after max LSN) before it is called impossible: both are datetime values
 * (1/300 s, rounded), and a clock may be stepped back by NTP or a resumed
 * VM. Stamps in another zone are off by at least 15 minutes.
 */
#define COMMIT_AHEAD_TOLERANCE_S 60

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
} SourceTimes;

/* The first check that fails, in the order they are made. */
typedef enum TimeProblem
{
	TIMES_OK,
	TIMES_ZONE_MISMATCH,		/* the timezone option is not SQL Server's zone */
	TIMES_COMMIT_AHEAD,			/* a commit later than the clock that made it */
	TIMES_CLOCK_SKEW			/* SQL Server's clock ahead of PostgreSQL's */
} TimeProblem;

extern TimeProblem check_source_times(const SourceTimes *t);
extern bool capture_stalled(const SourceTimes *t);

#endif							/* FINALIZE_CLOCK_CHECK_H */
