/*
 * cdc_state.c
 *     Reads SQL Server's CDC state at the start of a cycle (batch 1): the
 *     max LSN, its commit time, SQL Server's clock and UTC offset, the
 *     object ids of the tracked tables and the capture instances. Every
 *     value that must be there is checked: one that does not decode fails
 *     the batch, never leaves a default behind. (The later batches are
 *     cdc_reader.c's.)
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "mssql/cdc_reader.h"
#include "mssql/tsql.h"

/*
 * Fails batch 1 for a value that did not decode: it must fail the cycle,
 * never leave a default behind.
 */
static bool
snapshot_problem(CdcState *snap, MssqlConn *conn, int col, const char *what, const char *tds_version)
{
	snap->problem = psprintf("SQL Server's %s arrived as %s and could not be decoded (tds_version %s).",
							 what, mssql_column_type_name(conn, col), tds_version);
	return false;
}

/* The state row: max LSN, its commit time, the clock and its UTC offset. */
static bool
decode_state_row(MssqlConn *conn, const char *tds_version, CdcState *snap)
{
	snap->has_max_lsn = mssql_get_lsn(conn, TSQL_STATE_MAX_LSN, &snap->max_lsn);
	snap->has_max_time = mssql_get_local_time(conn, TSQL_STATE_MAX_TIME, &snap->max_time_local);
	if (!mssql_get_local_time(conn, TSQL_STATE_UTC_NOW, &snap->utc_now))
		return snapshot_problem(snap, conn, TSQL_STATE_UTC_NOW, "clock (SYSDATETIMEOFFSET() in UTC)",
								tds_version);
	if (!mssql_get_int64(conn, TSQL_STATE_TZ_OFFSET, &snap->tz_offset_minutes))
		return snapshot_problem(snap, conn, TSQL_STATE_TZ_OFFSET, "UTC offset (DATEPART(TZOFFSET, ...))",
								tds_version);
	snap->has_state = true;
	return true;
}

/* A row of object ids: the tag is the name's index in the request. */
static void
decode_object_id_row(MssqlConn *conn, int64 *object_ids, int nnames)
{
	int64		tag;
	int64		id;

	if (mssql_get_int64(conn, TSQL_OBJECT_TAG, &tag) && tag >= 0 && tag < nnames &&
		mssql_get_int64(conn, TSQL_OBJECT_ID, &id))
		object_ids[tag] = id;
}

/* A row of sys.sp_cdc_help_change_data_capture; incomplete rows are skipped. */
static void
decode_instance_row(MssqlConn *conn, CdcState *snap, int *capacity)
{
	CaptureInstance *ci;

	if (snap->ninstances == *capacity)
	{
		*capacity *= 2;
		snap->instances = repalloc(snap->instances, sizeof(CaptureInstance) * *capacity);
	}
	ci = &snap->instances[snap->ninstances++];
	memset(ci, 0, sizeof(*ci));
	ci->source_schema = mssql_get_text(conn, TSQL_HELP_SCHEMA);
	ci->source_table = mssql_get_text(conn, TSQL_HELP_TABLE);
	ci->name = mssql_get_text(conn, TSQL_HELP_INSTANCE);
	ci->has_start = mssql_get_lsn(conn, TSQL_HELP_START_LSN, &ci->start_lsn);
	if (!mssql_get_int64(conn, TSQL_HELP_SOURCE_OBJECT_ID, &ci->source_object_id))
		ci->source_object_id = 0;
	if (ci->name == NULL || ci->source_schema == NULL || ci->source_table == NULL)
		snap->ninstances--;
}

/*
 * Reads batch 1: the max LSN row, the object ids of the given (quoted,
 * schema-qualified) names into object_ids (0: not visible), then the
 * capture instances unless with_instances is false (a settled source's
 * idle cycle asks only for the state row). Returns false with err set on a SQL Server failure
 * (snap->results says how far it got), or with snap->problem set when a
 * value could not be decoded.
 */
bool
cdc_read_state(MssqlConn *conn, const char *tds_version, const char *const *names, int64 *object_ids,
			   int nnames, bool with_instances, CdcState *snap, MssqlError *err)
{
	int			resultno = 0;
	int			r;
	StringInfoData sql;
	/* results: the state row, the object ids (one per chunk of names), the instances */
	int			nid_results = (nnames + TSQL_NAMES_PER_STATEMENT - 1) / TSQL_NAMES_PER_STATEMENT;
	int			help_result = 1 + nid_results;
	int			capacity = 16;

	memset(snap, 0, sizeof(*snap));
	snap->instances = palloc0(sizeof(CaptureInstance) * capacity);
	for (int i = 0; i < nnames; i++)
		object_ids[i] = 0;
	initStringInfo(&sql);
	tsql_source_state(&sql, names, nnames, with_instances);

	/* An error already (the first statement failed) is the cycle's failure. */
	if (!mssql_execute(conn, sql.data, err) || err->set)
		return false;
	while ((r = mssql_next_result(conn, err)) == 1)
	{
		/* An error before a result ended the statement before it. */
		if (err->set)
			return false;
		if (mssql_num_columns(conn) == 0)
			continue;
		if (mssql_num_columns(conn) < (resultno == 0 ? TSQL_STATE_TZ_OFFSET : resultno < help_result
									   ? TSQL_OBJECT_ID : TSQL_HELP_START_LSN))
		{
			snap->problem = psprintf("SQL Server returned result %d of the CDC state with %d columns.",
									 resultno + 1, mssql_num_columns(conn));
			return false;
		}
		while ((r = mssql_next_row(conn, err)) == 1)
		{
			if (resultno == 0 && !decode_state_row(conn, tds_version, snap))
				return false;
			else if (resultno > 0 && resultno < help_result)
				decode_object_id_row(conn, object_ids, nnames);
			else if (resultno == help_result)
				decode_instance_row(conn, snap, &capacity);
		}
		/* The call that ends the rows reads to the end of the statement: an
		 * error there means its rows may be cut (a partial list of instances). */
		if (r < 0 || err->set)
			return false;
		resultno++;
		snap->results = resultno;
	}
	return r == 0 && !err->set && snap->has_state;
}
