/*
 * fdw_options.c
 *     The checking of finalize's foreign-data wrapper options, and reading
 *     the options it checked.
 *
 * Sources are declared as foreign servers, their logins as user mappings, so
 * credentials get PostgreSQL's own protection (pg_user_mappings shows them
 * only to the mapping's user and the server owner). Each wrapper's
 * validator (mssql/mssql_options.c, store/s3_options.c,
 * alert/webhook_options.c) checks its options against its table here, when
 * they are set: every error names the option and never echoes a secret.
 */
#include "postgres.h"

#include <sys/stat.h>

#include "catalog/pg_foreign_data_wrapper.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_foreign_table.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "lib/stringinfo.h"
#include "foreign/foreign.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/fdw_options.h"
#include "core/period.h"
#include "core/redact.h"

/* Accepts a value sent in an HTTP header: no CR, LF or other control bytes. */
bool
fdw_check_header_value(const char *value)
{
	if (value[0] == '\0')
		return false;
	for (const unsigned char *c = (const unsigned char *) value; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return false;
	return true;
}

/*
 * Why the CA file at path may not be handed to a TLS library (libcurl's,
 * FreeTDS's GnuTLS), or NULL when it may. They read it whole, in the
 * backend or worker, where no cancel reaches them: a FIFO would block them
 * for ever and /dev/zero exhaust the memory, so only a regular file of at
 * most FDW_CA_FILE_MAX_BYTES passes. On "cannot be read", errno says why.
 * Allocates nothing and raises nothing (http.c calls it between mallocs).
 */
const char *
fdw_ca_file_problem(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return FDW_CA_FILE_UNREADABLE;
	if (!S_ISREG(st.st_mode) || st.st_size > FDW_CA_FILE_MAX_BYTES)
		return "is not a regular file of at most 1 MB of PEM certificates";
	return NULL;
}

/*
 * Accepts a ca_file option: an absolute path that is not, when it exists,
 * anything but a regular file of at most 1 MB. A path that does not exist
 * yet is accepted (a server is restored before its files are deployed);
 * fdw_ca_file_problem is applied again each time the file is used.
 */
bool
fdw_check_ca_file(const char *value)
{
	struct stat st;

	if (value[0] != '/')
		return false;
	if (stat(value, &st) != 0)
		return true;
	return fdw_ca_file_problem(value) == NULL;
}

/*
 * Accepts a secret of a user mapping sent to a service (a token, a
 * password, a key): at least REDACT_MIN_SECRET bytes, since a shorter one
 * could not be told from ordinary text when it is redacted from the
 * service's answers, and no control characters, since it goes into a
 * header or a body.
 */
bool
fdw_check_secret(const char *value)
{
	return strlen(value) >= REDACT_MIN_SECRET && fdw_check_header_value(value);
}

/*
 * Accepts the timeout of one delivery to a service (a webhook, a
 * publication's target): a positive interval of at most a minute, since
 * one worker delivers to every target in turn and a slow one delays the
 * rest.
 */
bool
fdw_check_delivery_timeout(const char *value)
{
	Datum		iv;
	int64		usecs;

	return subxact_input(interval_in, value, &iv) &&
		interval_usecs(DatumGetIntervalP(iv), &usecs) && usecs > 0 && usecs <= 60 * USECS_PER_SEC;
}

/*
 * Whether a host is this machine: plain http is accepted only there (a
 * local relay, tests), since what finalize sends (alerts' table names and
 * error texts, a catalog's tokens) must not cross a network in the clear.
 */
static bool
loopback_host(const char *host, size_t len)
{
	return (len == 9 && pg_strncasecmp(host, "localhost", 9) == 0) ||
		(len >= 4 && strncmp(host, "127.", 4) == 0 && strspn(host, "0123456789.") == len) ||
		(len == 5 && strncmp(host, "[::1]", 5) == 0);
}

/*
 * Accepts the URL of a service finalize calls (a webhook, an Iceberg
 * catalog): https:// and a host, or http:// to a loopback host; no
 * credentials in it (user@), no fragment, no whitespace or control bytes.
 */
bool
fdw_check_service_url(const char *value)
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
void
fdw_validate_options(const char *wrapper, const FdwOption *options, List *opts, Oid context)
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

/*
 * A delivery's timeout option in milliseconds (fdw_check_delivery_timeout
 * checked it when it was set), or dflt_ms when it is absent.
 */
long
fdw_option_timeout_ms(List *options, long dflt_ms)
{
	const char *text = fdw_option_value(options, "timeout", NULL);
	int64		usecs;

	if (text == NULL || !fdw_option_usecs(text, &usecs) || usecs <= 0)
		return dflt_ms;
	return (long) Min(Max(usecs / 1000, 1), (int64) 60 * 1000);
}

/*
 * The user mapping a process reads a server with for user: user's own,
 * else PUBLIC's; NULL when there is neither (GetUserMapping would raise).
 * The one rule of every worker that reads a server's secrets.
 */
UserMapping *
fdw_user_mapping(Oid user, Oid serverid)
{
	if (!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(user), ObjectIdGetDatum(serverid)) &&
		!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(InvalidOid), ObjectIdGetDatum(serverid)))
		return NULL;
	return GetUserMapping(user, serverid);
}

/* The options of fdw_user_mapping(user, serverid), NIL when there is none. */
List *
fdw_user_mapping_options(Oid user, Oid serverid)
{
	UserMapping *um = fdw_user_mapping(user, serverid);

	return um != NULL ? um->options : NIL;
}
