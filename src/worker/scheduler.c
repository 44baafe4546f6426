/*
 * scheduler.c
 *     The scheduler: one dynamic background worker in finalize.database. It
 *     lists the sources (foreign servers with tracked tables) in the shared
 *     source table, keeps the pool of source workers running (as many as
 *     finalize.max_source_workers, no more than there are sources; or one
 *     process per source when it is 0) and a lake worker per Iceberg catalog
 *     with consumers, stops those no longer needed, brings the derived tables
 *     up to date, applies the facts retention, checks the freshness SLAs, and
 *     keeps the alerts worker running while there are webhook targets or
 *     deliveries. It idles while the extension is not installed.
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
	Oid			serverid;		/* InvalidOid for a pool worker */
	int			index;			/* a pool worker's index + 1, else 0 */
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
static TimestampTz restore_error_logged = 0;
/* When the sources finalize.max_sources left out, or the lack of a pool worker, were last logged or recorded. */
static TimestampTz capacity_logged = 0;
static TimestampTz no_pool_recorded = 0;
static TimestampTz pool_start_logged = 0;

#define ALERTS_RESTART_MS 5000
#define POOL_HINT "Increase max_worker_processes: finalize needs one process for its launcher, one for its " \
	"scheduler, one for webhook delivery and finalize.max_source_workers for its sources."
#define CHECKS_ERROR_LOG_MS (5 * 60 * 1000)

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
							 internal_function_exists("wanted_catalogs()", "finalize's lake functions")
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

/* Whether this scheduler registered a worker for the source (or pool index) that is still starting. */
static bool
worker_starting(Oid serverid, int index)
{
	for (int i = 0; i < nstarted; i++)
	{
		pid_t		pid;

		if (started[i].serverid != serverid || started[i].index != index)
			continue;
		if (GetBackgroundWorkerPid(started[i].handle, &pid) != BGWH_STOPPED)
			return true;
		pfree(started[i].handle);
		started[i] = started[--nstarted];
		i--;
	}
	return false;
}

/*
 * Forgets the workers this scheduler started that have stopped, whatever
 * they served (a dropped source's, a dedicated one after a switch to the
 * pool): their handles would fill the list.
 */
static void
prune_started(void)
{
	for (int i = 0; i < nstarted; i++)
	{
		pid_t		pid;

		if (GetBackgroundWorkerPid(started[i].handle, &pid) != BGWH_STOPPED)
			continue;
		pfree(started[i].handle);
		started[i] = started[--nstarted];
		i--;
	}
}

/* Records that a source has no worker for lack of processes. */
static void
record_no_worker(const WantedSource *src)
{
	ereport(WARNING,
			(errmsg("finalize could not start a worker for source \"%s\"", src->name),
			 errhint("Increase max_worker_processes: with finalize.max_source_workers = 0 finalize needs one "
					 "process for its launcher, one for its scheduler, one for webhook delivery and one per source.")));
	db_begin("finalize: recording a missing worker");
	ws_source_failed(src->name, COND_NO_WORKER,
					 "No background worker slot was free (max_worker_processes); the source is not polled.",
					 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SCHEDULER_NAP_MS));
	db_commit();
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

/*
 * Records that no source is polled because no worker of the pool could
 * start (at most once a minute: every source's status row is written).
 */
static void
record_no_pool(const WantedSource *wanted, int nwanted)
{
	if (!TimestampDifferenceExceeds(no_pool_recorded, GetCurrentTimestamp(), 60 * 1000))
		return;
	no_pool_recorded = GetCurrentTimestamp();
	ereport(WARNING,
			(errmsg("finalize could not start a source worker"),
			 errhint(POOL_HINT)));
	db_begin("finalize: recording a missing worker");
	for (int j = 0; j < nwanted; j++)
		if (!wanted[j].lake)
			ws_source_failed(wanted[j].name, COND_NO_WORKER,
							 "No background worker slot was free (max_worker_processes); the source is not polled.",
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SCHEDULER_NAP_MS));
	db_commit();
}

