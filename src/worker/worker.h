/*
 * worker.h
 *     Background processes: launcher, per-database scheduler and alerts
 *     worker, per-source worker.
 */
#ifndef FINALIZE_WORKER_H
#define FINALIZE_WORKER_H

#include "postmaster/bgworker.h"

extern void register_launcher(void);
extern void dbhooks_install(void);
extern void connect_worker_to_database(Oid dboid);
extern bool start_dynamic_worker(const char *function, const char *type, const char *name,
								 Oid dboid, Oid serverid, BackgroundWorkerHandle **handle);

PGDLLEXPORT void finalize_launcher_main(Datum arg);
PGDLLEXPORT void finalize_scheduler_main(Datum arg);
PGDLLEXPORT void finalize_worker_main(Datum arg);
PGDLLEXPORT void finalize_alerts_main(Datum arg);

#endif							/* FINALIZE_WORKER_H */
