/*
 * wait_events.h
 *     What a finalize process waits for, as pg_stat_activity.wait_event
 *     names it: custom wait events from PostgreSQL 17 on, the generic
 *     "Extension" before (core/pg_compat.h).
 */
#ifndef FINALIZE_WAIT_EVENTS_H
#define FINALIZE_WAIT_EVENTS_H

/* The waits of finalize's processes and sessions (wait_events.c names them). */
typedef enum FinalizeWait
{
	FINALIZE_WAIT_STORE_REQUEST,	/* an object store's answer (listing, GET) */
	FINALIZE_WAIT_CATALOG_REQUEST,	/* an Iceberg REST catalog's answer */
	FINALIZE_WAIT_WEBHOOK,		/* a webhook's answer to a delivery */
	FINALIZE_WAIT_SQLSERVER_LOGIN,	/* a login to SQL Server */
	FINALIZE_WAIT_SQLSERVER_READ,	/* SQL Server's answer to a batch */
	FINALIZE_WAIT_FINAL,		/* wait_final, for a verdict to move */
	FINALIZE_WAIT_LAUNCHER_MAIN,	/* the launcher between rounds */
	FINALIZE_WAIT_SCHEDULER_MAIN,	/* a scheduler between rounds */
	FINALIZE_WAIT_WORKER_MAIN,	/* a source worker between cycles */
	FINALIZE_WAIT_ALERTS_MAIN,	/* the alerts worker between deliveries */
	FINALIZE_WAIT_LAKE_MAIN,	/* a lake worker between rounds */
	FINALIZE_WAIT_COUNT
} FinalizeWait;

extern uint32 finalize_wait_event(FinalizeWait wait);
extern void finalize_wait_begin(uint32 event);
extern void finalize_wait_end(void);

#endif							/* FINALIZE_WAIT_EVENTS_H */
