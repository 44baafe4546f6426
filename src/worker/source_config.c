/*
 * source_config.c
 *     What a source's cycle reads of PostgreSQL state at its start: the
 *     source's configuration (its foreign server's options, TLS and login),
 *     its active tracked tables, their consumers and its hold, in one short
 *     transaction that is closed before the worker talks to SQL Server.
 *
 * The writes at the end of a cycle are worker/worker_state.c's.
 */
#include "postgres.h"

#include <sys/stat.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/condition.h"
#include "core/db.h"
#include "core/fdw_options.h"
#include "core/pg_compat.h"
#include "core/period.h"
#include "core/settings.h"
#include "core/source_table.h"
#include "mssql/mssql_options.h"
#include "worker/consumer_state.h"
#include "worker/source_config.h"

/*
 * How the source's connection is encrypted and verified (in the current
 * context), and where its private FreeTDS configuration and log live: in
 * pg_finalize/tds under the data directory, readable by PostgreSQL's user
 * only, one per server and a log per worker. encrypt defaults to require and the
 * certificate is verified unless trust_server_certificate says not to:
 * against ca_file, else the system's trusted CAs. Returns NULL, or what is
 * wrong with the CA file.
 */
static char *
load_tls(ForeignServer *server, SourceConfig *cfg)
{
	bool		trust = false;
	const char *why;

	cfg->conn.encrypt = pstrdup(fdw_option_value(server->options, "encrypt", "require"));
	(void) parse_bool(fdw_option_value(server->options, "trust_server_certificate", "false"), &trust);
	if (trust || strcmp(cfg->conn.encrypt, "off") == 0)
		cfg->conn.ca_file = NULL;
	else
		cfg->conn.ca_file = pstrdup(fdw_option_value(server->options, "ca_file", "system"));
	if (MakePGDirectory("pg_finalize") < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"pg_finalize\" in the data directory: %m")));
	if (MakePGDirectory("pg_finalize/tds") < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"pg_finalize/tds\" in the data directory: %m")));
	/* where a Kerberos source's tickets and, for a moment, its keytab are (PostgreSQL makes it on demand) */
	if (MakePGDirectory(COMPAT_TEMP_DIR) < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\" in the data directory: %m", COMPAT_TEMP_DIR)));
	cfg->conn.conf_path = psprintf("%s/pg_finalize/tds/%u.conf", DataDir, server->serverid);
	/*
	 * FreeTDS keeps one log open per process (the first login's "dump
	 * file"; later logins append to it), so the log is the worker's, not the
	 * server's: emptied before each login and read after a failed one, one
	 * login at a time.
	 */
	cfg->conn.log_path = psprintf("%s/pg_finalize/tds/worker-%d.log", DataDir, source_table_my_index() + 1);
	cfg->conn.section = psprintf("finalize-%u.invalid", server->serverid);
	cfg->conn.keytab_path = psprintf("%s/" COMPAT_TEMP_DIR "/" COMPAT_TEMP_PREFIX "_finalize_%u_%u.keytab",
									 DataDir, MyDatabaseId, server->serverid);

	/* GnuTLS reads the CA file whole, in this process (fdw_ca_file_problem says why that matters). */
	if (cfg->conn.ca_file != NULL && strcmp(cfg->conn.ca_file, "system") != 0 &&
		(why = fdw_ca_file_problem(cfg->conn.ca_file)) != NULL)
		return psprintf(strcmp(why, FDW_CA_FILE_UNREADABLE) == 0 ? "the ca_file \"%s\" of server \"%s\" %s: %m"
						: "the ca_file \"%s\" of server \"%s\" %s", cfg->conn.ca_file, server->servername, why);
	return NULL;
}

/* How a source logs in, from its authentication option (validated). */
static MssqlAuth
auth_of(const char *option)
{
	return strcmp(option, "kerberos") == 0 ? MSSQL_AUTH_KERBEROS :
		strcmp(option, "ntlm") == 0 ? MSSQL_AUTH_NTLM : MSSQL_AUTH_SQL;
}

