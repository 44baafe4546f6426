/*
 * delivery.c
 *     The alert webhooks' queue as the delivery worker (push/worker.c, the
 *     "finalize alerts" process) drains it: finalize.alert_delivery.
 *
 * Each delivery takes three steps, and no transaction is open during the
 * HTTP request: a short transaction claims the next due delivery
 * (_claim_delivery, which counts the attempt) and reads its target; the
 * request goes out through core/http.c; a short transaction records the
 * outcome (_delivery_result: delivered, retried with backoff, or failed;
 * the target's circuit breaker). A receiver that stalls costs this worker
 * its timeout, never a source worker or a verdict. The worker sleeps until
 * the next delivery falls due; the queue's trigger wakes it at commit
 * (wake.c). A crash between the request and the record re-sends the same
 * request under the same idempotency key, which receivers deduplicate.
 */
#include "postgres.h"

#include <signal.h>
#include <time.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "alert/delivery.h"
#include "alert/outcome.h"
#include "alert/payload.h"
#include "alert/target.h"
#include "core/internal_schema.h"
#include "core/background.h"
#include "core/db.h"
#include "core/http.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "core/wait_events.h"
#include "core/redact.h"

/* Deliveries sent before the worker looks at its latch and settings again. */
#define DELIVERIES_PER_ROUND 50
/* An answer's body kept in last_error, at most. */
#define ERROR_EXCERPT 300
/* An answer's body read, at most: a longer one is cut, not a failure. */
#define MAX_ANSWER (64 * 1024)
/* The shortest nap: a queue that has nothing claimable never spins. */
#define MIN_NAP_MS 100

/* One claimed delivery, with the request to send or why there is none. */
typedef struct Claimed
{
	int64		delivery_id;
	char	   *target_name;
	AlertTarget *target;
	AlertRequest *request;
	char	   *error;			/* set: fails at once, nothing is sent */
} Claimed;

/* What one attempt came to, for _delivery_result. */
typedef struct Attempt
{
	bool		delivered;
	long		status;			/* 0: no HTTP answer */
	char	   *error;
	double		retry_after;	/* seconds, -1 when none */
	bool		permanent;
} Attempt;

/* Whether the catalog has the delivery queue (an older version has not). */
static bool
queue_exists(void)
{
	if (!OidIsValid(get_extension_oid("finalize", true)))
		return false;
	return internal_function_exists("claim_delivery()");
}

/*
 * Loads the claimed delivery's target and builds its request, in a
 * transaction of its own; whatever goes wrong (a target dropped, a secret
 * missing, text that has no UTF-8 form) becomes c->error, a failure of this
 * delivery alone: an error must not stop the worker, or the next claim of
 * the same delivery would stop it again.
 */
static void
prepare_request(MemoryContext cxt, Claimed *c, Jsonb *event)
{
	PG_TRY();
	{
		db_begin("finalize: preparing an alert delivery");
		c->target = alert_target_load(c->target_name, cxt, &c->error);
		if (c->target != NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			c->request = alert_build_request(c->target->format, c->target->url, event, &c->target->secrets,
											 &c->error);
			if (c->request == NULL)
				c->error = psprintf("webhook target \"%s\": %s", c->target->name, c->error);
			MemoryContextSwitchTo(old);
		}
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
		c->request = NULL;
		c->error = psprintf("the request to webhook target \"%s\" could not be built: %s", c->target_name,
							edata->message);
	}
	PG_END_TRY();
}

/*
 * Claims the next due delivery and builds its request (in cxt); false when
 * none is due. *gone is set when the worker has nothing left to serve (the
 * extension, or every target and pending delivery, is gone).
 */
