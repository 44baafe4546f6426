/*
 * shmem.c
 *     finalize's shared memory: requested when the library is preloaded,
 *     attached by every process at startup.
 *
 * Each scheduler and source worker holds a slot while it runs, so that no
 * two processes ever serve the same source, the scheduler knows which ones
 * run, and DROP DATABASE can stop those connected to the database.
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "core/shmem.h"
#include "core/source_table.h"

FinalizeShared *finalize_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static int	my_slot = -1;

/* Reserves the space (postmaster, while loading preload libraries). */
static void
finalize_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(FinalizeShared)));
	RequestAddinShmemSpace(MAXALIGN(source_table_shmem_size()));
	RequestNamedLWLockTranche("finalize", 1);
}

/* Creates or attaches the struct; the first process initializes it. */
static void
finalize_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	finalize_shared = ShmemInitStruct("finalize", sizeof(FinalizeShared), &found);
	if (!found)
	{
		memset(finalize_shared, 0, sizeof(FinalizeShared));
		pg_atomic_init_u64(&finalize_shared->verdict_epoch, 1);
		pg_atomic_init_u64(&finalize_shared->notify_dropped, 0);
		pg_atomic_init_u64(&finalize_shared->notify_logged_at, 0);
		for (int i = 0; i < FINALIZE_WAKE_SHARDS; i++)
		{
			pg_atomic_init_u64(&finalize_shared->wake_epoch[i], 1);
			ConditionVariableInit(&finalize_shared->wake_cv[i].cv);
		}
		SpinLockInit(&finalize_shared->mutex);
	}
	source_table_shmem_init(ShmemInitStruct("finalize sources", source_table_shmem_size(), &found), found);
	LWLockRelease(AddinShmemInitLock);
}

/* Installs the hooks; called from _PG_init while preloading. */
void
shmem_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = finalize_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = finalize_shmem_startup;
}

/*
 * Whether a slot is held. Processes free their slot on exit; one killed by a
 * signal makes the postmaster reinitialize shared memory, so no slot
 * outlives its process.
 */
static bool
slot_alive(const WorkerSlot *slot)
{
	return slot->kind != SLOT_FREE && slot->pid != 0;
}

/* Frees this process's slot when it exits. */
static void
slot_release(int code pg_attribute_unused(), Datum arg pg_attribute_unused())
{
	if (my_slot < 0 || finalize_shared == NULL)
		return;
	SpinLockAcquire(&finalize_shared->mutex);
	if (finalize_shared->slots[my_slot].pid == MyProcPid)
		memset(&finalize_shared->slots[my_slot], 0, sizeof(WorkerSlot));
	SpinLockRelease(&finalize_shared->mutex);
	my_slot = -1;
}

/*
 * Claims the slot for (kind, database, server). False when another live
 * process holds it (the caller exits), or when all slots are taken.
 */
bool
slot_claim(SlotKind kind, Oid dboid, Oid serverid)
{
	return slot_claim_at(kind, dboid, serverid, 0);
}

/* Claims the slot for (kind, database, server, index): a pool worker's index is its own. */
bool
slot_claim_at(SlotKind kind, Oid dboid, Oid serverid, int index)
{
	int			free_slot = -1;

	SpinLockAcquire(&finalize_shared->mutex);
	for (int i = 0; i < FINALIZE_MAX_SLOTS; i++)
	{
		WorkerSlot *s = &finalize_shared->slots[i];

		if (s->kind == kind && s->dboid == dboid && s->serverid == serverid && s->index == index &&
			slot_alive(s))
		{
			SpinLockRelease(&finalize_shared->mutex);
			return false;
		}
		if (free_slot < 0 && !slot_alive(s))
			free_slot = i;
	}
	if (free_slot >= 0)
	{
		WorkerSlot *s = &finalize_shared->slots[free_slot];

		s->kind = kind;
		s->dboid = dboid;
		s->serverid = serverid;
		s->pid = MyProcPid;
		s->index = index;
		my_slot = free_slot;
	}
	SpinLockRelease(&finalize_shared->mutex);
	if (free_slot < 0)
		return false;
	on_shmem_exit(slot_release, (Datum) 0);
	return true;
}

/* Whether a live process holds the slot for (kind, database, server). */
bool
slot_is_running(SlotKind kind, Oid dboid, Oid serverid)
{
	bool		found = false;

	SpinLockAcquire(&finalize_shared->mutex);
	for (int i = 0; i < FINALIZE_MAX_SLOTS && !found; i++)
	{
		WorkerSlot *s = &finalize_shared->slots[i];

		found = s->kind == kind && s->dboid == dboid && s->serverid == serverid && slot_alive(s);
	}
	SpinLockRelease(&finalize_shared->mutex);
	return found;
}

/* The pid of the live process holding a slot, or 0. */
pid_t
slot_pid(SlotKind kind, Oid dboid, Oid serverid)
{
	pid_t		pid = 0;

	SpinLockAcquire(&finalize_shared->mutex);
	for (int i = 0; i < FINALIZE_MAX_SLOTS && pid == 0; i++)
	{
		WorkerSlot *s = &finalize_shared->slots[i];

		if (s->kind == kind && s->dboid == dboid && s->serverid == serverid && slot_alive(s))
			pid = s->pid;
	}
	SpinLockRelease(&finalize_shared->mutex);
	return pid;
}

/* Copies the live slots of a kind in a database; returns how many. */
int
slot_list(SlotKind kind, Oid dboid, WorkerSlot *out, int max)
{
	int			n = 0;

	SpinLockAcquire(&finalize_shared->mutex);
	for (int i = 0; i < FINALIZE_MAX_SLOTS && n < max; i++)
	{
		WorkerSlot *s = &finalize_shared->slots[i];

		if (s->kind == kind && s->dboid == dboid && slot_alive(s))
			out[n++] = *s;
	}
	SpinLockRelease(&finalize_shared->mutex);
	return n;
}

/* Signals every finalize process connected to a database; returns how many. */
int
slot_signal_database(Oid dboid, int signo)
{
	pid_t		pids[FINALIZE_MAX_SLOTS];
	int			n = 0;

	SpinLockAcquire(&finalize_shared->mutex);
	for (int i = 0; i < FINALIZE_MAX_SLOTS; i++)
	{
		WorkerSlot *s = &finalize_shared->slots[i];

		if (s->kind != SLOT_FREE && s->dboid == dboid && slot_alive(s))
			pids[n++] = s->pid;
	}
	SpinLockRelease(&finalize_shared->mutex);
	for (int i = 0; i < n && signo != 0; i++)
		kill(pids[i], signo);
	return n;
}

/* Marks a database whose processes must not be started (being dropped). */
void
set_paused_database(Oid dboid)
{
	SpinLockAcquire(&finalize_shared->mutex);
	finalize_shared->paused_dboid = dboid;
	SpinLockRelease(&finalize_shared->mutex);
}

/* The database marked by set_paused_database, or InvalidOid. */
Oid
paused_database(void)
{
	Oid			dboid;

	SpinLockAcquire(&finalize_shared->mutex);
	dboid = finalize_shared->paused_dboid;
	SpinLockRelease(&finalize_shared->mutex);
	return dboid;
}
