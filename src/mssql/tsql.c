/*
 * tsql.c
 *     The T-SQL the worker sends.
 *
 * Identifiers go through mssql_quote_ident and strings through
 * mssql_quote_literal; LSNs are written as 0x literals built from bytes. No
 * other text from a user or a catalog ever reaches a statement.
 *
 * Reads go through the documented access path a least-privilege login may
 * use: the capture instance's query function cdc.fn_cdc_get_all_changes_<ci>
 * (SELECT on the captured columns plus the gating role; no SELECT on the cdc
 * schema), sys.fn_cdc_get_min_lsn and sys.sp_cdc_get_ddl_history. The query
 * function reads the change table WITH (NOLOCK) itself: a range ends at or
 * below max LSN, so every row of it is committed, and the min LSN read after
 * the ranges still catches a cleanup that ran during the read.
 *
 * Statements whose values change every cycle run through sys.sp_executesql
 * with typed binary(10) parameters, so SQL Server compiles each statement
 * shape once and reuses its plan; the batch around them only holds EXECs
 * and markers. A compile error inside sp_executesql (208: a capture
 * instance dropped since the first batch) aborts only that call, so one
 * table's failure does not stop the reads of the others.
 *
 * Every statement of a read batch is preceded by a one-column marker result
 * "SELECT <n> AS finalize_statement": a statement that fails returns no
 * result, and the markers say which one it was and which error is its own.
 */
#include "postgres.h"

#include "utils/datetime.h"

#include "mssql/mssql_name.h"
#include "mssql/tsql.h"

/*
 * The session options set once after every login. SQL Server truncates
 * (n)varchar(max) values to TEXTSIZE bytes, 4,096 unless the client sets it
 * (FreeTDS sets nothing unless configured): a DDL statement longer than
 * 2,048 characters would arrive cut.
 */
const char *
tsql_session_setup(void)
{
	return "SET TEXTSIZE 2147483647;\n";
}

/*
 * The start of every cycle, one batch with three results:
 * 1. max LSN, its commit time (server-local datetime), then SQL Server's
 *    clock in UTC and its current UTC offset in minutes, both from one
 *    reading of SYSDATETIMEOFFSET() taken AFTER max LSN was read (a commit
 *    seen is never later than a clock read after it), and as datetime, which
 *    every TDS version decodes (below TDS 7.3 datetime2 and datetimeoffset
 *    arrive as nvarchar);
 * 2. the object ids of the tracked source tables, resolved by SQL Server
 *    with the database's collation (dbo.Orders and dbo.orders are two
 *    tables in a case-sensitive database), TSQL_NAMES_PER_STATEMENT per
 *    result so that no statement grows with the number of tables;
 * 3. the capture instances the login may read, with their source object ids
 *    and start LSNs (sp_cdc_help_change_data_capture needs no SELECT on cdc.*).
 */
void
tsql_source_state(StringInfo buf, const char *const *qualified_names, int nnames, bool with_instances)
{
	appendStringInfoString(buf,
						   "DECLARE @max_lsn binary(10) = sys.fn_cdc_get_max_lsn();\n"
						   "DECLARE @max_time datetime = sys.fn_cdc_map_lsn_to_time(@max_lsn);\n"
						   "DECLARE @now datetimeoffset(7) = SYSDATETIMEOFFSET();\n"
						   "SELECT @max_lsn AS max_lsn, @max_time AS max_time,\n"
						   "       CONVERT(datetime, SWITCHOFFSET(@now, '+00:00')) AS utc_now,\n"
						   "       DATEPART(TZOFFSET, @now) AS tz_offset_minutes;\n");
	for (int i = 0; i < nnames; i++)
	{
		bool		first = i % TSQL_NAMES_PER_STATEMENT == 0;
		bool		last = i == nnames - 1 || (i + 1) % TSQL_NAMES_PER_STATEMENT == 0;

		appendStringInfo(buf, "%s SELECT %d AS finalize_table, OBJECT_ID(%s) AS object_id%s\n",
						 first ? "" : "UNION ALL", i, mssql_quote_literal(qualified_names[i]), last ? ";" : "");
	}
	if (with_instances)
		appendStringInfoString(buf, "EXEC sys.sp_cdc_help_change_data_capture;\n");
}

/* A schema-qualified name, quoted, for OBJECT_ID. */
char *
tsql_qualified_name(const char *schema, const char *object)
{
	return psprintf("%s.%s", mssql_quote_ident(schema), mssql_quote_ident(object));
}

/* Appends an LSN as a binary literal. */
static void
append_lsn(StringInfo buf, const Lsn *lsn)
{
	char		text[LSN_TEXT_LEN + 1];

	lsn_format(lsn, text);
	appendStringInfoString(buf, text);
}

