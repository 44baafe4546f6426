/*
 * worker.h
 *     The worker subsystem's background processes: launcher, per-database
 *     scheduler, per-source worker (the alerts worker is alert/delivery.c's;
 *     starting any of them is core/background.c's).
 */
#ifndef FINALIZE_WORKER_H
#define FINALIZE_WORKER_H

#include "postmaster/bgworker.h"

extern void register_launcher(void);
extern void dbhooks_install(void);

PGDLLEXPORT void finalize_launcher_main(Datum arg);
PGDLLEXPORT void finalize_scheduler_main(Datum arg);
PGDLLEXPORT void finalize_worker_main(Datum arg);

#endif							/* FINALIZE_WORKER_H */
