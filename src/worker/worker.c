/*
 * worker.c
 *     The source worker: one process per SQL Server source, running cycles
 *     (cycle.c) every finalize.poll_interval, backing off after failures.
 *
 * Errors never kill the worker: a failed cycle is recorded in
 * finalize.source_status with SQL Server's message and retried after a
 * capped exponential backoff. pg_cancel_backend cancels the cycle in
 * progress; SIGTERM and pg_terminate_backend end the process at once, also
 * while SQL Server stalls (DB-Library checks for interrupts every second).
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/background.h"
#include "core/db.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "worker/cycle.h"
#include "worker/worker.h"
#include "worker/worker_state.h"

/* Delay before the next cycle: the poll interval, or a capped backoff. */
static long
next_delay_ms(int failures)
{
	int64		delay = finalize_poll_interval_ms;
	int64		cap = Max(finalize_max_retry_interval_ms, finalize_poll_interval_ms);

	for (int i = 1; i < failures && delay < cap; i++)
		delay *= 2;
	return (long) Min(delay, cap);
}

/*
 * Sleeps until the next cycle is due. The latch also wakes up for reasons
 * that are no cause for a cycle (a timer's tick, a ProcSignal such as a
 * request to log memory contexts): those are served and the sleep goes on.
 * A reload ends it, so a new poll interval applies at once, and so does a
 * request for a cycle (the lake worker recorded a report to resolve).
 */
static void
sleep_until(TimestampTz due)
{
	for (;;)
	{
		long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), due);

		if (ms <= 0 || ConfigReloadPending || slot_take_cycle_request())
			return;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		/* Between cycles a cancel has nothing to cancel. */
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
	}
}

/* Records a failed cycle, logging it; never lets a second error escape. */
static void
record_failure(SourceRun *run, const CycleOutcome *outcome, long delay_ms)
{
	MemoryContext cxt = CurrentMemoryContext;

	ereport(LOG,
			(errmsg("finalize: source \"%s\": %s", run->server_name ? run->server_name : "?", outcome->message),
			 errdetail("Next attempt in %ld ms (failure %d in a row).", delay_ms, run->failures)));
	if (run->server_name == NULL)
		return;
	PG_TRY();
	{
		/* Bounded like the cycle's write: a held row must not stop the worker. */
		db_begin_write("finalize: recording a failed cycle");
		ws_source_failed(run->server_name, outcome->condition, outcome->message,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay_ms));
		db_commit();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		MemoryContextSwitchTo(cxt);
	}
	PG_END_TRY();
}

/*
 * Runs one cycle in a fresh cycle_cxt; an error in PostgreSQL (not one of
 * SQL Server's, which run_cycle reports) becomes the cycle's outcome, so the
 * worker backs off instead of exiting. Leaves cycle_cxt current.
 */
static bool
guarded_cycle(SourceRun *run, MemoryContext cycle_cxt, CycleOutcome *outcome)
{
	volatile bool ok = false;

	MemoryContextReset(cycle_cxt);
	MemoryContextSwitchTo(cycle_cxt);
	PG_TRY();
	{
		ok = run_cycle(run, cycle_cxt, outcome);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cycle_cxt);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		outcome->condition = edata->sqlerrcode == ERRCODE_QUERY_CANCELED ? COND_CANCELLED : COND_INTERNAL_ERROR;
		outcome->message = psprintf("The cycle failed in PostgreSQL: %s", edata->message);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cycle_cxt);
	return ok;
}

/*
 * Entry point of a source worker: bgw_main_arg is the foreign server, the
 * database OID is in bgw_extra.
 */
void
finalize_worker_main(Datum arg)
{
	Oid			serverid = DatumGetObjectId(arg);
	Oid			dboid;
	MemoryContext cycle_cxt;
	SourceRun	run;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	connect_worker_to_database(dboid);

	/* Another worker already serves this source: leave it alone. */
	if (!slot_claim(SLOT_WORKER, dboid, serverid))
		proc_exit(0);

	memset(&run, 0, sizeof(run));
	run.serverid = serverid;
	cycle_cxt = AllocSetContextCreate(TopMemoryContext, "finalize cycle", ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		CycleOutcome outcome = {COND_NONE, NULL};
		bool		ok;
		long		delay;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (!finalize_enabled)
			proc_exit(0);

		ok = guarded_cycle(&run, cycle_cxt, &outcome);

		if (run.server_gone)
		{
			if (run.conn)
				mssql_close(run.conn);
			proc_exit(0);
		}
		if (ok)
			run.failures = 0;
		else
		{
			run.failures++;
			if (run.conn != NULL && mssql_is_dead(run.conn))
			{
				mssql_close(run.conn);
				run.conn = NULL;
			}
		}
		delay = next_delay_ms(run.failures);
		if (!ok)
			record_failure(&run, &outcome, delay);

		pgstat_report_activity(STATE_IDLE, NULL);
		sleep_until(TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay));
	}
}