/* Appends the marker result that precedes statement n of a read batch. */
void
tsql_append_marker(StringInfo buf, int n)
{
	appendStringInfo(buf, "SELECT %d AS finalize_statement;\n", n);
}

/*
 * A server wall time as a datetime2 literal in ISO 8601 (CONVERT style
 * 126), which neither DATEFORMAT nor the login's language reads otherwise.
 */
static void
append_wall_time(StringInfo buf, Timestamp t)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(t, NULL, &tm, &fsec, NULL, NULL) != 0)
		elog(ERROR, "a period boundary is out of range");
	appendStringInfo(buf, "CONVERT(datetime2(7), '%04d-%02d-%02dT%02d:%02d:%02d.%06d', 126)", tm.tm_year, tm.tm_mon,
					 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec);
}

/*
 * The statement text of a range split at server wall times splits[0..n):
 * the counts and commit times per piece (piece k: rows committed before
 * splits[k] and not before splits[k - 1]) with each piece's first and last
 * LSN, and the grand total (GROUPING(x.p) = 1) in the columns of the plain
 * aggregate. Each transaction's commit time is mapped once (DISTINCT LSNs),
 * and a piece's first and last commit times are the least and greatest of
 * its rows' (not those of its least and greatest LSN: a clock that went
 * back commits later LSNs at earlier times).
 */
static char *
split_aggregate(const char *fn, const Timestamp *splits, int nsplits)
{
	StringInfoData stmt;

	initStringInfo(&stmt);
	appendStringInfoString(&stmt,
						   "SELECT COUNT_BIG(CASE WHEN x.op = 2 THEN 1 END) AS ins,\n"
						   "       COUNT_BIG(CASE WHEN x.op = 4 THEN 1 END) AS upd,\n"
						   "       COUNT_BIG(CASE WHEN x.op = 1 THEN 1 END) AS del,\n"
						   "       MIN(x.ct) AS first_time, MAX(x.ct) AS last_time,\n"
						   "       GROUPING(x.p) AS gp, x.p, MIN(x.l) AS first_lsn, MAX(x.l) AS last_lsn\n"
						   "  FROM (SELECT r.l, r.op, t.ct, CASE");
	for (int i = 0; i < nsplits; i++)
	{
		appendStringInfoString(&stmt, " WHEN t.ct < ");
		append_wall_time(&stmt, splits[i]);
		appendStringInfo(&stmt, " THEN %d", i);
	}
	appendStringInfo(&stmt, " ELSE %d END AS p\n"
					 "          FROM (SELECT a.[__$start_lsn] AS l, a.[__$operation] AS op\n"
					 "                  FROM [cdc].%s(@from, @to, N'all') AS a) AS r\n"
					 "          JOIN (SELECT d.l, sys.fn_cdc_map_lsn_to_time(d.l) AS ct\n"
					 "                  FROM (SELECT DISTINCT f.[__$start_lsn] AS l\n"
					 "                          FROM [cdc].%s(@from, @to, N'all') AS f) AS d) AS t ON t.l = r.l) AS x\n"
					 " GROUP BY GROUPING SETS ((x.p), ())", nsplits, fn, fn);
	return stmt.data;
}

/*
 * Appends one statement that aggregates the range (start, end] of a capture
 * instance on the server: rows per operation (2 insert, 4 update
 * after-image, 1 delete; row filter 'all' returns no before-images), and the
 * least and greatest commit time of its rows (each transaction's mapped
 * once): not those of its first and last LSN, since a clock stepped back
 * within the range commits later LSNs at earlier times, and a row between
 * them could lie in another period than both. One row whatever the size of
 * the range, so a range costs the same to transfer with 10 rows or 10
 * million. With split points (a commit-time table's period boundaries in
 * the server's wall time, ascending), the same per piece of the range
 * between them as well (split_aggregate): one row per piece with rows.
 *
 * The query function takes its low end inclusively, so it gets start + 1.
 * When that is below the instance's low water mark (cleanup passed it) the
 * function raises error 313; the min LSN read after the ranges then shows
 * the loss, which is what decides.
 */
