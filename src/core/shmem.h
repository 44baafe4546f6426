/*
 * shmem.h
 *     finalize's shared memory: the verdict epoch, the wake-up shards of
 *     finalize.wait_final, the count of notifications not sent and the
 *     worker slots.
 */
#ifndef FINALIZE_SHMEM_H
#define FINALIZE_SHMEM_H

#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/spin.h"

/* Launcher, schedulers, alerts workers and source workers together (one slot each). */
#define FINALIZE_MAX_SLOTS 128

typedef enum SlotKind
{
	SLOT_FREE = 0,
	SLOT_SCHEDULER,				/* one per database */
	SLOT_WORKER,				/* a source worker: of the pool (serverid invalid,
								 * index set), or one per source */
	SLOT_ALERTS,				/* one per database: webhook delivery */
	SLOT_LAKE					/* one per Iceberg catalog (foreign server) */
} SlotKind;

typedef struct WorkerSlot
{
	SlotKind	kind;
	Oid			dboid;
	Oid			serverid;		/* InvalidOid for a scheduler */
	pid_t		pid;
	int			index;			/* a pool worker: its index + 1; 0 otherwise */
} WorkerSlot;

/*
 * Waiters of finalize.wait_final sleep on one of these condition variables,
 * chosen by the id of the table they wait for, so that an advance of one
 * table wakes only the few waiters whose tables share its shard, not all
 * of them. A power of two (see wait_shard()); building with
 * -DFINALIZE_WAKE_SHARDS=1 gives one condition variable for all waiters,
 * the baseline test/bench/wait.sh compares against.
 */
#ifndef FINALIZE_WAKE_SHARDS
#define FINALIZE_WAKE_SHARDS 256
#endif

typedef struct FinalizeShared
{
	/*
	 * Bumped after every commit that changed tracked_table or watermark, so
	 * backends know when their cached verdicts may be stale.
	 */
	pg_atomic_uint64 verdict_epoch;

	/*
	 * Per shard: bumped, then broadcast, after every commit that may have
	 * changed the verdict of a table of the shard (all shards for a change
	 * that may concern any table). A waiter reads the counter before it
	 * checks, and sleeps only while it has not moved.
	 */
	pg_atomic_uint64 wake_epoch[FINALIZE_WAKE_SHARDS];
	ConditionVariableMinimallyPadded wake_cv[FINALIZE_WAKE_SHARDS];

	/*
	 * Notifications finalize did not send because the NOTIFY queue was half
	 * full (notify.c), and when the log last said so (a TimestampTz).
	 */
	pg_atomic_uint64 notify_dropped;
	pg_atomic_uint64 notify_logged_at;

	slock_t		mutex;			/* protects the fields below */
	Oid			paused_dboid;	/* a database being dropped or renamed */
	WorkerSlot	slots[FINALIZE_MAX_SLOTS];
} FinalizeShared;

/* NULL until shared memory is attached (never NULL in a preloaded server). */
extern FinalizeShared *finalize_shared;

extern void shmem_install_hooks(void);
extern bool slot_claim(SlotKind kind, Oid dboid, Oid serverid);
extern bool slot_claim_at(SlotKind kind, Oid dboid, Oid serverid, int index);
extern bool slot_is_running(SlotKind kind, Oid dboid, Oid serverid);
extern int	slot_list(SlotKind kind, Oid dboid, WorkerSlot *out, int max);
extern int	slot_signal_database(Oid dboid, int signo);
extern pid_t slot_pid(SlotKind kind, Oid dboid, Oid serverid);
extern void set_paused_database(Oid dboid);
extern Oid	paused_database(void);

/*
 * The wake-up shard of a tracked table (its table_id): Fibonacci hashing,
 * so that consecutive ids spread over the shards.
 */
static inline int
wait_shard(int64 table_id)
{
	uint64		h = (uint64) table_id * UINT64CONST(0x9E3779B97F4A7C15);

	StaticAssertStmt((FINALIZE_WAKE_SHARDS & (FINALIZE_WAKE_SHARDS - 1)) == 0,
					 "FINALIZE_WAKE_SHARDS must be a power of two");
	return (int) (h >> 40) & (FINALIZE_WAKE_SHARDS - 1);
}

#endif							/* FINALIZE_SHMEM_H */
