/*
 * iceberg_options.c
 *     The validator of the finalize_iceberg wrapper (Iceberg REST catalogs
 *     whose tables' snapshots tell how far a pipeline got): its options,
 *     where each belongs and what each accepts. The checking itself is
 *     core/fdw_options.c's; the lake worker reads them (catalog_config.c).
 *     Credentials belong in user mappings only.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/fdw_options.h"
#include "core/period.h"
#include "lake/catalog.h"

PG_FUNCTION_INFO_V1(finalize_iceberg_validator);

/* Accepts an interval between bounds (in seconds), such as '10 seconds'. */
static bool
interval_between(const char *value, int64 min_secs, int64 max_secs)
{
	Datum		iv;
	int64		usecs;

	return subxact_input(interval_in, value, &iv) && interval_usecs(DatumGetIntervalP(iv), &usecs) &&
		usecs >= min_secs * USECS_PER_SEC && usecs <= max_secs * USECS_PER_SEC;
}

/* Accepts a request timeout: 1 second to a minute. */
static bool
check_timeout(const char *value)
{
	return interval_between(value, 1, 60);
}

/* Accepts a poll interval: 1 second to a day. */
static bool
check_poll_interval(const char *value)
{
	return interval_between(value, 1, 24 * 60 * 60);
}

/*
 * Accepts a path prefix (the config's "prefix", a Glue catalog's
 * "catalogs/123456789012"): letters, digits and -._~/ , no empty segment.
 */
bool
lake_prefix_ok(const char *value)
{
	size_t		n = strlen(value);

	if (n == 0 || n > 512 || value[0] == '/' || value[n - 1] == '/' || strstr(value, "//") != NULL)
		return false;
	for (const char *c = value; *c; c++)
		if (!(isalnum((unsigned char) *c) || strchr("-._~/", *c) != NULL))
			return false;
	return strstr(value, "..") == NULL;
}

/*
 * Accepts a catalog's URI: a service URL (https, or http to a loopback
 * host) without a query, since finalize appends paths to it.
 */
static bool
check_catalog_uri(const char *value)
{
	return fdw_check_service_url(value) && strchr(value, '?') == NULL;
}

/* Accepts a short value sent in a request (a warehouse, a scope, a region). */
static bool
check_word(const char *value)
{
	return strlen(value) <= 1024 && fdw_check_header_value(value);
}