/*
 * The server's options into cfg (in cxt). Returns NULL, or what is wrong
 * with them.
 */
static char *
load_options(ForeignServer *server, MemoryContext cxt, SourceConfig *cfg)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	char	   *problem = NULL;

	cfg->serverid = server->serverid;
	cfg->server_name = pstrdup(server->servername);
	cfg->conn.host = pstrdup(fdw_option_value(server->options, "host", ""));
	cfg->conn.port = atoi(fdw_option_value(server->options, "port", "1433"));
	cfg->database = pstrdup(fdw_option_value(server->options, "database", ""));
	cfg->conn.database = cfg->database;
	cfg->timezone = pstrdup(fdw_option_value(server->options, "timezone", "UTC"));
	cfg->conn.tds_version = pstrdup(fdw_option_value(server->options, "tds_version", "7.4"));
	cfg->conn.auth = auth_of(fdw_option_value(server->options, "authentication", "sql"));
	cfg->conn.spn = pstrdup(fdw_option_value(server->options, "server_spn", ""));
	/*
	 * A file of PostgreSQL's temporary directory: shared by every process
	 * that logs in as the source (the pool moves sources between workers, a
	 * session checks a table), never in a base backup, removed at a restart;
	 * named by database too, since server OIDs are a database's own.
	 */
	cfg->conn.krb_cache = psprintf("FILE:%s/" COMPAT_TEMP_DIR "/" COMPAT_TEMP_PREFIX "_finalize_%u_%u.ccache",
								   DataDir, MyDatabaseId, server->serverid);
	cfg->conn.login_timeout = finalize_login_timeout;
	cfg->conn.query_timeout = finalize_query_timeout;
	cfg->tz = pg_tzset(cfg->timezone);
	problem = load_tls(server, cfg);
	MemoryContextSwitchTo(oldcxt);
	if (problem != NULL)
		return problem;

	if (!fdw_option_usecs(fdw_option_value(server->options, "capture_stall_threshold", "15 minutes"),
						  &cfg->stall_threshold) || cfg->stall_threshold <= 0)
		problem = psprintf("the capture_stall_threshold option of server \"%s\" is out of range; set it again "
						   "(ALTER SERVER %s OPTIONS (SET capture_stall_threshold '15 minutes'))",
						   server->servername, quote_identifier(server->servername));
	else if (!mssql_clock_tolerance(server->options, &cfg->clock_tolerance))
		problem = psprintf("the clock_tolerance option of server \"%s\" is out of range; set it again "
						   "(ALTER SERVER %s OPTIONS (SET clock_tolerance '%s'))",
						   server->servername, quote_identifier(server->servername), CLOCK_TOLERANCE_DEFAULT);
	else if (cfg->conn.host[0] == '\0')
		problem = psprintf("server \"%s\" has no host option", server->servername);
	else if (cfg->database[0] == '\0')
		problem = psprintf("server \"%s\" has no database option", server->servername);
	else if (cfg->tz == NULL)
		problem = psprintf("the timezone option \"%s\" of server \"%s\" is not a known time zone",
						   cfg->timezone, server->servername);
	return problem;
}

/*
 * What is wrong with the login of cfg for the server's authentication
 * option, or NULL: a SQL login needs a username without a domain, NTLM a
 * DOMAIN\\user and its password, Kerberos a principal and its keytab (and
 * neither username nor password, which it would not use).
 */