static bool
claim_next(MemoryContext cxt, Claimed *c, bool *gone)
{
	bool		isnull;
	Jsonb	   *event;
	MemoryContext old;

	db_begin("finalize: claiming an alert delivery");
	if (!queue_exists())
	{
		*gone = true;
		db_commit();
		return false;
	}
	if (SPI_execute("SELECT d.delivery_id, d.target_name, d.event FROM "
					FINALIZE_INTERNAL_SCHEMA ".claim_delivery() AS d", false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not claim an alert delivery");
	if (SPI_processed == 0)
	{
		if (SPI_execute("SELECT NOT EXISTS (SELECT FROM " FINALIZE_INTERNAL_SCHEMA ".alert_targets()) "
						"AND NOT EXISTS (SELECT FROM " FINALIZE_SCHEMA ".alert_delivery d WHERE d.state = 'pending')",
						true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not look for webhook targets");
		*gone = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		db_commit();
		return false;
	}
	old = MemoryContextSwitchTo(cxt);
	memset(c, 0, sizeof(*c));
	c->delivery_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	c->target_name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	event = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	MemoryContextSwitchTo(old);
	/* The claim (its counted attempt) commits before anything can fail. */
	db_commit();
	prepare_request(cxt, c, event);
	return true;
}

/* Sends a claimed delivery's request; no transaction is open. */
static void
send_request(HttpClient *client, Claimed *c, Attempt *a)
{
	HttpRequest req;
	HttpResponse resp;
	bool		answered;

	memset(a, 0, sizeof(*a));
	a->retry_after = -1;
	if (c->error != NULL)
	{
		/* The request's words may quote its URL: redacted as an answer's are. */
		a->error = c->target != NULL ? alert_redact(c->target, c->error) : c->error;
		a->permanent = true;
		return;
	}
	if (client == NULL)
	{
		a->error = pstrdup("could not start an HTTP client");
		return;
	}
	memset(&req, 0, sizeof(req));
	req.wait = FINALIZE_WAIT_WEBHOOK;
	req.method = "POST";
	req.url = c->request->url;
	req.headers = c->request->headers;
	req.body = c->request->body;
	req.body_len = strlen(c->request->body);
	req.timeout_ms = c->target->timeout_ms;
	req.connect_timeout_ms = c->target->timeout_ms;
	req.max_response_bytes = MAX_ANSWER;
	pgstat_report_activity(STATE_RUNNING, psprintf("finalize: delivering an alert to \"%s\"", c->target->name));
	(void) http_perform(client, &req, &resp);
	pgstat_report_activity(STATE_IDLE, NULL);
	/* A cancel or a termination is served now, after libcurl returned. */
	CHECK_FOR_INTERRUPTS();
	/*
	 * An answer longer than MAX_ANSWER still answered: a 2xx with a big body
	 * is delivered, not sent again.
	 */
	answered = resp.failure == HTTP_OK || (resp.failure == HTTP_TOO_LARGE && resp.status > 0);
	a->status = answered ? resp.status : 0;
	switch (delivery_verdict(answered, resp.status))
	{
		case DELIVERY_DONE:
			a->delivered = true;
			break;
		case DELIVERY_PERMANENT:
			a->permanent = true;
			/* FALLTHROUGH */
		case DELIVERY_RETRY:
			/* Redacted whole, then cut: a cut must not split a secret. */
			if (!answered)
				a->error = text_excerpt(alert_redact(c->target, resp.error), ERROR_EXCERPT);
			else
				a->error = psprintf("HTTP %ld%s%s", resp.status, resp.len > 0 ? ": " : "",
									text_excerpt(alert_redact(c->target, resp.body), ERROR_EXCERPT));
			a->retry_after = delivery_retry_after(resp.retry_after, time(NULL));
			break;
	}
}

/* Records an attempt's outcome in a short transaction. */
static void
record_attempt(const Claimed *c, const Attempt *a)
{
	Oid			types[8] = {INT8OID, BOOLOID, INT4OID, TEXTOID, FLOAT8OID, BOOLOID, INT4OID, BOOLOID};
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	char	   *outcome;

	values[0] = Int64GetDatum(c->delivery_id);
	values[1] = BoolGetDatum(a->delivered);
	values[2] = Int32GetDatum((int32) a->status);
	if (a->status == 0)
		nulls[2] = 'n';
	if (a->error != NULL)
		values[3] = CStringGetTextDatum(a->error);
	else
		nulls[3] = 'n';
	values[4] = Float8GetDatum(a->retry_after);
	if (a->retry_after < 0)
		nulls[4] = 'n';
	values[5] = BoolGetDatum(a->permanent);
	values[6] = Int32GetDatum(finalize_alert_retry_limit);
	/* Nothing was sent when the request could not be prepared. */
	values[7] = BoolGetDatum(c->error == NULL);
	db_begin("finalize: recording an alert delivery");
	if (SPI_execute_with_args("SELECT " FINALIZE_INTERNAL_SCHEMA ".delivery_result($1, $2, $3, $4, $5, $6, $7, $8)",
							  8, types, values, nulls, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not record an alert delivery");
	outcome = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	/* A message that will never arrive must not go unnoticed. */
	if (outcome != NULL && strcmp(outcome, "failed") == 0)
		ereport(WARNING,
				(errmsg("finalize could not deliver an alert to webhook target \"%s\"", c->target_name),
				 errdetail("Delivery %lld failed for good after %s: %s", (long long) c->delivery_id,
						   c->error != NULL ? "it could not be sent" :
						   a->permanent ? "an answer no retry can change" : "finalize.alert_retry_limit attempts",
						   a->error ? a->error : "no error text"),
				 errhint("See finalize.alert_deliveries; the incident itself is in finalize.alerts.")));
	db_commit();
}

/*
 * When the next claimable alert delivery falls due, in milliseconds from
 * now (at most nap, at least MIN_NAP_MS); nap when none is. In a
 * transaction of the caller's.
 */
long
alert_nap_ms(long nap)
{
	bool		isnull;
	Datum		due;

	if (!queue_exists())
		return nap;
	if (SPI_execute("SELECT " FINALIZE_INTERNAL_SCHEMA ".next_delivery()", true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read when the next alert delivery is due");
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

/*
 * Claims and sends due alert deliveries, at most DELIVERIES_PER_ROUND;
 * returns how many were sent, or -1 when there is nothing left to serve
 * (no webhook target and no pending delivery). The caller checks its latch
 * and settings between rounds, and does not nap after a full one.
 */
int
alert_deliver_round(MemoryContext cxt, HttpClient *client, bool (*must_stop) (void))
{
	for (int i = 0; i < DELIVERIES_PER_ROUND; i++)
	{
		Claimed		c;
		Attempt		a;
		bool		gone = false;
		bool		more;

		CHECK_FOR_INTERRUPTS();
		/* Switched off or paused: stop before the next one, not after a round. */
		if (must_stop())
			return i;
		MemoryContextReset(cxt);
		/* Everything of one delivery lives in cxt (db_commit returns to it). */
		MemoryContextSwitchTo(cxt);
		more = claim_next(cxt, &c, &gone);
		if (more)
		{
			send_request(client, &c, &a);
			record_attempt(&c, &a);
		}
		MemoryContextSwitchTo(TopMemoryContext);
		if (!more)
			return gone ? -1 : i;
	}
	return DELIVERIES_PER_ROUND;
}

/* Whether a round sent as many as it may (more may be due at once). */
bool
alert_round_full(int sent)
{
	return sent >= DELIVERIES_PER_ROUND;
}

/*
 * What a previous run of the worker claimed and never recorded is due
 * again. In a transaction of the caller's.
 */
void
alert_release_claims(void)
{
	if (queue_exists() &&
		SPI_execute("SELECT " FINALIZE_INTERNAL_SCHEMA ".release_claims()", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not release claimed alert deliveries");
}
