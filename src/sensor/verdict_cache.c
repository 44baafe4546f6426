/*
 * verdict_cache.c
 *     Per-backend cache of verdicts for the sensor functions.
 *
 * Sensors ask the same few questions all day while verdicts move a few times
 * an hour, so each backend keeps the answers it read, stamped with a shared
 * epoch that every commit touching tracked_table or watermark bumps (a
 * statement trigger marks the transaction; a commit callback bumps the epoch
 * once the commit is visible). A reader takes the epoch first and then reads
 * under a fresh snapshot, so an entry can only be older than its stamp, never
 * newer: a writer that commits after the snapshot bumps the epoch after that
 * and the next call reads again. The cache can therefore lag a commit by one
 * call at most, and never shows a verdict that was not committed.
 *
 * An entry holds only what those two tables say (granularity,
 * finalized_until, loss_blocked). Consumers, derived inputs, losses and
 * acknowledgements reach a verdict only through a write of watermark
 * (_advance, _refresh_loss_blocked, also run by a trigger when required
 * consumers change), and neither whether a loss holds a period nor where
 * losses stop finalized_until is ever cached: sensor.c asks both afresh
 * (_loss_blocks, _loss_cap) while loss_blocked is set. The same
 * trigger on those four tables only makes entries go stale sooner; nothing
 * here depends on it.
 *
 * Entries also carry catalog_generation, so DDL on the relations read here
 * (DROP or ALTER EXTENSION, such as the update adding watermark.loss_blocked)
 * makes them stale. Bypassed where the epoch cannot be trusted: on a standby
 * (replay fires no triggers) and in a transaction that changed the tables
 * itself (it must see its own changes).
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "common/shmem.h"
#include "sensor/verdict_cache.h"

PG_FUNCTION_INFO_V1(finalize_verdict_changed);

/* Longest tracked table name (tracked_table's CHECK) plus the terminator. */
#define CACHE_KEY_SIZE 256
/* Entries kept before the cache starts over: sensors ask about few tables. */
#define CACHE_MAX_ENTRIES 10000

typedef struct CacheEntry
{
	char		name[CACHE_KEY_SIZE];	/* hash key */
	uint64		epoch;			/* shared epoch when it was read */
	uint64		generation;		/* catalog_generation when it was read */
	TrackedVerdict verdict;
} CacheEntry;

static HTAB *cache = NULL;
static bool changed_in_xact = false;
static bool callbacks_registered = false;

/*
 * Publishes a committed change of the verdict tables to every backend, and
 * keeps such changes out of prepared transactions, whose commit may happen
 * in a process that cannot publish them.
 */
static void
cache_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (changed_in_xact)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot prepare a transaction that changed finalize's verdicts"),
						 errhint("Record ranges and manage tracked tables in ordinary transactions.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (changed_in_xact && finalize_shared != NULL)
				pg_atomic_fetch_add_u64(&finalize_shared->verdict_epoch, 1);
			changed_in_xact = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			changed_in_xact = false;
			break;
		default:
			break;
	}
}

/* Registers the callbacks once per backend. */
static void
register_callbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(cache_xact_callback, NULL);
	catalog_register_callback();
	callbacks_registered = true;
}

/*
 * finalize._verdict_changed(): statement trigger on tracked_table, watermark
 * and what verdicts depend on, that marks the transaction, so its commit
 * bumps the epoch.
 */
Datum
finalize_verdict_changed(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("finalize._verdict_changed() must be called as a trigger")));
	register_callbacks();
	changed_in_xact = true;
	return PointerGetDatum(NULL);
}

/*
 * Reads the verdict of a tracked table, from the cache when its entry is
 * current, else from the tables (raising the not-tracked error there).
 */
void
verdict_cache_read(Datum table_name, TrackedVerdict *out)
{
	text	   *name = DatumGetTextPP(table_name);
	int			len = VARSIZE_ANY_EXHDR(name);
	char		key[CACHE_KEY_SIZE];
	CacheEntry *entry;
	uint64		epoch;
	uint64		generation;
	bool		found;

	if (finalize_shared == NULL || changed_in_xact || RecoveryInProgress() ||
		len >= CACHE_KEY_SIZE)
	{
		catalog_read_verdict(table_name, out, NULL);
		return;
	}

	register_callbacks();
	if (cache == NULL || hash_get_num_entries(cache) >= CACHE_MAX_ENTRIES)
	{
		HASHCTL		ctl;

		if (cache != NULL)
			hash_destroy(cache);
		ctl.keysize = CACHE_KEY_SIZE;
		ctl.entrysize = sizeof(CacheEntry);
		ctl.hcxt = TopMemoryContext;
		cache = hash_create("finalize verdict cache", 64, &ctl,
							HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}

	memset(key, 0, sizeof(key));
	memcpy(key, VARDATA_ANY(name), len);

	/* The epoch is read before the snapshot is taken: see the file header. */
	epoch = pg_atomic_read_u64(&finalize_shared->verdict_epoch);
	pg_memory_barrier();
	generation = catalog_generation;

	entry = hash_search(cache, key, HASH_FIND, &found);
	if (found && entry->epoch == epoch && entry->generation == generation)
	{
		*out = entry->verdict;
		return;
	}

	/*
	 * Opening the relations may process invalidations; the entry keeps the
	 * generation seen before, so it is stale at once if one arrived.
	 */
	catalog_read_verdict(table_name, out, GetLatestSnapshot());
	entry = hash_search(cache, key, HASH_ENTER, &found);
	entry->epoch = epoch;
	entry->generation = generation;
	entry->verdict = *out;
}
