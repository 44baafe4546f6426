/*
 * wake.c
 *     finalize_internal.wake_alert_delivery(): wakes the alerts worker once the
 *     transaction that queued deliveries commits.
 *
 * The queue's trigger calls it; the wake-up is deferred to the commit (a
 * transaction callback), so the worker never looks before the rows are
 * visible, and an aborted transaction wakes nobody. The signal is SIGUSR1,
 * whose handler in a background worker sets its latch. Without a wake-up
 * (the worker not running yet, a prepared transaction) the worker still
 * finds the rows at its next nap.
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"

#include "core/shmem.h"

PG_FUNCTION_INFO_V1(finalize_wake_alert_delivery);

static bool wake_at_commit = false;
static bool callback_registered = false;

/* Signals the alerts worker of this database at commit; forgets on abort. */
static void
wake_callback(XactEvent event, void *arg pg_attribute_unused())
{
	if (!wake_at_commit)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		pid_t		pid = finalize_shared ? slot_pid(SLOT_ALERTS, MyDatabaseId, InvalidOid) : 0;

		wake_at_commit = false;
		if (pid != 0 && pid != MyProcPid)
			(void) kill(pid, SIGUSR1);
	}
	else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_PREPARE)
		wake_at_commit = false;
}

/* finalize_internal.wake_alert_delivery() */
Datum
finalize_wake_alert_delivery(PG_FUNCTION_ARGS pg_attribute_unused())
{
	if (!callback_registered)
	{
		RegisterXactCallback(wake_callback, NULL);
		callback_registered = true;
	}
	wake_at_commit = true;
	PG_RETURN_VOID();
}
