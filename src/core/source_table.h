/*
 * source_table.h
 *     The shared table of finalize's sources and of the source workers that
 *     serve them: when each source's next cycle is due, how often it failed
 *     in a row, which worker runs its cycle and which keeps its connection.
 *     The scheduler lists the sources (source_table_sync), the workers take
 *     and give back cycles (source_table_claim, source_table_finish), and
 *     anyone may ask for a cycle now (source_table_request_cycle).
 */
#ifndef FINALIZE_SOURCE_TABLE_H
#define FINALIZE_SOURCE_TABLE_H

#include "datatype/timestamp.h"

#include "core/source_pick.h"

/*
 * Pool workers have the indexes 0 to FINALIZE_MAX_POOL - 1 (given by the
 * scheduler); a dedicated worker (finalize.max_source_workers = 0: one
 * process per source) takes a free index above them.
 */
#define FINALIZE_MAX_POOL 64
#define FINALIZE_MAX_SOURCE_WORKERS (FINALIZE_MAX_POOL + 128)

/* A cycle a worker took. */
typedef struct SourceClaim
{
	Oid			serverid;
	int			entry;			/* its entry in the table (source_table_still_home) */
	int			failures;		/* consecutive failures before this cycle */
	bool		moved;			/* it was another worker's: what this one kept of it is stale */
} SourceClaim;

/* A worker as finalize.source_workers shows it. */
typedef struct SourceWorkerInfo
{
	int			index;			/* below FINALIZE_MAX_POOL: a pool worker */
	pid_t		pid;
	Oid			serving;		/* the source whose cycle it runs, or InvalidOid */
	bool		retrying;		/* that source had failed before (the retry lane) */
	TimestampTz since;			/* when that cycle began */
	int			kept;			/* connections it keeps open */
	int64		cycles;			/* cycles it ran */
} SourceWorkerInfo;

extern Size source_table_shmem_size(void);
extern void source_table_shmem_init(void *place, bool found);

extern int	source_table_sync(Oid dboid, const Oid *serverids, int n, TimestampTz now, Oid *left_out);
extern bool source_table_attach(int index);
extern bool source_table_claim(Oid only_serverid, TimestampTz now, int64 steal_after_us, SourceClaim *out,
							   TimestampTz *wake_at);
extern void source_table_finish(Oid serverid, int failures, TimestampTz due, bool gone);
extern bool source_table_still_home(int entry, Oid serverid);
extern bool source_table_request_cycle(Oid dboid, Oid serverid);
extern void source_table_reschedule(Oid dboid, int poll_interval_ms);
extern void source_table_retire(int index);
extern bool source_table_retiring(void);
extern void source_table_set_kept(int kept);
extern int	source_table_workers(Oid dboid, SourceWorkerInfo *out);
extern int	source_table_my_index(void);

#endif							/* FINALIZE_SOURCE_TABLE_H */
