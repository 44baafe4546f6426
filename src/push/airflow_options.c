/*
 * airflow_options.c
 *     The validator of the finalize_airflow wrapper (Airflow API servers
 *     that publications post asset events to): its options, where each
 *     belongs and what each accepts. The checking itself is
 *     core/fdw_options.c's; the delivery reads the options (airflow.c).
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "fmgr.h"

#include "core/fdw_options.h"

PG_FUNCTION_INFO_V1(finalize_airflow_validator);

/*
 * Accepts the API server's base URL (core/fdw_options.c's rule for a
 * service's URL: https://, plain http:// only to loopback), without a
 * query, since finalize appends the API's paths to it.
 */
static bool
check_airflow_url(const char *value)
{
	return fdw_check_service_url(value) && strchr(value, '?') == NULL && strlen(value) <= 2048;
}

/*
 * Accepts a user name: Airflow's users are named in a JSON body, so
 * anything printable up to 256 bytes.
 */
static bool
check_username(const char *value)
{
	return strlen(value) <= 256 && fdw_check_header_value(value);
}

/*
 * A token or a password is never echoed. A token is Airflow's JWT (from
 * `airflow` or an identity provider); a user name and password are
 * exchanged for one at POST /auth/token.
 */
static const FdwOption airflow_options[] = {
	{"url", ForeignServerRelationId, false, check_airflow_url,
	"The URL is the API server's base URL, https:// and a host (plain http:// only to localhost, 127.x.x.x or [::1]), without user@, ?query or #fragment, such as 'https://airflow.example.com'."},
	{"timeout", ForeignServerRelationId, false, fdw_check_delivery_timeout,
	"The timeout is a positive interval of at most a minute, such as '10 seconds' (the default): how long one delivery may take."},
	{"token", UserMappingRelationId, true, fdw_check_secret,
	"The token (a JWT Airflow accepts as a bearer token) has at least 8 characters and no control characters (CR, LF, ...)."},
	{"username", UserMappingRelationId, false, check_username,
	"The user name has at most 256 characters and no control characters."},
	{"password", UserMappingRelationId, true, fdw_check_secret,
	"The password has at least 8 characters and no control characters (CR, LF, ...)."},
	{NULL}
};

/*
 * A user mapping's credentials are one of two kinds: a token, or a user
 * name with its password (none at all for an API server that asks for
 * none). A mix would leave which one is sent to a guess.
 */
static void
check_credentials(List *opts)
{
	bool		token = fdw_option_value(opts, "token", NULL) != NULL;
	bool		username = fdw_option_value(opts, "username", NULL) != NULL;
	bool		password = fdw_option_value(opts, "password", NULL) != NULL;

	if (token && (username || password))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
				 errmsg("a finalize_airflow user mapping takes a token or a username and password, not both"),
				 errdetail("A token is sent as it is; a username and password are exchanged for a token at the API server's /auth/token."),
				 errhint("Drop one of them: ALTER USER MAPPING ... OPTIONS (DROP token), or DROP username, DROP password.")));
	if (username != password)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
				 errmsg("a finalize_airflow user mapping with a %s needs a %s too", username ? "username" : "password",
						username ? "password" : "username"),
				 errdetail("Airflow's /auth/token takes both to issue a token."),
				 errhint("Add it: ALTER USER MAPPING ... OPTIONS (ADD %s '...').", username ? "password" : "username")));
}

/*
 * Validator of the finalize_airflow wrapper (targets of publications).
 */
Datum
finalize_airflow_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	fdw_validate_options("finalize_airflow", airflow_options, opts, context);
	if (context == UserMappingRelationId)
		check_credentials(opts);
	if (context == ForeignServerRelationId && fdw_option_value(opts, "url", NULL) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("a finalize_airflow server needs the option \"url\""),
				 errdetail("It is the base URL of Airflow's API server, where /api/v2 and /auth/token are."),
				 errhint("Give it: CREATE SERVER ... FOREIGN DATA WRAPPER finalize_airflow OPTIONS (url 'https://airflow.example.com').")));
	PG_RETURN_VOID();
}
