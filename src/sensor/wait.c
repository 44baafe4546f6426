/*
 * wait.c
 *     finalize.wait_final: is_final that waits, up to a timeout, for the
 *     period to become final, instead of being polled.
 *
 * The answer is is_final's (sensor_period_final), asked again only when a
 * verdict may have moved. Commits that move verdicts wake waiters through
 * condition variables in finalize's shared memory (verdict_cache.c's commit
 * callback): one per shard of tables, so that an advance wakes only the
 * waiters whose tables share its shard. A waiter sleeps on the shard of the
 * table that holds its period back (for several tables, the first one not
 * final: the answer cannot turn true before that one moves).
 *
 * No missed wake-up: a waiter reads the verdict epoch before each check,
 * which reads under a fresh snapshot; then it joins the shard's wait list,
 * reads the shard's counter and compares the epoch again. A writer bumps
 * the epoch, then the counter, then broadcasts, all after its commit is
 * visible: a commit the check did not see has either moved the epoch by
 * the time the waiter compares it, or will move the counter and broadcast
 * to a waiter already on the list. Each sleep lasts at most a second, as a
 * safety net: the waiter checks again then if the epoch moved at all. On a
 * standby (replay fires no trigger) it checks every second.
 *
 * While it sleeps it holds no lock and no snapshot of its own: each check
 * runs in a subtransaction that is rolled back (releasing whatever locks
 * the read took) with a fresh snapshot pushed for it, and the catalog
 * snapshot is dropped before sleeping. The snapshot of the calling
 * statement stays, as for any running statement, so the backend's xmin
 * holds back vacuum's horizon for the wait; in REPEATABLE READ or
 * SERIALIZABLE that would be the transaction's snapshot, whose later reads
 * could not even see the verdict waited for, so wait_final refuses to run
 * there, as in a transaction that has written (its row locks may be the
 * ones the worker needs to move the verdict).
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "common/int.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "core/db.h"
#include "core/shmem.h"
#include "core/wait_events.h"
#include "sensor/sensor.h"

PG_FUNCTION_INFO_V1(finalize_wait_final);
PG_FUNCTION_INFO_V1(finalize_wait_final_all);

/* The longest sleep between two looks at the epoch (the safety net). */
#define WAIT_TICK_MS 1000

/* One check of the waited-for period, as a subxact_rolled_back step. */
typedef struct WaitCheck
{
	const Datum *names;
	int			count;
	TimestampTz ts;
	bool		final;			/* the answer */
	int64		holding;		/* when not final: a table holding it back */
} WaitCheck;

/*
 * Asks is_final's question under a fresh snapshot, so that each check sees
 * every commit before it, whatever snapshot the calling statement holds.
 */
static void
check_step(void *arg)
{
	WaitCheck  *c = (WaitCheck *) arg;

	PushActiveSnapshot(GetLatestSnapshot());
	c->final = sensor_period_final(c->names, c->count, c->ts, &c->holding);
	PopActiveSnapshot();
}

/*
 * The timeout as microseconds (a day counts 24 hours and a month 30 days,
 * as extract(epoch) counts them), saturated rather than overflowing; a
 * NULL or negative one is the caller's bug.
 */
static int64
timeout_arg(FunctionCallInfo fcinfo)
{
	Interval   *iv;
	int64		days;
	int64		usecs;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument timeout must not be NULL"),
				 errhint("Pass how long to wait at most, for example interval '5 minutes'; interval '0' checks once.")));
	iv = PG_GETARG_INTERVAL_P(2);
	if (pg_mul_s64_overflow((int64) iv->month, DAYS_PER_MONTH, &days) ||
		pg_add_s64_overflow(days, (int64) iv->day, &days) ||
		pg_mul_s64_overflow(days, USECS_PER_DAY, &usecs) ||
		pg_add_s64_overflow(usecs, iv->time, &usecs))
		usecs = (iv->month < 0 || iv->day < 0 || (iv->month == 0 && iv->day == 0 && iv->time < 0))
			? PG_INT64_MIN : PG_INT64_MAX;
	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument timeout must not be negative"),
				 errdetail("The timeout is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv)))),
				 errhint("Pass how long to wait at most, for example interval '5 minutes'; interval '0' checks once.")));
	return usecs;
}

/*
 * Refuses a transaction whose snapshot lasts as long as the transaction:
 * waiting in it would hold back vacuum for the whole wait, and whatever
 * it read after a true answer would not show the verdict waited for.
 */
static void
require_read_committed(void)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("finalize.wait_final cannot wait in a %s transaction",
						IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errdetail("The transaction's snapshot would hold back vacuum for the whole wait, and the transaction's later reads would not see the verdict it waited for."),
				 errhint("Call it in a READ COMMITTED transaction (the default) or outside a transaction block, or poll with finalize.is_final.")));
	/*
	 * A transaction that has written holds row locks (record_range,
	 * report_processed lock the verdict rows) that the worker needs to move
	 * the very verdict waited for: the wait could only time out.
	 */
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("finalize.wait_final cannot wait in a transaction that has a transaction id"),
				 errdetail("The transaction has written or locked rows (for example through finalize.record_range or finalize.report_processed); its row locks could keep the worker from moving the verdict waited for until the transaction ends."),
				 errhint("Commit the writes first and call finalize.wait_final in its own transaction (autocommit).")));
}