void
tsql_append_range_aggregate(StringInfo buf, const char *capture_instance, const Lsn *start_exclusive,
							const Lsn *end_inclusive, const Timestamp *splits, int nsplits)
{
	char	   *fn_name = psprintf("fn_cdc_get_all_changes_%s", capture_instance);
	StringInfoData stmt;
	Lsn			from;

	initStringInfo(&stmt);
	if (nsplits > 0)
		appendStringInfoString(&stmt, split_aggregate(mssql_quote_ident(fn_name), splits, nsplits));
	else
	{
		const char *fn = mssql_quote_ident(fn_name);

		appendStringInfo(&stmt,
						 "SELECT COUNT_BIG(CASE WHEN r.op = 2 THEN 1 END) AS ins,\n"
						 "       COUNT_BIG(CASE WHEN r.op = 4 THEN 1 END) AS upd,\n"
						 "       COUNT_BIG(CASE WHEN r.op = 1 THEN 1 END) AS del,\n"
						 "       MIN(t.ct) AS first_time, MAX(t.ct) AS last_time\n"
						 "  FROM (SELECT a.[__$start_lsn] AS l, a.[__$operation] AS op\n"
						 "          FROM [cdc].%s(@from, @to, N'all') AS a) AS r\n"
						 "  JOIN (SELECT d.l, sys.fn_cdc_map_lsn_to_time(d.l) AS ct\n"
						 "          FROM (SELECT DISTINCT f.[__$start_lsn] AS l\n"
						 "                  FROM [cdc].%s(@from, @to, N'all') AS f) AS d) AS t ON t.l = r.l",
						 fn, fn);
	}
	appendStringInfoString(buf, "EXEC sys.sp_executesql ");
	appendStringInfoString(buf, mssql_quote_literal(stmt.data));

	/* start < end, so start + 1 exists */
	if (!lsn_increment(start_exclusive, &from))
		from = *end_inclusive;
	appendStringInfoString(buf, ", N'@from binary(10), @to binary(10)', @from = ");
	append_lsn(buf, &from);
	appendStringInfoString(buf, ", @to = ");
	append_lsn(buf, end_inclusive);
	appendStringInfoString(buf, ";\n");
	pfree(stmt.data);
	pfree(fn_name);
}

/*
 * Appends one statement that computes, on the server, the event-time facts
 * of the range (start, end] of a capture instance for an event column
 * (docs/design/event_time.md), in one result whose rows are told apart by
 * GROUPING(): per (event slot, operation) the rows (slot = whole @slot
 * seconds since 1900-01-01 of the event's local time, -1 before 1900, NULL
 * for a NULL event time); per lateness bucket the rows (the sketch's
 * CEILING(LOG(ms) / LOG(@gamma)), -1 for 0 ms, -2 for an event after its
 * commit); and the grand total with the least and greatest event time in
 * milliseconds since 1900-01-01. Transfer is O(slots + buckets) whatever
 * the number of rows. Lateness is commit time minus event time read as
 * local wall times; the worker corrects it for zones (never smaller).
 *
 * The commit time of each transaction is mapped once (DISTINCT LSNs), not
 * per row. A datetimeoffset column (utc_offset true) is converted to UTC
 * for its slots, and for its lateness to the wall time of the server's
 * current UTC offset (server_offset_minutes), the zone commit times are
 * stamped in; every other type is read as it is.
 */
void
tsql_append_range_events(StringInfo buf, const char *capture_instance, const char *event_column,
						 bool utc_offset, int server_offset_minutes, const Lsn *start_exclusive,
						 const Lsn *end_inclusive, int64 slot_seconds, double gamma)
{
	char	   *fn = mssql_quote_ident(psprintf("fn_cdc_get_all_changes_%s", capture_instance));
	const char *col = mssql_quote_ident(event_column);
	const char *lv = utc_offset ? "r.lv" : "r.ev";
	int			off = abs(server_offset_minutes);
	StringInfoData stmt;
	Lsn			from;

	initStringInfo(&stmt);
	appendStringInfo(&stmt,
					 "SELECT GROUPING(x.k) AS gk, GROUPING(x.b) AS gb, x.k, x.op, x.b, COUNT_BIG(*) AS n,\n"
					 "       DATEDIFF_BIG(millisecond, '19000101', MIN(x.ev)) AS min_ms,\n"
					 "       DATEDIFF_BIG(millisecond, '19000101', MAX(x.ev)) AS max_ms\n"
					 "  FROM (SELECT r.op, r.ev,\n"
					 "               CASE WHEN r.ev IS NULL THEN NULL WHEN r.ev < '19000101' THEN CONVERT(bigint, -1)\n"
					 "                    ELSE DATEDIFF_BIG(second, '19000101', r.ev) / @slot END AS k,\n"
					 "               CASE WHEN r.ev IS NULL THEN NULL\n"
					 "                    WHEN DATEDIFF_BIG(millisecond, %s, t.ct) > 0\n"
					 "                    THEN CONVERT(bigint, CEILING(LOG(CONVERT(float, DATEDIFF_BIG(millisecond, %s, t.ct))) / LOG(@gamma)))\n"
					 "                    WHEN DATEDIFF_BIG(millisecond, %s, t.ct) = 0 THEN CONVERT(bigint, -1)\n"
					 "                    ELSE CONVERT(bigint, -2) END AS b\n"
					 "          FROM (SELECT a.[__$start_lsn] AS l, a.[__$operation] AS op, ", lv, lv, lv);
	if (utc_offset)
		appendStringInfo(&stmt, "CONVERT(datetime2(7), SWITCHOFFSET(a.%s, '+00:00')) AS ev, "
						 "CONVERT(datetime2(7), SWITCHOFFSET(a.%s, '%c%02d:%02d')) AS lv", col, col,
						 server_offset_minutes < 0 ? '-' : '+', off / 60, off % 60);
	else
		appendStringInfo(&stmt, "CONVERT(datetime2(7), a.%s) AS ev", col);
	appendStringInfo(&stmt, "\n"
					 "                  FROM [cdc].%s(@from, @to, N'all') AS a) AS r\n"
					 "          JOIN (SELECT d.l, sys.fn_cdc_map_lsn_to_time(d.l) AS ct\n"
					 "                  FROM (SELECT DISTINCT f.[__$start_lsn] AS l\n"
					 "                          FROM [cdc].%s(@from, @to, N'all') AS f) AS d) AS t ON t.l = r.l) AS x\n"
					 " GROUP BY GROUPING SETS ((x.k, x.op), (x.b), ())", fn, fn);

	if (!lsn_increment(start_exclusive, &from))
		from = *end_inclusive;
	appendStringInfoString(buf, "EXEC sys.sp_executesql ");
	appendStringInfoString(buf, mssql_quote_literal(stmt.data));
	appendStringInfoString(buf, ", N'@from binary(10), @to binary(10), @slot bigint, @gamma float', @from = ");
	append_lsn(buf, &from);
	appendStringInfoString(buf, ", @to = ");
	append_lsn(buf, end_inclusive);
	appendStringInfo(buf, ", @slot = %lld, @gamma = %.17g;\n", (long long) slot_seconds, gamma);
	pfree(stmt.data);
}

