/*
 * source_table.c
 *     The shared table of sources and source workers (see source_table.h).
 *
 * One fixed array in shared memory, sized by finalize.max_sources (a
 * restart setting: shared memory is sized when the server starts), behind
 * one LWLock. The scheduler rewrites the list once a round; a worker takes
 * the lock twice per cycle (to take it and to give it back), for a scan of
 * the array: microseconds, against a cycle's milliseconds of SQL Server.
 *
 * A source is never run twice at once: a worker takes a cycle by setting the
 * entry's busy to its index, under the lock, and only the entries that are
 * not busy can be taken. A worker that exits gives back the cycle it held
 * (on_shmem_exit); one that crashes makes the postmaster reinitialize shared
 * memory, and the scheduler lists the sources again.
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "core/pg_compat.h"
#include "core/settings.h"
#include "core/source_table.h"

/* A worker of the pool (or a dedicated one) as the others see it. */
typedef struct SourceWorker
{
	Oid			dboid;
	pid_t		pid;			/* 0: the index is free */
	int			pgprocno;		/* its PGPROC, whose latch wakes it */
	Oid			serving;		/* the source whose cycle it runs, or InvalidOid */
	bool		serving_failing;	/* that source had failed, or was slow, before this cycle */
	bool		retire;			/* the scheduler wants it to exit between cycles */
	TimestampTz since;			/* when that cycle began */
	int			kept;			/* connections it keeps open (source_table_set_kept) */
	int64		cycles;			/* cycles it ran */
} SourceWorker;

typedef struct SourceTable
{
	LWLock	   *lock;
	int			capacity;		/* finalize.max_sources when shared memory was made */
	int			used;			/* entries at or after this index are all free */
	SourceWorker workers[FINALIZE_MAX_SOURCE_WORKERS];
	PoolSource	entries[FLEXIBLE_ARRAY_MEMBER];
} SourceTable;

static SourceTable *table = NULL;
static int	my_index = -1;		/* this process's index, once attached */
static int	my_entry = -1;		/* the entry whose cycle it runs, or -1 */

/* The shared memory the table needs, for finalize.max_sources entries. */
Size
source_table_shmem_size(void)
{
	return add_size(offsetof(SourceTable, entries), mul_size(sizeof(PoolSource), finalize_max_sources));
}

/*
 * Points at the table in shared memory; the first process initializes it.
 * Called with AddinShmemInitLock held, from the startup hook.
 */
void
source_table_shmem_init(void *place, bool found)
{
	table = place;
	if (found)
		return;
	memset(table, 0, source_table_shmem_size());
	table->lock = &(GetNamedLWLockTranche("finalize"))->lock;
	table->capacity = finalize_max_sources;
	for (int i = 0; i < table->capacity; i++)
	{
		table->entries[i].home = -1;
		table->entries[i].busy = -1;
	}
}

/* Frees an entry (the lock held); the scans stop at the last entry in use. */
static void
free_entry(PoolSource *e)
{
	memset(e, 0, sizeof(*e));
	e->home = -1;
	e->busy = -1;
	while (table->used > 0 && table->entries[table->used - 1].dboid == 0)
		table->used--;
}

/* The PGPROC numbers of the workers of a database that run no cycle (the lock held). */
static int
idle_workers(Oid dboid, int *procs)
{
	int			n = 0;

	for (int i = 0; i < FINALIZE_MAX_SOURCE_WORKERS; i++)
	{
		SourceWorker *w = &table->workers[i];

		if (w->pid != 0 && w->dboid == dboid && !OidIsValid(w->serving) && w->pid != MyProcPid)
			procs[n++] = w->pgprocno;
	}
	return n;
}

/*
 * Sets the latches of those workers, after the lock is released. A latch,
 * not a signal by pid: a worker that exited meanwhile leaves a PGPROC whose
 * latch wakes nobody harmfully, where its pid may already be another
 * process's.
 */
static void
wake(const int *procs, int n)
{
	for (int i = 0; i < n; i++)
		SetLatch(&GetPGProcByNumber(procs[i])->procLatch);
}

