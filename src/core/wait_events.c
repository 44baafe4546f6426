/*
 * wait_events.c
 *     The wait events of finalize's waits: one name each, registered in the
 *     cluster's table of custom wait events on a process's first wait of
 *     that kind (PostgreSQL 17 on; the generic "Extension" before).
 *
 * The name-to-id table is in shared memory and shared by every process,
 * so each process only looks its ids up once; the lookup needs a PGPROC
 * and shared memory (any backend or background worker, never the
 * postmaster), which is why it is not done in _PG_init. Names follow
 * PostgreSQL's own (CamelCase, the process's "Main" for its idle wait).
 */
#include "postgres.h"

#include "core/pg_compat.h"
#include "core/wait_events.h"

static const char *const wait_names[FINALIZE_WAIT_COUNT] = {
	[FINALIZE_WAIT_STORE_REQUEST] = "FinalizeStoreRequest",
	[FINALIZE_WAIT_CATALOG_REQUEST] = "FinalizeCatalogRequest",
	[FINALIZE_WAIT_WEBHOOK] = "FinalizeWebhookDelivery",
	[FINALIZE_WAIT_SQLSERVER_LOGIN] = "FinalizeSqlServerLogin",
	[FINALIZE_WAIT_SQLSERVER_READ] = "FinalizeSqlServerRead",
	[FINALIZE_WAIT_FINAL] = "FinalizeWaitFinal",
	[FINALIZE_WAIT_LAUNCHER_MAIN] = "FinalizeLauncherMain",
	[FINALIZE_WAIT_SCHEDULER_MAIN] = "FinalizeSchedulerMain",
	[FINALIZE_WAIT_WORKER_MAIN] = "FinalizeWorkerMain",
	[FINALIZE_WAIT_ALERTS_MAIN] = "FinalizeAlertsMain",
	[FINALIZE_WAIT_LAKE_MAIN] = "FinalizeLakeMain",
};

/* This process's ids, 0 until looked up. */
static uint32 wait_ids[FINALIZE_WAIT_COUNT];

/* The wait_event_info of a wait, for WaitLatch and its kin. */
uint32
finalize_wait_event(FinalizeWait wait)
{
	Assert(wait >= 0 && wait < FINALIZE_WAIT_COUNT);
	if (wait_ids[wait] == 0)
		wait_ids[wait] = compat_wait_event_new(wait_names[wait]);
	return wait_ids[wait];
}

/*
 * Before a wait inside a library (FreeTDS, libcurl), with the id of
 * finalize_wait_event (looked up before: the lookup may itself wait for a
 * lock, and raise): pg_stat_activity shows it until finalize_wait_end.
 * Raises nothing.
 */
void
finalize_wait_begin(uint32 event)
{
	pgstat_report_wait_start(event);
}

/* After the library returned. */
void
finalize_wait_end(void)
{
	pgstat_report_wait_end();
}
