/*
 * catalog.c
 *     The requests the lake worker sends an Iceberg REST catalog, over
 *     core/http.c (the one file that calls libcurl): GET /v1/config (to
 *     learn the prefix when the server has none), POST to the OAuth2 token
 *     endpoint (client credentials; the token is kept and refreshed before
 *     it expires, and once more when the catalog answers 401), and
 *     loadTable (GET /v1/{prefix}/namespaces/{ns}/tables/{table}, with
 *     If-None-Match when the catalog gave an ETag). Each answer becomes a
 *     condition and a sentence with the catalog's own words, secrets
 *     redacted.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/io_interrupts.h"
#include "core/oauth2.h"
#include "core/redact.h"
#include "lake/catalog.h"
#include "lake/metadata.h"

/* The largest metadata finalize reads (a table with very many snapshots). */
#define MAX_METADATA_BYTES (64 * 1024 * 1024)

/*
 * What outlives a cycle, in TopMemoryContext: the OAuth2 token (for the
 * credentials it was issued to) and the prefix the config gave (for the
 * uri and warehouse it was asked for).
 */
static char *token_key = NULL;
static char *access_token = NULL;
static TimestampTz token_refresh_at = 0;
static bool token_forced_this_poll = false;	/* one forced refresh per poll */
static char *prefix_key = NULL;
static char *learned_prefix = NULL;

/* A copy in TopMemoryContext (replacing *slot's). */
static void
keep(char **slot, const char *value)
{
	if (*slot != NULL)
		pfree(*slot);
	*slot = value != NULL ? MemoryContextStrdup(TopMemoryContext, value) : NULL;
}

/* The condition's name as finalize.consumers shows it. */
const char *
lake_condition_name(LakeCondition c)
{
	switch (c)
	{
		case LAKE_OK:
			return NULL;
		case LAKE_UNREACHABLE:
			return "catalog_unreachable";
		case LAKE_AUTH_FAILED:
			return "catalog_auth_failed";
		case LAKE_TABLE_NOT_FOUND:
			return "table_not_found";
		case LAKE_PROPERTY_MALFORMED:
			return "property_malformed";
		case LAKE_METADATA_MALFORMED:
			return "metadata_malformed";
		case LAKE_STORE_UNREACHABLE:
			return "store_unreachable";
		case LAKE_STORE_AUTH_FAILED:
			return "store_auth_failed";
		case LAKE_LOG_MALFORMED:
			return "log_malformed";
		case LAKE_CHECKPOINT_ONLY:
			return "checkpoint_only";
		case LAKE_LSN_MISSING:
			return "lsn_missing";
	}
	return "catalog_unreachable";
}

/*
 * A text with every secret of the catalog (and the OAuth2 token it was
 * given) replaced by [redacted] (core/redact.c). Applied to whole texts
 * before they are cut or made printable, so that no cut or replaced byte
 * can leave part of a secret.
 */
char *
lake_redact(const LakeCatalog *cat, const char *text)
{
	return redact_secrets(text, lappend(list_copy(cat->secrets), access_token));
}

/*
 * The catalog's words for a failed answer, secrets redacted: the REST
 * error's message and type ({"error": {"message", "type", "code"}}), an
 * OAuth2 error ({"error", "error_description"}), or the start of the body
 * (a body over 64 kB is no error message: only its size is said).
 */
static char *
catalog_words(const LakeCatalog *cat, const char *raw)
{
	char	   *body = lake_redact(cat, raw != NULL && strlen(raw) <= 65536 ? raw : "");
	char	   *message = lake_json_string(body, "error", "message");
	char	   *type = lake_json_string(body, "error", "type");
	char	   *oauth = lake_json_string(body, "error", NULL);
	char	   *description = lake_json_string(body, "error_description", NULL);

	if (message != NULL)
		return type != NULL ? psprintf("%s (%s)", text_excerpt(message, 300), text_excerpt(type, 300)) : text_excerpt(message, 300);
	if (oauth != NULL)
		return description != NULL ? psprintf("%s: %s", text_excerpt(oauth, 300), text_excerpt(description, 300)) : text_excerpt(oauth, 300);
	if (raw != NULL && strlen(raw) > 65536)
		return psprintf("(a body of %zu bytes)", strlen(raw));
	return body[0] != '\0' ? text_excerpt(body, 300) : pstrdup("(no body)");
}