/* For bsearch and qsort of server OIDs. */
static int
oid_cmp(const void *a, const void *b)
{
	Oid			x = *(const Oid *) a;
	Oid			y = *(const Oid *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * Makes the table's sources of a database the given ones (sorted here):
 * new ones are due now, those no longer wanted are freed (at the end of
 * their cycle if one runs). Entries of other databases that run no cycle are
 * freed too: only the scheduler of finalize.database lists sources. Returns
 * how many sources found no free entry (finalize.max_sources is too low);
 * their serverids go to left_out (room for n), in ascending order.
 */
int
source_table_sync(Oid dboid, const Oid *serverids, int n, TimestampTz now, Oid *left_out)
{
	Oid		   *sorted = palloc(sizeof(Oid) * Max(n, 1));
	bool	   *present = palloc0(sizeof(bool) * Max(n, 1));
	int			pids[FINALIZE_MAX_SOURCE_WORKERS];
	int			npids = 0;
	int			missing = 0;
	int			next_free = 0;
	bool		added = false;

	memcpy(sorted, serverids, sizeof(Oid) * n);
	qsort(sorted, n, sizeof(Oid), oid_cmp);
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	for (int i = table->used - 1; i >= 0; i--)
	{
		PoolSource *e = &table->entries[i];
		Oid		   *hit;

		if (e->dboid == 0)
			continue;
		hit = e->dboid == dboid ? bsearch(&e->serverid, sorted, n, sizeof(Oid), oid_cmp) : NULL;
		if (hit != NULL)
		{
			present[hit - sorted] = true;
			e->removed = false;
		}
		else if (e->busy >= 0)
			e->removed = true;
		else
			free_entry(e);
	}
	for (int j = 0; j < n; j++)
	{
		if (present[j] || (j > 0 && sorted[j] == sorted[j - 1]))
			continue;
		while (next_free < table->capacity && table->entries[next_free].dboid != 0)
			next_free++;
		if (next_free == table->capacity)
		{
			left_out[missing++] = sorted[j];
			continue;
		}
		table->entries[next_free].dboid = dboid;
		table->entries[next_free].serverid = sorted[j];
		table->entries[next_free].due = now;
		table->used = Max(table->used, next_free + 1);
		added = true;
	}
	if (added)
		npids = idle_workers(dboid, pids);
	LWLockRelease(table->lock);
	wake(pids, npids);
	pfree(sorted);
	pfree(present);
	return missing;
}

/*
 * How long a cycle may take before it counts as slow: a poll interval, at
 * least a second. A slow cycle cannot keep its source's schedule anyway;
 * its source is then served in the retry lane like a failing one, and a
 * cycle running longer takes a place in the lane while it runs.
 */
static int64
slow_after_us(void)
{
	return (int64) Max(finalize_poll_interval_ms, 1000) * 1000;
}

/*
 * Gives back the cycle this process held, and its index, when it exits. A
 * cycle cut short counts as a failure of its source, due again after a
 * poll interval: a source that hangs, or makes its worker fail, is then
 * retried in the retry lane, not at once by the next free worker.
 */
static void
detach(int code pg_attribute_unused(), Datum arg pg_attribute_unused())
{
	if (table == NULL || my_index < 0)
		return;
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	if (my_entry >= 0 && table->entries[my_entry].busy == my_index)
	{
		PoolSource *e = &table->entries[my_entry];

		e->busy = -1;
		e->failures++;
		e->due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), finalize_poll_interval_ms);
		if (e->removed)
			free_entry(e);
	}
	if (table->workers[my_index].pid == MyProcPid)
		memset(&table->workers[my_index], 0, sizeof(SourceWorker));
	LWLockRelease(table->lock);
	my_entry = -1;
	my_index = -1;
}

/*
 * Registers this process as the worker of a pool index (0 to
 * FINALIZE_MAX_POOL - 1), or with index -1 as a dedicated worker at the
 * first free index above the pool's. False when the index is held by
 * another live process, or no index is free (the caller exits).
 */
bool
source_table_attach(int index)
{
	bool		ok = false;

	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	if (index < 0)
	{
		for (int i = FINALIZE_MAX_POOL; i < FINALIZE_MAX_SOURCE_WORKERS && index < 0; i++)
			if (table->workers[i].pid == 0)
				index = i;
	}
	if (index >= 0 && index < FINALIZE_MAX_SOURCE_WORKERS && table->workers[index].pid == 0)
	{
		table->workers[index].dboid = MyDatabaseId;
		table->workers[index].pid = MyProcPid;
		table->workers[index].pgprocno = GetNumberFromPGProc(MyProc);
		table->workers[index].serving = InvalidOid;
		my_index = index;
		ok = true;
	}
	LWLockRelease(table->lock);
	if (ok)
		on_shmem_exit(detach, (Datum) 0);
	return ok;
}

