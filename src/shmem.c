/*
 * shmem.c
 *     finalize's shared memory: requested when the library is preloaded,
 *     attached by every process at startup.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "shmem.h"

FinalizeShared *finalize_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Reserves the space (postmaster, while loading preload libraries). */
static void
finalize_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(FinalizeShared)));
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
		pg_atomic_init_u64(&finalize_shared->verdict_epoch, 1);
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
