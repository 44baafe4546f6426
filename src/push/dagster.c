/*
 * dagster.c
 *     The dagster target of publications: each event becomes a runless
 *     materialization of a partition of a Dagster asset, reported to the
 *     webserver's REST endpoint
 *
 *         POST <url>/report_asset_materialization/<key segments, each
 *              percent-encoded, joined by '/'>
 *         {"partition", "data_version", "description", "metadata"}
 *
 *     (dagster_webserver/external_assets.py). The metadata is finalize's
 *     event object itself (event_id, table, period bounds, finalized_until,
 *     ...) over the publication's own metadata option; data_version is the
 *     event id, so a repeated report of one event is the same data to
 *     Dagster's staleness rules and a late_data event is new data. Before
 *     any attempt but an event's first, the materializations of the
 *     partition are looked up through Dagster's GraphQL API and nothing is
 *     reported when one carries the event id (dagster_outcome.c says what
 *     each answer means).
 */
#include "postgres.h"

#include <time.h>

#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/syscache.h"

#include "alert/outcome.h"
#include "core/fdw_options.h"
#include "core/http.h"
#include "core/json_build.h"
#include "core/redact.h"
#include "lake/metadata.h"
#include "push/dagster_outcome.h"
#include "push/target.h"

#define DEFAULT_TIMEOUT_MS 10000
/* A report's answer is {} (an error a sentence): more is cut, not read. */
#define MAX_REPORT_ANSWER (64 * 1024)
/* The look's answer: at most LOOK_LIMIT materializations' text metadata. */
#define MAX_LOOK_ANSWER (1024 * 1024)
/* An answer's words kept in last_error, at most. */
#define ERROR_EXCERPT 300

/*
 * The materializations of one partition, newest first, and their text
 * metadata: the event id is one (its label "event_id"). An asset that
 * Dagster has never heard of is AssetNotFoundError (nothing recorded).
 */
#define LOOK_QUERY \
	"query FinalizeLook($key: AssetKeyInput!, $partitions: [String!]) {" \
	" assetOrError(assetKey: $key) { __typename" \
	" ... on Asset { assetMaterializations(partitions: $partitions, limit: 10) {" \
	" metadataEntries { label ... on TextMetadataEntry { text } } } } } }"

/* A loaded target: everything one event's attempt sends, in the event's context. */
typedef struct DagsterTarget
{
	char	   *server;
	char	   *base_url;		/* the server's url option */
	long		timeout_ms;
	char	   *token;			/* the owner's api_token, or NULL */
	List	   *secrets;		/* every secret, to keep out of messages */
	char	   *report_url;
	char	   *report_body;
	char	   *look_url;
	char	   *look_body;
} DagsterTarget;

/*
 * The publication's asset key (options.asset_key, a JSON array of strings
 * as publication_options_dagster stores it), each segment a string; NIL
 * when it is not one.
 */
static List *
asset_key_segments(const PushEvent *ev)
{
	JsonbContainer *key = lake_container(lake_field(&ev->options->root, "asset_key"));
	List	   *segments = NIL;
	int			n;

	if (key == NULL || !JsonContainerIsArray(key) || (n = JsonContainerSize(key)) == 0)
		return NIL;
	for (int i = 0; i < n; i++)
	{
		char	   *s = lake_string_value(getIthJsonbValueFromContainer(key, i));

		if (s == NULL || s[0] == '\0')
			return NIL;
		segments = lappend(segments, s);
	}
	return segments;
}

/*
 * An endpoint of the webserver: the base URL (whose path prefix the
 * validator keeps; a trailing '/' is not doubled), the endpoint's path, and
 * each segment of the asset key percent-encoded (Dagster splits the path
 * at '/' into the key's segments).
 */
static char *
endpoint_url(const char *base, const char *endpoint, List *segments)
{
	StringInfoData url;
	ListCell   *lc;

	initStringInfo(&url);
	appendStringInfoString(&url, base);
	while (url.len > 0 && url.data[url.len - 1] == '/')
		url.data[--url.len] = '\0';
	appendStringInfoString(&url, endpoint);
	foreach(lc, segments)
		appendStringInfo(&url, "/%s", http_uri_encode((char *) lfirst(lc)));
	return url.data;
}

/*
 * The report's body: the partition, the event id as data version, a
 * sentence, and the metadata: the publication's metadata option with
 * finalize's event object over it (finalize's fields win).
 */
static char *
report_body(const PushEvent *ev)
{
	JsonbParseState *st = NULL;
	Jsonb	   *event = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(ev->body)));
	JsonbValue *own = lake_field(&ev->options->root, "metadata");
	Jsonb	   *metadata = event;

	if (own != NULL && own->type == jbvBinary && JsonContainerIsObject(own->val.binary.data))
		metadata = DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(JsonbValueToJsonb(own)),
													  JsonbPGetDatum(event)));
	jb_begin_object(&st, NULL);
	jb_text(&st, "partition", ev->partition_key);
	jb_text(&st, "data_version", ev->event_id);
	jb_text(&st, "description",
			psprintf("finalize: partition %s of %s is final%s", ev->partition_key, ev->table_name,
					 strcmp(ev->kind, "late_data") == 0 ? "; late data arrived in it since it was published" : ""));
	jb_jsonb(&st, "metadata", metadata);
	return jb_finish_text(jb_end_object(&st));
}

