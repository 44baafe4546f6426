/*
 * payload.c
 *     The HTTP request of one delivery, in the target's format.
 *
 * The input is the event the queue stored (finalize_internal.alert_event: the
 * incident at one transition), so a retry sends the same request. Each
 * format follows its service's public API:
 *   json          the event itself (the documented schema), with
 *                 Idempotency-Key and, with an hmac_key, X-Finalize-Signature:
 *                 sha256=<hex HMAC-SHA256(key, body)>;
 *   slack         an incoming webhook message: {"text", "blocks"} in mrkdwn
 *                 (&, <, > escaped as Slack asks);
 *   pagerduty_v2  Events API v2: routing_key, event_action trigger |
 *                 acknowledge | resolve, dedup_key naming the incident,
 *                 payload (summary at most 1024 characters, source,
 *                 severity, timestamp, component, group, class,
 *                 custom_details) on trigger;
 *   opsgenie      Alert API: create (message at most 130 characters, alias =
 *                 the dedup key, description, priority P1/P3/P5, details),
 *                 acknowledge and close by alias, Authorization: GenieKey.
 * Nothing here does I/O; the alerts worker sends what it returns.
 */
#include "postgres.h"

#include "common/hmac.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/formatting.h"
#include "utils/numeric.h"

#include "alert/payload.h"
#include "core/http.h"
#include "core/json_build.h"

/* Slack's limit for the text of a section or context element. */
#define SLACK_TEXT_MAX 3000

/* The fields of an event this file uses. */
typedef struct AlertEvent
{
	const char *transition;		/* open | acknowledge | resolve */
	const char *dedup_key;
	const char *idempotency_key;
	const char *database;
	const char *id;
	const char *kind;
	const char *severity;
	const char *table;
	const char *source;
	const char *subject;
	const char *message;
	const char *opened_at;
	const char *resolved_at;
	const char *acknowledged_by;
	const char *acknowledge_note;
	const char *count;
	Jsonb	   *detail;			/* NULL when none */
} AlertEvent;

/* A scalar member of an object as text (numbers too); NULL when absent or null. */
static const char *
member_text(JsonbContainer *obj, const char *key)
{
	JsonbValue	v;

	if (obj == NULL || getKeyJsonValueFromContainer(obj, key, strlen(key), &v) == NULL)
		return NULL;
	if (v.type == jbvString)
		return pnstrdup(v.val.string.val, v.val.string.len);
	if (v.type == jbvNumeric)
		return DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v.val.numeric)));
	return NULL;
}

