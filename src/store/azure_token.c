/*
 * azure_token.c
 *     Microsoft Entra ID bearer tokens for Azure Storage: OAuth2 client
 *     credentials (RFC 6749 4.4) posted to the server's token endpoint
 *     (https://login.microsoftonline.com/<tenant>/oauth2/v2.0/token by
 *     default) for the scope https://storage.azure.com/.default, through
 *     core/http.c, under core/oauth2.c's rules. A token is kept by the
 *     backend and used until 80% of its lifetime has passed (shortly before
 *     it expires), for the same endpoint, client and secret only.
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

/* The kept token: what it answers for, itself, and when to ask again. */
static char *token_key = NULL;
static char *access_token = NULL;
static TimestampTz token_refresh_at = 0;

/* Replaces a kept string by a copy in TopMemoryContext (NULL: none). */
static void
keep(char **slot, const char *value)
{
	if (*slot != NULL)
		pfree(*slot);
	*slot = value != NULL ? MemoryContextStrdup(TopMemoryContext, value) : NULL;
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
read_token(const RemoteStore *rs, const HttpResponse *r, const char *key, StoreError *err)
{
	char	   *token;
	TimestampTz refresh_at = 0;

	if (oauth2_token_answer(r->body, &token, &refresh_at) != OAUTH2_TOKEN_OK)
	{
		store_set_error(err, r->status, "AuthorizationFailure",
						psprintf("the answer of token endpoint %s has no usable access_token (at least %d "
								 "characters, none a control character)", rs->az.token_endpoint, REDACT_MIN_SECRET));
		return false;
	}
	keep(&token_key, key);
	keep(&access_token, token);
	token_refresh_at = refresh_at;
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
	char	   *key = psprintf("%s\x01%s\x01%s\x01%s", az->token_endpoint, az->client_id, az->client_secret,
							   az->scope);
	HttpRequest req = {0};
	HttpResponse r;

	if (token_key != NULL && strcmp(token_key, key) == 0 && access_token != NULL &&
		GetCurrentTimestamp() < token_refresh_at)
		return access_token;
	keep(&access_token, NULL);
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
	else if (read_token(rs, &r, key, err))
		return access_token;
	return NULL;
}
