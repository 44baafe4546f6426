/*
 * airflow.c
 *     The airflow publication target: each final period becomes an asset
 *     event of Airflow 3's REST API (POST /api/v2/assets/events) with the
 *     period's partition key, so that a DAG scheduled on the partitioned
 *     asset (PartitionedAssetTimetable) runs once for it.
 *
 * The server is a finalize_airflow foreign server; its owner's user
 * mapping holds a token, or a username and password exchanged for one at
 * POST /auth/token (kept in this process per server, replaced once when
 * the API answers 401). The asset is named by its URI; its id is looked
 * up (GET /api/v2/assets?uri_pattern=..., the exact URI among the
 * answers) and kept. The event's extra is finalize's event object, with
 * its event_id. After an attempt whose outcome finalize could not know
 * (no answer, a timeout, a 5xx), the asset's events are searched for
 * that event_id before it is posted again (airflow_rules.c says when the
 * search may stop), so a DAG runs once per period.
 *
 * Airflow 2's API (/api/v1/datasets/events, without partition keys) is
 * not spoken: docs/publishing.md says so.
 */
#include "postgres.h"

#include "foreign/foreign.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/fdw_options.h"
#include "core/json_build.h"
#include "core/redact.h"
#include "lake/metadata.h"
#include "push/airflow.h"
#include "push/airflow_rules.h"

#define DEFAULT_TIMEOUT_MS 10000
/* Caps on Airflow's answers: a token, a page of a listing, a posted event. */
#define TOKEN_ANSWER_MAX (64 * 1024)
#define LIST_ANSWER_MAX (2 * 1024 * 1024)
#define POST_ANSWER_MAX (1024 * 1024)
/* A listing is read in pages of PAGE items, at most MAX_PAGES of them. */
#define PAGE 100
#define MAX_PAGES 10
/* More kept tokens or asset ids than this and all are forgotten. */
#define MAX_KEPT 256

/* A kept value (a token, an asset id) under its key, in TopMemoryContext. */
typedef struct Kept
{
	char	   *key;
	char	   *value;
} Kept;

static List *kept_tokens = NIL;
static List *kept_assets = NIL;

/* The value kept under key, or NULL. */
static const char *
kept_get(List *kept, const char *key)
{
	ListCell   *lc;

	foreach(lc, kept)
	{
		Kept	   *k = (Kept *) lfirst(lc);

		if (strcmp(k->key, key) == 0)
			return k->value;
	}
	return NULL;
}

/* Forgets what is kept under key. */
static void
kept_forget(List **kept, const char *key)
{
	ListCell   *lc;

	foreach(lc, *kept)
	{
		Kept	   *k = (Kept *) lfirst(lc);

		if (strcmp(k->key, key) == 0)
		{
			*kept = foreach_delete_current(*kept, lc);
			pfree(k->key);
			pfree(k->value);
			pfree(k);
		}
	}
}

