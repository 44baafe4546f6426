/*
 * source_runs.c
 *     The sources a source worker keeps: a hash table of SourceRun by
 *     foreign server, in a memory context of its own.
 *
 * A kept connection saves SQL Server a login (TCP, TLS, LOGIN7) at every
 * cycle; each costs this process a socket, an eventfd and FreeTDS's
 * buffers. A worker keeps at most finalize.worker_connections of them, and
 * no more than PostgreSQL lets a process hold besides its own files
 * (AcquireExternalFD, two per connection: a third of the descriptors it may
 * use, as postgres_fdw counts its connections); beyond, the connection used most recently is closed and
 * its source logs in again at its next cycle. Most recently, not least: a
 * worker serves its sources in turn, so the one used least recently is the
 * next one needed, and closing it made every cycle log in once a worker had
 * more sources than connections (a login costs several idle cycles of CPU);
 * closing the one just used leaves one connection changing hands. A source another worker took
 * (its home moved) is forgotten here, connection and all: what its last
 * cycle here settled is stale once cycles ran elsewhere.
 */
#include "postgres.h"

#include "storage/fd.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/settings.h"
#include "mssql/mssql.h"
#include "worker/source_runs.h"

static HTAB *runs = NULL;
static TimestampTz last_sweep = 0;

#define SWEEP_INTERVAL_MS 1000

/* Creates the hash table (once per process). */
void
runs_init(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(KeptRun);
	ctl.hcxt = AllocSetContextCreate(TopMemoryContext, "finalize source runs", ALLOCSET_SMALL_SIZES);
	runs = hash_create("finalize source runs", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/*
 * Reserves the descriptors of one connection: FreeTDS holds two, its TCP
 * socket and an eventfd to wake its own waits (tds_wakeup_init).
 */
static bool
acquire_connection_fds(void)
{
	if (!AcquireExternalFD())
		return false;
	if (AcquireExternalFD())
		return true;
	ReleaseExternalFD();
	return false;
}

/* Gives back what acquire_connection_fds reserved. */
static void
release_connection_fds(void)
{
	ReleaseExternalFD();
	ReleaseExternalFD();
}

/* Closes a kept connection and gives back its descriptors. */
static void
close_connection(KeptRun *kept)
{
	if (kept->run.conn != NULL)
		mssql_close(kept->run.conn);
	kept->run.conn = NULL;
	if (kept->fd_held)
		release_connection_fds();
	kept->fd_held = false;
}

/* Forgets what was kept of a source (its connection closed). */
static void
reset_run(KeptRun *kept)
{
	close_connection(kept);
	if (kept->run.server_name != NULL)
		pfree(kept->run.server_name);
	if (kept->run.consumer_log != NULL)
		pfree(kept->run.consumer_log);
	memset(&kept->run, 0, sizeof(kept->run));
	kept->run.serverid = kept->serverid;
}

/*
 * Closes the most recently used connection but one's (the one needed last
 * when sources are served in turn); false if there is none.
 */
static bool
close_most_recent(const KeptRun *except)
{
	HASH_SEQ_STATUS seq;
	KeptRun    *k;
	KeptRun    *newest = NULL;

	hash_seq_init(&seq, runs);
	while ((k = hash_seq_search(&seq)) != NULL)
		if (k != except && k->run.conn != NULL && (newest == NULL || k->last_used > newest->last_used))
			newest = k;
	if (newest == NULL)
		return false;
	close_connection(newest);
	return true;
}

/*
 * Counts the source's connection (to be opened, or open) as an external
 * descriptor, closing the most recently used others while PostgreSQL has
 * none to spare; false when not even that frees one.
 */
static bool
hold_descriptor(KeptRun *kept)
{
	while (!kept->fd_held && !(kept->fd_held = acquire_connection_fds()))
		if (!close_most_recent(kept))
			return false;
	return true;
}

/*
 * The kept run of the source just claimed, made fresh when the source comes
 * from another worker (or is new here).
 */
KeptRun *
runs_take(const SourceClaim *claim)
{
	bool		found;
	KeptRun    *kept = hash_search(runs, &claim->serverid, HASH_ENTER, &found);

	if (!found)
	{
		memset(kept, 0, sizeof(*kept));
		kept->serverid = claim->serverid;
		kept->run.serverid = claim->serverid;
	}
	else if (claim->moved)
		reset_run(kept);
	kept->entry = claim->entry;
	kept->run.failures = claim->failures;
	/*
	 * The descriptor of the login to come is reserved before it, as
	 * postgres_fdw does; without one the cycle still runs (the login then
	 * fails if the process has no descriptor left, and says so).
	 */
	if (kept->run.conn == NULL)
		(void) hold_descriptor(kept);
	return kept;
}

/*
 * After a cycle: counts the source's connection as an external descriptor
 * (or gives it back when the cycle closed it), and closes connections
 * beyond the budget, the one just used first.
 */
void
runs_after_cycle(KeptRun *kept)
{
	kept->last_used = GetCurrentTimestamp();
	if (kept->run.conn == NULL && kept->fd_held)
	{
		release_connection_fds();
		kept->fd_held = false;
	}
	/* No descriptor to spare for it: log in again next cycle. */
	if (kept->run.conn != NULL && !kept->fd_held && !(kept->fd_held = acquire_connection_fds()))
		close_connection(kept);
	/* Beyond the budget the connection just used goes first (see above); then others, after a lowered budget. */
	if (runs_connections() > finalize_worker_connections)
		close_connection(kept);
	while (runs_connections() > finalize_worker_connections && close_most_recent(kept))
		;
	source_table_set_kept(runs_connections());
}

/* Forgets a source that is gone (its server dropped). */
void
runs_forget(KeptRun *kept)
{
	Oid			serverid = kept->serverid;

	reset_run(kept);
	(void) hash_search(runs, &serverid, HASH_REMOVE, NULL);
}

/*
 * Forgets the sources another worker took or the scheduler removed (at
 * most once a second: a look at each kept entry).
 */
void
runs_sweep(void)
{
	HASH_SEQ_STATUS seq;
	KeptRun    *k;
	TimestampTz now = GetCurrentTimestamp();

	if (!TimestampDifferenceExceeds(last_sweep, now, SWEEP_INTERVAL_MS))
		return;
	last_sweep = now;
	hash_seq_init(&seq, runs);
	while ((k = hash_seq_search(&seq)) != NULL)
		if (!source_table_still_home(k->entry, k->serverid))
			runs_forget(k);		/* removing the entry just returned is allowed */
	source_table_set_kept(runs_connections());
}

/* How many connections this worker keeps open. */
int
runs_connections(void)
{
	HASH_SEQ_STATUS seq;
	KeptRun    *k;
	int			n = 0;

	hash_seq_init(&seq, runs);
	while ((k = hash_seq_search(&seq)) != NULL)
		n += k->run.conn != NULL;
	return n;
}