/* The GraphQL request that looks for the partition's materializations. */
static char *
look_body(const PushEvent *ev, List *segments)
{
	JsonbParseState *st = NULL;
	ListCell   *lc;

	jb_begin_object(&st, NULL);
	jb_text(&st, "query", LOOK_QUERY);
	jb_begin_object(&st, "variables");
	jb_begin_object(&st, "key");
	jb_begin_array(&st, "path");
	foreach(lc, segments)
		jb_text(&st, NULL, (char *) lfirst(lc));
	jb_end_array(&st);
	jb_end_object(&st);
	jb_begin_array(&st, "partitions");
	jb_text(&st, NULL, ev->partition_key);
	jb_end_array(&st);
	jb_end_object(&st);
	return jb_finish_text(jb_end_object(&st));
}

/*
 * The options of the event's finalize_dagster server and the api_token of
 * its owner's user mapping (else PUBLIC's), as the alerts worker reads a
 * webhook target's; NULL with *error set (naming the server, never a
 * secret) when nothing can be sent.
 */
static DagsterTarget *
load_server(const PushEvent *ev, char **error)
{
	ForeignServer *server = ev->server_name ? GetForeignServerByName(ev->server_name, true) : NULL;
	List	   *um_options = NIL;
	DagsterTarget *t;
	const char *token;

	if (server == NULL)
	{
		*error = psprintf("dagster server \"%s\" was dropped or renamed: publication \"%s\" waits for it",
						  ev->server_name ? ev->server_name : "(none)", ev->publication);
		return NULL;
	}
	if (strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_dagster") != 0)
	{
		*error = psprintf("server \"%s\" is no longer a finalize_dagster server", server->servername);
		return NULL;
	}
	um_options = fdw_user_mapping_options(server->owner, server->serverid);
	t = palloc0(sizeof(DagsterTarget));
	t->server = pstrdup(server->servername);
	t->timeout_ms = fdw_option_timeout_ms(server->options, DEFAULT_TIMEOUT_MS);
	token = fdw_option_value(um_options, "api_token", NULL);
	if (token != NULL)
	{
		t->token = pstrdup(token);
		t->secrets = list_make1(t->token);
	}
	t->base_url = (char *) fdw_option_value(server->options, "url", NULL);
	if (t->base_url == NULL)
	{
		*error = psprintf("dagster server \"%s\" has no url: set the webserver's base URL with "
						  "ALTER SERVER %s OPTIONS (ADD url 'https://...')", t->server,
						  quote_identifier(t->server));
		return NULL;
	}
	return t;
}

/*
 * load(): in the delivery's transaction, everything an attempt sends,
 * copied into cxt; NULL with *error set when nothing can be sent.
 */
static void *
dagster_load(const PushEvent *ev, MemoryContext cxt, char **error)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	DagsterTarget *t;
	List	   *segments;

	*error = NULL;
	t = load_server(ev, error);
	segments = t != NULL ? asset_key_segments(ev) : NIL;
	if (t != NULL && segments == NIL)
	{
		*error = psprintf("publication \"%s\" has no asset_key that is an array of non-empty strings: "
						  "drop it and add it again with {\"asset_key\": \"a/b\"}", ev->publication);
		t = NULL;
	}
	if (t != NULL)
	{
		t->report_url = endpoint_url(t->base_url, "/report_asset_materialization", segments);
		t->report_body = report_body(ev);
		t->look_url = endpoint_url(t->base_url, "/graphql", NIL);
		t->look_body = look_body(ev, segments);
	}
	MemoryContextSwitchTo(old);
	return t;
}

/*
 * Dagster's own words for a refused request, secrets redacted: the
 * "error" of its JSON answer ({"error": "..."}), else the start of the
 * body. Redacted again once unescaped: an echo may be JSON-escaped.
 */
static char *
dagster_words(const DagsterTarget *t, const HttpResponse *resp)
{
	char	   *body = redact_secrets(resp->body, t->secrets);
	char	   *message = lake_json_string(body, "error", NULL);

	if (message != NULL)
		return text_excerpt(redact_secrets(message, t->secrets), ERROR_EXCERPT);
	return body[0] != '\0' ? text_excerpt(body, ERROR_EXCERPT) : pstrdup("(no body)");
}

/*
 * Sends one request (JSON, the token's header when there is one); true
 * when an HTTP answer came (any status; a body over the cap is cut, still
 * an answer).
 */
