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
 * An entry holds what tracked_table and watermark say (granularity,
 * finalized_until, loss_blocked) and, while loss_blocked is set, what the
 * loss rule read under the same snapshot (losses.c: the lineage's losses,
 * the tables each must be acknowledged on, their consumers and
 * acknowledgements), so that a sensor on a table a loss holds computes its
 * answer without reading. That is safe only because the statement trigger
 * verdict_changed sits on every table either read touches (tracked_table,
 * watermark, derived_input, consumer, loss, loss_ack; 03_tables.sql, run
 * by every install and update): a committed change of any of them bumps
 * the epoch, and a transaction's own change bypasses the cache until it
 * ends (test_verdict_cache.py checks both for losses). A loss read larger
 * than LOSS_CACHE_MAX_BYTES is not kept: sensor.c reads it afresh.

 * The same commit callback wakes finalize.wait_final's waiters (wait.c):
 * after the epoch it bumps the wake-up counter of each shard whose verdicts
 * may have changed and broadcasts its condition variable. A row trigger on
 * watermark, fired only when finalized_until or loss_blocked changes, names
 * the shard of that row's table; a change of tracked_table, loss or
 * loss_ack, or an insert, delete or truncate of watermark, may concern any
 * table and wakes every shard. consumer and derived_input change verdicts
 * only through a watermark write, which wakes its own shard.
 *
 * Entries also carry catalog_generation, so DDL on the relations read here
 * (DROP or ALTER EXTENSION, such as the update adding watermark.loss_blocked)
 * makes them stale. Bypassed where the epoch cannot be trusted: on a standby
 * (replay fires no triggers) and in a transaction that changed the tables
 * itself (it must see its own changes).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "core/shmem.h"
#include "sensor/losses.h"
#include "sensor/verdict_cache.h"

PG_FUNCTION_INFO_V1(finalize_verdict_changed);
PG_FUNCTION_INFO_V1(finalize_verdict_wake);

/* Longest tracked table name (tracked_table's CHECK) plus the terminator. */
#define CACHE_KEY_SIZE 256
/* Entries kept before the cache starts over: sensors ask about few tables. */
#define CACHE_MAX_ENTRIES 10000
/* The largest loss read kept in an entry (some 2,000 acknowledgements). */
#define LOSS_CACHE_MAX_BYTES (64 * 1024)
/*
 * All the loss reads a backend keeps: beyond it a sensor reads losses
 * afresh (slower, as exact). Entries of tables derived from one lossy
 * source each keep its acknowledgements, and a pool has many backends.
 */
#define LOSS_CACHE_BUDGET_BYTES (4 * 1024 * 1024)

typedef struct CacheEntry
{
	char		name[CACHE_KEY_SIZE];	/* hash key */
	uint64		epoch;			/* shared epoch when it was read */
	uint64		generation;		/* catalog_generation when it was read */
	TrackedVerdict verdict;		/* verdict.losses: in loss_cxt, or NULL */
} CacheEntry;

static HTAB *cache = NULL;
/* Where entries keep their loss reads: reset with the cache. */
static MemoryContext loss_cxt = NULL;
static bool changed_in_xact = false;
static bool callbacks_registered = false;

/* The wake-up shards this transaction's commit must wake (see the header). */
static bool wake_all_shards = false;
static uint64 wake_shards[(FINALIZE_WAKE_SHARDS + 63) / 64];

/* Forgets the shards marked by the transaction that just ended. */
static void
clear_wake_marks(void)
{
	wake_all_shards = false;
	memset(wake_shards, 0, sizeof(wake_shards));
}

/*
 * Wakes the waiters of the shards a committed transaction marked: bumps
 * each counter first, so that a waiter that reads it before sleeping
 * cannot miss the broadcast that follows.
 */
static void
wake_marked_shards(void)
{
	for (int i = 0; i < FINALIZE_WAKE_SHARDS; i++)
	{
		if (!wake_all_shards && (wake_shards[i / 64] & (UINT64CONST(1) << (i % 64))) == 0)
			continue;
		pg_atomic_fetch_add_u64(&finalize_shared->wake_epoch[i], 1);
		ConditionVariableBroadcast(&finalize_shared->wake_cv[i].cv);
	}
}

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
			{
				pg_atomic_fetch_add_u64(&finalize_shared->verdict_epoch, 1);
				wake_marked_shards();
			}
			changed_in_xact = false;
			clear_wake_marks();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			changed_in_xact = false;
			clear_wake_marks();
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
 * Whether the statement's changes are left to the row trigger
 * _verdict_wake, which wakes only the shards of the rows whose verdict
 * moved: updates of watermark once that trigger exists (a catalog from
 * before it wakes every shard, as does any insert, delete or truncate).
 */
static bool
woken_by_rows(TriggerData *trigdata)
{
	Relation	rel = trigdata->tg_relation;
	TriggerDesc *desc = rel->trigdesc;

	if (!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ||
		strcmp(RelationGetRelationName(rel), "watermark") != 0 || desc == NULL)
		return false;
	for (int i = 0; i < desc->numtriggers; i++)
		if (TRIGGER_FOR_ROW(desc->triggers[i].tgtype) &&
			strcmp(desc->triggers[i].tgname, "verdict_wake") == 0)
			return true;
	return false;
}

/*
 * finalize_internal.verdict_changed(): statement trigger on tracked_table, watermark
 * and what verdicts depend on, that marks the transaction, so its commit
 * bumps the epoch, and that decides which waiters of wait_final it wakes.
 */
