/*
 * notify.c
 *     finalize_internal.notify(channel, payload): a NOTIFY that can never stop a
 *     write from committing.
 *
 * The NOTIFY queue is one per cluster, shared by every role: any login
 * that keeps a session LISTENing in an open transaction holds the queue's
 * tail, and another session can then fill it, after which every commit
 * that carries a notification fails ("too many notifications in the NOTIFY
 * queue"). finalize's facts and verdicts must commit whatever the queue
 * does, and nothing of finalize depends on a notification arriving
 * (wait_final sleeps on condition variables, the alerts worker is woken by
 * a signal; a notification is a reason for a client to ask again, never
 * the answer). So notifications are kept with the transaction (dropped
 * with a subtransaction that aborts) and handed to PostgreSQL just before
 * it adds them to the queue at commit, and only when the queue is less
 * than half full (counting what this transaction adds: from PostgreSQL 17
 * on, max_notify_queue_pages can make the queue small); otherwise they are
 * dropped, counted in shared memory
 * (finalize.dropped_notifications()) and said in the log at most every
 * five minutes. Half a queue is gigabytes by default: no session fills
 * it between the look and the commit.
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/async.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/pg_compat.h"
#include "core/shmem.h"

PG_FUNCTION_INFO_V1(finalize_notify);
PG_FUNCTION_INFO_V1(finalize_dropped_notifications);

/* The longest payload pg_notify takes (async.c's limit, not in its header). */
#define NOTIFY_PAYLOAD_MAX_LENGTH (BLCKSZ - NAMEDATALEN - 128)

/* Notifications are dropped from this share of the queue on. */
#define QUEUE_LIMIT 0.5

/* The log says so at most this often. */
#define LOG_INTERVAL_USECS ((int64) 5 * 60 * USECS_PER_SEC)

/* One notification of the transaction, at the nesting level that sent it. */
typedef struct PendingNotify
{
	char	   *channel;
	char	   *payload;
	int			level;
} PendingNotify;

/* In TopTransactionContext; NIL outside a transaction that notified. */
static List *pending = NIL;
static bool callbacks_registered = false;

/* Counts dropped notifications and, at most every few minutes, says so. */
static void
count_dropped(int n, double usage)
{
	TimestampTz now = GetCurrentTimestamp();
	uint64		last;

	if (finalize_shared == NULL)
		return;
	pg_atomic_fetch_add_u64(&finalize_shared->notify_dropped, n);
	last = pg_atomic_read_u64(&finalize_shared->notify_logged_at);
	if ((int64) last + LOG_INTERVAL_USECS <= now &&
		pg_atomic_compare_exchange_u64(&finalize_shared->notify_logged_at, &last, (uint64) now))
		ereport(LOG,
				(errmsg("finalize: %llu notification(s) were not sent since the server started: the NOTIFY queue is %.0f%% full",
						(unsigned long long) pg_atomic_read_u64(&finalize_shared->notify_dropped), usage * 100),
				 errdetail("Verdicts and facts committed; only their notifications on channels \"finalize\" and \"finalize_alert\" were dropped."),
				 errhint("A session that LISTENs in a transaction left open holds the queue: find it with "
						 "SELECT pid, usename, state, xact_start FROM pg_stat_activity WHERE state LIKE 'idle in transaction%%', "
						 "and end it.")));
}

/*
 * The bytes pg_notification_queue_usage() is a share of (see
 * compat_notify_queue_pages: from 17 on, max_notify_queue_pages may be set
 * small).
 */
static double
queue_bytes(void)
{
	return compat_notify_queue_pages() * BLCKSZ;
}

/*
 * The queue's share the pending notifications will take, at least: each
 * entry is a header of four 4-byte fields, the channel and the payload
 * with their terminators, 4-byte aligned (async.c's AsyncQueueEntry).
 */
static double
pending_share(void)
{
	double		bytes = 0;
	ListCell   *lc;

	foreach(lc, pending)
	{
		PendingNotify *p = (PendingNotify *) lfirst(lc);

		bytes += TYPEALIGN(4, 16 + strlen(p->channel) + 1 + strlen(p->payload) + 1);
	}
	return bytes / queue_bytes();
}

/* At PRE_COMMIT: hands the transaction's notifications over, or drops them. */
static void
send_pending(void)
{
	double		usage;
	ListCell   *lc;

	if (pending == NIL)
		return;
	usage = DatumGetFloat8(DirectFunctionCall1(pg_notification_queue_usage, (Datum) 0));
	if (usage + pending_share() >= QUEUE_LIMIT)
	{
		count_dropped(list_length(pending), usage);
		return;
	}
	foreach(lc, pending)
	{
		PendingNotify *p = (PendingNotify *) lfirst(lc);

		Async_Notify(p->channel, p->payload);
	}
}

/* Transaction end: sends (before the commit adds notifications to the queue), or forgets. */
static void
notify_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	if (event == XACT_EVENT_PRE_COMMIT)
		send_pending();
	else if (event == XACT_EVENT_PRE_PREPARE && pending != NIL)
		/* PostgreSQL refuses NOTIFY in a prepared transaction: not sent. */
		count_dropped(list_length(pending), 0);
	if (event != XACT_EVENT_PARALLEL_PRE_COMMIT)
		pending = NIL;
}

/* A subtransaction that aborts takes its notifications along; one that commits hands them up. */
static void
notify_subxact_callback(SubXactEvent event, SubTransactionId mySubid pg_attribute_unused(),
						SubTransactionId parentSubid pg_attribute_unused(), void *arg pg_attribute_unused())
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (pending == NIL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		foreach(lc, pending)
			if (((PendingNotify *) lfirst(lc))->level >= level)
				pending = foreach_delete_current(pending, lc);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, pending)
		{
			PendingNotify *p = (PendingNotify *) lfirst(lc);

			if (p->level >= level)
				p->level = level - 1;
		}
	}
}

/*
 * finalize_internal.notify(channel text, payload text): pg_notify, best effort (see
 * the file header). A channel or payload pg_notify would refuse is the
 * same error now, not at commit.
 */
Datum
finalize_notify(PG_FUNCTION_ARGS)
{
	MemoryContext old;
	PendingNotify *p;
	char	   *channel;
	char	   *payload;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("channel name cannot be empty")));
	channel = text_to_cstring(PG_GETARG_TEXT_PP(0));
	payload = PG_ARGISNULL(1) ? "" : text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (channel[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("channel name cannot be empty")));
	if (strlen(channel) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("channel name too long")));
	if (strlen(payload) >= NOTIFY_PAYLOAD_MAX_LENGTH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("payload string too long")));
	if (!callbacks_registered)
	{
		RegisterXactCallback(notify_xact_callback, NULL);
		RegisterSubXactCallback(notify_subxact_callback, NULL);
		callbacks_registered = true;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	p = palloc(sizeof(PendingNotify));
	p->channel = pstrdup(channel);
	p->payload = pstrdup(payload);
	p->level = GetCurrentTransactionNestLevel();
	pending = lappend(pending, p);
	MemoryContextSwitchTo(old);
	PG_RETURN_VOID();
}

/*
 * finalize.dropped_notifications(): how many notifications finalize did not
 * send since the server started, because the NOTIFY queue was half full.
 */
Datum
finalize_dropped_notifications(PG_FUNCTION_ARGS pg_attribute_unused())
{
	if (finalize_shared == NULL)
		PG_RETURN_INT64(0);
	PG_RETURN_INT64((int64) pg_atomic_read_u64(&finalize_shared->notify_dropped));
}
