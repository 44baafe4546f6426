/*
 * s3_options.c
 *     The validator of the finalize_s3 wrapper (object stores listed by the
 *     gate): its options, where each belongs and what each accepts. The
 *     checking itself is core/fdw_options.c's; the gate reads the options
 *     (store_listing.c).
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "fmgr.h"

#include "core/fdw_options.h"

PG_FUNCTION_INFO_V1(finalize_s3_validator);

/* Accepts an http:// or https:// URL of a host, with an optional port. */
static bool
check_endpoint(const char *value)
{
	const char *host;

	if (strncmp(value, "http://", 7) == 0)
		host = value + 7;
	else if (strncmp(value, "https://", 8) == 0)
		host = value + 8;
	else
		return false;
	if (host[0] == '\0' || host[0] == '/' || host[0] == ':')
		return false;
	for (const char *s = host; *s; s++)
		if (isspace((unsigned char) *s) || *s == '?' || *s == '#' || *s == '@')
			return false;
	return true;
}

/* Accepts an S3 bucket name: 3 to 63 lower-case letters, digits, dots, hyphens. */
static bool
check_bucket(const char *value)
{
	size_t		len = strlen(value);

	if (len < 3 || len > 63 || !isalnum((unsigned char) value[0]) || !isalnum((unsigned char) value[len - 1]))
		return false;
	for (const char *s = value; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '.' || *s == '-'))
			return false;
	return true;
}

/* Accepts an AWS region name such as us-east-1. */
static bool
check_region(const char *value)
{
	if (value[0] == '\0' || strlen(value) > 64)
		return false;
	for (const char *s = value; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-'))
			return false;
	return true;
}

/* Accepts the two URL styles of S3. */
static bool
check_url_style(const char *value)
{
	return strcmp(value, "path") == 0 || strcmp(value, "virtual") == 0;
}

static const FdwOption s3_options[] = {
	{"endpoint", ForeignServerRelationId, false, check_endpoint,
	"The endpoint is the store's URL, http:// or https:// and a host with an optional port, such as https://s3.eu-central-1.amazonaws.com."},
	{"region", ForeignServerRelationId, false, check_region,
	"The region is the signing region, such as us-east-1 (lower-case letters, digits and hyphens)."},
	{"bucket", ForeignServerRelationId, false, check_bucket,
	"The bucket name has 3 to 63 lower-case letters, digits, dots and hyphens, and starts and ends with a letter or digit."},
	{"url_style", ForeignServerRelationId, false, check_url_style,
	"The URL style is path (https://endpoint/bucket/key, the default) or virtual (https://bucket.endpoint/key)."},
	/* Not secret, but never echoed either: it may hold CR/LF. */
	{"access_key_id", UserMappingRelationId, true, fdw_check_header_value,
	"The access key id must not be empty, and has no control characters (CR, LF, ...)."},
	{"secret_access_key", UserMappingRelationId, true, fdw_check_header_value,
	"The secret access key must not be empty, and has no control characters (CR, LF, ...)."},
	{"session_token", UserMappingRelationId, true, fdw_check_header_value,
	"The session token must not be empty (omit the option when there is none), and has no control characters (CR, LF, ...)."},
	{NULL}
};

/*
 * Validator of the finalize_s3 wrapper (object stores listed by the gate).
 */
Datum
finalize_s3_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	fdw_validate_options("finalize_s3", s3_options, opts, context);
	PG_RETURN_VOID();
}