Datum
finalize_verdict_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	const char *relname;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("finalize_internal.verdict_changed() must be called as a trigger")));
	register_callbacks();
	changed_in_xact = true;
	relname = RelationGetRelationName(trigdata->tg_relation);
	/* Their changes reach a verdict only through a write of watermark. */
	if (strcmp(relname, "consumer") == 0 || strcmp(relname, "derived_input") == 0)
		return PointerGetDatum(NULL);
	if (!woken_by_rows(trigdata))
		wake_all_shards = true;
	return PointerGetDatum(NULL);
}

/* Whether an update of watermark changed the row's loss_blocked. */
static bool
loss_flag_changed(TriggerData *trigdata)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	int			attnum = SPI_fnumber(desc, "loss_blocked");
	bool		old_null,
				new_null;
	Datum		old_value,
				new_value;

	if (attnum <= 0 || !TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		return false;
	old_value = heap_getattr(trigdata->tg_trigtuple, attnum, desc, &old_null);
	new_value = heap_getattr(trigdata->tg_newtuple, attnum, desc, &new_null);
	return old_null != new_null || (!old_null && DatumGetBool(old_value) != DatumGetBool(new_value));
}

/*
 * finalize_internal.verdict_wake(): row trigger on watermark, fired when a row's
 * finalized_until or loss_blocked changed (its WHEN clause), that marks
 * the shard of its table, so that the commit wakes the waiters of
 * wait_final there and nowhere else. A loss flag holds the tables built
 * from its table too (_lineage_blocked), whose waiters sit in other
 * shards: a change of it wakes them all (losses are rare).
 */
Datum
finalize_verdict_wake(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	int			attnum;
	bool		isnull;
	Datum		id;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("finalize_internal.verdict_wake() must be called as a row trigger")));
	register_callbacks();
	changed_in_xact = true;
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? trigdata->tg_newtuple : trigdata->tg_trigtuple;
	attnum = SPI_fnumber(RelationGetDescr(trigdata->tg_relation), "table_id");
	id = attnum > 0 ? heap_getattr(tuple, attnum, RelationGetDescr(trigdata->tg_relation), &isnull) : (Datum) 0;
	if (attnum <= 0 || isnull || loss_flag_changed(trigdata))
		wake_all_shards = true;
	else
	{
		int			shard = wait_shard(DatumGetInt64(id));

		wake_shards[shard / 64] |= UINT64CONST(1) << (shard % 64);
	}
	return PointerGetDatum(NULL);
}

/* An empty cache, the old one (if any) and its loss reads freed. */
static void
cache_start_over(void)
{
	HASHCTL		ctl;

	if (cache != NULL)
	{
		HTAB	   *old = cache;

		cache = NULL;			/* never left pointing at freed memory */
		hash_destroy(old);
	}
	if (loss_cxt == NULL)
		loss_cxt = AllocSetContextCreate(TopMemoryContext, "finalize verdict cache losses", ALLOCSET_SMALL_SIZES);
	MemoryContextReset(loss_cxt);
	ctl.keysize = CACHE_KEY_SIZE;
	ctl.entrysize = sizeof(CacheEntry);
	ctl.hcxt = TopMemoryContext;
	cache = hash_create("finalize verdict cache", 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/*
 * Reads the verdict under a fresh snapshot and, while its loss flag is
 * set, what the loss rule needs under the same one (out->losses, in the
 * caller's memory).
 */
static void
read_fresh(Datum table_name, TrackedVerdict *out)
{
	Snapshot	snapshot = RegisterSnapshot(catalog_fresh_snapshot());

	catalog_read_verdict(table_name, out, snapshot);
	if (out->loss_blocked)
		out->losses = loss_data_read(out->table_id, snapshot, CurrentMemoryContext);
	UnregisterSnapshot(snapshot);
}

/*
 * Reads the verdict of a tracked table, from the cache when its entry is
 * current, else from the tables (raising the not-tracked error there).
 * out->losses is set (a copy the caller owns) when the entry kept what the
 * loss rule read with the verdict; NULL tells sensor.c to read it afresh.
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
	LossData   *kept;

	/* In a parallel query the snapshot is the statement's: see catalog_fresh_snapshot. */
	if (finalize_shared == NULL || changed_in_xact || RecoveryInProgress() || IsInParallelMode() ||
		len >= CACHE_KEY_SIZE)
	{
		catalog_read_verdict(table_name, out, NULL);
		return;
	}

	register_callbacks();
	if (cache == NULL || hash_get_num_entries(cache) >= CACHE_MAX_ENTRIES)
		cache_start_over();

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
		if (out->losses != NULL)
			out->losses = loss_data_copy(out->losses, CurrentMemoryContext);
		return;
	}

	/*
	 * Opening the relations may process invalidations; the entry keeps the
	 * generation seen before, so it is stale at once if one arrived.
	 */
	read_fresh(table_name, out);
	/* What may fail (allocations) comes before the entry is written. */
	kept = out->losses != NULL && out->losses->size <= LOSS_CACHE_MAX_BYTES &&
		MemoryContextMemAllocated(loss_cxt, true) + out->losses->size <= LOSS_CACHE_BUDGET_BYTES
		? loss_data_copy(out->losses, loss_cxt) : NULL;
	entry = hash_search(cache, key, HASH_ENTER, &found);
	if (found && entry->verdict.losses != NULL)
		pfree(entry->verdict.losses);
	entry->verdict = *out;
	entry->verdict.losses = kept;
	entry->generation = generation;
	entry->epoch = epoch;
}
