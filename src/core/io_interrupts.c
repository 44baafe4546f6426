/*
 * io_interrupts.c
 *     What a wait for SQL Server or an object store does about PostgreSQL's
 *     interrupts.
 *
 * DB-Library and libcurl call back into finalize while they wait (about once
 * a second), with the library on the stack: a callback must not raise an
 * error through it. Only a query cancel (pg_cancel_backend,
 * statement_timeout) and a termination (SIGTERM, pg_terminate_backend) end
 * the I/O. Other interrupts, such as a request to log memory contexts or a
 * ProcSignal barrier another backend waits on, are served right there and
 * the I/O goes on; should serving one raise an error, the error is kept, the
 * I/O ends, and io_interrupts_rethrow() raises it once the library returned.
 * A caller may also give all its waits one deadline (io_set_deadline): a
 * wait still going then ends as a timeout.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/procsignal.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/io_interrupts.h"

/* An error raised while serving an interrupt inside a callback. */
static ErrorData *deferred_error = NULL;

/* When every wait must end (io_set_deadline), 0 for no deadline. */
static TimestampTz io_deadline = 0;

/*
 * Whether the I/O in progress must end: a cancel or a termination that may
 * be served now, or a deferred error. Has no side effects.
 */
bool
io_stop_requested(void)
{
	if (deferred_error != NULL)
		return true;
	if (!InterruptPending || InterruptHoldoffCount != 0 || CritSectionCount != 0)
		return false;
	return ProcDiePending || (QueryCancelPending && QueryCancelHoldoffCount == 0);
}

/*
 * Called from the libraries' callbacks: serves the interrupts that need not
 * end the I/O, then says whether it must end.
 */
bool
io_must_stop(void)
{
	MemoryContext cxt = CurrentMemoryContext;

	if (io_stop_requested() || !InterruptPending ||
		InterruptHoldoffCount != 0 || CritSectionCount != 0)
		return io_stop_requested();
	PG_TRY();
	{
		if (ProcSignalBarrierPending)
			ProcessProcSignalBarrier();
		if (LogMemoryContextPending)
			ProcessLogMemoryContextInterrupt();
	}
	PG_CATCH();
	{
		/*
		 * Kept, not swallowed: raised again by io_interrupts_rethrow(). In
		 * TopMemoryContext, since the caller's context may be gone by then.
		 */
		MemoryContextSwitchTo(TopMemoryContext);
		deferred_error = CopyErrorData();
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
	}
	PG_END_TRY();
	return io_stop_requested();
}

/*
 * Before an I/O: forgets an error an earlier I/O deferred but never raised
 * (an error between its library's return and io_interrupts_rethrow), so it
 * cannot end this one.
 */
void
io_interrupts_begin(void)
{
	if (deferred_error != NULL)
	{
		FreeErrorData(deferred_error);
		deferred_error = NULL;
	}
}

/*
 * After the library returned: raises the error deferred by a callback, then
 * serves whatever interrupt is still pending (a cancel raises here).
 */
void
io_interrupts_rethrow(void)
{
	if (deferred_error != NULL)
	{
		ErrorData  *volatile e = deferred_error;

		deferred_error = NULL;
		/* ReThrowError copies it into the error stack; free the kept copy. */
		PG_TRY();
		{
			ReThrowError(e);
		}
		PG_CATCH();
		{
			FreeErrorData(e);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	CHECK_FOR_INTERRUPTS();
}

/*
 * Gives every later wait of this process one deadline, timeout_ms from now
 * (0: none, the worker's way, where each wait has its own timeout): a call
 * that must answer within one time however many waits it makes
 * (finalize.track_table's check of the SQL Server table).
 */
void
io_set_deadline(long timeout_ms)
{
	io_deadline = timeout_ms > 0 ? TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms) : 0;
}

/* Whether the deadline has passed: the library's wait must end. */
bool
io_deadline_passed(void)
{
	return io_deadline != 0 && GetCurrentTimestamp() >= io_deadline;
}

/* A wait of ms milliseconds, cut to end by the deadline (at least 1 ms). */
long
io_bounded_ms(long ms)
{
	long		left;

	if (io_deadline == 0)
		return ms;
	left = (long) ((io_deadline - GetCurrentTimestamp()) / 1000);
	return Max(Min(ms, left), 1);
}
