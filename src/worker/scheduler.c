/*
 * scheduler.c
 *     The scheduler: one dynamic background worker in finalize.database.
 *     Each round it reads the sources (foreign servers with tracked tables)
 *     and the Iceberg catalogs with consumers, has the source workers kept
 *     running (worker/source_pool.c), keeps a lake worker per catalog and
 *     stops those no longer needed, brings the derived tables up to date,
 *     applies the facts retention, checks the freshness SLAs, and keeps the
 *     alerts worker running while there are webhook targets or deliveries.
 *     It idles while the extension is not installed.
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "core/internal_schema.h"
#include "core/background.h"
#include "core/db.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "core/source_table.h"
#include "core/wait_events.h"
#include "worker/scheduler_steps.h"
#include "worker/source_pool.h"
#include "worker/worker.h"
#include "worker/worker_state.h"

#define PURGE_INTERVAL_MS (60 * 60 * 1000)

/* The alerts worker this scheduler registered, until it is seen running or stopped. */
static BackgroundWorkerHandle *alerts_handle = NULL;
/* When it was last started: one that keeps failing is restarted every few seconds, not every round. */
static TimestampTz alerts_started = 0;
/* When a failure of a step was last logged: the same one each second would flood the log. */
static TimestampTz checks_error_logged = 0;
static TimestampTz refresh_error_logged = 0;
static TimestampTz restore_error_logged = 0;

#define ALERTS_RESTART_MS 5000

/*
 * Reads the sources that have tracked tables and the Iceberg catalogs with
 * consumers (*wanted, in the current context), in a short transaction; also
 * purges old facts once an hour. Both only on a whole catalog, in the same
 * statement (db_when_whole). Returns -1 while the extension is not installed.
 */
static int
read_wanted_sources(WantedSource **wanted_out, TimestampTz *last_purge)
{
	MemoryContext cxt = CurrentMemoryContext;
	WantedSource *wanted;
	int			n = 0;

	db_begin("finalize: listing sources");
	if (!OidIsValid(get_extension_oid("finalize", true)))
	{
		db_commit();
		return -1;
	}
	/*
	 * The sources (in a catalog older than the library too: its workers then
	 * say that it must be updated) and the Iceberg catalogs with consumers
	 * (their lake workers), once the catalog has wanted_catalogs().
	 */
	if (SPI_execute(psprintf("SELECT w.* FROM (SELECT s.serverid, s.server_name, false FROM %s() AS s%s) AS w%s",
							 internal_function_name("wanted_sources"),
							 internal_function_exists("wanted_catalogs()")
							 ? " UNION ALL SELECT c.serverid, c.server_name, true FROM " FINALIZE_INTERNAL_SCHEMA
							 ".wanted_catalogs() AS c" : "",
							 db_when_whole()), true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list finalize's sources");
	wanted = MemoryContextAllocZero(cxt, sizeof(WantedSource) * Max(SPI_processed, 1));
	*wanted_out = wanted;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		wanted[n].serverid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc, 1, &isnull));
		strlcpy(wanted[n].name, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2),
				NAMEDATALEN);
		wanted[n].lake = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull));
		n++;
	}
	if (TimestampDifferenceExceeds(*last_purge, GetCurrentTimestamp(), PURGE_INTERVAL_MS))
	{
		ws_purge_facts(db_when_whole());
		*last_purge = GetCurrentTimestamp();
	}
	db_commit();
	return n;
}

/*
 * Runs one step of a round (check_alerts, refresh_derived) in a
 * transaction of its own, bounded by finalize.lock_timeout (an admin's
 * open transaction that holds an incident must not stall the scheduling
 * of sources), and never lets its error stop the scheduler: it is logged
 * (the same step's failure at most every five minutes, *logged_at), and
 * the next round tries again. Returns the step's answer, or on_error.
 */
static bool
guarded_step(bool (*step) (void), const char *activity, TimestampTz *logged_at, bool on_error)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool answer = false;

	PG_TRY();
	{
		db_begin_write(activity);
		answer = OidIsValid(get_extension_oid("finalize", true)) && step();
		db_commit();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		if (TimestampDifferenceExceeds(*logged_at, GetCurrentTimestamp(), CHECKS_ERROR_LOG_MS))
		{
			EmitErrorReport();
			*logged_at = GetCurrentTimestamp();
		}
		FlushErrorState();
		AbortOutOfAnyTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);
		answer = on_error;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	return answer;
}

/* Starts the alerts worker unless it runs or is starting. */
static void
ensure_alerts_worker(void)
{
	pid_t		pid;
	char		name[BGW_MAXLEN];

	if (slot_is_running(SLOT_ALERTS, MyDatabaseId, InvalidOid))
		return;
	if (alerts_handle != NULL && GetBackgroundWorkerPid(alerts_handle, &pid) != BGWH_STOPPED)
		return;
	if (alerts_handle != NULL)
		pfree(alerts_handle);
	alerts_handle = NULL;
	if (!TimestampDifferenceExceeds(alerts_started, GetCurrentTimestamp(), ALERTS_RESTART_MS))
		return;
	alerts_started = GetCurrentTimestamp();
	snprintf(name, sizeof(name), "finalize alerts for database %s", finalize_database);
	if (!start_dynamic_worker("finalize_alerts_main", "finalize alerts", name, MyDatabaseId, InvalidOid, 0,
							  &alerts_handle))
	{
		alerts_handle = NULL;
		ereport(WARNING,
				(errmsg("finalize could not start its alerts worker"),
				 errdetail("Incidents are recorded in finalize.alerts, but no webhook is sent until it runs."),
				 errhint("Increase max_worker_processes: finalize needs one process for its launcher, "
						 "one for its scheduler, one for webhook delivery and finalize.max_source_workers for its sources.")));
	}
}

