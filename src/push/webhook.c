/*
 * webhook.c
 *     The webhook target of publications: a finalize_webhook server (its URL
 *     and secrets read as alert webhooks read them, alert/target.c), sent
 *     finalize's event (schema finalize.publication/1, with Paimon's
 *     http-report fields) signed as the json format of alerts is, under
 *     Idempotency-Key = the event's id. Any 2xx delivers it; with the
 *     publication's contract "paimon" the answer must also be
 *     {"result": "SUCCESS"}, as Paimon's http-report expects.
 */
#include "postgres.h"

#include <time.h>

#include "utils/jsonb.h"

#include "alert/outcome.h"
#include "alert/payload.h"
#include "alert/target.h"
#include "core/http.h"
#include "lake/metadata.h"
#include "push/target.h"

/* An answer's body read, at most: a longer one is cut, not a failure. */
#define MAX_ANSWER (64 * 1024)

/* A webhook publication's target and the request of one event. */
typedef struct WebhookSend
{
	AlertTarget *target;
	char	   *body;			/* UTF-8, signed */
	List	   *headers;
} WebhookSend;

/*
 * The server of a webhook publication, as alerts read it (alert/target.c),
 * and the event's request: built here, in the transaction, because the
 * HMAC (PostgreSQL's, over OpenSSL) is tracked by the transaction's
 * resource owner.
 */
static void *
webhook_load(const PushEvent *ev, MemoryContext cxt, char **error)
{
	AlertTarget *t = alert_target_load(ev->server_name, cxt, error);
	WebhookSend *w;
	MemoryContext old;

	if (t == NULL)
		return NULL;
	if (strcmp(t->format, "json") != 0)
	{
		*error = psprintf("webhook target \"%s\" has format \"%s\"; a publication sends finalize's json only",
						  t->name, t->format);
		return NULL;
	}
	if (t->secrets.bearer_token != NULL && !http_header_safe(t->secrets.bearer_token))
	{
		*error = psprintf("webhook target \"%s\": its bearer_token has a control character", t->name);
		return NULL;
	}
	old = MemoryContextSwitchTo(cxt);
	w = palloc0(sizeof(WebhookSend));
	w->target = t;
	w->body = alert_utf8_body(pstrdup(ev->body));
	w->headers = list_make3(pstrdup("Content-Type: application/json"),
							psprintf("Idempotency-Key: %s", ev->event_id),
							psprintf("X-Finalize-Event: publication.%s", ev->kind));
	if (t->secrets.bearer_token != NULL)
		w->headers = lappend(w->headers, psprintf("Authorization: Bearer %s", t->secrets.bearer_token));
	/* Signed last: over exactly the bytes sent. */
	if (t->secrets.hmac_key != NULL)
		w->headers = lappend(w->headers, psprintf("X-Finalize-Signature: %s",
												  alert_signature(t->secrets.hmac_key, w->body, strlen(w->body))));
	MemoryContextSwitchTo(old);
	return w;
}

/* The value of a text key of a JSON object answer, or NULL. */
static char *
answer_field(const char *body, const char *key)
{
	Jsonb	   *doc = lake_parse_json(body);
	JsonbValue	k;
	JsonbValue *v;

	if (doc == NULL || !JB_ROOT_IS_OBJECT(doc))
		return NULL;
	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	v = findJsonbValueFromContainer(&doc->root, JB_FOBJECT, &k);
	if (v == NULL || v->type != jbvString)
		return NULL;
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* Whether the publication asked for Paimon's http-report contract. */
static bool
paimon_contract(const PushEvent *ev)
{
	JsonbValue	k;
	JsonbValue *v;

	k.type = jbvString;
	k.val.string.val = "contract";
	k.val.string.len = strlen("contract");
	v = findJsonbValueFromContainer(&ev->options->root, JB_FOBJECT, &k);
	return v != NULL && v->type == jbvString && v->val.string.len == 6 &&
		strncmp(v->val.string.val, "paimon", 6) == 0;
}

/* One POST of the event; the outcome in r, every secret redacted. */
static void
webhook_send(void *target, const PushEvent *ev, HttpClient *client, PushResult *r)
{
	WebhookSend *w = (WebhookSend *) target;
	AlertTarget *t = w->target;
	HttpRequest req;
	HttpResponse resp;
	bool		answered;

	memset(&req, 0, sizeof(req));
	req.wait = FINALIZE_WAIT_WEBHOOK;
	req.method = "POST";
	req.url = t->url;
	req.headers = w->headers;
	req.body = w->body;
	req.body_len = strlen(w->body);
	req.timeout_ms = t->timeout_ms;
	req.connect_timeout_ms = t->timeout_ms;
	req.max_response_bytes = MAX_ANSWER;
	(void) http_perform(client, &req, &resp);
	answered = resp.failure == HTTP_OK || (resp.failure == HTTP_TOO_LARGE && resp.status > 0);
	r->status = answered ? resp.status : 0;
	r->retry_after = delivery_retry_after(resp.retry_after, time(NULL));
	if (!answered)
	{
		r->error = alert_redact(t, resp.error);
		return;
	}
	if (delivery_verdict(true, resp.status) == DELIVERY_DONE)
	{
		char	   *result;

		if (!paimon_contract(ev))
		{
			r->delivered = true;
			return;
		}
		result = answer_field(resp.body, "result");
		if (result != NULL && strcmp(result, "SUCCESS") == 0)
		{
			r->delivered = true;
			return;
		}
		r->error = psprintf("HTTP %ld without {\"result\": \"SUCCESS\"} (Paimon's http-report contract): %s",
							resp.status, alert_redact(t, resp.body));
		return;
	}
	r->auth_failed = resp.status == 401 || resp.status == 403;
	r->error = psprintf("HTTP %ld%s%s", resp.status, resp.len > 0 ? ": " : "", alert_redact(t, resp.body));
}

const PushTargetKind push_webhook_kind = {"webhook", webhook_load, webhook_send};
