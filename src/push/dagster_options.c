/*
 * dagster_options.c
 *     The validator of the finalize_dagster wrapper (Dagster webservers that
 *     publications report materializations to): its options, where each
 *     belongs and what each accepts. The checking itself is
 *     core/fdw_options.c's; the target reads them (dagster.c). The API
 *     token belongs in a user mapping only.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "fmgr.h"

#include "core/fdw_options.h"

PG_FUNCTION_INFO_V1(finalize_dagster_validator);

/*
 * Accepts the webserver's base URL (core/fdw_options.c's rule for a
 * service's URL: https://, or http:// to a loopback host), without a query:
 * finalize appends /report_asset_materialization/... and /graphql to it.
 */
static bool
check_dagster_url(const char *value)
{
	return fdw_check_service_url(value) && strchr(value, '?') == NULL;
}

static const FdwOption dagster_options[] = {
	{"url", ForeignServerRelationId, false, check_dagster_url,
	"The URL is the webserver's base URL: https:// and a host (plain http:// only to localhost, 127.x.x.x or [::1]), an optional path prefix, without user@, ?query or #fragment."},
	{"timeout", ForeignServerRelationId, false, fdw_check_delivery_timeout,
	"The timeout is a positive interval of at most a minute, such as '10 seconds' (the default): how long one request may take."},
	{"api_token", UserMappingRelationId, true, fdw_check_secret,
	"The API token (sent as Dagster-Cloud-Api-Token) has at least 8 characters and no control characters."},
	{NULL}
};

/*
 * Validator of the finalize_dagster wrapper (targets of dagster
 * publications).
 */
Datum
finalize_dagster_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	fdw_validate_options("finalize_dagster", dagster_options, opts, context);
	PG_RETURN_VOID();
}
