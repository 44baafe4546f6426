/*
 * fdw_options.c
 *     Validators of finalize's foreign-data wrappers.
 *
 * Sources are declared as foreign servers, their logins as user mappings, so
 * credentials get PostgreSQL's own protection (pg_user_mappings shows them
 * only to the mapping's user and the server owner). The validators check
 * every option when it is set, name the option, and never echo a secret.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_data_wrapper.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_foreign_table.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "common/fdw_options.h"
#include "common/period.h"
#include "common/subxact.h"
#include "mssql/tds_conf.h"

PG_FUNCTION_INFO_V1(finalize_mssql_validator);
PG_FUNCTION_INFO_V1(finalize_s3_validator);
PG_FUNCTION_INFO_V1(finalize_webhook_validator);

/* Checks one option value; false means invalid. */
typedef bool (*OptionCheck) (const char *value);

/* One valid option of a wrapper. */
typedef struct FdwOption
{
	const char *name;
	Oid			context;		/* catalog the option belongs to */
	bool		secret;			/* never echo its value */
	OptionCheck check;
	const char *rule;			/* errdetail when the check fails */
} FdwOption;

/* Accepts a non-empty value. */
static bool
check_nonempty(const char *value)
{
	return value[0] != '\0';
}

/* Accepts a SQL Server identifier (sysname: 1 to 128 characters). */
static bool
check_sysname(const char *value)
{
	return value[0] != '\0' && pg_mbstrlen(value) <= 128;
}

/* Accepts a SQL Server login: Windows logins (domain\user) make FreeTDS switch to NTLM. */
static bool
check_login(const char *value)
{
	return check_sysname(value) && strchr(value, '\\') == NULL;
}

/*
 * Accepts a host name or address, without a port or an instance name, that
 * FreeTDS's configuration can carry (tds_conf.c).
 */
static bool
check_host(const char *value)
{
	if (!tds_conf_value_ok(value))
		return false;
	for (const char *s = value; *s; s++)
		if (isspace((unsigned char) *s) || *s == ':' || *s == '\\' || *s == '/')
			return false;
	return true;
}

/* Accepts how a connection is encrypted: off, request or require. */
static bool
check_encrypt(const char *value)
{
	return strcmp(value, "off") == 0 || strcmp(value, "request") == 0 || strcmp(value, "require") == 0;
}

/* Accepts a boolean as PostgreSQL spells one (true, false, on, off, ...). */
static bool
check_bool(const char *value)
{
	bool		b;

	return parse_bool(value, &b);
}

/* Accepts the absolute path of a PEM file FreeTDS's configuration can carry. */
static bool
check_ca_file(const char *value)
{
	return value[0] == '/' && tds_conf_value_ok(value);
}

/* Accepts a TCP port, 1 to 65535. */
static bool
check_port(const char *value)
{
	char	   *end;
	long		port;

	errno = 0;
	port = strtol(value, &end, 10);
	return errno == 0 && end != value && *end == '\0' && port >= 1 && port <= 65535;
}

/* Accepts a time zone name PostgreSQL knows (the IANA database). */
static bool
check_timezone(const char *value)
{
	return value[0] != '\0' && pg_tzset(value) != NULL;
}

/*
 * Accepts a positive interval without months, such as '15 minutes' or
 * '900 s', whose length fits in 64 bits of microseconds.
 */
static bool
check_positive_interval(const char *value)
{
	Datum		iv;
	int64		usecs;

	return subxact_input(interval_in, value, &iv) &&
		interval_usecs(DatumGetIntervalP(iv), &usecs) && usecs > 0;
}

