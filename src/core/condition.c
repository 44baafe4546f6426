/*
 * condition.c
 *     The names of the condition codes, as stored in SQL and shown to users.
 */
#include "postgres.h"

#include "core/condition.h"

/* Indexed by Condition; the SQL CHECK constraints list the same names. */
static const char *const condition_names[COND_COUNT] = {
	[COND_NONE] = NULL,
	[COND_NO_ACCESS] = "no_access",
	[COND_READ_FAILED] = "read_failed",
	[COND_NO_CAPTURE_INSTANCE] = "no_capture_instance",
	[COND_SOURCE_REPLACED] = "source_replaced",
	[COND_LSN_REGRESSED] = "lsn_regressed",
	[COND_RECORD_FAILED] = "record_failed",
	[COND_LOCK_TIMEOUT] = "lock_timeout",
	[COND_EVENT_COLUMN_INVALID] = "event_column_invalid",
	[COND_START_UNREADABLE] = "start_unreadable",
	[COND_STARTING] = "starting",
	[COND_OK] = "ok",
	[COND_CAPTURE_STALLED] = "capture_stalled",
	[COND_NO_WORKER] = "no_worker",
	[COND_SERVER_DROPPED] = "server_dropped",
	[COND_CONFIGURATION] = "configuration",
	[COND_COMMIT_TIME_AHEAD] = "commit_time_ahead",
	[COND_UNREACHABLE] = "unreachable",
	[COND_TIMEOUT] = "timeout",
	[COND_CANCELLED] = "cancelled",
	[COND_SQL_ERROR] = "sql_error",
	[COND_NO_MAX_LSN] = "no_max_lsn",
	[COND_TIMEZONE_MISMATCH] = "timezone_mismatch",
	[COND_CLOCK_SKEW] = "clock_skew",
	[COND_INTERNAL_ERROR] = "internal_error",
	[COND_TLS_FAILED] = "tls_failed",
	[COND_KERBEROS_FAILED] = "kerberos_failed",
	[COND_CONSUMER_STALLED] = "consumer_stalled",
	[COND_REPORT_AHEAD] = "report_ahead",
};

/* The stored name of a condition; NULL for COND_NONE. */
const char *
condition_name(Condition c)
{
	Assert(c >= 0 && c < COND_COUNT);
	return condition_names[c];
}

/*
 * The condition of a stored name (a source's hold), or COND_NONE for a name
 * this build does not know.
 */
Condition
condition_from_name(const char *name)
{
	for (int c = COND_NONE + 1; c < COND_COUNT; c++)
		if (strcmp(condition_names[c], name) == 0)
			return (Condition) c;
	return COND_NONE;
}
