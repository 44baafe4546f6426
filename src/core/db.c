/*
 * db.c
 *     The short transactions of finalize's background processes (the
 *     source workers, the scheduler and the alerts worker) and the SPI
 *     statements they run: the one place that starts, commits and continues
 *     them and returns to the caller's memory context.
 *
 * A background process keeps no transaction open while it waits for
 * anything outside PostgreSQL (SQL Server, a webhook): it reads in one
 * short transaction, talks to the other side with none open, and writes in
 * another. What each process reads and writes is its subsystem's own
 * (worker/source_config.c, worker/worker_state.c, alert/delivery.c, ...);
 * how a transaction begins and ends is this file's.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "core/db.h"
#include "core/internal_schema.h"
#include "core/settings.h"

/* The memory context that was current when db_begin started a transaction. */
static MemoryContext caller_cxt = NULL;

/* Starts a short transaction with SPI and a snapshot. */
void
db_begin(const char *activity)
{
	caller_cxt = CurrentMemoryContext;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

/*
 * Starts a transaction that writes (the one that records a cycle, say).
 * Its lock waits are bounded by finalize.lock_timeout: a session that holds
 * a table's row (an open transaction that called resume_table, say) then
 * costs that table one condition, instead of stalling every table of the
 * source unseen.
 */
void
db_begin_write(const char *activity)
{
	char		value[32];

	db_begin(activity);
	snprintf(value, sizeof(value), "%dms", finalize_lock_timeout_ms);
	(void) set_config_option("lock_timeout", value, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * Commits the transaction started by db_begin, and makes the caller's
 * memory context current again: CommitTransactionCommand leaves
 * TopMemoryContext current, where everything the process allocated next
 * would live (and leak) for the life of the process.
 *
 * Then it hands the transaction's table statistics to the shared stats
 * (at most once a second; pending ones wait for a later commit): a
 * background worker has no main loop that does it, and without them
 * autovacuum never sees the rows the workers insert and update, so fact,
 * watermark and source_status would never be vacuumed or analyzed.
 */
void
db_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(caller_cxt);
	(void) pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Commits the write transaction and starts the next one in its place (the
 * given activity, the same lock timeout): for a long run of one-table
 * writes, so that a transaction never holds more than a few dozen
 * subtransactions. The caller's allocations must live in
 * db_caller_context(): SPI's own end with the commit.
 */
void
db_commit_and_continue(const char *activity)
{
	MemoryContext keep = caller_cxt;

	db_commit();
	db_begin_write(activity);
	caller_cxt = keep;
}

/* The memory context that was current when the open transaction began. */
MemoryContext
db_caller_context(void)
{
	return caller_cxt;
}

/*
 * The plan of a statement, prepared once per process and kept (SPI_keepplan):
 * a background process runs the same few dozen statements every cycle, and
 * parsing and planning them again each time cost a source's idle cycle a
 * quarter of its CPU. Plans are found by their text and argument types; the
 * plan cache replans one whose objects changed. At most DB_KEPT_PLANS are
 * kept (memory stays flat whatever texts a caller builds); beyond, a
 * statement is planned for this run only, as before.
 */
#define DB_KEPT_PLANS 64

typedef struct KeptPlan
{
	char	   *sql;
	int			nargs;
	Oid		   *types;
	SPIPlanPtr	plan;
} KeptPlan;

static KeptPlan kept_plans[DB_KEPT_PLANS];
static int	nkept_plans = 0;

/* The plan of sql with nargs arguments of types: kept, or prepared now (in a transaction with SPI). */
static SPIPlanPtr
db_plan(const char *sql, int nargs, const Oid *types)
{
	SPIPlanPtr	plan;
	KeptPlan   *k;

	for (int i = 0; i < nkept_plans; i++)
		if (kept_plans[i].nargs == nargs && strcmp(kept_plans[i].sql, sql) == 0 &&
			(nargs == 0 || memcmp(kept_plans[i].types, types, sizeof(Oid) * nargs) == 0))
			return kept_plans[i].plan;
	plan = SPI_prepare(sql, nargs, unconstify(Oid *, types));
	if (plan == NULL)
		elog(ERROR, "could not prepare \"%s\": %s", sql, SPI_result_code_string(SPI_result));
	if (nkept_plans >= DB_KEPT_PLANS || SPI_keepplan(plan) != 0)
		return plan;			/* freed with the SPI connection */
	k = &kept_plans[nkept_plans++];
	k->sql = MemoryContextStrdup(TopMemoryContext, sql);
	k->nargs = nargs;
	k->types = MemoryContextAlloc(TopMemoryContext, sizeof(Oid) * (nargs + 1));
	if (nargs > 0)
		memcpy(k->types, types, sizeof(Oid) * nargs);
	k->plan = plan;
	return plan;
}

/*
 * Runs a statement through its kept plan (db_plan); returns SPI's code, the
 * rows in SPI_tuptable. count limits the rows as SPI_execute's does.
 */
int
db_query(const char *sql, int nargs, const Oid *types, Datum *values, const char *nulls, bool read_only,
		 long count)
{
	return SPI_execute_plan(db_plan(sql, nargs, types), values, nulls, read_only, count);
}

/*
 * Runs a statement of finalize's internal functions; any failure is an
 * error, which the caller's subtransaction (if any) confines.
 */
void
db_exec_internal(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls)
{
	int			rc = db_query(sql, nargs, types, values, nulls, false, 0);

	if (rc < 0)
		elog(ERROR, "could not run \"%s\": %s", sql, SPI_result_code_string(rc));
}

/*
 * Why the catalog must be left alone now (finalize_internal.catalog_restoring(): a
 * restore under way, src/sql/11d_catalog_seal.sql), in the caller's memory
 * context; NULL when it is whole, or older than the library (which has its
 * own waits: a version mismatch). In a transaction of db_begin.
 */
char *
db_catalog_restoring(void)
{
	bool		isnull;
	Datum		why;

	if (!internal_function_exists("catalog_restoring()"))
		return NULL;
	if (db_query("SELECT " FINALIZE_INTERNAL_SCHEMA ".catalog_restoring()", 0, NULL, NULL, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not check whether finalize's catalog is being restored");
	why = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? NULL : MemoryContextStrdup(caller_cxt, TextDatumGetCString(why));
}

/*
 * A WHERE clause that lets a statement act only on a whole catalog, checked
 * in the statement's own snapshot (db_catalog_restoring's check, read in
 * another statement, may be older than the rows); "" for a catalog older
 * than the check. In a transaction of db_begin.
 */
const char *
db_when_whole(void)
{
	return internal_function_exists("catalog_restoring()")
		? " WHERE " FINALIZE_INTERNAL_SCHEMA ".catalog_restoring() IS NULL" : "";
}

/* Text datum of an LSN (the lsn domain's form). */
Datum
db_lsn_datum(const Lsn *lsn)
{
	char		text[LSN_TEXT_LEN + 1];

	lsn_format(lsn, text);
	return CStringGetTextDatum(text);
}

/* An interval datum of a span of microseconds (no days or months). */
Datum
db_usecs_datum(int64 usecs)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = usecs;
	return PointerGetDatum(iv);
}

/* Text datum of s, or NULL (nulls[i] set to 'n') when s is NULL. */
Datum
db_text_or_null(const char *s, char *nulls, int i)
{
	if (s == NULL)
	{
		nulls[i] = 'n';
		return (Datum) 0;
	}
	return CStringGetTextDatum(s);
}

/* Copies an SPI text value into cxt (NULL stays NULL). */
char *
db_text_copy(HeapTuple tup, TupleDesc desc, int col, MemoryContext cxt)
{
	char	   *v = SPI_getvalue(tup, desc, col);

	return v ? MemoryContextStrdup(cxt, v) : NULL;
}
