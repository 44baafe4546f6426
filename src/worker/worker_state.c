/*
 * worker_state.c
 *     The worker's writes of PostgreSQL state.
 *
 * Writes happen in one short transaction at the end of a cycle, through the
 * same SQL functions an admin would use (record_range is the only write path
 * of the verdict). No transaction is ever open while the worker talks to SQL
 * Server; how the transactions begin and end is core/db.c's. What a cycle
 * reads at its start (a source's configuration, its tables and its hold) is
 * worker/source_config.c's.
 */
#include "postgres.h"

#include "catalog/pg_foreign_server.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "core/condition.h"
#include "core/db.h"
#include "core/settings.h"
#include "worker/worker_state.h"

/*
 * Records one range through finalize_internal.record_range (facts and verdict), by
 * table id: a name untracked and tracked again since the cycle read it is
 * another table, and the write is refused.
 */
void
ws_record_range(void *arg)
{
	RangeFacts *f = (RangeFacts *) arg;
	Oid			types[17] = {INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID, INT8OID, INT8OID, INT8OID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INTERVALOID};
	Datum		values[17];
	char		nulls[17];
	int			rc;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(f->table_id);
	if (f->has_start)
		values[1] = db_lsn_datum(&f->start);
	else
		nulls[1] = 'n';
	values[2] = db_lsn_datum(&f->end);
	values[3] = TimestampTzGetDatum(f->end_time);
	values[4] = Int64GetDatum(f->inserts);
	values[5] = Int64GetDatum(f->updates);
	values[6] = Int64GetDatum(f->deletes);
	if (f->has_rows)
	{
		values[7] = TimestampTzGetDatum(f->first_time);
		values[8] = TimestampTzGetDatum(f->last_time);
	}
	else
		nulls[7] = nulls[8] = 'n';
	values[9] = db_text_or_null(f->capture_instance, nulls, 9);
	values[10] = db_text_or_null(f->event, nulls, 10);
	if (f->detail != NULL)
		values[11] = JsonbPGetDatum(f->detail);
	else
		nulls[11] = 'n';
	if (f->event_periods != NULL)
		values[12] = JsonbPGetDatum(f->event_periods);
	else
		nulls[12] = 'n';
	if (f->sketch != NULL)
		values[13] = PointerGetDatum(f->sketch);
	else
		nulls[13] = 'n';
	if (f->has_event_span)
	{
		values[14] = TimestampTzGetDatum(f->first_event);
		values[15] = TimestampTzGetDatum(f->last_event);
	}
	else
		nulls[14] = nulls[15] = 'n';
	values[16] = db_usecs_datum(f->clock_tolerance);

	rc = db_query("SELECT " FINALIZE_INTERNAL_SCHEMA ".record_range($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, "
				  "$14, $15, $16, $17)", 17, types, values, nulls, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "finalize_internal.record_range failed: %s", SPI_result_code_string(rc));
}

/*
 * Whether a table is still tracked, locking its verdict row until the end
 * of the transaction (see finalize_internal.still_tracked).
 */
bool
ws_still_tracked(int64 table_id)
{
	Oid			type = INT8OID;
	Datum		value = Int64GetDatum(table_id);
	bool		isnull;
	Datum		result;

	if (db_query("SELECT " FINALIZE_INTERNAL_SCHEMA ".still_tracked($1)", 1, &type, &value, NULL, false, 1)
		!= SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not check whether table %lld is still tracked", (long long) table_id);
	result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return !isnull && DatumGetBool(result);
}

/* Records an event fact and optionally a new state (data loss, ...). */
void
ws_record_event(int64 table_id, const char *event, const Lsn *start, const Lsn *end,
				const char *capture_instance, const Jsonb *detail,
				const char *new_state, const char *state_detail)
{
	Oid			types[8] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID};
	Datum		values[8];
	char		nulls[8];

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(table_id);
	values[1] = CStringGetTextDatum(event);
	if (start)
		values[2] = db_lsn_datum(start);
	else
		nulls[2] = 'n';
	if (end)
		values[3] = db_lsn_datum(end);
	else
		nulls[3] = 'n';
	values[4] = db_text_or_null(capture_instance, nulls, 4);
	if (detail)
		values[5] = JsonbPGetDatum(detail);
	else
		nulls[5] = 'n';
	values[6] = db_text_or_null(new_state, nulls, 6);
	values[7] = db_text_or_null(state_detail, nulls, 7);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".record_event($1, $2, $3, $4, $5, $6, $7, $8)",
				  8, types, values, nulls);
}

/* Sets or clears (NULL) why a table could not be read. */
void
ws_set_condition(int64 table_id, Condition condition, const char *detail)
{
	Oid			types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	values[0] = Int64GetDatum(table_id);
	values[1] = db_text_or_null(condition_name(condition), nulls, 1);
	values[2] = db_text_or_null(detail, nulls, 2);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".set_condition($1, $2, $3)", 3, types, values, nulls);
}

