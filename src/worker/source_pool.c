/*
 * source_pool.c
 *     The source workers the scheduler keeps running: the sources listed in
 *     the shared source table (those finalize.max_sources leaves out get the
 *     condition no_worker), and either a pool of finalize.max_source_workers
 *     workers (no more than there are sources) or one dedicated worker per
 *     source when it is 0; workers no longer needed are stopped, and a
 *     source that no worker can serve says so in its status. Also the
 *     workers this scheduler registered and has not seen stop (source and
 *     lake workers), so that one still starting is not started twice.
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/timestamp.h"

#include "core/background.h"
#include "core/db.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "core/source_table.h"
#include "worker/source_pool.h"
#include "worker/worker_state.h"

/* A worker this scheduler registered and has not seen stop. */
typedef struct StartedWorker
{
	Oid			serverid;		/* InvalidOid for a pool worker */
	int			index;			/* a pool worker's index + 1, else 0 */
	BackgroundWorkerHandle *handle;
} StartedWorker;

static StartedWorker started[FINALIZE_MAX_SLOTS];
static int	nstarted = 0;

/* When the sources finalize.max_sources left out, or the lack of a pool worker, were last logged or recorded. */
static TimestampTz capacity_logged = 0;
static TimestampTz no_pool_recorded = 0;
static TimestampTz pool_start_logged = 0;

#define POOL_HINT "Increase max_worker_processes: finalize needs one process for its launcher, one for its " \
	"scheduler, one for webhook delivery and finalize.max_source_workers for its sources."

/* Whether this scheduler registered a worker for the source (or pool index) that is still starting. */
bool
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

/* Whether this scheduler has no room left to remember another worker it starts. */
bool
started_full(void)
{
	return nstarted >= FINALIZE_MAX_SLOTS;
}

/*
 * Remembers a worker this scheduler started (serverid and index as
 * worker_starting looks them up; room checked first by started_full).
 */
void
started_add(BackgroundWorkerHandle *handle, Oid serverid, int index)
{
	Assert(!started_full());
	started[nstarted].handle = handle;
	started[nstarted].serverid = serverid;
	started[nstarted++].index = index;
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
		BackgroundWorkerHandle *handle;
		bool		runs = false;

		for (int k = 0; k < nrunning && !runs; k++)
			runs = running[k].index == i + 1;
		alive += runs;
		if (runs || worker_starting(InvalidOid, i + 1) || started_full())
		{
			starting += !runs;
			continue;
		}
		snprintf(name, sizeof(name), "finalize source worker %d for database %s", i + 1, finalize_database);
		if (start_dynamic_worker("finalize_worker_main", "finalize worker", name, MyDatabaseId, InvalidOid, i,
								 &handle))
		{
			started_add(handle, InvalidOid, i + 1);
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
		BackgroundWorkerHandle *handle;

		if (wanted[j].lake || slot_is_running(SLOT_WORKER, MyDatabaseId, wanted[j].serverid) ||
			worker_starting(wanted[j].serverid, 0) || started_full())
			continue;
		snprintf(name, sizeof(name), "finalize worker for server %s", wanted[j].name);
		if (start_dynamic_worker("finalize_worker_main", "finalize worker", name, MyDatabaseId,
								 wanted[j].serverid, -1, &handle))
		{
			started_add(handle, wanted[j].serverid, 0);
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

/*
 * One round of the source workers: forgets those seen stopped, lists the
 * sources in the shared source table, stops the workers no longer needed
 * and starts the missing ones (a pool, or one per source).
 */
void
keep_source_workers(const WantedSource *wanted, int nwanted)
{
	int			pool_size;

	prune_started();
	pool_size = Min(finalize_max_source_workers, count_sources(wanted, nwanted));
	list_sources(wanted, nwanted);
	stop_source_workers(wanted, nwanted, pool_size);
	if (finalize_max_source_workers > 0)
		start_pool(wanted, nwanted, pool_size);
	else
		start_dedicated(wanted, nwanted);
}
