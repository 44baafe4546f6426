/*
 * source_pool.h
 *     The source workers the scheduler keeps running, and the workers it
 *     registered and has not seen stop (source_pool.c).
 */
#ifndef FINALIZE_SOURCE_POOL_H
#define FINALIZE_SOURCE_POOL_H

#include "postmaster/bgworker.h"

/* The scheduler's nap between rounds: also when a source without a worker is tried again. */
#define SCHEDULER_NAP_MS 1000
/* A failure or a shortage the scheduler logs is logged again at most this often. */
#define CHECKS_ERROR_LOG_MS (5 * 60 * 1000)

/* A source (or an Iceberg catalog: lake) that should have a worker. */
typedef struct WantedSource
{
	Oid			serverid;
	char		name[NAMEDATALEN];
	bool		lake;
} WantedSource;

extern void keep_source_workers(const WantedSource *wanted, int nwanted);
extern bool worker_starting(Oid serverid, int index);
extern bool started_full(void);
extern void started_add(BackgroundWorkerHandle *handle, Oid serverid, int index);

#endif							/* FINALIZE_SOURCE_POOL_H */