/* The condition of an HTTP status other than 200 and 304. */
static LakeCondition
status_condition(long status)
{
	if (status == 401 || status == 403 || status == 419)
		return LAKE_AUTH_FAILED;
	if (status == 404)
		return LAKE_TABLE_NOT_FOUND;
	return LAKE_UNREACHABLE;
}

/*
 * Sends one request with the catalog's authentication (a bearer token, or
 * SigV4) and fills out: LAKE_OK with the body for 200 (and not_modified
 * for 304), else the condition and a sentence naming what was asked.
 */
static void
perform(LakeCatalog *cat, HttpClient *client, const char *what, const char *method, const char *url,
		List *headers, const char *body, bool authenticate, LakeAnswer *out)
{
	HttpRequest req;
	HttpResponse resp;
	TimestampTz start = GetCurrentTimestamp();

	memset(out, 0, sizeof(*out));
	memset(&req, 0, sizeof(req));
	req.wait = FINALIZE_WAIT_CATALOG_REQUEST;
	headers = lappend(list_copy(headers), "Accept: application/json");
	if (authenticate && cat->token != NULL)
		headers = lappend(headers, psprintf("Authorization: Bearer %s", cat->token));
	else if (authenticate && cat->client_id != NULL && access_token != NULL)
		headers = lappend(headers, psprintf("Authorization: Bearer %s", access_token));
	if (authenticate && cat->sigv4 != NULL)
	{
		req.aws_sigv4 = cat->sigv4;
		req.username = cat->access_key_id;
		req.password = cat->secret_access_key;
		if (cat->session_token != NULL)
			headers = lappend(headers, psprintf("X-Amz-Security-Token: %s", cat->session_token));
	}
	req.method = method;
	req.url = url;
	req.headers = headers;
	req.body = body;
	req.body_len = body != NULL ? strlen(body) : 0;
	req.connect_timeout_ms = cat->timeout_ms;
	req.timeout_ms = cat->timeout_ms;
	req.max_response_bytes = MAX_METADATA_BYTES;
	(void) http_perform(client, &req, &resp);
	/* A cancel or a termination that came meanwhile is served now. */
	io_interrupts_rethrow();
	out->elapsed_ms = (double) (GetCurrentTimestamp() - start) / 1000.0;
	if (resp.failure == HTTP_TOO_LARGE && resp.status > 0)
	{
		out->condition = LAKE_METADATA_MALFORMED;
		out->error = psprintf("%s: the catalog's answer is larger than %d MB", what, MAX_METADATA_BYTES >> 20);
		return;
	}
	if (resp.failure != HTTP_OK)
	{
		out->condition = LAKE_UNREACHABLE;
		out->error = lake_redact(cat, psprintf("%s: no answer from the catalog: %s", what, resp.error));
		return;
	}
	out->etag = resp.etag;
	out->status = resp.status;
	if (resp.status == 200)
	{
		out->body = resp.body;
		return;
	}
	if (resp.status == 304)
	{
		out->not_modified = true;
		return;
	}
	out->condition = status_condition(resp.status);
	/* Redacted again once unescaped: a catalog may echo a secret JSON-escaped. */
	out->error = lake_redact(cat, psprintf("%s: the catalog answered HTTP %ld: %s", what, resp.status,
										   catalog_words(cat, resp.body)));
}

