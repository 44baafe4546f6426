/*
 * tsql.c
 *     The T-SQL the worker sends.
 *
 * Identifiers go through mssql_quote_ident and strings through
 * mssql_quote_literal; LSNs are written as 0x literals built from bytes. No
 * other text from a user or a catalog ever reaches a statement.
 */
#include "postgres.h"

#include "mssql_name.h"
#include "tsql.h"

/*
 * The start of every cycle, one batch with two results:
 * 1. max LSN, its commit time (server-local datetime), SQL Server's UTC clock
 *    and its current UTC offset in minutes;
 * 2. the capture instances the login may read, with their source tables and
 *    start LSNs (sp_cdc_help_change_data_capture needs no SELECT on cdc.*).
 */
const char *
tsql_source_state(void)
{
	return
		"SELECT m.max_lsn, sys.fn_cdc_map_lsn_to_time(m.max_lsn) AS max_time,\n"
		"       SYSUTCDATETIME() AS utc_now,\n"
		"       DATEPART(TZOFFSET, SYSDATETIMEOFFSET()) AS tz_offset_minutes\n"
		"  FROM (SELECT sys.fn_cdc_get_max_lsn() AS max_lsn) AS m;\n"
		"EXEC sys.sp_cdc_help_change_data_capture;\n";
}

/* Appends an LSN as a binary literal. */
static void
append_lsn(StringInfo buf, const Lsn *lsn)
{
	char		text[LSN_TEXT_LEN + 1];

	lsn_format(lsn, text);
	appendStringInfoString(buf, text);
}

/*
 * Appends one statement that aggregates the range (start, end] of a change
 * table on the server: rows per operation (2 insert, 4 update after-image,
 * 1 delete; update before-images are not counted twice), and the commit
 * times of the first and last LSN with rows. One row whatever the size of
 * the range, so a range costs the same to transfer with 10 rows or 10
 * million.
 */
void
tsql_append_range_aggregate(StringInfo buf, const char *capture_instance,
							const Lsn *start_exclusive, const Lsn *end_inclusive)
{
	char	   *ct_name = psprintf("%s_CT", capture_instance);

	appendStringInfoString(buf,
						   "SELECT s.ins, s.upd, s.del,\n"
						   "       sys.fn_cdc_map_lsn_to_time(s.first_lsn) AS first_time,\n"
						   "       sys.fn_cdc_map_lsn_to_time(s.last_lsn) AS last_time\n"
						   "  FROM (SELECT COUNT_BIG(CASE WHEN c.[__$operation] = 2 THEN 1 END) AS ins,\n"
						   "               COUNT_BIG(CASE WHEN c.[__$operation] = 4 THEN 1 END) AS upd,\n"
						   "               COUNT_BIG(CASE WHEN c.[__$operation] = 1 THEN 1 END) AS del,\n"
						   "               MIN(c.[__$start_lsn]) AS first_lsn, MAX(c.[__$start_lsn]) AS last_lsn\n"
						   "          FROM [cdc].");
	appendStringInfoString(buf, mssql_quote_ident(ct_name));
	appendStringInfoString(buf, " AS c\n         WHERE c.[__$start_lsn] > ");
	append_lsn(buf, start_exclusive);
	appendStringInfoString(buf, " AND c.[__$start_lsn] <= ");
	append_lsn(buf, end_inclusive);
	appendStringInfoString(buf, ") AS s;\n");
	pfree(ct_name);
}

/*
 * Appends the statement that reads a capture instance's low water mark and
 * its commit time (where a table resumes after a loss).
 */
void
tsql_append_min_lsn(StringInfo buf, const char *capture_instance)
{
	appendStringInfoString(buf, "SELECT m.min_lsn, sys.fn_cdc_map_lsn_to_time(m.min_lsn) AS min_time\n"
						   "  FROM (SELECT sys.fn_cdc_get_min_lsn(");
	appendStringInfoString(buf, mssql_quote_literal(capture_instance));
	appendStringInfoString(buf, ") AS min_lsn) AS m;\n");
}

/*
 * Appends the call that lists the DDL a capture instance recorded
 * (readable by a login that may read the instance, no SELECT on cdc.*).
 */
void
tsql_append_ddl_history(StringInfo buf, const char *capture_instance)
{
	appendStringInfoString(buf, "EXEC sys.sp_cdc_get_ddl_history @capture_instance = ");
	appendStringInfoString(buf, mssql_quote_literal(capture_instance));
	appendStringInfoString(buf, ";\n");
}