/*
 * Whether a lake worker for a catalog may start now: at most once every
 * few seconds each, so that one that keeps failing at start does not
 * restart in a loop (its errors are logged each time). Remembers the start.
 */
static bool
lake_restart_due(Oid serverid)
{
	static struct
	{
		Oid			serverid;
		TimestampTz at;
	}			starts[FINALIZE_MAX_SLOTS];
	static int	nstarts = 0;
	TimestampTz now = GetCurrentTimestamp();
	int			i;

	for (i = 0; i < nstarts && starts[i].serverid != serverid; i++)
		;
	if (i < nstarts && !TimestampDifferenceExceeds(starts[i].at, now, ALERTS_RESTART_MS))
		return false;
	if (i == nstarts)
	{
		if (nstarts == FINALIZE_MAX_SLOTS)
			i = 0;				/* forget the oldest slot's: only a delay is lost */
		else
			nstarts++;
	}
	starts[i].serverid = serverid;
	starts[i].at = now;
	return true;
}

/* Starts a lake worker for each Iceberg catalog with consumers, stops the others. */
static void
keep_lake_workers(const WantedSource *wanted, int nwanted)
{
	WorkerSlot	running[FINALIZE_MAX_SLOTS];
	int			nrunning = slot_list(SLOT_LAKE, MyDatabaseId, running, FINALIZE_MAX_SLOTS);

	for (int i = 0; i < nrunning; i++)
	{
		bool		keep = false;

		for (int j = 0; j < nwanted && !keep; j++)
			keep = wanted[j].lake && wanted[j].serverid == running[i].serverid;
		if (!keep)
			kill(running[i].pid, SIGTERM);
	}
	for (int j = 0; j < nwanted; j++)
	{
		char		name[BGW_MAXLEN];
		BackgroundWorkerHandle *handle;

		if (!wanted[j].lake || slot_is_running(SLOT_LAKE, MyDatabaseId, wanted[j].serverid) ||
			worker_starting(wanted[j].serverid, 0) || started_full() ||
			!lake_restart_due(wanted[j].serverid))
			continue;
		snprintf(name, sizeof(name), "finalize lake worker for catalog %s", wanted[j].name);
		if (start_dynamic_worker("finalize_lake_main", "finalize lake worker", name, MyDatabaseId,
								 wanted[j].serverid, 0, &handle))
			started_add(handle, wanted[j].serverid, 0);
		else
			ereport(WARNING,
					(errmsg("finalize could not start a lake worker for catalog \"%s\"", wanted[j].name),
					 errhint("Increase max_worker_processes: finalize needs one process per Iceberg catalog with consumers too.")));
	}
}

/*
 * One round: list the sources, start the missing workers, stop the
 * unneeded ones (in round_cxt, reset by the caller).
 */
static void
schedule(TimestampTz *last_purge)
{
	WantedSource *wanted = NULL;
	/* A restore under way (or a failed check): no worker runs, no step acts. */
	bool		restoring = guarded_step(scheduler_catalog_restoring, "finalize: looking for a restore",
										 &restore_error_logged, true);
	int			nwanted = finalize_enabled && !restoring ? read_wanted_sources(&wanted, last_purge) : 0;

	if (nwanted < 0)
		nwanted = 0;
	keep_source_workers(wanted, nwanted);
	keep_lake_workers(wanted, nwanted);
	if (restoring)
		return;
	/*
	 * Also with finalize.enabled off: no source is polled then, but
	 * pipelines still report (their derived tables follow), the freshness
	 * SLAs tell people that every verdict stopped, and deliveries go on.
	 */
	(void) guarded_step(scheduler_refresh_derived, "finalize: bringing derived tables up to date",
						&refresh_error_logged, false);
	if (guarded_step(scheduler_check_alerts, "finalize: checking freshness and dropped sources", &checks_error_logged,
					 slot_is_running(SLOT_ALERTS, MyDatabaseId, InvalidOid)) && finalize_alerts_enabled)
		ensure_alerts_worker();
}

/* Entry point of the scheduler; bgw_extra holds the database OID. */
void
finalize_scheduler_main(Datum arg pg_attribute_unused())
{
	Oid			dboid;
	TimestampTz last_purge = 0;
	MemoryContext round_cxt;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	connect_worker_to_database(dboid);
	if (!slot_claim(SLOT_SCHEDULER, dboid, InvalidOid))
		proc_exit(0);
	round_cxt = AllocSetContextCreate(TopMemoryContext, "finalize scheduler round", ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* A shorter poll interval applies at once. */
			source_table_reschedule(MyDatabaseId, finalize_poll_interval_ms);
		}
		if (paused_database() == MyDatabaseId)
			proc_exit(0);
		MemoryContextReset(round_cxt);
		MemoryContextSwitchTo(round_cxt);
		schedule(&last_purge);
		MemoryContextSwitchTo(TopMemoryContext);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(SCHEDULER_NAP_MS, finalize_poll_interval_ms),
						 finalize_wait_event(FINALIZE_WAIT_SCHEDULER_MAIN));
		ResetLatch(MyLatch);
	}
}
