/*
 * consumer_state.c
 *     The worker's reads and writes of consumers, through the internal SQL
 *     functions of the catalog (docs/design/pipelines.md): the consumers
 *     are read with the tracked tables at the start of a cycle, their
 *     resolutions written in the cycle's write transaction. Only SQL moves a
 *     verdict (_consumer_resolved calls _advance).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/settings.h"
#include "worker/consumer_state.h"

/*
 * One row of _source_consumers (strings in cxt). An LSN the catalog holds
 * is always well formed (the lsn domain checks it); one that still does not
 * parse fails the cycle rather than be read as something else.
 */
static void
decode_consumer(HeapTuple tup, TupleDesc desc, MemoryContext cxt, SourceConsumer *sc)
{
	bool		isnull;
	char	   *reported = SPI_getvalue(tup, desc, 3);
	char	   *resolved_for = SPI_getvalue(tup, desc, 4);
	char	   *name = SPI_getvalue(tup, desc, 2);

	if (name == NULL)
		elog(ERROR, "_source_consumers returned a consumer without a name");
	sc->table_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	sc->consumer = MemoryContextStrdup(cxt, name);
	if (reported == NULL || !lsn_parse(reported, &sc->reported))
		elog(ERROR, "consumer \"%s\" has no valid reported LSN: \"%s\"", sc->consumer,
			 reported ? reported : "NULL");
	sc->has_resolved = resolved_for != NULL;
	if (sc->has_resolved && !lsn_parse(resolved_for, &sc->resolved_for))
		elog(ERROR, "consumer \"%s\" has an invalid resolved LSN: \"%s\"", sc->consumer, resolved_for);
}

/*
 * The consumers of a source's active tables that have reported an LSN (in
 * cxt), read in the transaction that reads the tables.
 */
void
ws_load_consumers(const char *server_name, MemoryContext cxt, SourceConsumer **consumers, int *nconsumers)
{
	Oid			argtype = TEXTOID;
	Datum		arg = CStringGetTextDatum(server_name);
	SourceConsumer *sc;

	*consumers = NULL;
	*nconsumers = 0;
	if (db_query("SELECT c.table_id, c.consumer, c.reported_lsn, c.resolved_for_lsn"
				 "  FROM " FINALIZE_INTERNAL_SCHEMA ".source_consumers($1) AS c",
				 1, &argtype, &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the consumers of server \"%s\"", server_name);
	if (SPI_processed == 0)
		return;
	sc = MemoryContextAllocZero(cxt, sizeof(SourceConsumer) * SPI_processed);
	for (uint64 i = 0; i < SPI_processed; i++)
		decode_consumer(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, cxt, &sc[i]);
	*consumers = sc;
	*nconsumers = (int) SPI_processed;
}

/*
 * Stores what a consumer's LSN resolved to: the commit time of the greatest
 * mapping row at or below for_lsn, which SQL holds back by the source's
 * clock_tolerance (and ignores when the consumer has since been dropped or
 * re-added lower; it never moves a commit time back).
 */
void
ws_consumer_resolved(int64 table_id, const char *consumer, const Lsn *for_lsn, const Lsn *mapped_lsn,
					 TimestampTz commit_time, int64 clock_tolerance)
{
	Oid			types[6] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, INTERVALOID};
	Datum		values[6];

	values[0] = Int64GetDatum(table_id);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = db_lsn_datum(for_lsn);
	values[3] = db_lsn_datum(mapped_lsn);
	values[4] = TimestampTzGetDatum(commit_time);
	values[5] = db_usecs_datum(clock_tolerance);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".consumer_resolved($1, $2, $3, $4, $5, $6)",
					 6, types, values, NULL);
}

/*
 * Stores why a consumer's LSN stays unresolved, so that operators read it in
 * finalize.consumers instead of the server log (SQL writes only a changed
 * reason).
 */
void
ws_consumer_unresolved(int64 table_id, const char *consumer, const Lsn *for_lsn, const char *error)
{
	Oid			types[4] = {INT8OID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[4];

	values[0] = Int64GetDatum(table_id);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = db_lsn_datum(for_lsn);
	values[3] = CStringGetTextDatum(error);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".consumer_unresolved($1, $2, $3, $4)",
					 4, types, values, NULL);
}

/*
 * Notes that a consumer reported an LSN beyond the cycle's max LSN: its
 * condition becomes report_ahead (SQL writes it once, when it starts; an
 * incident follows after finalize.alert_after, _check_consumers).
 */
void
ws_consumer_ahead(int64 table_id, const char *consumer, const Lsn *reported, const Lsn *max_lsn)
{
	Oid			types[4] = {INT8OID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[4];

	values[0] = Int64GetDatum(table_id);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = db_lsn_datum(reported);
	values[3] = db_lsn_datum(max_lsn);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".consumer_ahead($1, $2, $3, $4)", 4, types, values, NULL);
}

/*
 * Sets and clears the source's consumer_stalled conditions (and sends their
 * alerts), once per successful cycle, after its tables' writes.
 */
void
ws_check_consumers(const char *server_name)
{
	Oid			type = TEXTOID;
	Datum		value = CStringGetTextDatum(server_name);

	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".check_consumers($1)", 1, &type, &value, NULL);
}
