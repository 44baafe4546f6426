/*
 * settings.c
 *     The finalize.* settings: their variables, definitions and the SQL
 *     functions that give some of them to SQL as intervals.
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "core/settings.h"

char	   *finalize_database = NULL;
bool		finalize_enabled = true;
int			finalize_poll_interval_ms = 5000;
int			finalize_max_source_workers = 4;
int			finalize_worker_connections = 256;
int			finalize_max_sources = 4096;
int			finalize_full_check_interval_ms = 60000;
int			finalize_login_timeout = 10;
int			finalize_query_timeout = 30;
int			finalize_source_check_timeout = 5;
int			finalize_max_retry_interval_ms = 60000;
int			finalize_data_loss_window_min = 7 * 24 * 60;
int			finalize_facts_retention_min = 30 * 24 * 60;
int			finalize_s3_timeout_ms = 30000;
int			finalize_s3_connect_timeout_ms = 10000;
int			finalize_generation_retention_min = 7 * 24 * 60;
int			finalize_lock_timeout_ms = 1000;
int			finalize_max_clock_skew_s = 3600;
int			finalize_s3_max_pages = 100000;
int			finalize_gate_max_problems = 1000;
int			finalize_gate_max_delta_kb = 256 * 1024;
int			finalize_iceberg_max_manifest_kb = 128 * 1024;
int			finalize_consumer_stall_threshold_s = 15 * 60;
int			finalize_late_data_alert_interval_s = 60 * 60;
int			finalize_alert_after_s = 5 * 60;
int			finalize_alert_retry_limit = 15;
bool		finalize_alerts_enabled = true;

PG_FUNCTION_INFO_V1(finalize_facts_retention);
PG_FUNCTION_INFO_V1(finalize_generation_retention);
PG_FUNCTION_INFO_V1(finalize_max_clock_skew);
PG_FUNCTION_INFO_V1(finalize_consumer_stall_threshold);
PG_FUNCTION_INFO_V1(finalize_late_data_alert_interval);
PG_FUNCTION_INFO_V1(finalize_alert_after);

/* The settings of the pool of source workers: how many, how many connections, how many sources. */
static void
define_pool_settings(void)
{
	DefineCustomIntVariable("finalize.max_source_workers",
							"Number of source worker processes that serve all the sources of finalize.database.",
							"Each source keeps its own poll interval, backoff and connection; 0 runs one process per "
							"source instead (the isolation of a process each, at a process each).",
							&finalize_max_source_workers,
							4, 0, 64,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.worker_connections",
							"SQL Server connections each source worker keeps open between cycles.",
							"Beyond it the most recently used one is closed (its source logs in again at its next "
							"cycle). Also bounded by the file descriptors PostgreSQL lets a process hold for "
							"connections of its own (a third of max_files_per_process and the open-files limit).",
							&finalize_worker_connections,
							256, 1, 100000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.max_sources",
							"Number of sources (foreign servers with tracked tables) finalize can serve.",
							"Sizes finalize's shared table of sources when the server starts (about 48 bytes each).",
							&finalize_max_sources,
							4096, 16, 100000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
}

/* The settings of the background workers: where they run, how often, how long they wait. */
static void
define_worker_settings(void)
{
	DefineCustomStringVariable("finalize.database",
							   "Database whose finalize extension the background worker serves.",
							   "The launcher starts a scheduler there once the database exists.",
							   &finalize_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomBoolVariable("finalize.enabled",
							 "Whether finalize's workers poll their sources.",
							 "Off stops polling every source; sensors keep answering from the recorded verdicts, and freshness SLAs and alert delivery go on.",
							 &finalize_enabled,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.poll_interval",
							"Time between two cycles of a source worker.",
							NULL,
							&finalize_poll_interval_ms,
							5000, 100, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.full_check_interval",
							"Longest time an idle source goes without a full check of its tables.",
							"While SQL Server's max LSN stays where every table already is, a cycle asks only "
							"for max LSN; a full check (object ids, capture instances) still runs this often, "
							"so renamed tables and dropped capture instances show. 0 checks fully every cycle.",
							&finalize_full_check_interval_ms,
							60000, 0, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.login_timeout",
							"How long a worker waits for a SQL Server login.",
							NULL,
							&finalize_login_timeout,
							10, 1, 3600,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.query_timeout",
							"How long a worker waits for SQL Server to answer a query.",
							"A query that times out is abandoned and the connection reopened.",
							&finalize_query_timeout,
							30, 1, 24 * 3600,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.max_retry_interval",
							"Longest wait between two attempts of a failing source.",
							"After a failure a worker retries after the poll interval, then doubles the wait up to this.",
							&finalize_max_retry_interval_ms,
							60000, 100, 24 * 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.lock_timeout",
							"Longest wait of a worker's write for a lock another session holds.",
							"A tracked table's rows, a consumer's row and an incident another session holds "
							"are not waited for at all (the table shows the condition lock_timeout, the "
							"consumer consumer_locked); this bounds the other waits, such as the source's "
							"status row.",
							&finalize_lock_timeout_ms,
							1000, 1, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* The setting of the check track_table and add_shard make of the SQL Server table. */
static void
define_check_settings(void)
{
	DefineCustomIntVariable("finalize.source_check_timeout",
							"How long track_table and add_shard wait for SQL Server, in all, when they check the source table.",
							"They log in as the worker would and ask whether the table exists, has change data "
							"capture and may be read; an unreachable source only gets a NOTICE. 0 checks nothing.",
							&finalize_source_check_timeout,
							5, 0, 60,
							PGC_USERSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);
}

/* The settings that bound what is trusted or kept: clock skew, data loss, facts, consumers. */
static void
define_trust_settings(void)
{
	DefineCustomIntVariable("finalize.max_clock_skew",
							"How far a commit time or SQL Server's clock may be ahead of PostgreSQL's clock.",
							"Commit times further ahead are refused by the write path, and a source whose clock is "
							"further ahead shows the condition clock_skew: a verdict moved by them could never move back.",
							&finalize_max_clock_skew_s,
							3600, 1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.data_loss_window",
							"How long after a data loss another one stops a table with on_data_loss = resume.",
							"A second loss within the window needs finalize.resume_table() again.",
							&finalize_data_loss_window_min,
							7 * 24 * 60, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MIN,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.facts_retention",
							"How long facts are kept before finalize.purge_facts() removes them.",
							"The fact a table's offset points at is always kept.",
							&finalize_facts_retention_min,
							30 * 24 * 60, 1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MIN,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.consumer_stall_threshold",
							"How long a consumer may go without reporting progress while its table's source moves on.",
							"Past it the consumer shows the condition consumer_stalled and an alert goes out on "
							"finalize_alert; its verdict is held either way.",
							&finalize_consumer_stall_threshold_s,
							15 * 60, 1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);
}

/* The settings of incidents and their delivery: when they open, how alerts go out. */
static void
define_alert_settings(void)
{
	DefineCustomIntVariable("finalize.alert_after",
							"How long a condition that stops a source or a table lasts before it opens an incident.",
							"Rides out blips (a login refused once, a timeout); conditions that make SQL Server's "
							"times untrusted open one at once.",
							&finalize_alert_after_s,
							5 * 60, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("finalize.alerts_enabled",
							 "Whether finalize's alerts worker delivers incidents to webhook targets.",
							 "Off stops webhook delivery (deliveries wait in the queue); incidents are still "
							 "recorded. With finalize.enabled off as well, no finalize process does any I/O.",
							 &finalize_alerts_enabled,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.alert_retry_limit",
							"How many times the alerts worker tries to deliver one message to a webhook target.",
							"Retries back off exponentially with jitter (1 s doubling to 10 minutes, at least the "
							"target's Retry-After); after the last one the delivery is marked failed.",
							&finalize_alert_retry_limit,
							15, 1, 1000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.late_data_alert_interval",
							"How often at most an alert goes out for late data in one event period of a table.",
							"Rows that land in an event period already declared final are counted every time; "
							"the alert on finalize_alert repeats for the same table and period only after this long.",
							&finalize_late_data_alert_interval_s,
							60 * 60, 1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);
}

/* The settings of the release gate: retired generations, object store listings. */
static void
define_gate_settings(void)
{
	DefineCustomIntVariable("finalize.generation_retention",
							"How long a superseded generation is kept before finalize.retired_generations() lists it.",
							"Readers and replays that still use the old generation need it this long.",
							&finalize_generation_retention_min,
							7 * 24 * 60, 0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MIN,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.s3_timeout",
							"Longest time one request to an object store may take.",
							NULL,
							&finalize_s3_timeout_ms,
							30000, 100, 3600 * 1000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.s3_connect_timeout",
							"Longest time to connect to an object store.",
							NULL,
							&finalize_s3_connect_timeout_ms,
							10000, 100, 600 * 1000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.s3_max_pages",
							"Most pages (of up to 1000 keys) one object-store listing may take.",
							"A listing that would take more is an error, so a store that never ends its listing cannot "
							"hold a release (or the server's memory) hostage.",
							&finalize_s3_max_pages,
							100000, 1, INT_MAX,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.gate_max_problems",
							"Most problems of each code one release attempt lists.",
							"The rest are counted in one entry per code, so a listing that disagrees on millions of "
							"files neither exhausts the backend's memory nor makes a report too large to store.",
							&finalize_gate_max_problems,
							1000, 1, 1000000,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.gate_max_delta",
							"Largest stored listing_delta of one release attempt.",
							"Past it the records are left out and the attempt's report says the delta is "
							"truncated; release_report then returns the records kept instead of a listing.",
							&finalize_gate_max_delta_kb,
							256 * 1024, 1, 512 * 1024,
							PGC_USERSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("finalize.iceberg_max_manifest_size",
							"Largest Iceberg manifest list or manifest a release reads, and most bytes its blocks "
							"may hold decompressed.",
							"A larger object, a decompression bomb, or a record whose values would take more "
							"memory, is refused with an error naming the file, so that nothing a lake writer "
							"puts into a table's files can exhaust the backend's memory.",
							&finalize_iceberg_max_manifest_kb,
							128 * 1024, 64, 256 * 1024,
							PGC_SUSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);
}

/* Defines every finalize.* setting and reserves the prefix (from _PG_init). */
void
settings_define(void)
{
	define_worker_settings();
	define_pool_settings();
	define_trust_settings();
	define_check_settings();
	define_alert_settings();
	define_gate_settings();
	MarkGUCPrefixReserved("finalize");
}

/* A number of minutes as an interval of days and time. */
static Interval *
minutes_interval(int minutes)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->day = minutes / (HOURS_PER_DAY * MINS_PER_HOUR);
	result->time = (int64) (minutes % (HOURS_PER_DAY * MINS_PER_HOUR)) * USECS_PER_MINUTE;
	return result;
}

/*
 * finalize_internal.facts_retention(): the retention setting as an interval, so SQL
 * need not parse the setting's unit-suffixed text.
 */
Datum
finalize_facts_retention(PG_FUNCTION_ARGS)
{
	PG_RETURN_INTERVAL_P(minutes_interval(finalize_facts_retention_min));
}

/* finalize_internal.generation_retention(): finalize.generation_retention as an interval. */
Datum
finalize_generation_retention(PG_FUNCTION_ARGS)
{
	PG_RETURN_INTERVAL_P(minutes_interval(finalize_generation_retention_min));
}

/*
 * finalize_internal.max_clock_skew(): finalize.max_clock_skew as an interval of
 * hours, minutes and seconds only, so that adding it to a timestamptz is
 * exact whatever the session's TimeZone.
 */
Datum
finalize_max_clock_skew(PG_FUNCTION_ARGS)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = (int64) finalize_max_clock_skew_s * USECS_PER_SEC;
	PG_RETURN_INTERVAL_P(result);
}

/*
 * finalize_internal.consumer_stall_threshold(): finalize.consumer_stall_threshold
 * as an interval of hours, minutes and seconds only (no days), so that
 * comparing it with now() - reported_at is exact across DST changes.
 */
Datum
finalize_consumer_stall_threshold(PG_FUNCTION_ARGS)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = (int64) finalize_consumer_stall_threshold_s * USECS_PER_SEC;
	PG_RETURN_INTERVAL_P(result);
}

/*
 * finalize_internal.late_data_alert_interval(): finalize.late_data_alert_interval
 * as an interval without days, exact across DST changes.
 */
Datum
finalize_late_data_alert_interval(PG_FUNCTION_ARGS)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = (int64) finalize_late_data_alert_interval_s * USECS_PER_SEC;
	PG_RETURN_INTERVAL_P(result);
}

/*
 * finalize_internal.alert_after(): finalize.alert_after as an interval without
 * days, exact across DST changes.
 */
Datum
finalize_alert_after(PG_FUNCTION_ARGS)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = (int64) finalize_alert_after_s * USECS_PER_SEC;
	PG_RETURN_INTERVAL_P(result);
}
