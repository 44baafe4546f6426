/*
 * oauth2.c
 *     OAuth2 client credentials (RFC 6749 4.4): the form posted to a token
 *     endpoint, and what its answer must hold. A token is used only when it
 *     can go into a header (no control character) and be redacted from
 *     every text (at least REDACT_MIN_SECRET characters); it is asked for
 *     again once 80% of its lifetime (expires_in, a number or a string of
 *     digits: an hour when not given, a second at least, a day at most)
 *     has passed, shortly before it expires.
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "core/http.h"
#include "core/json_parse.h"
#include "core/oauth2.h"
#include "core/redact.h"

/* A token's lifetime when the endpoint gives none, and the longest kept. */
#define DEFAULT_TOKEN_SECS 3600.0
#define MAX_TOKEN_SECS 86400.0

/* The body of a client-credentials request (application/x-www-form-urlencoded). */
char *
oauth2_client_credentials_form(const char *client_id, const char *client_secret, const char *scope)
{
	return psprintf("grant_type=client_credentials&client_id=%s&client_secret=%s&scope=%s",
					http_uri_encode(client_id), http_uri_encode(client_secret), http_uri_encode(scope));
}

/*
 * Reads expires_in given as a string of digits ("3599": Entra ID's v1 and
 * managed identity endpoints) into *secs; anything else leaves it.
 */
static void
expires_in_string(const char *text, double *secs)
{
	char	   *end;
	long		v;

	if (text == NULL || text[0] < '0' || text[0] > '9')
		return;
	errno = 0;
	v = strtol(text, &end, 10);
	if (errno == 0 && *end == '\0')
		*secs = (double) v;
}

/*
 * Reads a token endpoint's answer: *token (palloc'd) and when to ask for
 * another (*refresh_at) when it is OAUTH2_TOKEN_OK; otherwise why not.
 */
OAuth2Answer
oauth2_token_answer(const char *body, char **token, TimestampTz *refresh_at)
{
	double		secs = DEFAULT_TOKEN_SECS;

	*token = json_string_field(body, "access_token");
	if (*token == NULL || (*token)[0] == '\0' || !http_header_safe(*token))
		return OAUTH2_TOKEN_UNUSABLE;
	/* Too short to be kept out of messages: never sent, never kept (redact.h). */
	if (strlen(*token) < REDACT_MIN_SECRET)
		return OAUTH2_TOKEN_TOO_SHORT;
	if (!json_number_field(body, "expires_in", &secs))
		expires_in_string(json_string_field(body, "expires_in"), &secs);
	secs = Min(Max(secs, 1.0), MAX_TOKEN_SECS);
	*refresh_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), (int64) (secs * 800.0));
	return OAUTH2_TOKEN_OK;
}