/* The key the kept token answers for: the endpoint and the credentials. */
static char *
credentials_key(const LakeCatalog *cat)
{
	return psprintf("%s\x01%s\x01%s\x01%s", cat->oauth_uri, cat->client_id, cat->client_secret,
					cat->scope != NULL ? cat->scope : "catalog");
}

/*
 * Gets an OAuth2 token with the client credentials (RFC 6749 4.4, the form
 * Iceberg's REST specification describes; core/oauth2.c's rules), unless
 * the kept one is still fresh: it is refreshed when 80% of its lifetime
 * has passed.
 */
static bool
ensure_token(LakeCatalog *cat, HttpClient *client, bool force, LakeAnswer *out)
{
	char	   *key = credentials_key(cat);
	char	   *form;
	char	   *token;
	TimestampTz refresh_at = 0;
	OAuth2Answer answer;

	memset(out, 0, sizeof(*out));
	if (!force && token_key != NULL && strcmp(token_key, key) == 0 && access_token != NULL &&
		GetCurrentTimestamp() < token_refresh_at)
		return true;
	keep(&access_token, NULL);
	form = oauth2_client_credentials_form(cat->client_id, cat->client_secret,
										  cat->scope != NULL ? cat->scope : "catalog");
	perform(cat, client, "getting an OAuth2 token", "POST", cat->oauth_uri,
			list_make1("Content-Type: application/x-www-form-urlencoded"), form, false, out);
	if (out->condition == LAKE_TABLE_NOT_FOUND)
		out->condition = LAKE_AUTH_FAILED;
	if (out->condition != LAKE_OK)
	{
		/* An OAuth2 endpoint refuses bad credentials with 400 invalid_client. */
		if (out->condition == LAKE_UNREACHABLE && strstr(out->error, "HTTP 400") != NULL)
			out->condition = LAKE_AUTH_FAILED;
		return false;
	}
	answer = oauth2_token_answer(out->body, &token, &refresh_at);
	if (answer == OAUTH2_TOKEN_UNUSABLE)
	{
		out->condition = LAKE_AUTH_FAILED;
		out->error = psprintf("getting an OAuth2 token: the answer of %s has no usable access_token",
							  cat->oauth_uri);
		return false;
	}
	if (answer == OAUTH2_TOKEN_TOO_SHORT)
	{
		out->condition = LAKE_METADATA_MALFORMED;
		out->error = psprintf("getting an OAuth2 token for catalog \"%s\": the answer of %s is malformed: "
							  "its access_token is shorter than the %d characters finalize requires of a secret",
							  cat->name, cat->oauth_uri, REDACT_MIN_SECRET);
		return false;
	}
	keep(&token_key, key);
	keep(&access_token, token);
	token_refresh_at = refresh_at;
	return true;
}

/*
 * Gets what requests need before the tables are loaded: an OAuth2 token
 * when the user mapping has client credentials, and the prefix from the
 * catalog's config when the server sets none. False with *failure filled
 * when the catalog cannot be used this cycle.
 */
bool
lake_catalog_prepare(LakeCatalog *cat, HttpClient *client, LakeAnswer *failure)
{
	char	   *key;
	char	   *url;
	char	   *prefix;

	memset(failure, 0, sizeof(*failure));
	token_forced_this_poll = false;
	if (cat->client_id != NULL && !ensure_token(cat, client, false, failure))
		return false;
	if (cat->prefix != NULL)
		return true;
	key = psprintf("%s\x01%s", cat->uri, cat->warehouse != NULL ? cat->warehouse : "");
	if (prefix_key != NULL && strcmp(prefix_key, key) == 0)
		return true;
	url = cat->warehouse != NULL ? psprintf("%s/v1/config?warehouse=%s", cat->uri, http_uri_encode(cat->warehouse))
		: psprintf("%s/v1/config", cat->uri);
	perform(cat, client, "reading the catalog's config", "GET", url, NIL, NULL, true, failure);
	if (failure->condition == LAKE_TABLE_NOT_FOUND)
		failure->condition = LAKE_UNREACHABLE;
	if (failure->condition != LAKE_OK)
		return false;
	prefix = lake_json_string(failure->body, "overrides", "prefix");
	if (prefix == NULL)
		prefix = lake_json_string(failure->body, "defaults", "prefix");
	if (prefix != NULL && prefix[0] != '\0' && !lake_prefix_ok(prefix))
	{
		failure->condition = LAKE_METADATA_MALFORMED;
		failure->error = psprintf("reading the catalog's config: its prefix \"%s\" is not a path segment "
								  "(letters, digits, - . _ ~ and /)", text_excerpt(lake_redact(cat, prefix), 300));
		return false;
	}
	keep(&prefix_key, key);
	keep(&learned_prefix, prefix);
	return true;
}

