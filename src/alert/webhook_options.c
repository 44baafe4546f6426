/*
 * webhook_options.c
 *     The validator of the finalize_webhook wrapper (targets of alert
 *     delivery): its options, where each belongs and what each accepts. The
 *     checking itself is core/fdw_options.c's; the alerts worker reads the
 *     options (target.c).
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "fmgr.h"

#include "core/fdw_options.h"

PG_FUNCTION_INFO_V1(finalize_webhook_validator);

/* Accepts a webhook URL (core/fdw_options.c's rule for a service's URL). */
static bool
check_webhook_url(const char *value)
{
	return fdw_check_service_url(value);
}

/* Accepts the payload formats of webhook targets. */
static bool
check_webhook_format(const char *value)
{
	return strcmp(value, "json") == 0 || strcmp(value, "slack") == 0 ||
		strcmp(value, "pagerduty_v2") == 0 || strcmp(value, "opsgenie") == 0;
}

/* Accepts a severity of an incident. */
static bool
check_severity(const char *value)
{
	return strcmp(value, "info") == 0 || strcmp(value, "warning") == 0 || strcmp(value, "critical") == 0;
}

/* A URL may be the secret itself (Slack's), so it is never echoed. */
static const FdwOption webhook_options[] = {
	{"url", ForeignServerRelationId, true, check_webhook_url,
	"The URL is https:// and a host (plain http:// only to localhost, 127.x.x.x or [::1]), without user@ or #fragment; put it in the user mapping instead when it is itself the secret, as Slack's are."},
	{"format", ForeignServerRelationId, false, check_webhook_format,
	"The format is json (finalize's signed schema), slack, pagerduty_v2 or opsgenie."},
	{"min_severity", ForeignServerRelationId, false, check_severity,
	"The minimum severity is info, warning (the default) or critical."},
	{"timeout", ForeignServerRelationId, false, fdw_check_delivery_timeout,
	"The timeout is a positive interval of at most a minute, such as '10 seconds' (the default): how long one delivery may take."},
	{"url", UserMappingRelationId, true, check_webhook_url,
	"The URL is https:// and a host (plain http:// only to localhost, 127.x.x.x or [::1]), without user@ or #fragment."},
	{"bearer_token", UserMappingRelationId, true, fdw_check_secret,
	"The bearer token has at least 8 characters and no control characters (CR, LF, ...)."},
	{"routing_key", UserMappingRelationId, true, fdw_check_secret,
	"The routing key (PagerDuty's integration key) has at least 8 characters and no control characters."},
	{"api_key", UserMappingRelationId, true, fdw_check_secret,
	"The API key (Opsgenie's GenieKey) has at least 8 characters and no control characters."},
	{"hmac_key", UserMappingRelationId, true, fdw_check_secret,
	"The HMAC key signs json deliveries (X-Finalize-Signature); it has at least 8 characters and no control characters."},
	{NULL}
};

/*
 * Validator of the finalize_webhook wrapper (targets of alert delivery).
 */
Datum
finalize_webhook_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	fdw_validate_options("finalize_webhook", webhook_options, opts, context);
	PG_RETURN_VOID();
}

