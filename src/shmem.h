/*
 * shmem.h
 *     finalize's shared memory.
 */
#ifndef FINALIZE_SHMEM_H
#define FINALIZE_SHMEM_H

#include "postgres.h"
#include "port/atomics.h"

typedef struct FinalizeShared
{
	/*
	 * Bumped after every commit that changed tracked_table or watermark, so
	 * backends know when their cached verdicts may be stale.
	 */
	pg_atomic_uint64 verdict_epoch;
} FinalizeShared;

/* NULL until shared memory is attached (never NULL in a preloaded server). */
extern FinalizeShared *finalize_shared;

extern void shmem_install_hooks(void);

#endif							/* FINALIZE_SHMEM_H */
