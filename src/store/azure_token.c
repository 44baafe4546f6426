/*
 * azure_token.c
 *     Microsoft Entra ID bearer tokens for Azure Storage: OAuth2 client
 *     credentials (RFC 6749 4.4) posted to the server's token endpoint
 *     (https://login.microsoftonline.com/<tenant>/oauth2/v2.0/token by
 *     default) for the scope https://storage.azure.com/.default, through
 *     core/http.c, under core/oauth2.c's rules. A token is kept by the
 *     backend (a few, one per endpoint, client, secret and scope) and used
 *     until 80% of its lifetime has passed (shortly before it expires), or
 *     until Azure refuses it.
 *
 * Nothing here raises for what the endpoint answers: a refusal is
 * AuthorizationFailure in err, in the endpoint's words (an Entra ID error
 * answer's error and error_description), with the secret redacted by the
 * caller's store_raise.
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/json_parse.h"
#include "core/oauth2.h"
#include "core/redact.h"
#include "store/azure_token.h"

/* A token answer is small; refuse absurd ones. */
#define MAX_TOKEN_ANSWER (64 * 1024)

/*
 * The kept tokens: a few, so that a backend using several servers or
 * mappings in turn does not ask for a token at each switch. Each says what
 * it answers for (endpoint, client, secret and scope), itself, and when to
 * ask again; the slot asked again soonest makes room for a new one.
 */
#define TOKEN_SLOTS 4

typedef struct KeptToken
{
	char	   *key;
	char	   *token;
	TimestampTz refresh_at;
} KeptToken;

static KeptToken kept[TOKEN_SLOTS];

/* Replaces a kept string by a copy in TopMemoryContext (NULL: none). */
static void
keep(char **slot, const char *value)
{
	if (*slot != NULL)
		pfree(*slot);
	*slot = value != NULL ? MemoryContextStrdup(TopMemoryContext, value) : NULL;
}

/* What a token answers for: the endpoint, the client, its secret and the scope. */
static char *
token_key_of(const AzureLocation *az)
{
	return psprintf("%s\x01%s\x01%s\x01%s", az->token_endpoint, az->client_id, az->client_secret, az->scope);
}

/* The slot of key, or NULL. */
static KeptToken *
slot_of(const char *key)
{
	for (int i = 0; i < TOKEN_SLOTS; i++)
		if (kept[i].key != NULL && strcmp(kept[i].key, key) == 0)
			return &kept[i];
	return NULL;
}

/* The slot for a new token of key: its own, an empty one, or the one to ask again soonest. */
static KeptToken *
slot_for(const char *key)
{
	KeptToken  *slot = slot_of(key);

	for (int i = 0; slot == NULL && i < TOKEN_SLOTS; i++)
		if (kept[i].key == NULL)
			slot = &kept[i];
	for (int i = 0; slot == NULL && i < TOKEN_SLOTS; i++)
		if (i == 0 || kept[i].refresh_at < slot->refresh_at)
			slot = &kept[i];
	return slot;
}

/*
 * Forgets the token kept for the store's client credentials: Azure refused
 * it (401, or 403 AuthenticationFailed: revoked, or a clock that made it
 * expire early), so the next request asks for a new one instead of sending
 * it again until 80% of its stated lifetime.
 */
void
azure_forget_token(const RemoteStore *rs)
{
	KeptToken  *slot = slot_of(token_key_of(&rs->az));

	if (slot != NULL)
		keep(&slot->token, NULL);
}

/*
 * The endpoint's own words of a refusal: error and error_description, or
 * the status. Not cut here: store_set_error cuts between words, after
 * which redaction still finds every whole secret.
 */
static char *
refusal_words(const HttpResponse *r)
{
	char	   *error = json_string_field(r->body, "error");
	char	   *description = json_string_field(r->body, "error_description");

	if (error == NULL)
		return psprintf("the token endpoint answered HTTP %ld", r->status);
	return psprintf("the token endpoint answered HTTP %ld: %s%s%s", r->status, error,
					description ? ": " : "", description ? text_excerpt(description, strlen(description)) : "");
}

/*
 * Reads a token answer (core/oauth2.c's rules) and keeps its token; false
 * with err set when it has none that is usable.
 */
static bool
read_token(const RemoteStore *rs, const HttpResponse *r, const char *key, const char **out, StoreError *err)
{
	KeptToken  *slot;
	char	   *token;
	TimestampTz refresh_at = 0;

	if (oauth2_token_answer(r->body, &token, &refresh_at) != OAUTH2_TOKEN_OK)
	{
		store_set_error(err, r->status, "AuthorizationFailure",
						psprintf("the answer of token endpoint %s has no usable access_token (at least %d "
								 "characters, none a control character)", rs->az.token_endpoint, REDACT_MIN_SECRET));
		return false;
	}
	slot = slot_for(key);
	keep(&slot->key, key);
	keep(&slot->token, token);
	slot->refresh_at = refresh_at;
	*out = slot->token;
	return true;
}

/*
 * The bearer token for the store's client credentials: the kept one while
 * it is fresh, else a new one from the token endpoint (on client, the
 * request's own connection). NULL with err set when none could be had.
 */
const char *
azure_bearer_token(const RemoteStore *rs, HttpClient *client, StoreError *err)
{
	const AzureLocation *az = &rs->az;
	char	   *key = token_key_of(az);
	KeptToken  *slot = slot_of(key);
	const char *token = NULL;
	HttpRequest req = {0};
	HttpResponse r;

	if (slot != NULL && slot->token != NULL && GetCurrentTimestamp() < slot->refresh_at)
		return slot->token;
	if (slot != NULL)
		keep(&slot->token, NULL);
	req.method = "POST";
	req.url = az->token_endpoint;
	req.headers = list_make1("Content-Type: application/x-www-form-urlencoded");
	req.body = oauth2_client_credentials_form(az->client_id, az->client_secret, az->scope);
	req.body_len = strlen(req.body);
	req.connect_timeout_ms = rs->connect_timeout_ms;
	req.timeout_ms = rs->timeout_ms;
	req.max_response_bytes = MAX_TOKEN_ANSWER;
	req.ca_file = rs->ca_file;
	req.wait = FINALIZE_WAIT_STORE_REQUEST;
	http_perform(client, &req, &r);
	if (r.failure != HTTP_OK)
		store_set_error(err, 0, "TokenEndpointUnreachable",
						psprintf("getting a token from %s: %s", az->token_endpoint, r.error));
	else if (r.status != 200)
		store_set_error(err, r.status, "AuthorizationFailure", refusal_words(&r));
	else if (read_token(rs, &r, key, &token, err))
		return token;
	return NULL;
}