/*
 * Appends the call that lists the captured columns of a capture instance
 * with their types (what an event column is checked against).
 */
void
tsql_append_captured_columns(StringInfo buf, const char *capture_instance)
{
	appendStringInfoString(buf, "EXEC sys.sp_cdc_get_captured_columns @capture_instance = ");
	appendStringInfoString(buf, mssql_quote_literal(capture_instance));
	appendStringInfoString(buf, ";\n");
}

/*
 * Appends the statement that reads a capture instance's low water mark and
 * its commit time (where a table resumes after a loss). One plan for every
 * instance: the name is a parameter.
 */
void
tsql_append_min_lsn(StringInfo buf, const char *capture_instance)
{
	appendStringInfoString(buf,
						   "EXEC sys.sp_executesql N'SELECT m.min_lsn, sys.fn_cdc_map_lsn_to_time(m.min_lsn) AS min_time "
						   "FROM (SELECT sys.fn_cdc_get_min_lsn(@ci) AS min_lsn) AS m', N'@ci sysname', @ci = ");
	appendStringInfoString(buf, mssql_quote_literal(capture_instance));
	appendStringInfoString(buf, ";\n");
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

/*
 * Appends the statement that finds the greatest cdc.lsn_time_mapping row at
 * or below an LSN a pipeline reported, with its commit time: every commit
 * strictly before that time has a smaller LSN, so the pipeline has applied
 * it. The row is read directly (no public function answers "at or below":
 * sys.fn_cdc_map_lsn_to_time is documented only for LSNs in the table), so
 * the login needs SELECT on cdc.lsn_time_mapping, which holds LSNs and
 * times, no data. One row back; the LSN is a binary(10) parameter, so
 * every consumer shares one plan.
 */
void
tsql_append_lsn_mapping(StringInfo buf, const Lsn *lsn)
{
	appendStringInfoString(buf,
						   "EXEC sys.sp_executesql N'SELECT TOP (1) m.start_lsn, m.tran_end_time "
						   "FROM [cdc].[lsn_time_mapping] AS m WHERE m.start_lsn <= @lsn "
						   "ORDER BY m.start_lsn DESC', N'@lsn binary(10)', @lsn = ");
	append_lsn(buf, lsn);
	appendStringInfoString(buf, ";\n");
}

/*
 * The statement that tells a table that does not exist (Msg 208, Invalid
 * object name) from one the login has no permission on (Msg 229, The
 * SELECT permission was denied), for a name OBJECT_ID did not resolve
 * (metadata visibility hides both alike). TOP (0) reads no row.
 */
char *
tsql_probe_select(const char *qualified_name)
{
	return psprintf("SELECT TOP (0) 1 AS finalize_probe FROM %s;\n", qualified_name);
}

/*
 * The statement that says whether change data capture is enabled on a
 * table the login can see: is_tracked_by_cdc of sys.tables (no row: it is
 * not a table, a view say).
 */
char *
tsql_probe_tracked(const char *qualified_name)
{
	return psprintf("SELECT CONVERT(int, t.is_tracked_by_cdc) AS tracked FROM sys.tables AS t "
					"WHERE t.object_id = OBJECT_ID(%s);\n", mssql_quote_literal(qualified_name));
}
