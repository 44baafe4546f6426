/*
 * tsql.h
 *     The T-SQL the worker sends, built with every identifier and string
 *     quoted. Pure functions.
 */
#ifndef FINALIZE_TSQL_H
#define FINALIZE_TSQL_H

#include "lib/stringinfo.h"

#include "core/lsn.h"

/* Columns of the results the worker reads, 1-based as DB-Library counts. */
enum
{
	/* source state */
	TSQL_STATE_MAX_LSN = 1, TSQL_STATE_MAX_TIME, TSQL_STATE_UTC_NOW, TSQL_STATE_TZ_OFFSET
};
enum
{
	/* object ids of the tracked tables */
	TSQL_OBJECT_TAG = 1, TSQL_OBJECT_ID
};
enum
{
	/* sys.sp_cdc_help_change_data_capture */
	TSQL_HELP_SCHEMA = 1, TSQL_HELP_TABLE, TSQL_HELP_INSTANCE, TSQL_HELP_OBJECT_ID,
	TSQL_HELP_SOURCE_OBJECT_ID, TSQL_HELP_START_LSN
};
enum
{
	/* range aggregate */
	TSQL_RANGE_INSERTS = 1, TSQL_RANGE_UPDATES, TSQL_RANGE_DELETES, TSQL_RANGE_FIRST_TIME, TSQL_RANGE_LAST_TIME,
	/* a split range's: which row (1: the grand total), its piece, the piece's LSNs */
	TSQL_RANGE_GROUPING, TSQL_RANGE_PIECE, TSQL_RANGE_FIRST_LSN, TSQL_RANGE_LAST_LSN
};
enum
{
	/* event-time facts of a range (GROUPING SETS) */
	TSQL_EV_GROUPING_K = 1, TSQL_EV_GROUPING_B, TSQL_EV_SLOT, TSQL_EV_OP, TSQL_EV_BUCKET, TSQL_EV_ROWS,
	TSQL_EV_MIN_MS, TSQL_EV_MAX_MS
};
enum
{
	/* sys.sp_cdc_get_captured_columns: column_name, column_type */
	TSQL_CAPTURED_NAME = 4, TSQL_CAPTURED_TYPE = 7
};
enum
{
	/* min LSN */
	TSQL_MIN_LSN = 1, TSQL_MIN_TIME
};
enum
{
	/* the mapping row at or below an LSN (cdc.lsn_time_mapping) */
	TSQL_MAP_START_LSN = 1, TSQL_MAP_END_TIME
};
enum
{
	/* sys.sp_cdc_get_ddl_history */
	TSQL_DDL_COMMAND = 5, TSQL_DDL_LSN = 6, TSQL_DDL_TIME = 7
};

/* Tracked tables whose object ids one statement of the source state resolves. */
#define TSQL_NAMES_PER_STATEMENT 100

extern const char *tsql_session_setup(void);
extern void tsql_source_state(StringInfo buf, const char *const *qualified_names, int nnames,
							  bool with_instances);
extern char *tsql_qualified_name(const char *schema, const char *object);
extern void tsql_append_marker(StringInfo buf, int n);
extern void tsql_append_range_aggregate(StringInfo buf, const char *capture_instance,
										const Lsn *start_exclusive, const Lsn *end_inclusive,
										const Timestamp *splits, int nsplits);
extern void tsql_append_range_events(StringInfo buf, const char *capture_instance, const char *event_column,
									 bool utc_offset, int server_offset_minutes, const Lsn *start_exclusive,
									 const Lsn *end_inclusive, int64 slot_seconds, double gamma);
extern void tsql_append_captured_columns(StringInfo buf, const char *capture_instance);
extern void tsql_append_min_lsn(StringInfo buf, const char *capture_instance);
extern void tsql_append_ddl_history(StringInfo buf, const char *capture_instance);
extern void tsql_append_lsn_mapping(StringInfo buf, const Lsn *lsn);
extern char *tsql_probe_select(const char *qualified_name);
extern char *tsql_probe_tracked(const char *qualified_name);

#endif							/* FINALIZE_TSQL_H */
