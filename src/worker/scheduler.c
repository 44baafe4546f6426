/*
 * scheduler.c
 *     The scheduler: one dynamic background worker in finalize.database. It
 *     keeps one source worker running per foreign server that has tracked
 *     tables, stops those whose source is gone, brings the derived tables
 *     up to date with their inputs' reports, applies the facts
 *     retention, checks the tables' freshness SLAs, and keeps the alerts
 *     worker running while there are webhook targets or deliveries. It idles
 *     while the extension is not installed.
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

#include "core/background.h"
#include "core/db.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "worker/worker.h"
#include "worker/worker_state.h"

#define SCHEDULER_NAP_MS 1000
#define PURGE_INTERVAL_MS (60 * 60 * 1000)

/* A source (or an Iceberg catalog: lake) that should have a worker. */
typedef struct WantedSource
{
	Oid			serverid;
	char		name[NAMEDATALEN];
	bool		lake;
} WantedSource;

/* A worker this scheduler registered and has not seen stop. */
typedef struct StartedWorker
{
	Oid			serverid;
	BackgroundWorkerHandle *handle;
} StartedWorker;

static StartedWorker started[FINALIZE_MAX_SLOTS];
static int	nstarted = 0;

/* The alerts worker this scheduler registered, until it is seen running or stopped. */
static BackgroundWorkerHandle *alerts_handle = NULL;
/* When it was last started: one that keeps failing is restarted every few seconds, not every round. */
static TimestampTz alerts_started = 0;
/* When a failure of a step was last logged: the same one each second would flood the log. */
static TimestampTz checks_error_logged = 0;
static TimestampTz refresh_error_logged = 0;

#define ALERTS_RESTART_MS 5000
#define CHECKS_ERROR_LOG_MS (5 * 60 * 1000)

/*
 * Checks the freshness SLAs (incidents of tables whose verdict lags) and
 * the sources dropped under tracked tables, and says whether the alerts
 * worker is needed: webhook targets or pending
 * deliveries exist. A catalog older than the library has neither.
 */
