/*
 * worker.c
 *     The source workers: a pool of finalize.max_source_workers processes
 *     serving every source of finalize.database (or, with 0, one process per
 *     source), each cycle (cycle.c) of a source when it is due, its backoff
 *     after failures its own.
 *
 * A worker takes the due source that waited longest (core/source_pick.c),
 * runs its cycle, gives it back with when the next one is due, and keeps
 * its connection for the next time (source_runs.c). Errors never kill the
 * worker: a failed cycle is recorded in finalize.source_status with SQL
 * Server's message and retried after a capped exponential backoff.
 * pg_cancel_backend cancels the cycle in progress; SIGTERM and
 * pg_terminate_backend end the process at once, also while SQL Server
 * stalls (DB-Library checks for interrupts every second); the cycle it
 * held is given back and another worker takes it.
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
#include "core/source_table.h"
#include "core/wait_events.h"
#include "worker/clock_steps.h"
#include "worker/cycle.h"
#include "worker/source_runs.h"
#include "worker/worker.h"
#include "worker/worker_state.h"

/* The longest a worker sleeps without looking at the table again. */
#define IDLE_NAP_MS 1000

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
 * Sleeps until a source may be due, or the latch is set (a source was
 * listed or asked for, a failing cycle ended, a reload). The latch also
 * wakes up for reasons that are no cause for a cycle (a ProcSignal such as
 * a request to log memory contexts): those are served on the way.
 */
static void
nap_until(TimestampTz wake_at)
{
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), wake_at);

	if (ms <= 0)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, Min(ms, IDLE_NAP_MS),
					 finalize_wait_event(FINALIZE_WAIT_WORKER_MAIN));
	ResetLatch(MyLatch);
	/* Between cycles a cancel has nothing to cancel. */
	QueryCancelPending = false;
	CHECK_FOR_INTERRUPTS();
}

/*
 * How long another worker's source must have been due before this one takes
 * it: a tenth of the poll interval, between 100 ms and 1 s. Below, the home
 * worker (which keeps the source's connection) is about to be free; above,
 * it is most likely held by a source that does not answer.
 */
static int64
steal_after_us(void)
{
	int64		ms = Max(100, Min(1000, finalize_poll_interval_ms / 10));

	return ms * 1000;
}

/* Applies a reload of the configuration (SIGHUP) that arrived meanwhile. */
static void
reload_if_asked(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
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
		bool		held = false;

		db_begin_write("finalize: recording a failed cycle");
		if (ws_lock_source(run->serverid, run->server_name))
		{
			ws_source_failed(run->server_name, outcome->condition, outcome->message,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay_ms));
			ws_source_ticket(run->server_name, run->ticket_expires);
			if (outcome->clock_went_back)
			{
				record_clock_went_back(run->server_name, outcome->clock_at);
				held = true;
			}
		}
		db_commit();
		/* The hold is in the catalog: release_source decides from here on. */
		if (held)
			run->hold_pending = false;
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
 * Runs one claimed cycle and gives it back: the failures counted, when the
 * next one is due, the failure recorded. Returns false when the source is
 * gone (its server was dropped).
 */
static bool
serve(KeptRun *kept, MemoryContext cycle_cxt)
{
	SourceRun  *run = &kept->run;
	CycleOutcome outcome = {COND_NONE, NULL, false, 0};
	bool		ok;
	long		delay;

	ok = guarded_cycle(run, cycle_cxt, &outcome);
	if (run->server_gone)
	{
		source_table_finish(run->serverid, run->failures, 0, true);
		runs_forget(kept);
		return false;
	}
	if (ok)
		run->failures = 0;
	else
	{
		run->failures++;
		if (run->conn != NULL && mssql_is_dead(run->conn))
		{
			mssql_close(run->conn);
			run->conn = NULL;
		}
	}
	/* A reload during the cycle (a shorter poll interval) applies to its next one. */
	reload_if_asked();
	delay = next_delay_ms(run->failures);
	if (!ok)
		record_failure(run, &outcome, delay);
	runs_after_cycle(kept);
	source_table_finish(run->serverid, run->failures,
						TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay), false);
	return true;
}

/*
 * Entry point of a source worker: bgw_main_arg is its one source for a
 * dedicated worker (finalize.max_source_workers = 0), InvalidOid for a
 * worker of the pool; bgw_extra holds the database OID, then the pool index.
 */
void
finalize_worker_main(Datum arg)
{
	Oid			only = DatumGetObjectId(arg);
	Oid			dboid;
	int32		index;
	MemoryContext cycle_cxt;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	memcpy(&index, MyBgworkerEntry->bgw_extra + sizeof(Oid), sizeof(int32));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	connect_worker_to_database(dboid);

	/* Another worker already serves this source, or holds this index: leave it alone. */
	if (OidIsValid(only) ? !slot_claim(SLOT_WORKER, dboid, only) : !slot_claim_at(SLOT_WORKER, dboid, InvalidOid, index + 1))
	{
		elog(LOG, "finalize: source worker %d exits: another process holds its slot", index + 1);
		proc_exit(0);
	}
	if (!source_table_attach(OidIsValid(only) ? -1 : index))
	{
		elog(LOG, "finalize: source worker %d exits: another process holds its place in the source table", index + 1);
		proc_exit(0);
	}

	runs_init();
	cycle_cxt = AllocSetContextCreate(TopMemoryContext, "finalize cycle", ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		SourceClaim claim;
		TimestampTz now;
		TimestampTz wake_at;

		CHECK_FOR_INTERRUPTS();
		reload_if_asked();
		if (!finalize_enabled || source_table_retiring())
			proc_exit(0);
		runs_sweep();

		now = GetCurrentTimestamp();
		wake_at = TimestampTzPlusMilliseconds(now, IDLE_NAP_MS);
		if (!source_table_claim(only, now, steal_after_us(), &claim, &wake_at))
		{
			pgstat_report_activity(STATE_IDLE, NULL);
			nap_until(wake_at);
			continue;
		}
		if (!serve(runs_take(&claim), cycle_cxt) && OidIsValid(only))
			proc_exit(0);
		pgstat_report_activity(STATE_IDLE, NULL);
	}
}
