/*
 * mssql_options.c
 *     The validator of the finalize_mssql wrapper (sources: SQL Server
 *     databases): its options, where each belongs and what each accepts,
 *     as FreeTDS's configuration can carry them (tds_conf.c). The checking
 *     itself is core/fdw_options.c's; the worker reads the options
 *     (worker/source_config.c).
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "common/base64.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "mb/pg_wchar.h"
#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/fdw_options.h"
#include "core/period.h"
#include "core/period_zone.h"
#include "core/pg_compat.h"
#include "mssql/mssql_options.h"
#include "mssql/tds_conf.h"

PG_FUNCTION_INFO_V1(finalize_mssql_validator);

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

/*
 * Accepts a SQL Server login, or a Windows login DOMAIN\user (which the
 * server's authentication 'ntlm' requires; the worker checks that they
 * agree): one backslash between two non-empty parts.
 */
static bool
check_login(const char *value)
{
	const char *slash = strchr(value, '\\');

	return check_sysname(value) &&
		(slash == NULL || (slash != value && slash[1] != '\0' && strchr(slash + 1, '\\') == NULL));
}

/* Accepts how a source logs in: sql (the default), kerberos or ntlm. */
static bool
check_authentication(const char *value)
{
	return strcmp(value, "sql") == 0 || strcmp(value, "kerberos") == 0 || strcmp(value, "ntlm") == 0;
}

/*
 * Accepts a Kerberos principal name, user@REALM (or a service principal
 * such as MSSQLSvc/host:1433): 1 to 255 bytes without control characters
 * or spaces.
 */
static bool
check_principal(const char *value)
{
	size_t		len = strlen(value);

	for (const char *s = value; *s; s++)
		if ((unsigned char) *s < 0x21 || *s == 0x7f)
			return false;
	return len > 0 && len <= 255;
}

/*
 * The keytab of a user mapping's keytab option (base64, as base64 -w0
 * file.keytab writes it), palloc'd, with its length in *len: at most
 * KEYTAB_MAX bytes, beginning as every keytab does (0x05 0x02, the format
 * version 2 of MIT's ktutil and Windows' ktpass). NULL when it is not one.
 */
char *
mssql_keytab_decode(const char *value, int *len)
{
	int			n = strlen(value);
	int			cap;
	compat_b64_byte *raw;

	if (n == 0 || n > KEYTAB_MAX * 2)
		return NULL;
	cap = pg_b64_dec_len(n);
	raw = palloc(cap + 1);
	*len = pg_b64_decode(value, n, raw, cap);
	if (*len >= 2 && *len <= KEYTAB_MAX && raw[0] == 0x05 && raw[1] == 0x02)
		return (char *) raw;
	explicit_bzero(raw, cap);
	pfree(raw);
	return NULL;
}

/* Accepts a keytab in base64 (mssql_keytab_decode). */
static bool
check_keytab(const char *value)
{
	int			len;
	char	   *raw = mssql_keytab_decode(value, &len);

	if (raw == NULL)
		return false;
	explicit_bzero(raw, len);	/* a secret: not left in freed memory (or a core file) */
	pfree(raw);
	return true;
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
	return tds_conf_value_ok(value) && fdw_check_ca_file(value);
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

/*
 * Accepts a time zone name PostgreSQL knows (the IANA database), spelt as
 * the zone's own name: another spelling or a link ('ROK') is refused with
 * the name to use, since a validator cannot store it instead.
 */
static bool
check_timezone(const char *value)
{
	char	   *zone;

	if (value[0] == '\0' || pg_tzset(value) == NULL)
		return false;
	zone = period_zone_name(value);
	if (zone != NULL && strcmp(zone, value) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"timezone\" of a finalize_mssql server: \"%s\" is another name of zone %s",
						value, zone),
				 errdetail("A server's options are kept as written, so its clock's zone is named by the zone's own "
						   "name, not a link or another spelling of it."),
				 errhint("Use timezone '%s'.", zone)));
	return true;
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