static bool
check_alerts(void)
{
	bool		isnull;

	if (!db_function_exists(FINALIZE_SCHEMA "._check_freshness()", "finalize's alert functions"))
		return false;
	if (SPI_execute("SELECT " FINALIZE_SCHEMA "._check_freshness() >= 0 AND "
					FINALIZE_SCHEMA "._check_dropped_sources() >= 0 AND "
					"(EXISTS (SELECT FROM " FINALIZE_SCHEMA "._alert_targets()) OR "
					"EXISTS (SELECT FROM " FINALIZE_SCHEMA ".alert_delivery d WHERE d.state = 'pending'))",
					false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not check finalize's freshness SLAs");
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Reads the sources that have tracked tables, in a short transaction; also
 * purges old facts once an hour. Returns -1 while the extension is not
 * installed.
 */
static int
read_wanted_sources(WantedSource *wanted, int max, TimestampTz *last_purge)
{
	int			n = 0;

	db_begin("finalize: listing sources");
	if (!OidIsValid(get_extension_oid("finalize", true)))
	{
		db_commit();
		return -1;
	}
	/*
	 * The Iceberg catalogs with consumers too (their lake workers), once the
	 * catalog is at this library's version: an older one has no
	 * _wanted_catalogs().
	 */
	if (SPI_execute(db_function_exists(FINALIZE_SCHEMA "._wanted_catalogs()", "finalize's lake functions")
					? "SELECT s.serverid, s.server_name, false FROM " FINALIZE_SCHEMA "._wanted_sources() AS s "
					"UNION ALL SELECT c.serverid, c.server_name, true FROM " FINALIZE_SCHEMA "._wanted_catalogs() AS c"
					: "SELECT s.serverid, s.server_name, false FROM " FINALIZE_SCHEMA "._wanted_sources() AS s",
					true, max) != SPI_OK_SELECT)
		elog(ERROR, "could not list finalize's sources");
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
		ws_purge_facts();
		*last_purge = GetCurrentTimestamp();
	}
	db_commit();
	return n;
}

/* Whether this scheduler registered a worker for the source that is still starting. */
static bool
worker_starting(Oid serverid)
{
	for (int i = 0; i < nstarted; i++)
	{
		pid_t		pid;

		if (started[i].serverid != serverid)
			continue;
		if (GetBackgroundWorkerPid(started[i].handle, &pid) != BGWH_STOPPED)
			return true;
		started[i] = started[--nstarted];
		i--;
	}
	return false;
}

/* Records that a source has no worker for lack of processes. */
static void
record_no_worker(const WantedSource *src)
{
	ereport(WARNING,
			(errmsg("finalize could not start a worker for source \"%s\"", src->name),
			 errhint("Increase max_worker_processes: finalize needs one process for its launcher, "
					 "one for its scheduler, one for webhook delivery and one per source.")));
	db_begin("finalize: recording a missing worker");
	ws_source_failed(src->name, COND_NO_WORKER,
					 "No background worker slot was free (max_worker_processes); the source is not polled.",
					 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SCHEDULER_NAP_MS));
	db_commit();
}

/*
 * Brings the derived tables up to date with their inputs. A session's
 * report moves only the table it writes (_advance_dependents): this is how
 * the derived tables that use it follow, within a round of its commit. A
 * catalog older than the library has no _refresh_derived() (its reports
 * still move the derived tables themselves). Returns true.
 */
static bool
refresh_derived(void)
{
	if (!db_function_exists(FINALIZE_SCHEMA "._refresh_derived()", "finalize's _refresh_derived()"))
		return true;
	if (SPI_execute("SELECT " FINALIZE_SCHEMA "._refresh_derived()", false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not bring finalize's derived tables up to date");
	return true;
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
	if (!TimestampDifferenceExceeds(alerts_started, GetCurrentTimestamp(), ALERTS_RESTART_MS))
		return;
	alerts_started = GetCurrentTimestamp();
	snprintf(name, sizeof(name), "finalize alerts for database %s", finalize_database);
	if (!start_dynamic_worker("finalize_alerts_main", "finalize alerts", name, MyDatabaseId, InvalidOid,
							  &alerts_handle))
	{
		alerts_handle = NULL;
		ereport(WARNING,
				(errmsg("finalize could not start its alerts worker"),
				 errdetail("Incidents are recorded in finalize.alerts, but no webhook is sent until it runs."),
				 errhint("Increase max_worker_processes: finalize needs one process for its launcher, "
						 "one for its scheduler, one for webhook delivery and one per source.")));
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

/* One round: start the missing workers, stop the unneeded ones. */
static void
schedule(TimestampTz *last_purge)
{
	WantedSource wanted[FINALIZE_MAX_SLOTS];
	WorkerSlot	running[FINALIZE_MAX_SLOTS];
	int			nrunning;
	int			nwanted = finalize_enabled ? read_wanted_sources(wanted, FINALIZE_MAX_SLOTS, last_purge) : 0;

	for (int k = 0; k < 2; k++)
	{
		SlotKind	kind = k == 0 ? SLOT_WORKER : SLOT_LAKE;

		nrunning = slot_list(kind, MyDatabaseId, running, FINALIZE_MAX_SLOTS);
		for (int i = 0; i < nrunning; i++)
		{
			bool		keep = false;

			for (int j = 0; j < nwanted && !keep; j++)
				keep = wanted[j].serverid == running[i].serverid && wanted[j].lake == (kind == SLOT_LAKE);
			if (!keep)
				kill(running[i].pid, SIGTERM);
		}
	}
	for (int j = 0; j < nwanted; j++)
	{
		char		name[BGW_MAXLEN];
		SlotKind	kind = wanted[j].lake ? SLOT_LAKE : SLOT_WORKER;

		if (slot_is_running(kind, MyDatabaseId, wanted[j].serverid) ||
			worker_starting(wanted[j].serverid) || nstarted >= FINALIZE_MAX_SLOTS ||
			(wanted[j].lake && !lake_restart_due(wanted[j].serverid)))
			continue;
		snprintf(name, sizeof(name), wanted[j].lake ? "finalize lake worker for catalog %s"
				 : "finalize worker for server %s", wanted[j].name);
		if (start_dynamic_worker(wanted[j].lake ? "finalize_lake_main" : "finalize_worker_main",
								 wanted[j].lake ? "finalize lake worker" : "finalize worker", name,
								 MyDatabaseId, wanted[j].serverid, &started[nstarted].handle))
			started[nstarted++].serverid = wanted[j].serverid;
		else if (!wanted[j].lake)
			record_no_worker(&wanted[j]);
		else
			ereport(WARNING,
					(errmsg("finalize could not start a lake worker for catalog \"%s\"", wanted[j].name),
					 errhint("Increase max_worker_processes: finalize needs one process per Iceberg catalog with consumers too.")));
	}
	/*
	 * Also with finalize.enabled off: no source is polled then, but
	 * pipelines still report (their derived tables follow), the freshness
	 * SLAs tell people that every verdict stopped, and deliveries go on.
	 */
	(void) guarded_step(refresh_derived, "finalize: bringing derived tables up to date",
						&refresh_error_logged, false);
	if (guarded_step(check_alerts, "finalize: checking freshness and dropped sources", &checks_error_logged,
					 slot_is_running(SLOT_ALERTS, MyDatabaseId, InvalidOid)) && finalize_alerts_enabled)
		ensure_alerts_worker();
}

/* Entry point of the scheduler; bgw_extra holds the database OID. */
void
finalize_scheduler_main(Datum arg pg_attribute_unused())
{
	Oid			dboid;
	TimestampTz last_purge = 0;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	connect_worker_to_database(dboid);
	if (!slot_claim(SLOT_SCHEDULER, dboid, InvalidOid))
		proc_exit(0);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (paused_database() == MyDatabaseId)
			proc_exit(0);
		schedule(&last_purge);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(SCHEDULER_NAP_MS, finalize_poll_interval_ms), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
