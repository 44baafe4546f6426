/*
 * oauth2.h
 *     OAuth2 client credentials (RFC 6749 4.4), the rules every caller
 *     shares: the request's form, what makes an answer's token usable, and
 *     when a kept token is asked for again (oauth2.c). The lake's Iceberg
 *     catalogs and Azure's Entra ID tokens use them.
 */
#ifndef FINALIZE_OAUTH2_H
#define FINALIZE_OAUTH2_H

#include "datatype/timestamp.h"

/* What a token endpoint's answer (a 200) gave. */
typedef enum OAuth2Answer
{
	OAUTH2_TOKEN_OK,
	OAUTH2_TOKEN_UNUSABLE,		/* no access_token, empty, or a control
								 * character: it could not go into a header */
	OAUTH2_TOKEN_TOO_SHORT		/* shorter than REDACT_MIN_SECRET: it could
								 * not be kept out of messages */
} OAuth2Answer;

extern char *oauth2_client_credentials_form(const char *client_id, const char *client_secret, const char *scope);
extern OAuth2Answer oauth2_token_answer(const char *body, char **token, TimestampTz *refresh_at);

#endif							/* FINALIZE_OAUTH2_H */