/* Orders Oids, for bsearch. */
static int
oid_order(const void *a, const void *b)
{
	Oid			x = *(const Oid *) a;
	Oid			y = *(const Oid *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * Lists the sources in the shared source table, where the workers find
 * them. Those finalize.max_sources leaves out are not polled: each gets the
 * condition no_worker (so finalize.status and the alerts say so), and the
 * server log says it every five minutes.
 */
static void
list_sources(const WantedSource *wanted, int nwanted)
{
	Oid		   *oids = palloc(sizeof(Oid) * Max(nwanted, 1));
	Oid		   *left_out = palloc(sizeof(Oid) * Max(nwanted, 1));
	int			n = 0;
	int			missing;

	for (int j = 0; j < nwanted; j++)
		if (!wanted[j].lake)
			oids[n++] = wanted[j].serverid;
	missing = source_table_sync(MyDatabaseId, oids, n, GetCurrentTimestamp(), left_out);
	if (missing > 0 && TimestampDifferenceExceeds(capacity_logged, GetCurrentTimestamp(), CHECKS_ERROR_LOG_MS))
	{
		capacity_logged = GetCurrentTimestamp();
		ereport(WARNING,
				(errmsg("finalize cannot serve %d of its %d sources", missing, n),
				 errdetail("Its shared table of sources holds finalize.max_sources = %d entries.",
						   finalize_max_sources),
				 errhint("Raise finalize.max_sources and restart PostgreSQL.")));
		db_begin("finalize: recording sources left out");
		for (int j = 0; j < nwanted; j++)
			if (!wanted[j].lake &&
				bsearch(&wanted[j].serverid, left_out, missing, sizeof(Oid), oid_order) != NULL)
				ws_source_failed(wanted[j].name, COND_NO_WORKER,
								 psprintf("finalize.max_sources (%d) leaves no room for this source in the shared "
										  "table of sources; it is not polled. Raise finalize.max_sources and "
										  "restart PostgreSQL.", finalize_max_sources),
								 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), CHECKS_ERROR_LOG_MS));
		db_commit();
	}
	pfree(oids);
	pfree(left_out);
}

/* How many of the wanted entries are sources (not catalogs). */
static int
count_sources(const WantedSource *wanted, int nwanted)
{
	int			n = 0;

	for (int j = 0; j < nwanted; j++)
		n += !wanted[j].lake;
	return n;
}

/*
 * Stops the source workers no longer needed: with a pool, those beyond its
 * size (and any dedicated one); without, those whose source is gone (and
 * any of a pool).
 */
static void
stop_source_workers(const WantedSource *wanted, int nwanted, int pool_size)
{
	WorkerSlot	running[FINALIZE_MAX_SLOTS];
	int			nrunning = slot_list(SLOT_WORKER, MyDatabaseId, running, FINALIZE_MAX_SLOTS);

	for (int i = 0; i < nrunning; i++)
	{
		bool		keep = false;

		if (finalize_max_source_workers > 0)
			keep = running[i].index > 0 && running[i].index <= pool_size;
		else if (running[i].index == 0)
			for (int j = 0; j < nwanted && !keep; j++)
				keep = !wanted[j].lake && wanted[j].serverid == running[i].serverid;
		if (keep)
			continue;
		/* A pool that shrinks lets its workers finish their cycles; a change of kind stops them. */
		if (finalize_max_source_workers > 0 && running[i].index > 0)
			source_table_retire(running[i].index - 1);
		else
			kill(running[i].pid, SIGTERM);
	}
}

