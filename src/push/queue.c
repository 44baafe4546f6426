/*
 * queue.c
 *     The publications' outbox (finalize.publication_event) as the delivery
 *     worker drains it, one event at a time, in the three steps alert
 *     webhooks take: a short transaction claims the next due event
 *     (_claim_publication_event: the head of one publication's queue, its
 *     attempt counted) and its target kind loads the server; the attempt
 *     goes out with no transaction open; a short transaction records the
 *     outcome (_publication_result: delivered, or waiting with backoff, the
 *     target's breaker, the publication_failing incident). A crash between
 *     the attempt and its record sends the same event again under the same
 *     event_id, which each target recognises where it can.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/internal_schema.h"
#include "core/settings.h"
#include "core/redact.h"
#include "push/queue.h"
#include "push/target.h"

/* Events sent before the worker looks at its latch, settings and alerts again. */
#define EVENTS_PER_ROUND 50
/* The shortest nap: a queue that has nothing claimable never spins. */
#define MIN_NAP_MS 100
/* A failed attempt that took this long opens its target's breaker at once. */
#define SLOW_FAILURE_MS 2000
/* An error text kept, at most. */
#define ERROR_EXCERPT 500

/* The target kind of an event's publication (the outbox's CHECK lists them). */
static const PushTargetKind *
kind_of(const char *name)
{
	static const PushTargetKind *const kinds[] = {
		&push_webhook_kind, &push_airflow_kind, &push_dagster_kind,
		&push_iceberg_property_kind, &push_success_marker_kind
	};

	for (size_t i = 0; i < lengthof(kinds); i++)
		if (strcmp(kinds[i]->name, name) == 0)
			return kinds[i];
	return NULL;
}

/* Whether the catalog has the outbox (one older than the library has not). */
static bool
outbox_exists(void)
{
	return internal_function_exists("claim_publication_event()");
}

/* A column of the claim's row as text, or NULL. */
static char *
col_text(int n)
{
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, n);
}

/* A column of the claim's row as a datum (the row is in SPI's memory). */
static Datum
col(int n, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, n, isnull);
}

/*
 * Claims the next due event into cxt; false when none is due, *gone set
 * when no publication exists (or the catalog has no outbox). *refused says
 * why the role that declared its publication may no longer have it sent.
 */
