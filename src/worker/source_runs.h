/*
 * source_runs.h
 *     What a source worker keeps of the sources it served: their SourceRun
 *     (the connection kept open, what the last cycle settled), within the
 *     connection budget (finalize.worker_connections).
 */
#ifndef FINALIZE_SOURCE_RUNS_H
#define FINALIZE_SOURCE_RUNS_H

#include "core/source_table.h"
#include "worker/cycle.h"

/* A source this worker served, kept between its cycles. */
typedef struct KeptRun
{
	Oid			serverid;		/* hash key */
	int			entry;			/* its entry in the source table */
	TimestampTz last_used;		/* end of its last cycle here: the least recent is closed first */
	bool		fd_held;		/* its connection counts as an external file descriptor */
	SourceRun	run;
} KeptRun;

extern void runs_init(void);
extern KeptRun *runs_take(const SourceClaim *claim);
extern void runs_after_cycle(KeptRun *kept);
extern void runs_forget(KeptRun *kept);
extern void runs_sweep(void);
extern int	runs_connections(void);

#endif							/* FINALIZE_SOURCE_RUNS_H */
