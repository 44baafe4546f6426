/*
 * delta_worker.h
 *     The lake worker's poll of a store's Delta consumers (delta_worker.c).
 */
#ifndef FINALIZE_LAKE_DELTA_WORKER_H
#define FINALIZE_LAKE_DELTA_WORKER_H

extern bool delta_poll_store(Oid serverid, MemoryContext cxt, long *delay_ms);

#endif							/* FINALIZE_LAKE_DELTA_WORKER_H */