/* An object member of an object, as its container (v keeps its length); NULL otherwise. */
static JsonbContainer *
member_object(JsonbContainer *obj, const char *key, JsonbValue *v)
{
	if (obj == NULL || getKeyJsonValueFromContainer(obj, key, strlen(key), v) == NULL ||
		v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		return NULL;
	return v->val.binary.data;
}

/* Reads the event; false with *error set when it lacks what every format needs. */
static bool
read_event(Jsonb *event, AlertEvent *ev, char **error)
{
	JsonbContainer *top = JsonContainerIsObject(&event->root) ? &event->root : NULL;
	JsonbValue	av;
	JsonbValue	dv;
	JsonbContainer *a = member_object(top, "alert", &av);
	JsonbContainer *detail = member_object(a, "detail", &dv);

	memset(ev, 0, sizeof(*ev));
	ev->transition = member_text(top, "event");
	ev->dedup_key = member_text(top, "dedup_key");
	ev->idempotency_key = member_text(top, "idempotency_key");
	ev->database = member_text(top, "database");
	ev->id = member_text(a, "id");
	ev->kind = member_text(a, "kind");
	ev->severity = member_text(a, "severity");
	ev->table = member_text(a, "table");
	ev->source = member_text(a, "source");
	ev->subject = member_text(a, "subject");
	ev->message = member_text(a, "message");
	ev->opened_at = member_text(a, "opened_at");
	ev->resolved_at = member_text(a, "resolved_at");
	ev->acknowledged_by = member_text(a, "acknowledged_by");
	ev->acknowledge_note = member_text(a, "acknowledge_note");
	ev->count = member_text(a, "count");
	if (detail != NULL)
		ev->detail = JsonbValueToJsonb(&dv);
	if (ev->transition == NULL || ev->dedup_key == NULL || ev->idempotency_key == NULL ||
		ev->id == NULL || ev->kind == NULL || ev->severity == NULL || ev->message == NULL ||
		(strcmp(ev->transition, "open") != 0 && strcmp(ev->transition, "acknowledge") != 0 &&
		 strcmp(ev->transition, "resolve") != 0))
	{
		*error = pstrdup("the queued event lacks its transition, keys, id, kind, severity or message");
		return false;
	}
	return true;
}

/* At most max characters of s (never splitting one), with "..." when cut. */
static char *
clip(const char *s, int max)
{
	int			len = strlen(s);
	int			cut;

	if (pg_mbstrlen(s) <= max)
		return pstrdup(s);
	cut = pg_mbcharcliplen(s, len, max - 3);
	return psprintf("%.*s...", cut, s);
}

/* What the incident is about: "table t (source s), subject", or the source alone. */
static char *
subject_line(const AlertEvent *ev)
{
	StringInfoData buf;

	initStringInfo(&buf);
	if (ev->table != NULL)
		appendStringInfo(&buf, "table %s", ev->table);
	if (ev->source != NULL)
		appendStringInfo(&buf, buf.len > 0 ? " (source %s)" : "source %s", ev->source);
	if (ev->subject != NULL)
		appendStringInfo(&buf, buf.len > 0 ? ", %s" : "%s", ev->subject);
	if (buf.len == 0)
		appendStringInfo(&buf, "database %s", ev->database ? ev->database : "?");
	return buf.data;
}

/*
 * One line for people: "[CRITICAL] data_loss on table t: message". A
 * resolution's message begins with "Resolved at" (finalize_internal.alert_event).
 */
static char *
summary(const AlertEvent *ev)
{
	char	   *sev = asc_toupper(ev->severity, strlen(ev->severity));
	const char *state = strcmp(ev->transition, "acknowledge") == 0 ? "ACKNOWLEDGED " : "";

	return psprintf("%s[%s] %s on %s: %s", state, sev, ev->kind, subject_line(ev), ev->message);
}

/*
 * Escapes &, < and > as Slack's mrkdwn requires, in at most max bytes:
 * Slack refuses a block whose text is longer than 3000 characters, so a
 * longer text ends in "..." (never inside an entity or a character).
 */
static char *
slack_escape(const char *s, int max)
{
	StringInfoData buf;

	initStringInfo(&buf);
	while (*s)
	{
		int			len = pg_mblen(s);
		const char *piece = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : NULL;
		int			plen = piece ? strlen(piece) : len;

		if (buf.len + plen > max - 3)
		{
			appendStringInfoString(&buf, "...");
			break;
		}
		if (piece)
			appendStringInfoString(&buf, piece);
		else
			appendBinaryStringInfo(&buf, s, len);
		s += len;
	}
	return buf.data;
}

/* Appends a header, refusing a value that could split it. */
static bool
add_header(AlertRequest *req, const char *name, const char *value, char **error)
{
	if (!http_header_safe(value))
	{
		*error = psprintf("the %s header would contain a control character (CR, LF, ...)", name);
		return false;
	}
	req->headers = lappend(req->headers, psprintf("%s: %s", name, value));
	return true;
}

/* finalize's own format: the event (signed by the caller when the target has a key). */
static bool
build_json(AlertRequest *req, Jsonb *event, const AlertEvent *ev, char **error)
{
	req->body = JsonbToCString(NULL, &event->root, VARSIZE(event));
	return add_header(req, "X-Finalize-Event", ev->transition, error);
}

/* A Slack incoming-webhook message. */
static bool
build_slack(AlertRequest *req, const AlertEvent *ev)
{
	JsonbParseState *st = NULL;
	const char *icon = strcmp(ev->transition, "resolve") == 0 ? ":large_green_circle:"
		: strcmp(ev->transition, "acknowledge") == 0 ? ":eyes:"
		: strcmp(ev->severity, "critical") == 0 ? ":red_circle:"
		: strcmp(ev->severity, "warning") == 0 ? ":warning:" : ":information_source:";
	char	   *text = psprintf("%s %s", icon, slack_escape(summary(ev), SLACK_TEXT_MAX - 32));
	StringInfoData ctx;

	initStringInfo(&ctx);
	appendStringInfo(&ctx, "finalize incident %s in database %s, open since %s", ev->id,
					 ev->database ? ev->database : "?", ev->opened_at ? ev->opened_at : "?");
	if (ev->count != NULL && strcmp(ev->count, "1") != 0)
		appendStringInfo(&ctx, ", seen %s times", ev->count);
	if (strcmp(ev->transition, "resolve") == 0 && ev->resolved_at != NULL)
		appendStringInfo(&ctx, ", resolved at %s", ev->resolved_at);
	if (strcmp(ev->transition, "acknowledge") == 0)
		appendStringInfo(&ctx, ", acknowledged by %s: %s", ev->acknowledged_by ? ev->acknowledged_by : "?",
						 ev->acknowledge_note ? ev->acknowledge_note : "");

	jb_begin_object(&st, NULL);
	jb_text(&st, "text", text);
	jb_begin_array(&st, "blocks");
	jb_begin_object(&st, NULL);
	jb_text(&st, "type", "section");
	jb_begin_object(&st, "text");
	jb_text(&st, "type", "mrkdwn");
	jb_text(&st, "text", text);
	jb_end_object(&st);
	jb_end_object(&st);
	jb_begin_object(&st, NULL);
	jb_text(&st, "type", "context");
	jb_begin_array(&st, "elements");
	jb_begin_object(&st, NULL);
	jb_text(&st, "type", "mrkdwn");
	jb_text(&st, "text", slack_escape(ctx.data, SLACK_TEXT_MAX));
	jb_end_object(&st);
	jb_end_array(&st);
	jb_end_object(&st);
	jb_end_array(&st);
	req->body = jb_finish_text(jb_end_object(&st));
	return true;
}

/* The incident's fields as PagerDuty custom_details / Opsgenie details. */
static void
push_details(JsonbParseState **st, const char *key, const AlertEvent *ev, bool strings_only)
{
	jb_begin_object(st, key);
	jb_text(st, "alert_id", ev->id);
	jb_text(st, "kind", ev->kind);
	jb_text(st, "database", ev->database);
	if (ev->table)
		jb_text(st, "table", ev->table);
	if (ev->source)
		jb_text(st, "source", ev->source);
	if (ev->subject)
		jb_text(st, "subject", ev->subject);
	if (ev->count)
		jb_text(st, "count", ev->count);
	if (!strings_only)
	{
		jb_text(st, "message", ev->message);
		if (ev->detail)
			jb_jsonb(st, "detail", ev->detail);
	}
	jb_end_object(st);
}

/* A PagerDuty Events API v2 event. */
static bool
build_pagerduty(AlertRequest *req, const AlertEvent *ev, const AlertSecrets *sec, char **error)
{
	JsonbParseState *st = NULL;
	const char *action = strcmp(ev->transition, "open") == 0 ? "trigger" : ev->transition;

	if (sec->routing_key == NULL)
	{
		*error = pstrdup("the target's user mapping has no routing_key (the integration key of a PagerDuty service)");
		return false;
	}
	jb_begin_object(&st, NULL);
	jb_text(&st, "routing_key", sec->routing_key);
	jb_text(&st, "event_action", action);
	jb_text(&st, "dedup_key", ev->dedup_key);
	jb_text(&st, "client", "finalize");
	if (strcmp(action, "trigger") == 0)
	{
		jb_begin_object(&st, "payload");
		jb_text(&st, "summary", clip(summary(ev), 1024));
		jb_text(&st, "source", ev->source ? ev->source : ev->table ? ev->table : ev->database);
		jb_text(&st, "severity", ev->severity);
		if (ev->opened_at)
			jb_text(&st, "timestamp", ev->opened_at);
		if (ev->table)
			jb_text(&st, "component", ev->table);
		if (ev->source)
			jb_text(&st, "group", ev->source);
		jb_text(&st, "class", ev->kind);
		push_details(&st, "custom_details", ev, false);
		jb_end_object(&st);
	}
	req->body = jb_finish_text(jb_end_object(&st));
	return true;
}

/* An Opsgenie Alert API request: create, or acknowledge / close by alias. */
static bool
build_opsgenie(AlertRequest *req, const AlertEvent *ev, const AlertSecrets *sec, char **error)
{
	JsonbParseState *st = NULL;
	size_t		ulen = strlen(req->url);

	if (sec->api_key == NULL)
	{
		*error = pstrdup("the target's user mapping has no api_key (an Opsgenie API integration key)");
		return false;
	}
	if (!add_header(req, "Authorization", psprintf("GenieKey %s", sec->api_key), error))
		return false;
	while (ulen > 0 && req->url[ulen - 1] == '/')
		ulen--;
	jb_begin_object(&st, NULL);
	jb_text(&st, "source", "finalize");
	if (strcmp(ev->transition, "open") == 0)
	{
		req->url = psprintf("%.*s/v2/alerts", (int) ulen, req->url);
		jb_text(&st, "message", clip(summary(ev), 130));
		jb_text(&st, "alias", clip(ev->dedup_key, 512));
		jb_text(&st, "description", clip(ev->message, 15000));
		jb_text(&st, "priority", strcmp(ev->severity, "critical") == 0 ? "P1"
				: strcmp(ev->severity, "warning") == 0 ? "P3" : "P5");
		jb_text(&st, "entity", clip(ev->table ? ev->table : ev->source ? ev->source : ev->database, 512));
		jb_begin_array(&st, "tags");
		jb_text(&st, NULL, "finalize");
		jb_text(&st, NULL, ev->kind);
		jb_text(&st, NULL, ev->severity);
		jb_end_array(&st);
		push_details(&st, "details", ev, true);
	}
	else
	{
		req->url = psprintf("%.*s/v2/alerts/%s/%s?identifierType=alias", (int) ulen, req->url,
							http_uri_encode(clip(ev->dedup_key, 512)),
							strcmp(ev->transition, "resolve") == 0 ? "close" : "acknowledge");
		if (strcmp(ev->transition, "acknowledge") == 0 && ev->acknowledged_by)
			jb_text(&st, "user", ev->acknowledged_by);
		if (strcmp(ev->transition, "resolve") == 0)
			jb_text(&st, "note", psprintf("Resolved by finalize at %s: the condition cleared.",
										  ev->resolved_at ? ev->resolved_at : "?"));
		else if (ev->acknowledge_note != NULL)
			jb_text(&st, "note", clip(ev->acknowledge_note, 25000));
	}
	req->body = jb_finish_text(jb_end_object(&st));
	return true;
}

/*
 * The body as UTF-8, which JSON on the wire is, whatever the database's
 * encoding. SQL_ASCII promises nothing about its bytes: a sequence that is
 * not UTF-8 becomes '?'. Another encoding is converted (an error for a
 * character UTF-8 cannot hold; the alerts worker fails that delivery).
 */
char *
alert_utf8_body(char *body)
{
	StringInfoData buf;

	if (GetDatabaseEncoding() == PG_UTF8)
		return body;
	if (GetDatabaseEncoding() != PG_SQL_ASCII)
		return pg_server_to_any(body, strlen(body), PG_UTF8);
	initStringInfo(&buf);
	for (const unsigned char *c = (const unsigned char *) body; *c;)
	{
		int			len = pg_utf_mblen(c);

		if (*c < 0x80)
			appendStringInfoChar(&buf, (char) *c++);
		else if (len > 1 && strnlen((const char *) c, len) == (size_t) len && pg_utf8_islegal(c, len))
		{
			appendBinaryStringInfo(&buf, (const char *) c, len);
			c += len;
		}
		else
		{
			appendStringInfoChar(&buf, '?');
			c++;
		}
	}
	return buf.data;
}

/*
 * The request of one delivery; NULL with *error set when it cannot be
 * built (an event without its fields, a format's secret missing). The
 * error never contains a secret.
 */
AlertRequest *
alert_build_request(const char *format, const char *url, Jsonb *event, const AlertSecrets *secrets, char **error)
{
	AlertRequest *req = palloc0(sizeof(AlertRequest));
	AlertEvent	ev;
	bool		ok;

	*error = NULL;
	if (!read_event(event, &ev, error))
		return NULL;
	req->url = pstrdup(url);
	req->headers = list_make1(pstrdup("Content-Type: application/json"));
	if (!add_header(req, "Idempotency-Key", ev.idempotency_key, error))
		return NULL;
	/* Opsgenie's Authorization is its GenieKey; PagerDuty's key is in the body. */
	if (secrets->bearer_token != NULL && (strcmp(format, "json") == 0 || strcmp(format, "slack") == 0) &&
		!add_header(req, "Authorization", psprintf("Bearer %s", secrets->bearer_token), error))
		return NULL;
	if (strcmp(format, "json") == 0)
		ok = build_json(req, event, &ev, error);
	else if (strcmp(format, "slack") == 0)
		ok = build_slack(req, &ev);
	else if (strcmp(format, "pagerduty_v2") == 0)
		ok = build_pagerduty(req, &ev, secrets, error);
	else if (strcmp(format, "opsgenie") == 0)
		ok = build_opsgenie(req, &ev, secrets, error);
	else
	{
		*error = psprintf("unknown format \"%s\"", format);
		ok = false;
	}
	if (!ok)
		return NULL;
	req->body = alert_utf8_body(req->body);
	/* Signed last: over exactly the bytes sent. */
	if (strcmp(format, "json") == 0 && secrets->hmac_key != NULL &&
		!add_header(req, "X-Finalize-Signature", alert_signature(secrets->hmac_key, req->body, strlen(req->body)),
					error))
		return NULL;
	return req;
}

/*
 * "sha256=<hex>": HMAC-SHA256 of the body under the key, as the json
 * format's X-Finalize-Signature (PostgreSQL's own HMAC, no new library).
 */
char *
alert_signature(const char *key, const char *body, size_t len)
{
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char		hex[PG_SHA256_DIGEST_LENGTH * 2 + 1];

	if (ctx == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	if (pg_hmac_init(ctx, (const uint8 *) key, strlen(key)) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) body, len) < 0 ||
		pg_hmac_final(ctx, digest, sizeof(digest)) < 0)
	{
		pg_hmac_free(ctx);
		elog(ERROR, "could not compute an HMAC-SHA256 signature");
	}
	pg_hmac_free(ctx);
	hex_encode((const char *) digest, sizeof(digest), hex);
	hex[sizeof(hex) - 1] = '\0';
	return psprintf("sha256=%s", hex);
}
