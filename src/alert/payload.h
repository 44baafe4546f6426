/*
 * payload.h
 *     The HTTP request of one delivery in each target format: finalize's
 *     signed json, Slack incoming webhooks, PagerDuty Events API v2 and the
 *     Opsgenie Alert API.
 */
#ifndef FINALIZE_ALERT_PAYLOAD_H
#define FINALIZE_ALERT_PAYLOAD_H

#include "nodes/pg_list.h"
#include "utils/jsonb.h"

/* What the target's user mapping holds (NULL when not set). */
typedef struct AlertSecrets
{
	const char *bearer_token;
	const char *routing_key;
	const char *api_key;
	const char *hmac_key;
} AlertSecrets;

/* One POST: where, with which headers ("Name: value"), what body. */
typedef struct AlertRequest
{
	char	   *url;
	List	   *headers;
	char	   *body;
} AlertRequest;

extern AlertRequest *alert_build_request(const char *format, const char *url, Jsonb *event,
										 const AlertSecrets *secrets, char **error);
extern char *alert_signature(const char *key, const char *body, size_t len);
extern char *alert_utf8_body(char *body);

#endif							/* FINALIZE_ALERT_PAYLOAD_H */