/* Accepts a value sent in an HTTP header: no CR, LF or other control bytes. */
static bool
check_header_value(const char *value)
{
	if (value[0] == '\0')
		return false;
	for (const unsigned char *c = (const unsigned char *) value; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return false;
	return true;
}

/* Accepts the TDS versions FreeTDS speaks to SQL Server 2005 and later. */
static bool
check_tds_version(const char *value)
{
	return strcmp(value, "7.1") == 0 || strcmp(value, "7.2") == 0 ||
		strcmp(value, "7.3") == 0 || strcmp(value, "7.4") == 0;
}

static const FdwOption mssql_options[] = {
	{"host", ForeignServerRelationId, false, check_host,
	"The host is a name or an address of the SQL Server machine, without a port or instance name (use the port option)."},
	{"port", ForeignServerRelationId, false, check_port,
	"The port is an integer from 1 to 65535 (SQL Server listens on 1433 by default)."},
	{"database", ForeignServerRelationId, false, check_sysname,
	"The database is the name of a SQL Server database with change data capture, 1 to 128 characters."},
	{"timezone", ForeignServerRelationId, false, check_timezone,
	"The time zone is the IANA name of the SQL Server machine's clock zone, such as UTC or Europe/Berlin (see pg_timezone_names)."},
	{"tds_version", ForeignServerRelationId, false, check_tds_version,
	"The TDS version is one of 7.1, 7.2, 7.3 or 7.4."},
	{"encrypt", ForeignServerRelationId, false, check_encrypt,
	"The encrypt option is off, request or require (the default: an encrypted connection whose certificate is verified)."},
	{"trust_server_certificate", ForeignServerRelationId, false, check_bool,
	"The trust_server_certificate option is a boolean (false by default: the certificate must chain to ca_file, or to the system's trusted CAs, and name the host)."},
	{"ca_file", ForeignServerRelationId, false, check_ca_file,
	"The ca_file option is the absolute path of a PEM file of CA certificates the PostgreSQL server can read, at most 200 characters, without ; # [ ] = or control characters."},
	{"host_name_in_certificate", ForeignServerRelationId, false, check_host,
	"The host_name_in_certificate option is a host name, without a port."},
	{"capture_stall_threshold", ForeignServerRelationId, false, check_positive_interval,
	"The threshold is a positive interval without months, such as '15 minutes': how far the commit time of SQL Server's max LSN may lag its clock before the capture counts as stalled. Keep it above the idle dummy-row cadence (about 5 minutes)."},
	{"username", UserMappingRelationId, false, check_login,
	"The username is a SQL Server login of 1 to 128 characters; Windows logins (domain\\user) are not supported."},
	{"password", UserMappingRelationId, true, check_nonempty,
	"The password must not be empty."},
	{NULL}
};

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
	{"access_key_id", UserMappingRelationId, true, check_header_value,
	"The access key id must not be empty, and has no control characters (CR, LF, ...)."},
	{"secret_access_key", UserMappingRelationId, true, check_header_value,
	"The secret access key must not be empty, and has no control characters (CR, LF, ...)."},
	{"session_token", UserMappingRelationId, true, check_header_value,
	"The session token must not be empty (omit the option when there is none), and has no control characters (CR, LF, ...)."},
	{NULL}
};

/*
 * Whether a host is this machine: plain http is accepted only there (a
 * local relay, tests), since alerts carry table names and error texts.
 */
static bool
loopback_host(const char *host, size_t len)
{
	return (len == 9 && pg_strncasecmp(host, "localhost", 9) == 0) ||
		(len >= 4 && strncmp(host, "127.", 4) == 0 && strspn(host, "0123456789.") == len) ||
		(len == 5 && strncmp(host, "[::1]", 5) == 0);
}

/*
 * Accepts a webhook URL: https:// and a host, or http:// to a loopback
 * host; no credentials in it (user@), no fragment, no whitespace or
 * control bytes.
 */