/* Keeps value under key in TopMemoryContext; returns the kept copy. */
static const char *
kept_put(List **kept, const char *key, const char *value)
{
	MemoryContext old;
	Kept	   *k;

	kept_forget(kept, key);
	if (list_length(*kept) >= MAX_KEPT)
	{
		while (*kept != NIL)
			kept_forget(kept, ((Kept *) linitial(*kept))->key);
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	k = palloc(sizeof(Kept));
	k->key = pstrdup(key);
	k->value = pstrdup(value);
	*kept = lappend(*kept, k);
	MemoryContextSwitchTo(old);
	return k->value;
}

/*
 * The key of a token: the server, and the URL and credentials it was
 * issued for (a changed user mapping gets a new token).
 */
static char *
token_key(const AirflowTarget *t)
{
	return psprintf("%s\n%s\n%s\n%s", t->server, t->url, t->username, t->password);
}

/* The key of an asset's id: the API server and the URI. */
static char *
asset_key(const AirflowTarget *t, const char *uri)
{
	return psprintf("%s\n%s", t->url, uri);
}

/* A secret option copied (in the current context) and remembered for redaction. */
static char *
load_secret(AirflowTarget *t, List *options, const char *name)
{
	const char *value = fdw_option_value(options, name, NULL);

	if (value == NULL)
		return NULL;
	t->secrets = lappend(t->secrets, pstrdup(value));
	return llast(t->secrets);
}

/*
 * load(): the event's finalize_airflow server (by name: a dump and
 * restore keeps names) and the credentials of its owner's user mapping
 * (else PUBLIC's), copied into cxt; NULL with *error set when the server
 * was dropped, belongs to another wrapper or has no URL.
 */
static void *
airflow_load(const PushEvent *ev, MemoryContext cxt, char **error)
{
	ForeignServer *server = ev->server_name != NULL ? GetForeignServerByName(ev->server_name, true) : NULL;
	List	   *um = NIL;
	MemoryContext old;
	AirflowTarget *t;
	const char *url;

	*error = NULL;
	if (server == NULL)
	{
		*error = MemoryContextStrdup(cxt, psprintf("Airflow server \"%s\" was dropped or renamed before this delivery",
												   ev->server_name != NULL ? ev->server_name : "(none)"));
		return NULL;
	}
	url = fdw_option_value(server->options, "url", NULL);
	if (strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_airflow") != 0 || url == NULL)
	{
		*error = MemoryContextStrdup(cxt, psprintf("server \"%s\" is no longer a finalize_airflow server with a url",
												   server->servername));
		return NULL;
	}
	um = fdw_user_mapping_options(server->owner, server->serverid);

	old = MemoryContextSwitchTo(cxt);
	t = palloc0(sizeof(AirflowTarget));
	t->server = pstrdup(server->servername);
	t->url = pstrdup(url);
	while (strlen(t->url) > 0 && t->url[strlen(t->url) - 1] == '/')
		t->url[strlen(t->url) - 1] = '\0';
	t->timeout_ms = fdw_option_timeout_ms(server->options, DEFAULT_TIMEOUT_MS);
	t->token = load_secret(t, um, "token");
	t->password = load_secret(t, um, "password");
	t->username = t->password != NULL ? pstrdup(fdw_option_value(um, "username", "")) : NULL;
	MemoryContextSwitchTo(old);
	return t;
}

/*
 * Exchanges the user mapping's username and password for a token at
 * POST /auth/token and keeps it. False with the event's error said (and
 * auth_failed when Airflow refused the credentials).
 */
static bool
login(AirflowCall *c)
{
	AirflowTarget *t = c->target;
	JsonbParseState *st = NULL;
	AirflowAnswer a;
	char	   *token;

	jb_begin_object(&st, NULL);
	jb_text(&st, "username", t->username);
	jb_text(&st, "password", t->password);
	c->bearer = NULL;
	c->bearer_fetched = false;
	if (!airflow_request(c, "POST", "/auth/token", jb_finish_text(jb_end_object(&st)), TOKEN_ANSWER_MAX, &a))
		return false;
	if (a.status != 200 && a.status != 201)
	{
		airflow_refusal(c, "POST /auth/token (the user mapping's username and password)", &a);
		c->out->auth_failed = airflow_answer_step(a.status, false, false) == AIRFLOW_STEP_AUTH_FAILED;
		return false;
	}
	token = airflow_json_text(a.json, "access_token");
	if (token == NULL || strlen(token) < REDACT_MIN_SECRET || !fdw_check_header_value(token))
	{
		c->out->error = psprintf("Airflow server \"%s\" answered POST /auth/token without an access_token finalize can send",
								 t->server);
		return false;
	}
	c->bearer = kept_put(&kept_tokens, token_key(t), token);
	c->bearer_fetched = true;
	return true;
}

/*
 * The bearer token of the attempt: the user mapping's, the one kept for
 * its username and password, or a new one; none without credentials.
 */
static bool
authorize(AirflowCall *c)
{
	AirflowTarget *t = c->target;

	c->bearer = t->token;
	c->bearer_fetched = false;
	if (t->token != NULL || t->username == NULL)
		return true;
	c->bearer = kept_get(kept_tokens, token_key(t));
	c->bearer_fetched = c->bearer != NULL;
	return c->bearer != NULL || login(c);
}

/*
 * One request of the REST API, with the attempt's token; a 401 to a
 * token from /auth/token gets a new one and the request again, once per
 * attempt. False when no answer came (the error is said); else *step
 * says what the answer means.
 */
static bool
call_api(AirflowCall *c, const char *method, const char *path, const char *body, size_t max_bytes,
		 bool names_asset, AirflowAnswer *a, AirflowStep *step)
{
	bool		relogged = false;

	for (;;)
	{
		if (!airflow_request(c, method, path, body, max_bytes, a))
			return false;
		*step = airflow_answer_step(a->status, c->bearer_fetched && !relogged, names_asset);
		if (*step != AIRFLOW_STEP_RELOGIN)
			return true;
		relogged = true;
		kept_forget(&kept_tokens, token_key(c->target));
		if (!login(c))
			return false;
	}
}

/*
 * Whether a request's answer did what it asked; else the event's error
 * says why, in Airflow's words (and auth_failed when the credentials were
 * refused).
 */
static bool
answered_done(AirflowCall *c, const char *what, AirflowStep step, const AirflowAnswer *a)
{
	if (step == AIRFLOW_STEP_DONE)
		return true;
	airflow_refusal(c, what, a);
	c->out->auth_failed = step == AIRFLOW_STEP_AUTH_FAILED;
	return false;
}

/* Says that an answer of the REST API is too large or not what its schema says. */
static bool
malformed(AirflowCall *c, const char *what, const AirflowAnswer *a)
{
	if (a->too_large)
		c->out->error = psprintf("Airflow server \"%s\" answered %s with more than %d MB", c->target->server, what,
								 LIST_ANSWER_MAX >> 20);
	else
		c->out->error = psprintf("Airflow server \"%s\" answered %s with something other than the JSON of its REST API",
								 c->target->server, what);
	return false;
}

/*
 * The id of the asset whose URI is exactly uri: kept, or looked up among
 * the assets whose URI holds it (uri_pattern matches substrings, and '%',
 * '_' and '|' are patterns to it). False with the event's error said
 * when Airflow lists none: an asset is listed once a DAG that uses it is.
 */
static bool
asset_id(AirflowCall *c, const char *uri, int64 *id)
{
	const char *kept = kept_get(kept_assets, asset_key(c->target, uri));

	if (kept != NULL)
		return (*id = strtoll(kept, NULL, 10)) > 0;
	for (int page = 0; page < MAX_PAGES; page++)
	{
		char	   *path = psprintf("/api/v2/assets?uri_pattern=%s&limit=%d&offset=%d", http_uri_encode(uri), PAGE,
									page * PAGE);
		AirflowAnswer a;
		AirflowStep step;
		int			count = 0;

		if (!call_api(c, "GET", path, NULL, LIST_ANSWER_MAX, false, &a, &step) ||
			!answered_done(c, "GET /api/v2/assets", step, &a))
			return false;
		if (a.json == NULL || lake_field(&a.json->root, "assets") == NULL)
			return malformed(c, "GET /api/v2/assets", &a);
		(void) airflow_json_item(a.json, "assets", 0, &count);
		for (int i = 0; i < count; i++)
		{
			JsonbValue *asset = airflow_json_item(a.json, "assets", i, &count);
			char	   *seen = airflow_member_text(asset, "uri", NULL);

			if (seen != NULL && strcmp(seen, uri) == 0 && airflow_json_int(asset, "id", id) && *id > 0)
			{
				kept_put(&kept_assets, asset_key(c->target, uri), psprintf(INT64_FORMAT, *id));
				return true;
			}
		}
		if (count < PAGE)
			break;
	}
	c->out->error = psprintf("Airflow server \"%s\" has no active asset with URI \"%s\": Airflow lists an asset once a DAG that uses it is parsed (the URI as Airflow normalized it), and the event waits until then",
							 c->target->server, uri);
	return false;
}

/*
 * Whether an earlier attempt posted the event after all: the asset's
 * events, newest first, are read until the event itself (*found), an
 * earlier event of the same publication, or the end; at most MAX_PAGES
 * pages (beyond them it is posted again: at least once). False with the
 * event's error said when the search could not be made.
 */
static bool
posted_before(AirflowCall *c, int64 id, const AirflowEventMark *ours, bool *found)
{
	*found = false;
	for (int page = 0; page < MAX_PAGES; page++)
	{
		char	   *path = psprintf("/api/v2/assets/events?asset_id=" INT64_FORMAT "&order_by=-timestamp&limit=%d&offset=%d",
									id, PAGE, page * PAGE);
		AirflowAnswer a;
		AirflowStep step;
		int			count = 0;

		if (!call_api(c, "GET", path, NULL, LIST_ANSWER_MAX, false, &a, &step) ||
			!answered_done(c, "GET /api/v2/assets/events", step, &a))
			return false;
		if (a.json == NULL || lake_field(&a.json->root, "asset_events") == NULL)
			return malformed(c, "GET /api/v2/assets/events", &a);
		(void) airflow_json_item(a.json, "asset_events", 0, &count);
		for (int i = 0; i < count; i++)
		{
			JsonbValue *event = airflow_json_item(a.json, "asset_events", i, &count);
			AirflowEventMark seen = {
				airflow_member_text(event, "extra", "event_id"), airflow_member_text(event, "extra", "database"),
				airflow_member_text(event, "extra", "table"), airflow_member_text(event, "extra", "publication")
			};

			switch (airflow_event_seen(ours, &seen))
			{
				case AIRFLOW_SEEN_OURS:
					*found = true;
					return true;
				case AIRFLOW_SEEN_EARLIER:
					return true;
				case AIRFLOW_SEEN_OTHER:
					break;
			}
		}
		if (count < PAGE)
			break;
	}
	return true;
}

/*
 * Posts the event: {"asset_id", "partition_key", "extra": finalize's
 * event object}. A 404 means the kept id is stale: it is forgotten, and
 * the next attempt looks the URI up again.
 */
static void
post_event(AirflowCall *c, int64 id, const char *uri, Jsonb *body)
{
	JsonbParseState *st = NULL;
	AirflowAnswer a;
	AirflowStep step;

	jb_begin_object(&st, NULL);
	jb_int(&st, "asset_id", id);
	jb_text(&st, "partition_key", c->event->partition_key);
	jb_jsonb(&st, "extra", body);
	if (!call_api(c, "POST", "/api/v2/assets/events", jb_finish_text(jb_end_object(&st)), POST_ANSWER_MAX,
				  true, &a, &step))
		return;
	if (step == AIRFLOW_STEP_ASSET_GONE)
		kept_forget(&kept_assets, asset_key(c->target, uri));
	c->out->delivered = answered_done(c, "POST /api/v2/assets/events", step, &a);
}

/*
 * send(): one attempt, with no transaction open, bounded by the server's
 * timeout as a whole: the token, the asset's id, the search after an
 * attempt whose outcome is unknown, the post.
 */
static void
airflow_send(void *target, const PushEvent *ev, HttpClient *client, PushResult *out)
{
	AirflowCall c = {(AirflowTarget *) target, ev, client, out, 0, NULL, false};
	Jsonb	   *body = lake_parse_json(ev->body);
	char	   *uri = ev->options != NULL ? lake_string_value(lake_field(&ev->options->root, "asset_uri")) : NULL;
	AirflowEventMark ours;
	int64		id;
	bool		found;

	memset(out, 0, sizeof(*out));
	out->retry_after = -1;
	c.deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), c.target->timeout_ms);
	if (uri == NULL || body == NULL)
	{
		out->error = psprintf("publication \"%s\" has no asset_uri or its event is not JSON", ev->publication);
		return;
	}
	if (!authorize(&c) || !asset_id(&c, uri, &id))
		return;
	ours.event_id = ev->event_id;
	ours.database = airflow_json_text(body, "database");
	ours.table = airflow_json_text(body, "table");
	ours.publication = airflow_json_text(body, "publication");
	if (ev->attempts > 1)
	{
		if (!posted_before(&c, id, &ours, &found))
			return;
		if (found)
		{
			out->delivered = out->already = true;
			return;
		}
	}
	post_event(&c, id, uri, body);
}

const PushTargetKind push_airflow_kind = {
	.name = "airflow",
	.load = airflow_load,
	.send = airflow_send,
};