/* The verdict epoch (0 without finalize's shared memory). */
static uint64
read_epoch(void)
{
	uint64		epoch;

	if (finalize_shared == NULL)
		return 0;
	epoch = pg_atomic_read_u64(&finalize_shared->verdict_epoch);
	pg_memory_barrier();
	return epoch;
}

/* The next sleep in milliseconds: until the deadline, at most a tick. */
static long
tick_ms(TimestampTz deadline)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		left;

	if (now >= deadline)
		return 0;
	left = (deadline - now + 999) / 1000;
	return left < WAIT_TICK_MS ? (long) left : WAIT_TICK_MS;
}

/*
 * Sleeps until the period may have changed: the shard of the holding table
 * was woken, or (safety net) a tick passed and the epoch moved since
 * epoch_before_check was read; or until the deadline, or one tick on a
 * standby or without shared memory, where nothing wakes waiters. Returns
 * without sleeping when a commit slipped in since the check began.
 */
static void
sleep_until_woken(int64 holding, uint64 epoch_before_check, TimestampTz deadline)
{
	int			shard = wait_shard(holding);
	uint32		wait_event = finalize_wait_event(FINALIZE_WAIT_FINAL);
	ConditionVariable *cv;
	uint64		wake;

	InvalidateCatalogSnapshot();
	if (finalize_shared == NULL)
	{
		long		ms = tick_ms(deadline);

		if (ms > 0)
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, wait_event);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		return;
	}

	cv = &finalize_shared->wake_cv[shard].cv;
	ConditionVariablePrepareToSleep(cv);
	wake = pg_atomic_read_u64(&finalize_shared->wake_epoch[shard]);
	pg_memory_barrier();
	if (read_epoch() != epoch_before_check)
		return;
	for (;;)
	{
		long		ms = tick_ms(deadline);
		bool		timed_out;

		if (ms <= 0)
			return;
		/* CHECK_FOR_INTERRUPTS inside: cancel and statement_timeout end it. */
		timed_out = ConditionVariableTimedSleep(cv, ms, wait_event);
		pg_memory_barrier();
		if (pg_atomic_read_u64(&finalize_shared->wake_epoch[shard]) != wake)
			return;
		if (RecoveryInProgress())
			return;
		if (timed_out && read_epoch() != epoch_before_check)
			return;
	}
}

/*
 * Waits until the period containing ts is final in every table of names,
 * or until timeout_us passed: is_final's answer at that moment. The
 * condition variable's sleep is cancelled on the way out; an error (cancel,
 * statement_timeout, a table that is no longer tracked) leaves that to
 * AbortTransaction or AbortSubTransaction, which cancel it too.
 */
static bool
wait_for_period(const Datum *names, int count, TimestampTz ts, int64 timeout_us)
{
	MemoryContext check_cxt = AllocSetContextCreate(CurrentMemoryContext, "finalize wait_final",
													ALLOCSET_SMALL_SIZES);
	MemoryContext oldcxt;
	TimestampTz deadline;
	WaitCheck	c;

	if (pg_add_s64_overflow(GetCurrentTimestamp(), timeout_us, &deadline))
		deadline = DT_NOEND;
	c.names = names;
	c.count = count;
	c.ts = ts;
	for (;;)
	{
		uint64		epoch;

		CHECK_FOR_INTERRUPTS();
		epoch = read_epoch();
		oldcxt = MemoryContextSwitchTo(check_cxt);
		subxact_rolled_back(check_step, &c);
		MemoryContextSwitchTo(oldcxt);
		MemoryContextReset(check_cxt);
		if (c.final || GetCurrentTimestamp() >= deadline)
			break;
		sleep_until_woken(c.holding, epoch, deadline);
	}
	ConditionVariableCancelSleep();
	MemoryContextDelete(check_cxt);
	return c.final;
}

/*
 * finalize.wait_final(table_name, period_start, timeout): true as soon as
 * is_final(table_name, period_start) is, false when timeout passed first
 * (interval '0': one check). READ COMMITTED only.
 */
Datum
finalize_wait_final(PG_FUNCTION_ARGS)
{
	Datum		name;
	int64		timeout_us;

	sensor_require_table_name(fcinfo);
	sensor_require_period_start(fcinfo);
	timeout_us = timeout_arg(fcinfo);
	require_read_committed();
	name = PG_GETARG_DATUM(0);
	PG_RETURN_BOOL(wait_for_period(&name, 1, PG_GETARG_TIMESTAMPTZ(1), timeout_us));
}

/*
 * finalize.wait_final(table_names text[], period_start, timeout): the same
 * for is_final(table_names, period_start), the period final in every table.
 */
Datum
finalize_wait_final_all(PG_FUNCTION_ARGS)
{
	int			count;
	Datum	   *names = sensor_table_names_arg(fcinfo, &count);
	int64		timeout_us;

	sensor_require_period_start(fcinfo);
	timeout_us = timeout_arg(fcinfo);
	require_read_committed();
	PG_RETURN_BOOL(wait_for_period(names, count, PG_GETARG_TIMESTAMPTZ(1), timeout_us));
}