static bool
check_webhook_url(const char *value)
{
	bool		plain = strncmp(value, "http://", 7) == 0;
	const char *host = plain ? value + 7 : value + 8;
	size_t		hostlen;

	if (!plain && strncmp(value, "https://", 8) != 0)
		return false;
	for (const unsigned char *c = (const unsigned char *) value; *c; c++)
		if (*c <= 0x20 || *c == 0x7f || *c == '#')
			return false;
	hostlen = strcspn(host, "/?");
	if (hostlen == 0 || host[0] == ':' || memchr(host, '@', hostlen) != NULL)
		return false;
	if (host[0] == '[')
		hostlen = strcspn(host, "]") + 1;
	else
		hostlen = strcspn(host, ":/?");
	return !plain || loopback_host(host, hostlen);
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

/*
 * Accepts a delivery timeout: positive and at most a minute, since one
 * worker delivers to every target in turn and a slow one delays the rest.
 */
static bool
check_webhook_timeout(const char *value)
{
	Datum		iv;
	int64		usecs;

	return subxact_input(interval_in, value, &iv) &&
		interval_usecs(DatumGetIntervalP(iv), &usecs) && usecs > 0 && usecs <= 60 * USECS_PER_SEC;
}

/*
 * Accepts a webhook secret: at least 8 bytes (a shorter one could not be
 * told from ordinary text when it is redacted from a receiver's answer)
 * and no control characters, since it goes into a header or a body.
 */
static bool
check_webhook_secret(const char *value)
{
	return strlen(value) >= 8 && check_header_value(value);
}

/* A URL may be the secret itself (Slack's), so it is never echoed. */
static const FdwOption webhook_options[] = {
	{"url", ForeignServerRelationId, true, check_webhook_url,
	"The URL is https:// and a host (plain http:// only to localhost, 127.x.x.x or [::1]), without user@ or #fragment; put it in the user mapping instead when it is itself the secret, as Slack's are."},
	{"format", ForeignServerRelationId, false, check_webhook_format,
	"The format is json (finalize's signed schema), slack, pagerduty_v2 or opsgenie."},
	{"min_severity", ForeignServerRelationId, false, check_severity,
	"The minimum severity is info, warning (the default) or critical."},
	{"timeout", ForeignServerRelationId, false, check_webhook_timeout,
	"The timeout is a positive interval of at most a minute, such as '10 seconds' (the default): how long one delivery may take."},
	{"url", UserMappingRelationId, true, check_webhook_url,
	"The URL is https:// and a host (plain http:// only to localhost, 127.x.x.x or [::1]), without user@ or #fragment."},
	{"bearer_token", UserMappingRelationId, true, check_webhook_secret,
	"The bearer token has at least 8 characters and no control characters (CR, LF, ...)."},
	{"routing_key", UserMappingRelationId, true, check_webhook_secret,
	"The routing key (PagerDuty's integration key) has at least 8 characters and no control characters."},
	{"api_key", UserMappingRelationId, true, check_webhook_secret,
	"The API key (Opsgenie's GenieKey) has at least 8 characters and no control characters."},
	{"hmac_key", UserMappingRelationId, true, check_webhook_secret,
	"The HMAC key signs json deliveries (X-Finalize-Signature); it has at least 8 characters and no control characters."},
	{NULL}
};

/* What a catalog is called in messages. */
static const char *
context_name(Oid context)
{
	switch (context)
	{
		case ForeignDataWrapperRelationId:
			return "foreign-data wrapper";
		case ForeignServerRelationId:
			return "server";
		case UserMappingRelationId:
			return "user mapping";
		case ForeignTableRelationId:
			return "foreign table";
		default:
			return "column";
	}
}

/* The comma-separated names of the options valid in a context. */
static char *
valid_names(const FdwOption *options, Oid context)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (const FdwOption *o = options; o->name; o++)
		if (o->context == context)
			appendStringInfo(&buf, "%s%s", buf.len > 0 ? ", " : "", o->name);
	return buf.data;
}

/*
 * A value as an error may echo it: control characters become '?', so that
 * a value cannot start a forged line in the server log.
 */