/* Starts the workers of the pool that do not run (indexes 0 to pool_size - 1). */
static void
start_pool(const WantedSource *wanted, int nwanted, int pool_size)
{
	WorkerSlot	running[FINALIZE_MAX_SLOTS];
	int			nrunning = slot_list(SLOT_WORKER, MyDatabaseId, running, FINALIZE_MAX_SLOTS);
	bool		failed = false;
	int			alive = 0;
	int			starting = 0;

	for (int i = 0; i < pool_size; i++)
	{
		char		name[BGW_MAXLEN];
		bool		runs = false;

		for (int k = 0; k < nrunning && !runs; k++)
			runs = running[k].index == i + 1;
		alive += runs;
		if (runs || worker_starting(InvalidOid, i + 1) || nstarted >= FINALIZE_MAX_SLOTS)
		{
			starting += !runs;
			continue;
		}
		snprintf(name, sizeof(name), "finalize source worker %d for database %s", i + 1, finalize_database);
		if (start_dynamic_worker("finalize_worker_main", "finalize worker", name, MyDatabaseId, InvalidOid, i,
								 &started[nstarted].handle))
		{
			started[nstarted].serverid = InvalidOid;
			started[nstarted++].index = i + 1;
			starting++;
		}
		else
			failed = true;
	}
	if (failed && alive == 0 && starting == 0)
		record_no_pool(wanted, nwanted);
	else if (failed && TimestampDifferenceExceeds(pool_start_logged, GetCurrentTimestamp(), CHECKS_ERROR_LOG_MS))
	{
		pool_start_logged = GetCurrentTimestamp();
		ereport(WARNING,
				(errmsg("finalize runs %d of its %d source workers", alive, pool_size),
				 errdetail("No background worker slot was free (max_worker_processes); the running workers serve every source."),
				 errhint(POOL_HINT)));
	}
}

/* Starts a dedicated worker for each source without one (finalize.max_source_workers = 0). */
static void
start_dedicated(const WantedSource *wanted, int nwanted)
{
	for (int j = 0; j < nwanted; j++)
	{
		char		name[BGW_MAXLEN];

		if (wanted[j].lake || slot_is_running(SLOT_WORKER, MyDatabaseId, wanted[j].serverid) ||
			worker_starting(wanted[j].serverid, 0) || nstarted >= FINALIZE_MAX_SLOTS)
			continue;
		snprintf(name, sizeof(name), "finalize worker for server %s", wanted[j].name);
		if (start_dynamic_worker("finalize_worker_main", "finalize worker", name, MyDatabaseId,
								 wanted[j].serverid, -1, &started[nstarted].handle))
		{
			started[nstarted].serverid = wanted[j].serverid;
			started[nstarted++].index = 0;
			continue;
		}
		/* No slot for this one, so none for the rest: say so once a minute, not every round. */
		if (TimestampDifferenceExceeds(no_pool_recorded, GetCurrentTimestamp(), 60 * 1000))
		{
			no_pool_recorded = GetCurrentTimestamp();
			for (int k = j; k < nwanted; k++)
				if (!wanted[k].lake && !slot_is_running(SLOT_WORKER, MyDatabaseId, wanted[k].serverid))
					record_no_worker(&wanted[k]);
		}
		break;
	}
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

		if (!wanted[j].lake || slot_is_running(SLOT_LAKE, MyDatabaseId, wanted[j].serverid) ||
			worker_starting(wanted[j].serverid, 0) || nstarted >= FINALIZE_MAX_SLOTS ||
			!lake_restart_due(wanted[j].serverid))
			continue;
		snprintf(name, sizeof(name), "finalize lake worker for catalog %s", wanted[j].name);
		if (start_dynamic_worker("finalize_lake_main", "finalize lake worker", name, MyDatabaseId,
								 wanted[j].serverid, 0, &started[nstarted].handle))
		{
			started[nstarted].serverid = wanted[j].serverid;
			started[nstarted++].index = 0;
		}
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
	int			nsources;
	int			pool_size;

	if (nwanted < 0)
		nwanted = 0;
	prune_started();
	nsources = count_sources(wanted, nwanted);
	pool_size = Min(finalize_max_source_workers, nsources);
	list_sources(wanted, nwanted);
	stop_source_workers(wanted, nwanted, pool_size);
	if (finalize_max_source_workers > 0)
		start_pool(wanted, nwanted, pool_size);
	else
		start_dedicated(wanted, nwanted);
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