static char *
login_problem(ForeignServer *server, SourceConfig *cfg)
{
	const char *name = server->servername;
	bool		windows = strchr(cfg->conn.username, '\\') != NULL;

	if (cfg->conn.auth == MSSQL_AUTH_KERBEROS)
	{
		if (cfg->conn.principal[0] == '\0' || cfg->conn.keytab[0] == '\0')
			return psprintf("server \"%s\" logs in with Kerberos (authentication 'kerberos'), but its user mapping "
							"has no %s option; set principal and keytab (ALTER USER MAPPING FOR ... SERVER %s "
							"OPTIONS (ADD principal 'svc@REALM', ADD keytab '<base64 -w0 of the keytab>'))",
							name, cfg->conn.principal[0] == '\0' ? "principal" : "keytab", quote_identifier(name));
		if (cfg->conn.username[0] != '\0' || cfg->conn.password[0] != '\0')
			return psprintf("server \"%s\" logs in with Kerberos (authentication 'kerberos'), so its user mapping "
							"takes no username or password; drop them", name);
		cfg->conn.username = cfg->conn.principal;	/* for messages */
		return NULL;
	}
	if (cfg->conn.username[0] == '\0')
		return psprintf("the user mapping for server \"%s\" has no username option", name);
	if (cfg->conn.auth == MSSQL_AUTH_NTLM && !windows)
		return psprintf("server \"%s\" logs in with NTLM (authentication 'ntlm'), so its username must be a Windows "
						"login DOMAIN\\user, not \"%s\"", name, cfg->conn.username);
	if (cfg->conn.auth == MSSQL_AUTH_SQL && windows)
		return psprintf("the username \"%s\" of server \"%s\" is a Windows login: set the server's authentication "
						"to 'ntlm' (ALTER SERVER %s OPTIONS (ADD authentication 'ntlm')), or better 'kerberos' "
						"(docs/sql-server.md)", cfg->conn.username, name, quote_identifier(name));
	if (cfg->conn.auth == MSSQL_AUTH_NTLM && cfg->conn.password[0] == '\0')
		return psprintf("the user mapping for server \"%s\" has no password option", name);
	return NULL;
}

/*
 * The login into cfg (in cxt): the user mapping of the server's owner,
 * else PUBLIC's. Returns NULL, or what is missing.
 */
static char *
load_login(ForeignServer *server, MemoryContext cxt, SourceConfig *cfg)
{
	Oid			owner = server->owner;
	UserMapping *um;
	MemoryContext oldcxt;

	if (!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(owner),
							   ObjectIdGetDatum(server->serverid)) &&
		!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(InvalidOid),
							   ObjectIdGetDatum(server->serverid)))
		return psprintf("there is no user mapping for role \"%s\" (the owner of server \"%s\") or PUBLIC; "
						"create one with CREATE USER MAPPING FOR \"%s\" SERVER \"%s\" OPTIONS (username '...', password '...')",
						GetUserNameFromId(owner, false), server->servername,
						GetUserNameFromId(owner, false), server->servername);
	um = GetUserMapping(owner, server->serverid);
	oldcxt = MemoryContextSwitchTo(cxt);
	cfg->conn.username = pstrdup(fdw_option_value(um->options, "username", ""));
	cfg->conn.password = pstrdup(fdw_option_value(um->options, "password", ""));
	cfg->conn.principal = pstrdup(fdw_option_value(um->options, "principal", ""));
	cfg->conn.keytab = pstrdup(fdw_option_value(um->options, "keytab", ""));
	MemoryContextSwitchTo(oldcxt);
	return login_problem(server, cfg);
}

/*
 * How to reach a source, as its worker does: the server's options and the
 * login of its owner's user mapping, else PUBLIC's (in cxt, in a
 * transaction). Returns NULL, or what is missing.
 */
char *
ws_source_config(ForeignServer *server, MemoryContext cxt, SourceConfig *cfg)
{
	char	   *problem = load_options(server, cxt, cfg);

	return problem != NULL ? problem : load_login(server, cxt, cfg);
}

