/*
 * condition.h
 *     The condition codes the worker writes: why a table or a source is not
 *     moving. One enum and one name table; the SQL tables check the same
 *     codes (table_condition_condition_check, source_status_condition_check,
 *     consumer_condition_check), and test_packaging.py keeps the lists equal.
 */
#ifndef FINALIZE_CONDITION_H
#define FINALIZE_CONDITION_H

typedef enum Condition
{
	COND_NONE = 0,				/* no condition: clears a table's */

	/* A table's (finalize.table_condition). */
	COND_NO_ACCESS,
	COND_READ_FAILED,
	COND_NO_CAPTURE_INSTANCE,
	COND_SOURCE_REPLACED,
	COND_LSN_REGRESSED,
	COND_RECORD_FAILED,
	COND_LOCK_TIMEOUT,
	COND_EVENT_COLUMN_INVALID,
	COND_START_UNREADABLE,

	/* A source's (finalize.source_status). */
	COND_STARTING,
	COND_OK,
	COND_CAPTURE_STALLED,
	COND_NO_WORKER,
	COND_SERVER_DROPPED,
	COND_CONFIGURATION,
	COND_COMMIT_TIME_AHEAD,
	COND_UNREACHABLE,
	COND_TLS_FAILED,
	COND_TIMEOUT,
	COND_CANCELLED,
	COND_SQL_ERROR,
	COND_NO_MAX_LSN,
	COND_TIMEZONE_MISMATCH,
	COND_CLOCK_SKEW,
	COND_INTERNAL_ERROR,
	COND_KERBEROS_FAILED,

	/*
	 * A consumer's (finalize.consumer): written by SQL (_check_consumers and
	 * _consumer_ahead, which the worker calls once per cycle), never by C;
	 * named here so that the codes stay one list.
	 */
	COND_CONSUMER_STALLED,
	COND_REPORT_AHEAD,

	COND_COUNT
} Condition;

extern const char *condition_name(Condition c);
extern Condition condition_from_name(const char *name);

#endif							/* FINALIZE_CONDITION_H */
