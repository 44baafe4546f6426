/*
 * launcher.c
 *     The launcher: one static background worker per cluster, connected to
 *     no database. It watches for the database named by finalize.database
 *     and keeps one scheduler running in it.
 *
 * Staying out of the database means DROP DATABASE never waits for the
 * launcher, and a database created later is picked up without a restart.
 * On a standby nothing starts (BgWorkerStart_RecoveryFinished); after
 * promotion the launcher begins.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"

#include "core/background.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "core/wait_events.h"
#include "worker/worker.h"

/* How often the launcher looks for the database (it also wakes on signals). */
#define LAUNCHER_NAP_MS 5000

/* Registers the launcher (from _PG_init, while preloading). */
void
register_launcher(void)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = 10;
	strlcpy(bgw.bgw_library_name, "finalize", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "finalize_launcher_main", BGW_MAXLEN);
	strlcpy(bgw.bgw_type, "finalize launcher", BGW_MAXLEN);
	strlcpy(bgw.bgw_name, "finalize launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&bgw);
}

/*
 * OID of a database that accepts connections, or InvalidOid. A process
 * without a database can only scan pg_database sequentially (its indexes
 * need a database's relcache), as the autovacuum launcher does.
 */
static Oid
find_database(const char *name)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	Oid			dboid = InvalidOid;
	MemoryContext cxt = CurrentMemoryContext;

	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		if (strcmp(NameStr(db->datname), name) == 0 && db->datallowconn)
		{
			dboid = db->oid;
			break;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	/* The commit leaves TopMemoryContext current: go back to the caller's. */
	MemoryContextSwitchTo(cxt);
	return dboid;
}

/* Starts the scheduler of finalize.database unless it runs or cannot. */
static void
ensure_scheduler(BackgroundWorkerHandle **handle)
{
	Oid			dboid = find_database(finalize_database);
	pid_t		pid;

	if (!OidIsValid(dboid) || dboid == paused_database() ||
		slot_is_running(SLOT_SCHEDULER, dboid, InvalidOid))
		return;
	/* One registered but not running yet: give it time. */
	if (*handle != NULL && GetBackgroundWorkerPid(*handle, &pid) != BGWH_STOPPED)
		return;
	if (*handle != NULL)
		pfree(*handle);
	*handle = NULL;
	if (!start_dynamic_worker("finalize_scheduler_main", "finalize scheduler",
							  "finalize scheduler", dboid, InvalidOid, 0, handle))
		ereport(WARNING,
				(errmsg("finalize could not start its scheduler for database \"%s\"", finalize_database),
				 errhint("Increase max_worker_processes: finalize needs one process for its launcher, "
						 "one for its scheduler, one for webhook delivery and finalize.max_source_workers for its sources.")));
}

/* Entry point of the launcher. */
void
finalize_launcher_main(Datum arg pg_attribute_unused())
{
	BackgroundWorkerHandle *handle = NULL;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		/*
		 * Also with finalize.enabled off: the scheduler then polls no source
		 * but still checks freshness SLAs and delivers alerts, so that a
		 * paused finalize still tells people its verdicts stopped.
		 */
		ensure_scheduler(&handle);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 LAUNCHER_NAP_MS, finalize_wait_event(FINALIZE_WAIT_LAUNCHER_MAIN));
		ResetLatch(MyLatch);
	}
}