/* One row of _source_tables as a TrackedSource (strings in cxt). */
static void
decode_table(HeapTuple tup, TupleDesc desc, MemoryContext cxt, TrackedSource *ts)
{
	bool		isnull;
	char	   *offset;
	Datum		d;
	char	   *ack;
	char	   *start;

	ts->table_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	ts->table_name = db_text_copy(tup, desc, 2, cxt);
	ts->source_schema = db_text_copy(tup, desc, 3, cxt);
	ts->source_name = db_text_copy(tup, desc, 4, cxt);
	ts->capture_instance = db_text_copy(tup, desc, 5, cxt);
	ts->start_at_capture = DatumGetBool(SPI_getbinval(tup, desc, 6, &isnull));
	offset = SPI_getvalue(tup, desc, 7);
	ts->has_offset = offset != NULL && lsn_parse(offset, &ts->offset);
	ts->resuming = DatumGetBool(SPI_getbinval(tup, desc, 8, &isnull));
	ts->ddl_block = DatumGetBool(SPI_getbinval(tup, desc, 9, &isnull));
	ts->auto_resume = DatumGetBool(SPI_getbinval(tup, desc, 10, &isnull));
	d = SPI_getbinval(tup, desc, 11, &isnull);
	ts->offset_time = isnull ? 0 : DatumGetTimestampTz(d);
	ack = SPI_getvalue(tup, desc, 12);
	ts->has_schema_ack = ack != NULL && lsn_parse(ack, &ts->schema_ack);
	d = SPI_getbinval(tup, desc, 13, &isnull);
	ts->has_last_loss = !isnull;
	ts->last_loss = isnull ? 0 : DatumGetTimestampTz(d);
	ts->event_column = db_text_copy(tup, desc, 14, cxt);
	ts->event_zone = db_text_copy(tup, desc, 15, cxt);
	d = SPI_getbinval(tup, desc, 16, &isnull);
	if (!isnull)
		ts->granularity = *DatumGetIntervalP(d);
	ts->period_zone = db_text_copy(tup, desc, 17, cxt);
	d = SPI_getbinval(tup, desc, 19, &isnull);
	ts->has_source_until = !isnull && !TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(d));
	ts->source_until = ts->has_source_until ? DatumGetTimestampTz(d) : 0;
	start = SPI_getvalue(tup, desc, 18);
	if (start != NULL && strcmp(start, "max_lsn") != 0 && strcmp(start, "capture_start") != 0)
	{
		/* An LSN (the CHECK constraint says so); one that did not parse is never readable. */
		ts->has_start_lsn = true;
		if (!lsn_parse(start, &ts->start_lsn))
			memset(&ts->start_lsn, 0xFF, sizeof(ts->start_lsn));
	}
}

/*
 * The active tables of a source, with their offsets (in cxt). The rest of
 * each table's row is looked up by its key (LATERAL ... OFFSET 0): joined
 * with the function's rows, which the planner cannot count, it scanned and
 * sorted every tracked table and verdict of the database at every cycle.
 */
