/*
 * delta_worker.c
 *     The lake worker of a store (a store server, or every file:// store
 *     at once): every finalize.poll_interval it reads the _delta_log/ of
 *     each Delta consumer's table (delta_read.c) and records what it
 *     proves through lake_observe, as the worker of an Iceberg catalog
 *     does (lake_worker.c calls delta_poll_store for a worker that is no
 *     catalog's).
 *
 * Isolation: a store has a process of its own, so a slow or failing store
 * never delays a SQL Server cycle or another store. Each consumer's store
 * is opened as the role that declared it (its USAGE and its owner's user
 * mapping, or pg_read_server_files for file://): a refusal is that
 * consumer's condition (store_auth_failed), never an error that stops the
 * worker. A poll stops reading once it has used its poll interval; the
 * consumers it did not reach are read first next time.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/internal_schema.h"
#include "core/redact.h"
#include "core/settings.h"
#include "lake/delta_read.h"
#include "lake/delta_worker.h"

/* A Delta consumer, what was recorded of it, and its opened store. */
typedef struct DeltaConsumer
{
	LakeConsumer lake;			/* iceberg_table holds the table's location */
	char	   *lsn_from;
	char	   *store_name;
	Oid			declarer;
	bool		opened;
	ObjectStore store;
	char	   *store_error;	/* why it could not be opened */
} DeltaConsumer;

/*
 * Opens a consumer's store as the role that declared it, as add_consumer
 * checked (store_try_open never raises); a refusal is kept, redacted, for
 * the consumer's condition.
 */
static void
open_store(DeltaConsumer *c, MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	StoreError	err;

	c->opened = store_try_open(c->store_name, c->declarer, &c->store, &err);
	if (!c->opened)
		c->store_error = redact_secrets(err.message, c->store.secrets);
	MemoryContextSwitchTo(old);
}

/*
 * Opens each consumer's store as its declarer, once for all the consumers
 * that share both (a store has few declarers: the distinct pairs are kept
 * in a short list); a refusal is each such consumer's condition.
 */
static void
open_stores(DeltaConsumer *c, int n, MemoryContext cxt)
{
	int		   *first = palloc(sizeof(int) * Max(n, 1));
	int			distinct = 0;

	for (int i = 0; i < n; i++)
	{
		int			k = 0;

		if (!c[i].lake.allowed)
			continue;
		while (k < distinct && (strcmp(c[first[k]].store_name, c[i].store_name) != 0 ||
								c[first[k]].declarer != c[i].declarer))
			k++;
		if (k == distinct)
		{
			open_store(&c[i], cxt);
			first[distinct++] = i;
			continue;
		}
		c[i].opened = c[first[k]].opened;
		c[i].store = c[first[k]].store;
		c[i].store_error = c[first[k]].store_error;
	}
	pfree(first);
}

/* One row of delta_consumers, copied into cxt. */
static void
read_consumer(HeapTuple tup, TupleDesc desc, MemoryContext cxt, DeltaConsumer *c)
{
	bool		isnull;
	char	   *lsn;
	Datum		d;

	c->lake.delta = true;
	c->lake.table_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	c->lake.table_name = db_text_copy(tup, desc, 2, cxt);
	c->lake.consumer = db_text_copy(tup, desc, 3, cxt);
	c->lake.iceberg_table = db_text_copy(tup, desc, 4, cxt);
	c->lsn_from = db_text_copy(tup, desc, 5, cxt);
	c->store_name = db_text_copy(tup, desc, 6, cxt);
	d = SPI_getbinval(tup, desc, 7, &isnull);
	c->lake.seen.any = !isnull;
	c->lake.seen.head_id = isnull ? 0 : DatumGetInt64(d);
	d = SPI_getbinval(tup, desc, 8, &isnull);
	c->lake.seen.head_sequence = isnull ? 0 : DatumGetInt64(d);
	lsn = db_text_copy(tup, desc, 9, cxt);
	c->lake.seen.any = c->lake.seen.any && lsn != NULL && lsn_parse(lsn, &c->lake.seen.lsn);
	c->lake.seen.table_uuid = db_text_copy(tup, desc, 10, cxt);
	d = SPI_getbinval(tup, desc, 11, &isnull);
	c->lake.source_serverid = isnull ? InvalidOid : DatumGetObjectId(d);
	d = SPI_getbinval(tup, desc, 12, &isnull);
	c->lake.quiet = !isnull && DatumGetBool(d);
	c->lake.lake_id = DatumGetInt64(SPI_getbinval(tup, desc, 13, &isnull));
	d = SPI_getbinval(tup, desc, 14, &isnull);
	c->lake.allowed = !isnull && DatumGetBool(d);
	d = SPI_getbinval(tup, desc, 15, &isnull);
	c->declarer = isnull ? InvalidOid : DatumGetObjectId(d);
	c->lake.seen_identity = db_text_copy(tup, desc, 16, cxt);
}