/*
 * Accepts a clock_tolerance: an interval without months from 0 to
 * CLOCK_TOLERANCE_MAX.
 */
static bool
check_clock_tolerance(const char *value)
{
	Datum		iv;
	int64		usecs;

	return subxact_input(interval_in, value, &iv) && interval_usecs(DatumGetIntervalP(iv), &usecs) &&
		usecs >= 0 && usecs <= CLOCK_TOLERANCE_MAX;
}

/*
 * A server's clock_tolerance in microseconds (CLOCK_TOLERANCE_DEFAULT
 * without the option): how far SQL Server's clock may be stepped back (NTP,
 * a VM resumed or moved to another host) without a verdict running ahead.
 * False for a value out of range (set before the validator checked it).
 */
bool
mssql_clock_tolerance(List *server_options, int64 *usecs)
{
	return fdw_option_usecs(fdw_option_value(server_options, "clock_tolerance", CLOCK_TOLERANCE_DEFAULT), usecs) &&
		*usecs >= 0 && *usecs <= CLOCK_TOLERANCE_MAX;
}

PG_FUNCTION_INFO_V1(finalize_clock_tolerance);

/*
 * finalize_internal.clock_tolerance(server_name): a source's clock_tolerance as an
 * interval (of hours, minutes and seconds only), NULL for a server that
 * does not exist; so that explanations can say how long a verdict waits.
 */
Datum
finalize_clock_tolerance(PG_FUNCTION_ARGS)
{
	ForeignServer *server = GetForeignServerByName(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	Interval   *result;
	int64		usecs;

	if (server == NULL || !mssql_clock_tolerance(server->options, &usecs))
		PG_RETURN_NULL();
	result = palloc0(sizeof(Interval));
	result->time = usecs;
	PG_RETURN_INTERVAL_P(result);
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
	"The ca_file option is the absolute path of a PEM file of CA certificates the PostgreSQL server can read, a regular file of at most 1 MB, at most 200 characters, without ; # [ ] = or control characters."},
	{"host_name_in_certificate", ForeignServerRelationId, false, check_host,
	"The host_name_in_certificate option is a host name, without a port."},
	{"capture_stall_threshold", ForeignServerRelationId, false, check_positive_interval,
	"The threshold is a positive interval without months, such as '15 minutes': how far the commit time of SQL Server's max LSN may lag its clock before the capture counts as stalled. Keep it above the idle dummy-row cadence (about 5 minutes)."},
	{"clock_tolerance", ForeignServerRelationId, false, check_clock_tolerance,
	"The clock tolerance is an interval from 0 to 1 hour without months, such as '60 s' (the default): how far SQL Server's clock may be stepped back without a verdict running ahead. Every verdict waits that much longer; a larger step back is detected."},
	{"authentication", ForeignServerRelationId, false, check_authentication,
	"The authentication is sql (a SQL Server login and password, the default), kerberos (a Windows account's keytab) or ntlm (DOMAIN\\user and password)."},
	{"server_spn", ForeignServerRelationId, false, check_principal,
	"The server_spn is SQL Server's service principal name, such as MSSQLSvc/sql1.corp.example.com:1433 (optionally @REALM), without spaces."},
	{"username", UserMappingRelationId, false, check_login,
	"The username is a SQL Server login of 1 to 128 characters, or a Windows login DOMAIN\\user for authentication 'ntlm'."},
	{"password", UserMappingRelationId, true, check_nonempty,
	"The password must not be empty."},
	{"principal", UserMappingRelationId, false, check_principal,
	"The principal is the Kerberos name of the Windows account finalize logs in as, such as svc_finalize@CORP.EXAMPLE.COM, without spaces."},
	{"keytab", UserMappingRelationId, true, check_keytab,
	"The keytab is the account's keytab file in base64 (base64 -w0 svc_finalize.keytab), at most 64 kB."},
	{NULL}
};

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

	fdw_validate_options("finalize_mssql", mssql_options, opts, context);
	if (context == ForeignServerRelationId)
		check_certificate_name(opts);
	PG_RETURN_VOID();
}