/*
 * The loadTable URL of a table named "ns1.ns2.table" (levels joined by
 * %1F), with ?snapshots=all when loading.
 */
static char *
table_url(const LakeCatalog *cat, const char *iceberg_table, bool loading)
{
	StringInfoData buf;
	const char *prefix = cat->prefix != NULL ? cat->prefix : learned_prefix;
	const char *last = strrchr(iceberg_table, '.');
	char	   *ns = pnstrdup(iceberg_table, last - iceberg_table);
	char	   *save = NULL;
	bool		first = true;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s/v1/", cat->uri);
	if (prefix != NULL && prefix[0] != '\0')
		appendStringInfo(&buf, "%s/", prefix);
	appendStringInfoString(&buf, "namespaces/");
	for (char *level = strtok_r(ns, ".", &save); level != NULL; level = strtok_r(NULL, ".", &save))
	{
		appendStringInfo(&buf, "%s%s", first ? "" : "%1F", http_uri_encode(level));
		first = false;
	}
	appendStringInfo(&buf, "/tables/%s%s", http_uri_encode(last + 1), loading ? "?snapshots=all" : "");
	return buf.data;
}

/*
 * Loads a table's metadata (every snapshot: the walk needs the parents,
 * which snapshots=refs would leave out). With an ETag from the last load
 * the catalog may answer 304. A 401 with an OAuth2 token gets a new token
 * and one more try (a token revoked or expired early).
 */
void
lake_catalog_load_table(LakeCatalog *cat, HttpClient *client, const char *iceberg_table, const char *etag,
						LakeAnswer *out)
{
	char	   *url = table_url(cat, iceberg_table, true);
	char	   *what = psprintf("loading table %s", iceberg_table);
	List	   *headers = etag != NULL ? list_make1(psprintf("If-None-Match: %s", etag)) : NIL;

	perform(cat, client, what, "GET", url, headers, NULL, true, out);
	/* A catalog that refuses every token costs one new token per poll, not one per table. */
	if (out->condition == LAKE_AUTH_FAILED && cat->client_id != NULL && cat->token == NULL &&
		!token_forced_this_poll)
	{
		LakeAnswer	token;

		token_forced_this_poll = true;

		if (!ensure_token(cat, client, true, &token))
		{
			*out = token;
			return;
		}
		perform(cat, client, what, "GET", url, headers, NULL, true, out);
	}
}

/*
 * Commits to a table (updateTable: POST /v1/{prefix}/namespaces/{ns}/
 * tables/{table}) with body's requirements and updates. The catalog
 * applies all or nothing: 200 is committed, 409 is a requirement that no
 * longer holds (out->status tells them apart from other failures). Sent
 * once: a commit whose answer was lost is found out by loading the table
 * again, never by sending it twice.
 */
void
lake_catalog_commit(LakeCatalog *cat, HttpClient *client, const char *iceberg_table, const char *body,
					LakeAnswer *out)
{
	perform(cat, client, psprintf("committing to table %s", iceberg_table), "POST",
			table_url(cat, iceberg_table, false), list_make1("Content-Type: application/json"), body, true, out);
}
