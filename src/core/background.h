/*
 * background.h
 *     Starting finalize's dynamic background workers and connecting them to
 *     their database.
 */
#ifndef FINALIZE_BACKGROUND_H
#define FINALIZE_BACKGROUND_H

#include "postmaster/bgworker.h"

extern bool start_dynamic_worker(const char *function, const char *type, const char *name,
								 Oid dboid, Oid serverid, int32 index, BackgroundWorkerHandle **handle);
extern void connect_worker_to_database(Oid dboid);

#endif							/* FINALIZE_BACKGROUND_H */