/*
 * Takes the cycle this worker should run now (source_pick.c's rule), or
 * returns false and sets *wake_at to when one may be due. A dedicated
 * worker passes its source as only_serverid.
 */
bool
source_table_claim(Oid only_serverid, TimestampTz now, int64 steal_after_us, SourceClaim *out,
				   TimestampTz *wake_at)
{
	bool		alive[FINALIZE_MAX_SOURCE_WORKERS];
	bool		stuck[FINALIZE_MAX_SOURCE_WORKERS];
	int			pool = 0;
	int			failing = 0;
	PickRules	rules;
	int64_t		wake = *wake_at;
	int			i;

	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	for (int k = 0; k < FINALIZE_MAX_SOURCE_WORKERS; k++)
	{
		SourceWorker *w = &table->workers[k];

		alive[k] = w->pid != 0 && w->dboid == MyDatabaseId;
		stuck[k] = alive[k] && OidIsValid(w->serving) && now - w->since > steal_after_us;
		if (alive[k] && k < FINALIZE_MAX_POOL)
		{
			pool++;
			failing += OidIsValid(w->serving) && (w->serving_failing || now - w->since > slow_after_us());
		}
	}
	rules.dboid = MyDatabaseId;
	rules.me = my_index;
	rules.only_serverid = only_serverid;
	rules.now = now;
	rules.steal_after = steal_after_us;
	rules.retry_lane_open = failing < retry_lane_size(pool);
	rules.home_alive = alive;
	rules.home_stuck = stuck;
	rules.nworkers = FINALIZE_MAX_SOURCE_WORKERS;
	i = source_pick(table->entries, table->used, &rules, &wake);
	if (i >= 0)
	{
		PoolSource *e = &table->entries[i];

		out->serverid = e->serverid;
		out->entry = i;
		out->failures = e->failures;
		out->moved = e->home != my_index;
		e->busy = my_index;
		e->home = my_index;
		e->requested = false;
		table->workers[my_index].serving = e->serverid;
		table->workers[my_index].serving_failing = e->failures > 0 || e->slow;
		table->workers[my_index].since = now;
		table->workers[my_index].cycles++;
		my_entry = i;
	}
	LWLockRelease(table->lock);
	*wake_at = wake;
	return i >= 0;
}

/*
 * Gives back the cycle taken by source_table_claim: when the next one is
 * due and how many failed in a row. The source's entry is freed when the
 * source is gone or no longer wanted. The end of a failing cycle may open
 * the retry lane to a worker waiting for it: the idle ones are woken.
 */
void
source_table_finish(Oid serverid, int failures, TimestampTz due, bool gone)
{
	int			pids[FINALIZE_MAX_SOURCE_WORKERS];
	int			npids = 0;

	if (my_entry < 0)
		return;
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	{
		PoolSource *e = &table->entries[my_entry];
		TimestampTz now = GetCurrentTimestamp();
		bool		slow = now - table->workers[my_index].since > slow_after_us();
		bool		was_failing = table->workers[my_index].serving_failing || slow;

		if (e->serverid == serverid && e->busy == my_index)
		{
			e->busy = -1;
			e->failures = failures;
			e->slow = slow;
			e->due = due;
			e->last_end = now;
			if (gone || e->removed)
				free_entry(e);
		}
		table->workers[my_index].serving = InvalidOid;
		table->workers[my_index].serving_failing = false;
		if (was_failing)
			npids = idle_workers(MyDatabaseId, pids);
	}
	LWLockRelease(table->lock);
	my_entry = -1;
	wake(pids, npids);
}

/*
 * Whether this worker is still the home of a source it served (the entry
 * from its claim): false once another worker took it, or it is gone, so the
 * connection kept for it can be closed.
 */
bool
source_table_still_home(int entry, Oid serverid)
{
	bool		home;

	if (entry < 0 || entry >= table->capacity)
		return false;
	LWLockAcquire(table->lock, LW_SHARED);
	home = table->entries[entry].serverid == serverid && table->entries[entry].dboid == MyDatabaseId &&
		table->entries[entry].home == my_index;
	LWLockRelease(table->lock);
	return home;
}