static bool
claim(MemoryContext cxt, PushEvent *ev, char **refused, bool *gone)
{
	bool		isnull;
	MemoryContext old;

	db_begin("finalize: claiming a publication event");
	if (!outbox_exists())
	{
		*gone = true;
		db_commit();
		return false;
	}
	if (SPI_execute("SELECT * FROM " FINALIZE_INTERNAL_SCHEMA ".claim_publication_event()", false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not claim a publication event");
	if (SPI_processed == 0)
	{
		if (SPI_execute("SELECT NOT EXISTS (SELECT FROM " FINALIZE_SCHEMA ".publication)", true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not look for publications");
		*gone = DatumGetBool(col(1, &isnull));
		db_commit();
		return false;
	}
	old = MemoryContextSwitchTo(cxt);
	memset(ev, 0, sizeof(*ev));
	ev->event_seq = DatumGetInt64(col(1, &isnull));
	ev->event_id = col_text(2);
	ev->kind = col_text(3);
	ev->publication_id = DatumGetInt64(col(4, &isnull));
	ev->publication = col_text(5);
	ev->target_kind = col_text(6);
	ev->server_name = col_text(7);
	ev->table_name = col_text(8);
	ev->period_start = DatumGetTimestampTz(col(9, &isnull));
	ev->period_end = DatumGetTimestampTz(col(10, &isnull));
	ev->period_zone = col_text(11);
	ev->partition_key = col_text(12);
	ev->location = col_text(13);
	ev->options = DatumGetJsonbPCopy(col(14, &isnull));
	ev->body = col_text(15);
	ev->attempts = DatumGetInt32(col(16, &isnull));
	*refused = col_text(17);
	MemoryContextSwitchTo(old);
	/* The claim (its counted attempt) commits before anything can fail. */
	db_commit();
	return true;
}

/*
 * Loads the event's target in a transaction of its own; whatever goes
 * wrong becomes *error, a wait of this event alone: an error must not stop
 * the worker, or the next claim of the same event would stop it again.
 */
static void *
load_target(MemoryContext cxt, const PushTargetKind *kind, const PushEvent *ev, char **error)
{
	void	   *target = NULL;

	PG_TRY();
	{
		db_begin("finalize: preparing a publication event");
		target = kind->load(ev, cxt, error);
		db_commit();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		MemoryContextSwitchTo(cxt);
		target = NULL;
		*error = psprintf("the target of publication \"%s\" could not be read: %s", ev->publication, edata->message);
	}
	PG_END_TRY();
	return target;
}

/*
 * The target's send(), an ERROR in which (out of memory, a library's
 * refusal) fails this attempt alone: outside a transaction it would end
 * the worker, which would claim the same event again after its restart.
 * A termination (FATAL) still ends the worker.
 */
static void
send_guarded(MemoryContext cxt, const PushTargetKind *kind, void *target, const PushEvent *ev, HttpClient *client,
			 PushResult *r)
{
	PG_TRY();
	{
		kind->send(target, ev, client, r);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		MemoryContextSwitchTo(cxt);
		r->delivered = false;
		r->error = psprintf("the %s target failed: %s", ev->target_kind, edata->message);
	}
	PG_END_TRY();
}

/*
 * One attempt at a claimed event; no transaction is open while it is sent.
 * *slow says that it held the worker for SLOW_FAILURE_MS or more, *reached
 * that it went to the target (a failure before, such as a refused role or
 * a server that cannot be read, is the publication's, not the target's:
 * it must not open the breaker that alert webhooks to that server share).
 */
static void
attempt(MemoryContext cxt, HttpClient *client, const PushEvent *ev, const char *refused, PushResult *r, bool *slow,
		bool *reached)
{
	const PushTargetKind *kind = kind_of(ev->target_kind);
	char	   *error = NULL;
	void	   *target;
	TimestampTz started;

	memset(r, 0, sizeof(*r));
	r->retry_after = -1;
	*slow = false;
	*reached = false;
	/* Checked at every attempt, as add_publication checked it. */
	if (refused != NULL)
	{
		r->error = pstrdup(refused);
		r->auth_failed = true;
		return;
	}
	if (kind == NULL)
	{
		r->error = psprintf("publication \"%s\" has a target kind this library does not know: \"%s\"",
							ev->publication, ev->target_kind);
		return;
	}
	target = load_target(cxt, kind, ev, &error);
	if (target == NULL)
	{
		r->error = error != NULL ? error : pstrdup("its target could not be read");
		return;
	}
	if (client == NULL)
	{
		r->error = pstrdup("could not start an HTTP client");
		return;
	}
	pgstat_report_activity(STATE_RUNNING, psprintf("finalize: publishing %s of \"%s\" (%s)", ev->kind,
												   ev->table_name, ev->publication));
	started = GetCurrentTimestamp();
	*reached = true;
	send_guarded(cxt, kind, target, ev, client, r);
	*slow = TimestampDifferenceExceeds(started, GetCurrentTimestamp(), SLOW_FAILURE_MS);
	pgstat_report_activity(STATE_IDLE, NULL);
	/* A cancel or a termination is served now, after the target returned. */
	CHECK_FOR_INTERRUPTS();
	if (!r->delivered && r->error == NULL)
		r->error = psprintf("%s target gave no reason", ev->target_kind);
}

/* Records an attempt's outcome in a short transaction. */
static void
record(const PushEvent *ev, const PushResult *r, bool slow, bool reached)
{
	Oid			types[9] = {INT8OID, BOOLOID, BOOLOID, INT4OID, TEXTOID, FLOAT8OID, BOOLOID, BOOLOID, BOOLOID};
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = Int64GetDatum(ev->event_seq);
	values[1] = BoolGetDatum(r->delivered);
	values[2] = BoolGetDatum(r->delivered && r->already);
	values[3] = Int32GetDatum((int32) r->status);
	if (r->status == 0)
		nulls[3] = 'n';
	if (!r->delivered && r->error != NULL)
		values[4] = CStringGetTextDatum(text_excerpt(r->error, ERROR_EXCERPT));
	else
		nulls[4] = 'n';
	values[5] = Float8GetDatum(r->retry_after);
	if (r->retry_after < 0)
		nulls[5] = 'n';
	values[6] = BoolGetDatum(r->auth_failed);
	values[7] = BoolGetDatum(slow && !r->delivered);
	values[8] = BoolGetDatum(reached);
	db_begin("finalize: recording a publication event");
	if (SPI_execute_with_args("SELECT " FINALIZE_INTERNAL_SCHEMA ".publication_result($1, $2, $3, $4, $5, $6, $7, $8, $9)",
							  9, types, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not record a publication event");
	db_commit();
}

/*
 * Claims and sends due publication events, at most EVENTS_PER_ROUND;
 * returns how many were sent, or -1 when there is nothing left to serve
 * (no publication exists).
 */
int
publication_deliver_round(MemoryContext cxt, HttpClient *client, bool (*must_stop) (void))
{
	for (int i = 0; i < EVENTS_PER_ROUND; i++)
	{
		PushEvent	ev;
		PushResult	r;
		char	   *refused = NULL;
		bool		gone = false;
		bool		slow;
		bool		reached;
		bool		more;

		CHECK_FOR_INTERRUPTS();
		/* Switched off or paused: stop before the next one, not after a round. */
		if (must_stop())
			return i;
		MemoryContextReset(cxt);
		MemoryContextSwitchTo(cxt);
		more = claim(cxt, &ev, &refused, &gone);
		if (more)
		{
			attempt(cxt, client, &ev, refused, &r, &slow, &reached);
			record(&ev, &r, slow, reached);
		}
		MemoryContextSwitchTo(TopMemoryContext);
		if (!more)
			return gone ? -1 : i;
	}
	return EVENTS_PER_ROUND;
}

/* Whether a round sent as many as it may (more may be due at once). */
bool
publication_round_full(int sent)
{
	return sent >= EVENTS_PER_ROUND;
}

/*
 * When the next publication event falls due, in milliseconds from now (at
 * most nap, at least MIN_NAP_MS); nap when none is. In a transaction of
 * the caller's.
 */
long
publication_nap_ms(long nap)
{
	bool		isnull;
	Datum		due;

	if (!outbox_exists())
		return nap;
	if (SPI_execute("SELECT " FINALIZE_INTERNAL_SCHEMA ".next_publication_event()", true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read when the next publication event is due");
	due = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
	{
		long		secs;
		int			usecs;

		TimestampDifference(GetCurrentTimestamp(), DatumGetTimestampTz(due), &secs, &usecs);
		nap = Max(Min(nap, secs * 1000 + usecs / 1000 + 1), MIN_NAP_MS);
	}
	return nap;
}

/* Events a previous run claimed and never recorded are due again. */
void
publication_release_claims(void)
{
	if (outbox_exists() &&
		SPI_execute("SELECT " FINALIZE_INTERNAL_SCHEMA ".release_publication_claims()", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not release claimed publication events");
}
