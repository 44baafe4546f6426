/*
 * lake_state.c
 *     The lake worker's reads and writes of finalize's catalog, through
 *     SPI in the transactions the worker opens (core/db.h): the Iceberg
 *     consumers of a catalog, and what a poll saw of any lake consumer,
 *     Iceberg or Delta, recorded through one function (lake_observe).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "core/internal_schema.h"
#include "core/db.h"
#include "core/settings.h"
#include "core/source_table.h"
#include "lake/lake_state.h"

#define OBSERVE_SIGNATURE "lake_observe(bigint, bigint, text, text, text, bigint, bigint, bigint, text, text, boolean, text, text, text)"

/*
 * NULL when the catalog is at this library's version and has the lake's
 * functions; else why the worker waits (as a source worker waits: the
 * library must not guess at an older catalog's functions).
 */
char *
lake_catalog_version_problem(void)
{
	char	   *version;

	if (!OidIsValid(get_extension_oid("finalize", true)))
		return pstrdup("extension finalize is not installed in this database");
	if (SPI_execute("SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize'",
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read the version of extension finalize");
	version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (strcmp(version, FINALIZE_VERSION) != 0 || !internal_function_exists(OBSERVE_SIGNATURE))
		return psprintf("extension finalize is at version %s in this database but the loaded library is version %s; "
						"no Iceberg table is read until they match: run ALTER EXTENSION finalize UPDATE",
						version, FINALIZE_VERSION);
	return NULL;
}

/* A bigint column, or 0 with *has false when NULL. */
static int64
int8_col(HeapTuple tup, TupleDesc desc, int col, bool *has)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	*has = !isnull;
	return isnull ? 0 : DatumGetInt64(d);
}

/* A bool column (NULL as false). */
static bool
bool_col(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return !isnull && DatumGetBool(d);
}

/* One row of _lake_consumers, copied into cxt. */
static void
read_consumer(HeapTuple tup, TupleDesc desc, MemoryContext cxt, LakeConsumer *c)
{
	bool		has;
	bool		isnull;
	char	   *lsn;
	Datum		d;

	c->table_id = int8_col(tup, desc, 1, &has);
	c->table_name = db_text_copy(tup, desc, 2, cxt);
	c->consumer = db_text_copy(tup, desc, 3, cxt);
	c->iceberg_table = db_text_copy(tup, desc, 4, cxt);
	c->ref = db_text_copy(tup, desc, 5, cxt);
	c->lsn_property = db_text_copy(tup, desc, 6, cxt);
	c->seen.head_id = int8_col(tup, desc, 7, &c->seen.any);
	c->seen.head_sequence = int8_col(tup, desc, 8, &has);
	lsn = db_text_copy(tup, desc, 9, cxt);
	c->seen.any = c->seen.any && lsn != NULL && lsn_parse(lsn, &c->seen.lsn);
	c->seen.table_uuid = db_text_copy(tup, desc, 10, cxt);
	d = SPI_getbinval(tup, desc, 11, &isnull);
	c->source_serverid = isnull ? InvalidOid : DatumGetObjectId(d);
	c->quiet = bool_col(tup, desc, 12);
	c->lake_id = int8_col(tup, desc, 13, &has);
	c->allowed = bool_col(tup, desc, 14);
}

/*
 * Reads the catalog's options and the consumers it serves, copied into
 * cxt, in one transaction. False when the worker has nothing to do: the
 * server is gone or is no catalog, or has no consumer left (*problem says
 * why when it is an error to log), or none is read while the catalog is
 * being restored (src/sql/11d_catalog_seal.sql, checked in the same
 * statement): the scheduler starts the worker again once it is whole.
 */
bool
lake_load_consumers(Oid serverid, MemoryContext cxt, LakeCatalog **cat, LakeConsumer **consumers,
					int *nconsumers, char **problem)
{
	ForeignServer *server;
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];
	LakeConsumer *out;

	*problem = NULL;
	*nconsumers = 0;
	*consumers = NULL;
	*cat = NULL;
	db_begin("finalize: reading Iceberg consumers");
	*problem = lake_catalog_version_problem();
	if (*problem != NULL)
	{
		*problem = MemoryContextStrdup(cxt, *problem);
		db_commit();
		return false;
	}
	server = GetForeignServerExtended(serverid, FSV_MISSING_OK);
	if (server == NULL)
	{
		db_commit();
		return false;
	}
	*cat = lake_catalog_config(serverid, cxt, problem);
	if (*cat == NULL)
	{
		*problem = MemoryContextStrdup(cxt, *problem);
		db_commit();
		return false;
	}
	args[0] = CStringGetTextDatum(server->servername);
	if (SPI_execute_with_args("SELECT c.table_id, c.table_name, c.consumer, c.iceberg_table, c.ref, c.lsn_property, "
							  "c.seen_head_id, c.seen_head_sequence, c.seen_lsn, c.seen_table_uuid, c.source_serverid, "
							  "c.quiet, c.lake_id, c.allowed FROM " FINALIZE_INTERNAL_SCHEMA ".lake_consumers($1) AS c "
							  "WHERE " FINALIZE_INTERNAL_SCHEMA ".catalog_restoring() IS NULL",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list the Iceberg consumers of server \"%s\"", server->servername);
	out = MemoryContextAllocZero(cxt, sizeof(LakeConsumer) * (SPI_processed + 1));
	for (uint64 i = 0; i < SPI_processed; i++)
		read_consumer(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, cxt, &out[i]);
	*nconsumers = (int) SPI_processed;
	*consumers = out;
	db_commit();
	return *nconsumers > 0;
}

/*
 * Whether an observation says something new: a condition, a rollback, a
 * new LSN or head. Only an answer that says nothing new may be skipped
 * next time with its ETag.
 */
bool
lake_observation_new(const LakeObservation *obs)
{
	const LakeSeen *seen = &obs->consumer->seen;

	return obs->condition != LAKE_OK || obs->rolled_back ||
		(obs->has_lsn && (!seen->any || lsn_cmp(&obs->lsn, &seen->lsn) != 0)) ||
		(obs->has_head && seen->any && obs->head_id != seen->head_id) ||
		(obs->identity != NULL && obs->has_lsn &&
		 (obs->consumer->seen_identity == NULL || strcmp(obs->identity, obs->consumer->seen_identity) != 0));
}

/*
 * Whether an observation has anything to record: something new, or a
 * consumer whose row wants writing (a condition to clear, polled_at to
 * refresh). A thousand consumers polled every 10 seconds whose tables do
 * not move cost no statement.
 */
bool
lake_needs_record(const LakeObservation *obs)
{
	return lake_observation_new(obs) || !obs->consumer->quiet;
}

/*
 * Records one observation (finalize_internal.lake_observe) in the caller's write
 * transaction; returns whether the consumer's report moved.
 */
bool
lake_record(const LakeObservation *obs)
{
	Oid			types[14] = {INT8OID, INT8OID, TEXTOID, TEXTOID, TEXTOID, INT8OID, INT8OID, INT8OID, TEXTOID,
	TEXTOID, BOOLOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[14];
	char		nulls[14];
	char		lsn[LSN_TEXT_LEN + 1];
	char		held[LSN_TEXT_LEN + 1];
	char		judged[LSN_TEXT_LEN + 1];
	const LakeSeen *seen = &obs->consumer->seen;
	bool		isnull;

	memset(nulls, ' ', sizeof(nulls));
	lsn_format(&obs->lsn, lsn);
	lsn_format(&obs->held_lsn, held);
	lsn_format(&seen->lsn, judged);
	values[0] = Int64GetDatum(obs->consumer->lake_id);
	values[1] = Int64GetDatum(seen->head_id);
	nulls[1] = seen->any ? ' ' : 'n';
	values[2] = db_text_or_null(seen->any ? judged : NULL, nulls, 2);
	values[3] = db_text_or_null(lake_condition_name(obs->condition), nulls, 3);
	values[4] = db_text_or_null(obs->detail, nulls, 4);
	values[5] = Int64GetDatum(obs->head_id);
	nulls[5] = obs->has_head ? ' ' : 'n';
	values[6] = Int64GetDatum(obs->head_sequence);
	nulls[6] = obs->has_head ? ' ' : 'n';
	values[7] = Int64GetDatum(obs->carrier_id);
	nulls[7] = obs->has_carrier ? ' ' : 'n';
	values[8] = db_text_or_null(obs->has_lsn ? lsn : NULL, nulls, 8);
	values[9] = db_text_or_null(obs->table_uuid, nulls, 9);
	values[10] = BoolGetDatum(obs->rolled_back);
	values[11] = db_text_or_null(obs->rolled_back && obs->held_known ? held : NULL, nulls, 11);
	values[12] = db_text_or_null(obs->reason, nulls, 12);
	values[13] = db_text_or_null(obs->identity, nulls, 13);
	if (SPI_execute_with_args("SELECT " FINALIZE_INTERNAL_SCHEMA ".lake_observe($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, "
							  "$11, $12, $13, $14)", 14, types, values, nulls, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not record what table %s holds for consumer \"%s\"",
			 obs->consumer->iceberg_table, obs->consumer->consumer);
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) && !isnull;
}

/* One observation recorded in a subtransaction (subxact_try's step). */
typedef struct RecordStep
{
	const LakeObservation *obs;
	bool		moved;
} RecordStep;

static void
record_step(void *arg)
{
	RecordStep *r = (RecordStep *) arg;

	r->moved = lake_record(r->obs);
}

/*
 * Records the observations that need it in one write transaction, each in
 * a subtransaction of its own: one that fails (logged) loses no other's.
 * Returns the sources to wake.
 */
static List *
record_each(LakeObservation *obs, int n)
{
	List	   *wake = NIL;
	int			todo = 0;

	for (int i = 0; i < n; i++)
		todo += lake_needs_record(&obs[i]) ? 1 : 0;
	if (todo == 0)
		return NIL;
	db_begin_write("finalize: recording what lake tables hold");
	for (int i = 0; i < n; i++)
	{
		RecordStep	r = {&obs[i], false};
		ErrorData  *error = NULL;

		if (!lake_needs_record(&obs[i]))
			continue;
		if (!subxact_try(record_step, &r, &error))
		{
			ereport(LOG,
					(errmsg("finalize: could not record what %s table %s holds for consumer \"%s\" of table \"%s\": %s",
							obs[i].consumer->delta ? "Delta" : "Iceberg", obs[i].consumer->iceberg_table,
							obs[i].consumer->consumer,
							obs[i].consumer->table_name, error->message),
					 errdetail("The next poll tries again; the verdict waits for it.")));
			continue;
		}
		if (r.moved && OidIsValid(obs[i].consumer->source_serverid))
			wake = list_append_unique_oid(wake, obs[i].consumer->source_serverid);
	}
	db_commit();
	return wake;
}

/*
 * Records a poll's observations (record_each) and asks the source worker
 * of each consumer whose report moved for a cycle now, which resolves the
 * LSN to a commit time at once.
 */
void
lake_record_all(LakeObservation *obs, int n)
{
	ListCell   *lc;

	foreach(lc, record_each(obs, n))
		(void) source_table_request_cycle(MyDatabaseId, lfirst_oid(lc));
}