static bool
perform(const DagsterTarget *t, HttpClient *client, const char *url, const char *body, size_t cap,
		HttpResponse *resp)
{
	HttpRequest req;
	List	   *headers = list_make2("Content-Type: application/json", "Accept: application/json");

	if (t->token != NULL)
		headers = lappend(headers, psprintf("Dagster-Cloud-Api-Token: %s", t->token));
	memset(&req, 0, sizeof(req));
	req.wait = FINALIZE_WAIT_WEBHOOK;
	req.method = "POST";
	req.url = url;
	req.headers = headers;
	req.body = body;
	req.body_len = strlen(body);
	req.timeout_ms = t->timeout_ms;
	req.connect_timeout_ms = t->timeout_ms;
	req.max_response_bytes = cap;
	(void) http_perform(client, &req, resp);
	/* A cancel or a termination that came meanwhile is served now. */
	CHECK_FOR_INTERRUPTS();
	return resp->failure == HTTP_OK || (resp->failure == HTTP_TOO_LARGE && resp->status > 0);
}

/*
 * Whether the look's answer (data.assetOrError) shows a materialization
 * whose text metadata "event_id" is the event's; *readable is false when
 * the answer is not what Dagster's GraphQL schema says.
 */
static bool
look_found(const char *body, const char *event_id, bool *readable)
{
	Jsonb	   *doc = lake_parse_json(body);
	JsonbContainer *asset;
	char	   *type;
	JsonbContainer *mats;

	asset = doc ? lake_container(lake_field(lake_container(lake_field(&doc->root, "data")), "assetOrError")) : NULL;
	type = lake_string_value(lake_field(asset, "__typename"));
	mats = lake_container(lake_field(asset, "assetMaterializations"));
	*readable = type != NULL && (strcmp(type, "AssetNotFoundError") == 0 ||
								 (mats != NULL && JsonContainerIsArray(mats)));
	if (!*readable || mats == NULL)
		return false;
	for (int i = 0; i < JsonContainerSize(mats); i++)
	{
		JsonbContainer *entries = lake_container(lake_field(lake_container(getIthJsonbValueFromContainer(mats, i)),
															"metadataEntries"));

		CHECK_FOR_INTERRUPTS();
		for (int j = 0; entries != NULL && JsonContainerIsArray(entries) && j < JsonContainerSize(entries); j++)
		{
			JsonbContainer *entry = lake_container(getIthJsonbValueFromContainer(entries, j));
			char	   *label = lake_string_value(lake_field(entry, "label"));
			char	   *text = lake_string_value(lake_field(entry, "text"));

			if (label != NULL && text != NULL && strcmp(label, "event_id") == 0 && strcmp(text, event_id) == 0)
				return true;
		}
	}
	return false;
}

/* Looks for the event's materialization before reporting it again. */
static DagsterLook
look(const DagsterTarget *t, const PushEvent *ev, HttpClient *client, PushResult *out)
{
	HttpResponse resp;
	bool		answered = perform(t, client, t->look_url, t->look_body, MAX_LOOK_ANSWER, &resp);
	bool		readable = false;
	bool		found = false;

	out->status = answered ? resp.status : 0;
	if (answered && resp.status == 200 && resp.failure == HTTP_OK)
		found = look_found(resp.body, ev->event_id, &readable);
	if (!answered)
		out->error = psprintf("no answer from the Dagster webserver of server \"%s\": %s", t->server,
							  text_excerpt(redact_secrets(resp.error, t->secrets), ERROR_EXCERPT));
	return dagster_look_verdict(answered, resp.status, readable, found);
}

/* Reports the event's materialization and reads Dagster's answer into out. */
static void
report(const DagsterTarget *t, HttpClient *client, PushResult *out)
{
	HttpResponse resp;
	bool		answered = perform(t, client, t->report_url, t->report_body, MAX_REPORT_ANSWER, &resp);

	out->status = answered ? resp.status : 0;
	switch (dagster_report_verdict(answered, resp.status))
	{
		case DAGSTER_REPORT_DONE:
			out->delivered = true;
			return;
		case DAGSTER_REPORT_AUTH:
			out->auth_failed = true;
			break;
		case DAGSTER_REPORT_RETRY:
			break;
	}
	if (!answered)
		out->error = psprintf("no answer from the Dagster webserver of server \"%s\": %s", t->server,
							  text_excerpt(redact_secrets(resp.error, t->secrets), ERROR_EXCERPT));
	else
		out->error = psprintf("the Dagster webserver of server \"%s\" answered HTTP %ld: %s", t->server,
							  resp.status, dagster_words(t, &resp));
	out->retry_after = delivery_retry_after(resp.retry_after, time(NULL));
}

/* send(): one attempt, no transaction open. */
static void
dagster_send(void *target, const PushEvent *ev, HttpClient *client, PushResult *out)
{
	const DagsterTarget *t = (const DagsterTarget *) target;

	memset(out, 0, sizeof(*out));
	out->retry_after = -1;
	if (dagster_should_look(ev->attempts))
	{
		switch (look(t, ev, client, out))
		{
			case DAGSTER_LOOK_FOUND:
				out->delivered = true;
				out->already = true;
				return;
			case DAGSTER_LOOK_UNREACHABLE:
				return;
			case DAGSTER_LOOK_REPORT:
				break;
		}
	}
	report(t, client, out);
}

const PushTargetKind push_dagster_kind = {
	.name = "dagster",
	.load = dagster_load,
	.send = dagster_send,
};