static char *
printable(const char *value)
{
	char	   *copy = pstrdup(value);

	for (unsigned char *c = (unsigned char *) copy; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			*c = '?';
	return copy;
}

/*
 * Checks a list of options (DefElems) against a wrapper's table. Unknown or
 * misplaced options and bad values raise errors that name the option, list
 * what is valid and never show a secret value.
 */
static void
validate_options(const char *wrapper, const FdwOption *options, List *opts, Oid context)
{
	ListCell   *cell;

	foreach(cell, opts)
	{
		DefElem    *def = (DefElem *) lfirst(cell);
		const FdwOption *opt = NULL;
		const char *value;

		/* An option may belong to two catalogs (a webhook's url). */
		for (const FdwOption *o = options; o->name; o++)
			if (strcmp(o->name, def->defname) == 0 && (opt == NULL || o->context == context))
				opt = o;

		if (opt == NULL || opt->context != context)
		{
			char	   *valid = valid_names(options, context);

			if (opt != NULL)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
						 errmsg("option \"%s\" is not valid for a %s %s", def->defname, wrapper, context_name(context)),
						 errdetail("Option \"%s\" belongs to a %s.", def->defname, context_name(opt->context)),
						 opt->context == UserMappingRelationId ?
						 errhint("Credentials go in a user mapping: CREATE USER MAPPING FOR ... SERVER ... OPTIONS (%s '...').", def->defname) :
						 errhint("Set it on the %s instead.", context_name(opt->context))));
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("invalid option \"%s\" for a %s %s", def->defname, wrapper, context_name(context)),
					 valid[0] != '\0' ?
					 errhint("Valid options for a %s %s are: %s.", wrapper, context_name(context), valid) :
					 errhint("A %s %s takes no options.", wrapper, context_name(context))));
		}

		value = defGetString(def);
		if (opt->check != NULL && !opt->check(value))
		{
			if (opt->secret)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
						 errmsg("invalid value for option \"%s\" of a %s %s", opt->name, wrapper, context_name(context)),
						 errdetail("%s", opt->rule)));
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("invalid value for option \"%s\" of a %s %s: \"%s\"", opt->name, wrapper, context_name(context),
							printable(value)),
					 errdetail("%s", opt->rule)));
		}
	}
}

/*
 * host_name_in_certificate must be the host: FreeTDS 1.3 (Debian 12's)
 * checks the certificate against the name it connects to and cannot be
 * told another one. Refusing it says so, instead of checking a name the
 * user did not mean.
 */
static void
check_certificate_name(List *opts)
{
	const char *host = fdw_option_value(opts, "host", NULL);
	const char *name = fdw_option_value(opts, "host_name_in_certificate", NULL);

	if (name != NULL && (host == NULL || pg_strcasecmp(host, name) != 0))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("option \"host_name_in_certificate\" (\"%s\") must equal option \"host\" (\"%s\")",
						name, host ? host : ""),
				 errdetail("FreeTDS 1.3 checks SQL Server's certificate against the host it connects to and cannot check another name."),
				 errhint("Set host to the name in the certificate (add it to /etc/hosts or DNS if needed), or drop host_name_in_certificate.")));
}

/*
 * Validator of the finalize_mssql wrapper (sources: SQL Server databases).
 */
Datum
finalize_mssql_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	validate_options("finalize_mssql", mssql_options, opts, context);
	if (context == ForeignServerRelationId)
		check_certificate_name(opts);
	PG_RETURN_VOID();
}

/*
 * Validator of the finalize_s3 wrapper (object stores listed by the gate).
 */
Datum
finalize_s3_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	validate_options("finalize_s3", s3_options, opts, context);
	PG_RETURN_VOID();
}

/*
 * Validator of the finalize_webhook wrapper (targets of alert delivery).
 */
Datum
finalize_webhook_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	validate_options("finalize_webhook", webhook_options, opts, context);
	PG_RETURN_VOID();
}

/*
 * The value of a generic option of a server or user mapping, or a default:
 * the validators above have checked it when it was set.
 */
const char *
fdw_option_value(List *options, const char *name, const char *dflt)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (strcmp(def->defname, name) == 0)
			return defGetString(def);
	}
	return dflt;
}

/*
 * An interval option in microseconds; false when it does not fit (the
 * validators refuse such values, so only an option set before they did).
 */
bool
fdw_option_usecs(const char *text, int64 *out)
{
	Interval   *iv = DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(text),
														  ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));

	return interval_usecs(iv, out);
}