/* Accepts an AWS region such as eu-west-1. */
static bool
check_region(const char *value)
{
	size_t		n = strlen(value);

	return n >= 3 && n <= 32 && strspn(value, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

/* Accepts the SigV4 signing name: glue (AWS Glue) or s3tables (S3 Tables). */
static bool
check_signing_name(const char *value)
{
	return strcmp(value, "glue") == 0 || strcmp(value, "s3tables") == 0;
}

/* Accepts a secret: at least 8 bytes, no control characters (it goes into a header or a form). */
static bool
check_secret(const char *value)
{
	return strlen(value) >= 8 && strlen(value) <= 8192 && fdw_check_header_value(value);
}

/* Accepts a client id or an access key id: no control characters. */
static bool
check_id(const char *value)
{
	return strlen(value) <= 1024 && fdw_check_header_value(value);
}

static const FdwOption iceberg_options[] = {
	{"uri", ForeignServerRelationId, false, check_catalog_uri,
	"The URI is the catalog's base, https:// and a host (plain http:// only to localhost, 127.x.x.x or [::1]), without user@, ?query or #fragment, such as https://catalog.example.com/api/catalog; finalize appends /v1/..."},
	{"warehouse", ForeignServerRelationId, false, check_word,
	"The warehouse is sent to the catalog's config endpoint as is: at most 1024 characters, no control characters."},
	{"prefix", ForeignServerRelationId, false, lake_prefix_ok,
	"The prefix is the path segment after /v1/ (letters, digits, - . _ ~ and /, no empty segment); without it, the catalog's config says it."},
	{"oauth_uri", ForeignServerRelationId, false, fdw_check_service_url,
	"The OAuth2 token endpoint is https:// and a host (plain http:// only to a loopback host); without it, <uri>/v1/oauth/tokens."},
	{"scope", ForeignServerRelationId, false, check_word,
	"The OAuth2 scope is at most 1024 characters without control characters (the default is catalog)."},
	{"region", ForeignServerRelationId, false, check_region,
	"The region is an AWS region such as eu-west-1 (for SigV4 signing)."},
	{"signing_name", ForeignServerRelationId, false, check_signing_name,
	"The SigV4 signing name is glue (AWS Glue's Iceberg REST endpoint, the default) or s3tables (Amazon S3 Tables')."},
	{"timeout", ForeignServerRelationId, false, check_timeout,
	"The timeout is an interval from 1 second to a minute, such as '10 seconds' (the default): how long one request may take."},
	{"poll_interval", ForeignServerRelationId, false, check_poll_interval,
	"The poll interval is an interval from 1 second to a day, such as '10 seconds' (the default): how often each table's metadata is loaded."},
	{"token", UserMappingRelationId, true, check_secret,
	"The bearer token has at least 8 characters and no control characters."},
	{"client_id", UserMappingRelationId, false, check_id,
	"The OAuth2 client id has no control characters."},
	{"client_secret", UserMappingRelationId, true, check_secret,
	"The OAuth2 client secret has at least 8 characters and no control characters."},
	{"access_key_id", UserMappingRelationId, false, check_id,
	"The AWS access key id has no control characters."},
	{"secret_access_key", UserMappingRelationId, true, check_secret,
	"The AWS secret access key has at least 8 characters and no control characters."},
	{"session_token", UserMappingRelationId, true, check_secret,
	"The AWS session token has at least 8 characters and no control characters."},
	{NULL}
};

/* Whether an option is in a list. */
static bool
has(List *opts, const char *name)
{
	return fdw_option_value(opts, name, NULL) != NULL;
}

/*
 * Checks which options go together: a server needs its uri; a user
 * mapping holds one way to authenticate (a bearer token, OAuth2 client
 * credentials, or AWS keys), each complete. CREATE and ALTER give the
 * validator the whole list, so this sees every option at once.
 */
static void
check_combination(List *opts, Oid context)
{
	int			ways;

	if (context == ForeignServerRelationId && !has(opts, "uri"))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("a finalize_iceberg server needs option \"uri\""),
				 errdetail("The URI is the Iceberg REST catalog's base; finalize appends /v1/config, /v1/{prefix}/namespaces/... to it."),
				 errhint("CREATE SERVER lake FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'https://catalog.example.com/api/catalog', warehouse '...');")));
	if (context != UserMappingRelationId)
		return;
	ways = (has(opts, "token") ? 1 : 0) + (has(opts, "client_id") || has(opts, "client_secret") ? 1 : 0) +
		(has(opts, "access_key_id") || has(opts, "secret_access_key") || has(opts, "session_token") ? 1 : 0);
	if (ways > 1)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
				 errmsg("a finalize_iceberg user mapping holds one kind of credentials"),
				 errdetail("Give a bearer token (token), OAuth2 client credentials (client_id and client_secret) or AWS keys (access_key_id and secret_access_key), not several.")));
	if (has(opts, "client_id") != has(opts, "client_secret"))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("OAuth2 client credentials need both client_id and client_secret"),
				 errhint("Set both in the user mapping: OPTIONS (client_id '...', client_secret '...').")));
	if (has(opts, "access_key_id") != has(opts, "secret_access_key") ||
		(has(opts, "session_token") && !has(opts, "access_key_id")))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("AWS credentials need both access_key_id and secret_access_key"),
				 errdetail("A session_token goes with the temporary keys it was issued with."),
				 errhint("Set them in the user mapping, and region on the server.")));
}

/* Validator of the finalize_iceberg wrapper. */
Datum
finalize_iceberg_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	fdw_validate_options("finalize_iceberg", iceberg_options, opts, context);
	check_combination(opts, context);
	PG_RETURN_VOID();
}
