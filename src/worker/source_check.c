/*
 * source_check.c
 *     The check finalize.track_table and finalize.add_shard make of the SQL
 *     Server table when they are called: does it exist, is change data
 *     capture enabled on it, may the worker's login read it
 *     (mssql/table_probe.c). Each answer is its own error with its own
 *     hint; a source that cannot be reached (or gives no answer that tells)
 *     only gets a NOTICE: the table is tracked, and the worker retries.
 *
 * The check logs in exactly as the worker will: the server's options and
 * the user mapping of its owner, else PUBLIC's (ws_source_config), with
 * the same encryption and certificate checks. It runs in the caller's
 * backend, in the call's own transaction, before the table's row is
 * written and before any of finalize's locks is taken, within
 * finalize.source_check_timeout (5 s) for the login and every query
 * together (one deadline: a wait still going then ends within a second);
 * a cancel or statement_timeout ends it at once. Its private FreeTDS
 * configuration and log are this backend's, removed afterwards, so that
 * a worker reading the server's own configuration never sees it rewritten.
 */
#include "postgres.h"

#include <unistd.h>

#include "fmgr.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "core/io_interrupts.h"
#include "core/settings.h"
#include "mssql/table_probe.h"
#include "mssql/tsql.h"
#include "worker/source_config.h"

PG_FUNCTION_INFO_V1(finalize_check_source_table);

/* Raises the error a definitive answer calls for. */
static void
refuse(const TableProbe *probe, const char *schema, const char *name, const SourceConfig *cfg)
{
	TableProbeText t;

	table_probe_text(probe, schema, name, cfg->database, cfg->conn.username, &t);
	ereport(ERROR,
			(errcode(t.sqlstate),
			 errmsg("%s", t.message),
			 errdetail("%s", t.detail),
			 t.hint ? errhint("%s", t.hint) : 0));
}

/* Says that the table could not be checked, and that it is tracked all the same. */
static void
not_checked(const char *schema, const char *name, const SourceConfig *cfg, const char *why)
{
	ereport(NOTICE,
			(errmsg("SQL Server table %s of server \"%s\" could not be checked; it is tracked all the same",
					tsql_qualified_name(schema, name), cfg->server_name),
			 errdetail("%s", why),
			 errhint("The worker connects on its own and retries; finalize.status shows what it finds.")));
}

/* The connection and the files one check uses. */
typedef struct SourceCheck
{
	SourceConfig cfg;
	MssqlConn  *conn;
	const char *schema;
	const char *name;
} SourceCheck;

/* Logs in and asks; raises or notices what it learnt. */
static void
check_table(SourceCheck *sc)
{
	MssqlError	err;
	TableProbe	probe;
	TimestampTz ticket_expires;

	sc->conn = mssql_connect(&sc->cfg.conn, &ticket_expires, &err);
	io_interrupts_rethrow();
	if (sc->conn == NULL)
	{
		if (table_probe_login(&err, &probe))
			refuse(&probe, sc->schema, sc->name, &sc->cfg);
		not_checked(sc->schema, sc->name, &sc->cfg,
					psprintf("Could not log in to SQL Server %s:%d, database \"%s\", as \"%s\": %s.",
							 sc->cfg.conn.host, sc->cfg.conn.port, sc->cfg.database, sc->cfg.conn.username,
							 mssql_error_text(&err)));
		return;
	}
	mssql_probe_table(sc->conn, sc->cfg.conn.tds_version, sc->schema, sc->name, &probe);
	io_interrupts_rethrow();
	if (probe.access == TABLE_READABLE)
		return;
	if (probe.access != TABLE_UNKNOWN)
		refuse(&probe, sc->schema, sc->name, &sc->cfg);
	not_checked(sc->schema, sc->name, &sc->cfg,
				psprintf("Asking SQL Server about it failed: %s%s.", mssql_error_text(&probe.err),
						 probe.err.timed_out ? psprintf(" (the check answers within finalize.source_check_timeout, %d s, in all)",
														finalize_source_check_timeout) : ""));
}

/*
 * finalize_internal.check_source_table(server oid, source_schema text, source_name
 * text): checks schema.name on the server as its worker would read it;
 * returns nothing when the worker can read it, raises when SQL Server says
 * why not, notices when it could not tell. With
 * finalize.source_check_timeout = 0 it checks nothing.
 */
Datum
finalize_check_source_table(PG_FUNCTION_ARGS)
{
	SourceCheck *sc;
	ForeignServer *server;
	char	   *problem;

	if (finalize_source_check_timeout == 0)
		PG_RETURN_VOID();
	sc = palloc0(sizeof(SourceCheck));
	server = GetForeignServer(PG_GETARG_OID(0));
	sc->schema = text_to_cstring(PG_GETARG_TEXT_PP(1));
	sc->name = text_to_cstring(PG_GETARG_TEXT_PP(2));
	problem = ws_source_config(server, CurrentMemoryContext, &sc->cfg);
	sc->cfg.server_name = server->servername;
	if (problem != NULL)
	{
		not_checked(sc->schema, sc->name, &sc->cfg, psprintf("The worker cannot connect yet: %s.", problem));
		PG_RETURN_VOID();
	}
	sc->cfg.conn.login_timeout = Min(sc->cfg.conn.login_timeout, finalize_source_check_timeout);
	sc->cfg.conn.query_timeout = Min(sc->cfg.conn.query_timeout, finalize_source_check_timeout);
	sc->cfg.conn.conf_path = psprintf("%s/pg_finalize/tds/check-%d.conf", DataDir, MyProcPid);
	sc->cfg.conn.log_path = psprintf("%s/pg_finalize/tds/check-%d.log", DataDir, MyProcPid);
	/* One deadline for the login and every question, however many. */
	io_set_deadline(finalize_source_check_timeout * 1000L);
	PG_TRY();
	{
		check_table(sc);
	}
	PG_FINALLY();
	{
		io_set_deadline(0);
		mssql_close(sc->conn);
		(void) unlink(sc->cfg.conn.conf_path);
		(void) unlink(sc->cfg.conn.log_path);
	}
	PG_END_TRY();
	PG_RETURN_VOID();
}