/*
 * Asks for a cycle of a source now (the lake worker recorded a report its
 * worker should resolve): wakes the worker that keeps its connection, or
 * every idle worker when none does. Returns whether the source is listed.
 */
bool
source_table_request_cycle(Oid dboid, Oid serverid)
{
	int			pids[FINALIZE_MAX_SOURCE_WORKERS];
	int			npids = 0;
	bool		found = false;

	if (table == NULL)
		return false;
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < table->used && !found; i++)
	{
		PoolSource *e = &table->entries[i];

		if (e->dboid != dboid || e->serverid != serverid)
			continue;
		found = true;
		if (!e->requested)
			e->requested_at = GetCurrentTimestamp();
		e->requested = true;
		if (e->home >= 0 && table->workers[e->home].pid != 0 && table->workers[e->home].dboid == dboid)
			pids[npids++] = table->workers[e->home].pgprocno;
		else
			npids = idle_workers(dboid, pids);
	}
	LWLockRelease(table->lock);
	wake(pids, npids);
	return found;
}

/*
 * After a reload: a shorter finalize.poll_interval applies at once to the
 * sources of a database that answered their last cycle (a longer one from
 * their next cycle; backoffs keep their own schedule).
 */
void
source_table_reschedule(Oid dboid, int poll_interval_ms)
{
	int			pids[FINALIZE_MAX_SOURCE_WORKERS];
	int			npids;

	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < table->used; i++)
	{
		PoolSource *e = &table->entries[i];
		TimestampTz due;

		if (e->dboid != dboid || e->failures > 0 || e->last_end == 0)
			continue;
		due = TimestampTzPlusMilliseconds(e->last_end, poll_interval_ms);
		if (due < e->due)
			e->due = due;
	}
	npids = idle_workers(dboid, pids);
	LWLockRelease(table->lock);
	wake(pids, npids);
}

/*
 * Asks pool worker `index` to exit once its cycle ends (the pool shrinks):
 * unlike a SIGTERM, which cuts the cycle short and counts it as its
 * source's failure, the source that worker serves loses nothing.
 */
void
source_table_retire(int index)
{
	int			procno = -1;

	if (index < 0 || index >= FINALIZE_MAX_POOL)
		return;
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	if (table->workers[index].pid != 0)
	{
		table->workers[index].retire = true;
		procno = table->workers[index].pgprocno;
	}
	LWLockRelease(table->lock);
	if (procno >= 0)
		wake(&procno, 1);
}

/* Whether the scheduler asked this worker to exit (source_table_retire). */
bool
source_table_retiring(void)
{
	bool		retire;

	if (my_index < 0)
		return false;
	LWLockAcquire(table->lock, LW_SHARED);
	retire = table->workers[my_index].retire;
	LWLockRelease(table->lock);
	return retire;
}

/* Publishes how many connections this worker keeps open (for source_table_workers). */
void
source_table_set_kept(int kept)
{
	if (my_index < 0)
		return;
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	table->workers[my_index].kept = kept;
	LWLockRelease(table->lock);
}

/*
 * Copies the workers of a database (up to FINALIZE_MAX_SOURCE_WORKERS) for
 * finalize.source_workers; returns how many.
 */
int
source_table_workers(Oid dboid, SourceWorkerInfo *out)
{
	int			n = 0;

	if (table == NULL)
		return 0;
	LWLockAcquire(table->lock, LW_SHARED);
	for (int i = 0; i < FINALIZE_MAX_SOURCE_WORKERS; i++)
	{
		SourceWorker *w = &table->workers[i];

		if (w->pid == 0 || w->dboid != dboid)
			continue;
		out[n].index = i;
		out[n].pid = w->pid;
		out[n].serving = w->serving;
		out[n].retrying = OidIsValid(w->serving) && w->serving_failing;
		out[n].since = w->since;
		out[n].kept = w->kept;
		out[n].cycles = w->cycles;
		n++;
	}
	LWLockRelease(table->lock);
	return n;
}

/* This process's worker index, or -1 when it is not a source worker. */
int
source_table_my_index(void)
{
	return my_index;
}