/*
 * Reads the Delta consumers of a store (serverid invalid: file://) into
 * cxt, each with its store opened, in one transaction. False when the
 * worker has nothing to do (*problem says why when it is worth a log).
 */
static bool
load_consumers(Oid serverid, MemoryContext cxt, DeltaConsumer **consumers, int *n, char **problem)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1] = {(Datum) 0};
	char		nulls[1] = {'n'};
	DeltaConsumer *out;

	*n = 0;
	db_begin("finalize: reading Delta consumers");
	*problem = lake_catalog_version_problem();
	if (*problem == NULL && OidIsValid(serverid))
	{
		ForeignServer *server = GetForeignServerExtended(serverid, FSV_MISSING_OK);

		if (server == NULL)
		{
			db_commit();
			return false;
		}
		args[0] = CStringGetTextDatum(server->servername);
		nulls[0] = ' ';
	}
	if (*problem != NULL)
	{
		*problem = MemoryContextStrdup(cxt, *problem);
		db_commit();
		return false;
	}
	if (SPI_execute_with_args("SELECT c.table_id, c.table_name, c.consumer, c.delta_table, c.lsn_from, c.store, "
							  "c.seen_head_id, c.seen_head_sequence, c.seen_lsn, c.seen_table_uuid, c.source_serverid, "
							  "c.quiet, c.lake_id, c.allowed, c.declarer, c.seen_identity FROM " FINALIZE_INTERNAL_SCHEMA
							  ".delta_consumers($1) AS c WHERE " FINALIZE_INTERNAL_SCHEMA ".catalog_restoring() IS NULL",
							  1, argtypes, args, nulls, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list the Delta consumers of a store");
	out = MemoryContextAllocZero(cxt, sizeof(DeltaConsumer) * (SPI_processed + 1));
	for (uint64 i = 0; i < SPI_processed; i++)
		read_consumer(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, cxt, &out[i]);
	*n = (int) SPI_processed;
	*consumers = out;
	open_stores(out, *n, cxt);
	db_commit();
	return *n > 0;
}

/*
 * Reads one consumer's log into its observation (no transaction is open);
 * false when there is nothing to record (the poll's time ran out first).
 */
static bool
poll_consumer(DeltaConsumer *c, LakeObservation *obs)
{
	DeltaReader r;
	const char *key;

	memset(obs, 0, sizeof(*obs));
	obs->consumer = &c->lake;
	if (!c->lake.allowed || c->store_error != NULL)
	{
		obs->condition = LAKE_STORE_AUTH_FAILED;
		obs->detail = c->store_error != NULL
			? psprintf("Store %s cannot be read as the role that declared consumer \"%s\": %s", c->store_name,
					   c->lake.consumer, c->store_error)
			: psprintf("The role that declared consumer \"%s\" may no longer read store %s (USAGE on the server "
					   "and the use of its owner's user mapping, or pg_read_server_files for file://); it is "
					   "not read.", c->lake.consumer, c->store_name);
		return true;
	}
	memset(&r, 0, sizeof(r));
	r.store = &c->store;
	r.location = c->lake.iceberg_table;
	r.obs = obs;
	r.cxt = CurrentMemoryContext;
	r.walk_floor = -1;
	r.lsn_from_text = c->lsn_from;
	/* A consumer's poll reads for one poll interval at most (what was judged by then is recorded). */
	r.deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), finalize_poll_interval_ms);
	key = store_key_of(&c->store, c->lake.iceberg_table);
	r.store_identity = store_identity(&c->store);
	if (c->lake.seen.any && delta_identity_gone(c->lake.seen_identity, r.store_identity, NULL) != NULL)
	{
		/* Checked before the location is resolved: in another bucket it may name nothing. */
		obs->rolled_back = true;
		obs->reason = delta_identity_gone(c->lake.seen_identity, r.store_identity, NULL);
		return true;
	}
	if (key == NULL || !delta_lsn_from_parse(c->lsn_from, &r.from))
	{
		/* add_consumer refuses both; a row written by hand is not trusted either. */
		obs->condition = LAKE_TABLE_NOT_FOUND;
		obs->detail = psprintf("Delta table %s is not in store %s, or lsn_from \"%s\" names no place.",
							   c->lake.iceberg_table, c->store_name, c->lsn_from);
		return true;
	}
	r.log = key[0] == '\0' ? "_delta_log/" : psprintf("%s/_delta_log/", key);
	pgstat_report_activity(STATE_RUNNING, psprintf("finalize: reading Delta table %s", c->lake.iceberg_table));
	return delta_read_consumer(&r, &c->lake);
}

