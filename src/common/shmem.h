/*
 * shmem.h
 *     finalize's shared memory: the verdict epoch and the worker slots.
 */
#ifndef FINALIZE_SHMEM_H
#define FINALIZE_SHMEM_H

#include "port/atomics.h"
#include "storage/spin.h"

/* Launcher, schedulers, alerts workers and source workers together (one slot each). */
#define FINALIZE_MAX_SLOTS 128

typedef enum SlotKind
{
	SLOT_FREE = 0,
	SLOT_SCHEDULER,				/* one per database */
	SLOT_WORKER,				/* one per source (foreign server) */
	SLOT_ALERTS					/* one per database: webhook delivery */
} SlotKind;

typedef struct WorkerSlot
{
	SlotKind	kind;
	Oid			dboid;
	Oid			serverid;		/* InvalidOid for a scheduler */
	pid_t		pid;
} WorkerSlot;

typedef struct FinalizeShared
{
	/*
	 * Bumped after every commit that changed tracked_table or watermark, so
	 * backends know when their cached verdicts may be stale.
	 */
	pg_atomic_uint64 verdict_epoch;

	slock_t		mutex;			/* protects the fields below */
	Oid			paused_dboid;	/* a database being dropped or renamed */
	WorkerSlot	slots[FINALIZE_MAX_SLOTS];
} FinalizeShared;

/* NULL until shared memory is attached (never NULL in a preloaded server). */
extern FinalizeShared *finalize_shared;

extern void shmem_install_hooks(void);
extern bool slot_claim(SlotKind kind, Oid dboid, Oid serverid);
extern bool slot_is_running(SlotKind kind, Oid dboid, Oid serverid);
extern int	slot_list(SlotKind kind, Oid dboid, WorkerSlot *out, int max);
extern int	slot_signal_database(Oid dboid, int signo);
extern pid_t slot_pid(SlotKind kind, Oid dboid, Oid serverid);
extern void set_paused_database(Oid dboid);
extern Oid	paused_database(void);

#endif							/* FINALIZE_SHMEM_H */
