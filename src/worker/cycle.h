/*
 * cycle.h
 *     One cycle of a source worker.
 */
#ifndef FINALIZE_CYCLE_H
#define FINALIZE_CYCLE_H

#include "datatype/timestamp.h"

#include "core/condition.h"
#include "core/lsn.h"
#include "mssql/mssql.h"

/* What a source worker keeps between cycles. */
typedef struct SourceRun
{
	Oid			serverid;
	char	   *server_name;	/* in TopMemoryContext, for messages */
	MssqlConn  *conn;			/* kept open across cycles */
	int			failures;		/* consecutive failed cycles */
	bool		server_gone;	/* the foreign server was dropped: exit */
	char	   *consumer_log;	/* unresolved consumers logged last cycle (TopMemoryContext) */
	bool		settled;		/* the last full check found every table at settled_lsn */
	Lsn			settled_lsn;	/* SQL Server's max LSN then */
	TimestampTz settled_at;		/* when that full check started */
	bool		has_previous_max;	/* previous_max was read in the zone previous_tz */
	TimestampTz previous_max;	/* the greatest max LSN commit time read so far */
	const void *previous_tz;	/* the timezone option it was converted with */
	TimestampTz ticket_expires; /* Kerberos: when the source's service ticket ends (else 0) */
	bool		hold_pending;	/* a hold found here, not yet committed: nothing is read */
	TimestampTz hold_clock_at;	/* SQL Server's clock when it was found */
} SourceRun;

/*
 * Why a cycle failed: the source's condition and a message for people; and,
 * when SQL Server's clock was found behind commit times read before by more
 * than the clock_tolerance, where it stood (the periods from there on may
 * receive commits while the source is held).
 */
typedef struct CycleOutcome
{
	Condition	condition;
	char	   *message;
	bool		clock_went_back;
	TimestampTz clock_at;		/* SQL Server's clock then */
} CycleOutcome;

extern bool run_cycle(SourceRun *run, MemoryContext cxt, CycleOutcome *out);

#endif							/* FINALIZE_CYCLE_H */