/* Copies what an observation points into the poll's context. */
static void
keep_observation(LakeObservation *obs)
{
	if (obs->detail != NULL)
		obs->detail = pstrdup(obs->detail);
	if (obs->table_uuid != NULL)
		obs->table_uuid = pstrdup(obs->table_uuid);
	if (obs->reason != NULL)
		obs->reason = pstrdup(obs->reason);
	if (obs->identity != NULL)
		obs->identity = pstrdup(obs->identity);
}

/*
 * One poll of a store's Delta consumers: returns false when the worker
 * should exit (no consumer left, the server gone), with *delay_ms until
 * the next one.
 */
bool
delta_poll_store(Oid serverid, MemoryContext cxt, long *delay_ms)
{
	DeltaConsumer *consumers = NULL;
	LakeObservation *obs;
	int			n;
	int			done;
	int			kept = 0;
	char	   *problem = NULL;
	TimestampTz start = GetCurrentTimestamp();
	MemoryContext scratch;

	*delay_ms = finalize_poll_interval_ms;
	if (!load_consumers(serverid, cxt, &consumers, &n, &problem))
	{
		if (problem == NULL)
			return false;
		ereport(LOG, (errmsg("finalize: lake worker: %s", problem)));
		return true;
	}
	obs = palloc0(sizeof(LakeObservation) * n);
	scratch = AllocSetContextCreate(cxt, "finalize Delta log", ALLOCSET_DEFAULT_SIZES);
	for (done = 0; done < n; done++)
	{
		if (done > 0 && TimestampDifferenceExceeds(start, GetCurrentTimestamp(), finalize_poll_interval_ms))
			break;
		CHECK_FOR_INTERRUPTS();
		/* A log's commits live only while they are judged. */
		MemoryContextReset(scratch);
		MemoryContextSwitchTo(scratch);
		if (poll_consumer(&consumers[done], &obs[kept]))
		{
			MemoryContextSwitchTo(cxt);
			keep_observation(&obs[kept++]);
		}
		MemoryContextSwitchTo(cxt);
	}
	MemoryContextDelete(scratch);
	/* As for a catalog: a poll cut short writes when it looked at each consumer it reached. */
	for (int i = 0; done < n && i < done; i++)
		consumers[i].lake.quiet = false;
	pgstat_report_activity(STATE_IDLE, NULL);
	lake_record_all(obs, kept);
	*delay_ms = Max(finalize_poll_interval_ms - TimestampDifferenceMilliseconds(start, GetCurrentTimestamp()), 0);
	return true;
}