static void
load_tables(const char *server_name, MemoryContext cxt, TrackedSource **tables, int *ntables)
{
	Oid			argtype = TEXTOID;
	Datum		arg = CStringGetTextDatum(server_name);
	TrackedSource *ts;

	if (db_query("SELECT t.table_id, t.table_name, t.source_schema, t.source_name, t.capture_instance,"
				 "       t.start_at_capture, t.offset_lsn, t.resuming, t.ddl_block, t.auto_resume,"
				 "       t.offset_commit_time, t.schema_ack_lsn, t.last_loss,"
				 "       x.event_time_column, x.event_time_zone, x.granularity, x.period_zone, x.start_from,"
				 "       x.source_until"
				 "  FROM " FINALIZE_INTERNAL_SCHEMA ".source_tables($1) AS t"
				 " CROSS JOIN LATERAL (SELECT y.event_time_column, y.event_time_zone, y.granularity,"
				 "                            y.period_zone, y.start_from, w.source_until"
				 "                       FROM " FINALIZE_SCHEMA ".tracked_table AS y"
				 "                       JOIN " FINALIZE_SCHEMA ".watermark AS w ON w.table_id = y.table_id"
				 "                      WHERE y.table_id = t.table_id OFFSET 0) AS x"
				 " ORDER BY t.table_id",
				 1, &argtype, &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the tracked tables of server \"%s\"", server_name);
	if (SPI_processed == 0)
		return;
	ts = MemoryContextAllocZero(cxt, sizeof(TrackedSource) * SPI_processed);
	for (uint64 i = 0; i < SPI_processed; i++)
		decode_table(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, cxt, &ts[i]);
	*tables = ts;
	*ntables = (int) SPI_processed;
}

/* A condition that holds the source until a person releases it. */
static void
load_hold(const char *server_name, SourceConfig *cfg)
{
	Oid			argtype = TEXTOID;
	Datum		arg = CStringGetTextDatum(server_name);
	bool		isnull;
	char	   *held_by;

	if (db_query("SELECT h.held_by, h.held_since FROM " FINALIZE_INTERNAL_SCHEMA ".source_hold($1) AS h",
				 1, &argtype, &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the hold of server \"%s\"", server_name);
	if (SPI_processed == 0)
		return;
	held_by = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (held_by == NULL)
		return;
	/* An unknown hold (a newer version's) still holds: the cycle fails. */
	cfg->held_by = condition_from_name(held_by);
	if (cfg->held_by == COND_NONE)
		elog(ERROR, "server \"%s\" is held by unknown condition \"%s\"", server_name, held_by);
	cfg->held_since = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
														&isnull));
}

/*
 * NULL when the catalog is at this library's version; else why the worker
 * waits. Between `make install` plus a restart and ALTER EXTENSION UPDATE
 * the library runs against the older catalog, whose functions and
 * constraints it must not guess at: recording nothing only lets verdicts lag.
 */
static char *
check_catalog_version(void)
{
	char	   *version;

	if (db_query("SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize'",
				 0, NULL, NULL, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read the version of extension finalize");
	version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (strcmp(version, FINALIZE_VERSION) == 0)
		return NULL;
	return psprintf("extension finalize is at version %s in this database but the loaded library is version %s; "
					"nothing is recorded until they match: run ALTER EXTENSION finalize UPDATE as the extension's "
					"owner (or restart PostgreSQL if the library is the older one)", version, FINALIZE_VERSION);
}

/*
 * Reads a source's options, its login, its active tracked tables and the
 * consumers of those that reported progress, all copied into cxt, in one
 * transaction (so each consumer belongs to a table read with it). Returns
 * NULL, or a message saying what is missing (then the cycle cannot run).
 * *server_gone says the server itself was dropped.
 */
char *
ws_load_source(Oid serverid, MemoryContext cxt, SourceConfig *cfg,
			   TrackedSource **tables, int *ntables, SourceConsumer **consumers, int *nconsumers,
			   bool *server_gone)
{
	ForeignServer *server;
	char	   *problem;

	*server_gone = false;
	*ntables = 0;
	*tables = NULL;
	*nconsumers = 0;
	*consumers = NULL;
	memset(cfg, 0, sizeof(*cfg));
	db_begin("finalize: reading tracked tables");

	server = GetForeignServerExtended(serverid, FSV_MISSING_OK);
	if (server == NULL ||
		strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_mssql") != 0)
	{
		*server_gone = true;
		db_commit();
		return pstrdup("the foreign server no longer exists");
	}
	problem = check_catalog_version();
	if (problem != NULL)
	{
		problem = MemoryContextStrdup(cxt, problem);
		db_commit();
		return problem;
	}
	problem = ws_source_config(server, cxt, cfg);
	if (db_catalog_restoring() != NULL)
	{
		/* A restore under way: nothing is read, nothing recorded (the scheduler stops this worker). */
		db_commit();
		return NULL;
	}
	load_tables(server->servername, cxt, tables, ntables);
	ws_load_consumers(server->servername, cxt, consumers, nconsumers);
	load_hold(server->servername, cfg);
	if (problem != NULL)
		problem = MemoryContextStrdup(cxt, problem);
	db_commit();
	return problem;
}