/* Remembers the capture instance a table is read from. */
void
ws_set_capture_instance(int64 table_id, const char *capture_instance)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2];

	values[0] = Int64GetDatum(table_id);
	values[1] = CStringGetTextDatum(capture_instance);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".set_capture_instance($1, $2)", 2, types, values, NULL);
}

/*
 * Records a successful poll of the source; condition is COND_OK or
 * COND_CAPTURE_STALLED (with its message). started is when the cycle began,
 * for source_status.cycle_time.
 */
void
ws_source_ok(const char *server_name, const Lsn *max_lsn, TimestampTz max_time,
			 TimestampTz server_time, Condition condition, const char *message, TimestampTz started)
{
	Oid			types[8] = {TEXTOID, INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID,
	TIMESTAMPTZOID};
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(server_name);
	values[1] = Int32GetDatum(MyProcPid);
	values[2] = db_lsn_datum(max_lsn);
	values[3] = TimestampTzGetDatum(max_time);
	values[4] = TimestampTzGetDatum(server_time);
	values[5] = CStringGetTextDatum(condition_name(condition));
	values[6] = db_text_or_null(message, nulls, 6);
	values[7] = TimestampTzGetDatum(started);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".source_ok($1, $2, $3, $4, $5, $6, $7, $8)", 8, types, values,
					 nulls);
}

/*
 * Restarts a table after a data loss at new_offset (see _resume_after_loss);
 * lost_until ends the lost range of commit times, which begins
 * clock_tolerance before the old offset's: a lost commit after it may carry
 * an earlier time when SQL Server's clock was stepped back.
 */
void
ws_resume_after_loss(int64 table_id, const Lsn *new_offset, TimestampTz new_offset_time,
					 TimestampTz lost_until, const char *capture_instance, bool automatic,
					 const Jsonb *detail, int64 clock_tolerance)
{
	Oid			types[8] = {INT8OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, BOOLOID, JSONBOID,
	INTERVALOID};
	Datum		values[8];

	values[0] = Int64GetDatum(table_id);
	values[1] = db_lsn_datum(new_offset);
	values[2] = TimestampTzGetDatum(new_offset_time);
	values[3] = TimestampTzGetDatum(lost_until);
	values[4] = CStringGetTextDatum(capture_instance);
	values[5] = BoolGetDatum(automatic);
	values[6] = JsonbPGetDatum(detail);
	values[7] = db_usecs_datum(clock_tolerance);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".resume_after_loss($1, $2, $3, $4, $5, $6, $7, $8)", 8, types,
					 values, NULL);
}

/*
 * Whether the source serverid still exists under server_name, called first
 * in every transaction that writes its status or facts. The lock (DROP
 * SERVER takes it exclusively) keeps it so until commit: a pool worker
 * finishing a cycle of a server dropped meanwhile, perhaps re-created under
 * the same name, must not write its outcome as the new server's.
 */
bool
ws_lock_source(Oid serverid, const char *server_name)
{
	ForeignServer *server;

	LockDatabaseObject(ForeignServerRelationId, serverid, 0, AccessShareLock);
	server = GetForeignServerExtended(serverid, FSV_MISSING_OK);
	return server != NULL && strcmp(server->servername, server_name) == 0;
}

/*
 * Records when the source's Kerberos ticket ends (0: it has none, or logs
 * in otherwise), written only when it changed.
 */
void
ws_source_ticket(const char *server_name, TimestampTz expires)
{
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	values[0] = CStringGetTextDatum(server_name);
	values[1] = TimestampTzGetDatum(expires);
	nulls[1] = expires == 0 ? 'n' : ' ';
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".source_ticket($1, $2)", 2, types, values, nulls);
}

/* Records a failed poll of the source and when the next attempt is due. */
void
ws_source_failed(const char *server_name, Condition condition, const char *error,
				 TimestampTz next_attempt)
{
	Oid			types[5] = {TEXTOID, INT4OID, TEXTOID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[5];

	values[0] = CStringGetTextDatum(server_name);
	values[1] = Int32GetDatum(MyProcPid);
	values[2] = CStringGetTextDatum(condition_name(condition));
	values[3] = CStringGetTextDatum(error);
	values[4] = TimestampTzGetDatum(next_attempt);
	db_exec_internal("SELECT " FINALIZE_INTERNAL_SCHEMA ".source_failed($1, $2, $3, $4, $5)", 5, types, values, NULL);
}

/* Applies the facts retention (finalize.facts_retention) if the catalog is whole (db_when_whole). */
void
ws_purge_facts(const char *when_whole)
{
	db_exec_internal(psprintf("SELECT " FINALIZE_SCHEMA ".purge_facts()%s", when_whole), 0, NULL, NULL, NULL);
}
