/*
 * table_probe.c
 *     What SQL Server says of a source table a login is to read through its
 *     capture instance, and the words for it.
 *
 * The worker needs a capture instance of the table that
 * sys.sp_cdc_help_change_data_capture lists for its login: that takes
 * SELECT on every captured column and membership in the instance's gating
 * role. When none is listed, SQL Server is asked why, in the order that
 * never mistakes one case for another: OBJECT_ID resolves the name only
 * for a login with some permission on the table (metadata visibility), so
 * a name it does not resolve is tried with SELECT TOP (0), which SQL Server
 * answers with Msg 208 (Invalid object name: there is no such table) or
 * Msg 229 (the SELECT permission was denied: it exists, and the login may
 * not read it); a table the login does see is looked up in sys.tables,
 * whose is_tracked_by_cdc says whether change data capture is enabled on
 * it (if it is, the login is missing from the gating role or a column
 * grant). finalize.track_table asks once, when it is called
 * (worker/source_check.c); the worker asks for a table whose instance it
 * cannot see, so that its condition says which of these it is.
 */
#include "postgres.h"

#include "utils/elog.h"

#include "mssql/cdc_reader.h"
#include "mssql/mssql_name.h"
#include "mssql/table_probe.h"
#include "mssql/tsql.h"

/* SQL Server's numbers for the answers that tell. */
#define MSG_INVALID_OBJECT 208
#define MSG_PERMISSION_DENIED 229
#define MSG_CANNOT_OPEN_DATABASE 4060
#define MSG_LOGIN_FAILED 18456
#define MSG_CDC_NOT_ENABLED_DB 22901

/*
 * Runs a one-statement batch: *rows counts its rows, *value (when given)
 * is the first column of the last row (-1 if it is no integer). False with
 * err set when the statement failed.
 */
static bool
run_probe(MssqlConn *conn, const char *sql, int *rows, int64 *value, MssqlError *err)
{
	MssqlError	step;
	int			r;

	*rows = 0;
	if (!mssql_execute(conn, sql, err) || err->set)
	{
		if (!mssql_is_dead(conn))
			mssql_cancel(conn);
		return false;
	}
	while ((r = mssql_next_result(conn, &step)) == 1 && !step.set)
	{
		while ((r = mssql_next_row(conn, &step)) == 1)
		{
			(*rows)++;
			if (value != NULL && !mssql_get_int64(conn, 1, value))
				*value = -1;
		}
		if (r < 0 || step.set)
			break;
	}
	if (r < 0 || step.set)
	{
		*err = step;
		if (!mssql_is_dead(conn))
			mssql_cancel(conn);
		return false;
	}
	return true;
}

/*
 * Why no capture instance of schema.name is listed for the login, given
 * the object id OBJECT_ID resolved for it (0: none).
 */
void
mssql_probe_unlisted(MssqlConn *conn, const char *schema, const char *name, int64 object_id, TableProbe *out)
{
	char	   *qualified = tsql_qualified_name(schema, name);
	int			rows;
	int64		tracked = -1;

	memset(out, 0, sizeof(*out));
	out->access = TABLE_UNKNOWN;
	if (object_id == 0 && !run_probe(conn, tsql_probe_select(qualified), &rows, NULL, &out->err))
	{
		if (out->err.from_server && out->err.number == MSG_INVALID_OBJECT)
			out->access = TABLE_MISSING;
		else if (out->err.from_server && out->err.number == MSG_PERMISSION_DENIED)
			out->access = TABLE_NO_SELECT;
		return;
	}
	memset(&out->err, 0, sizeof(out->err));
	if (!run_probe(conn, tsql_probe_tracked(qualified), &rows, &tracked, &out->err))
		return;
	out->access = rows == 1 && tracked == 1 ? TABLE_NOT_IN_ROLE : TABLE_NO_CDC;
}

/*
 * The whole question, on a fresh connection: the source's CDC state as the
 * worker reads it (the table's object id and the instances listed for the
 * login), then, when none of them captures the table, why.
 */
void
mssql_probe_table(MssqlConn *conn, const char *tds_version, const char *schema, const char *name,
				  TableProbe *out)
{
	const char *qualified = tsql_qualified_name(schema, name);
	int64		object_id = 0;
	CdcState	snap;
	MssqlError	err;

	memset(out, 0, sizeof(*out));
	memset(&err, 0, sizeof(err));
	out->access = TABLE_UNKNOWN;
	if (!cdc_read_state(conn, tds_version, &qualified, &object_id, 1, true, &snap, &err))
	{
		/* The help procedure fails (22901) where CDC is off in the database. */
		if (err.from_server && err.number == MSG_CDC_NOT_ENABLED_DB)
			out->access = TABLE_NO_CDC_DATABASE;
		out->err = err;
		if (!err.set && snap.problem != NULL)
		{
			out->err.set = true;
			strlcpy(out->err.message, snap.problem, sizeof(out->err.message));
		}
		return;
	}
	for (int i = 0; i < snap.ninstances; i++)
		if (object_id != 0 && snap.instances[i].source_object_id == object_id)
		{
			out->access = TABLE_READABLE;
			out->instance = snap.instances[i].name;
			return;
		}
	mssql_probe_unlisted(conn, schema, name, object_id, out);
}

/*
 * Whether a failed login is SQL Server's answer (the login may not open
 * the database, or it refused the credentials) rather than no answer (a
 * network failure, a timeout, TLS): then out says which.
 */
bool
table_probe_login(const MssqlError *err, TableProbe *out)
{
	memset(out, 0, sizeof(*out));
	out->err = *err;
	out->access = TABLE_UNKNOWN;
	if (!err->from_server || err->interrupted || err->timed_out)
		return false;
	if (err->number == MSG_CANNOT_OPEN_DATABASE)
		out->access = TABLE_NO_DATABASE;
	else if (err->number == MSG_LOGIN_FAILED)
		out->access = TABLE_LOGIN_REFUSED;
	return out->access != TABLE_UNKNOWN;
}

/* The message, detail, hint and SQLSTATE for a probe's answer. */
void
table_probe_text(const TableProbe *p, const char *schema, const char *name, const char *database,
				 const char *login, TableProbeText *t)
{
	const char *table = tsql_qualified_name(schema, name);
	const char *text = mssql_error_text(&p->err);
	size_t		len = strlen(text);
	/* SQL Server's own words usually end with a full stop: never two. */
	const char *said = psprintf("SQL Server answered: %s%s", text,
								len > 0 && text[len - 1] == '.' ? "" : ".");
	const char *user = mssql_quote_ident(login);

	switch (p->access)
	{
		case TABLE_MISSING:
			t->sqlstate = ERRCODE_FDW_TABLE_NOT_FOUND;
			t->message = psprintf("SQL Server table %s does not exist in database \"%s\"", table, database);
			t->detail = psprintf("%s The name is resolved in the database of the server, with its collation.", said);
			t->hint = pstrdup("Check source_table (schema.table): SELECT name FROM sys.tables in that database lists its tables.");
			break;
		case TABLE_NO_SELECT:
			t->sqlstate = ERRCODE_INSUFFICIENT_PRIVILEGE;
			t->message = psprintf("login \"%s\" may not read SQL Server table %s", login, table);
			t->detail = psprintf("%s Reading the table's changes takes SELECT on its captured columns and membership in its capture instance's gating role.", said);
			t->hint = psprintf("In database %s: GRANT SELECT ON %s TO %s; (the login's database user), and add it to the gating role.",
							   mssql_quote_ident(database), table, user);
			break;
		case TABLE_NO_CDC:
			t->sqlstate = ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
			t->message = psprintf("change data capture is not enabled on SQL Server table %s", table);
			t->detail = psprintf("sys.tables of database \"%s\" shows is_tracked_by_cdc = 0 for it (or it is not a table), so it has no capture instance to read.", database);
			t->hint = psprintf("A member of db_owner enables it: EXEC sys.sp_cdc_enable_table @source_schema = %s, @source_name = %s, @role_name = N'cdc_gate';",
							   mssql_quote_literal(schema), mssql_quote_literal(name));
			break;
		case TABLE_NO_CDC_DATABASE:
			t->sqlstate = ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
			t->message = psprintf("change data capture is not enabled on SQL Server database \"%s\"", database);
			t->detail = psprintf("%s sys.fn_cdc_get_max_lsn() is NULL there, so table %s has no capture instance to read.", said, table);
			t->hint = psprintf("A sysadmin runs EXEC sys.sp_cdc_enable_db; in database %s, then a member of db_owner EXEC sys.sp_cdc_enable_table @source_schema = %s, @source_name = %s, @role_name = N'cdc_gate';",
							   mssql_quote_ident(database), mssql_quote_literal(schema), mssql_quote_literal(name));
			break;
		case TABLE_NOT_IN_ROLE:
			t->sqlstate = ERRCODE_INSUFFICIENT_PRIVILEGE;
			t->message = psprintf("login \"%s\" may not read the capture instance of SQL Server table %s", login, table);
			t->detail = psprintf("Change data capture is enabled on it, but sys.sp_cdc_help_change_data_capture lists no instance of it for the login: reading one takes SELECT on every captured column and membership in the instance's gating role.");
			t->hint = psprintf("A member of db_owner finds the role (role_name of EXEC sys.sp_cdc_help_change_data_capture) and runs ALTER ROLE [<role>] ADD MEMBER %s; in database %s.",
							   user, mssql_quote_ident(database));
			break;
		case TABLE_NO_DATABASE:
			t->sqlstate = ERRCODE_INSUFFICIENT_PRIVILEGE;
			t->message = psprintf("login \"%s\" may not open SQL Server database \"%s\"", login, database);
			t->detail = psprintf("%s The login has no user in that database.", said);
			t->hint = psprintf("In database %s: CREATE USER %s FOR LOGIN %s; then grant it what docs/sql-server.md lists.",
							   mssql_quote_ident(database), user, user);
			break;
		case TABLE_LOGIN_REFUSED:
			t->sqlstate = ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION;
			t->message = psprintf("SQL Server refused the login \"%s\"", login);
			t->detail = psprintf("%s The worker logs in with the same user mapping.", said);
			t->hint = pstrdup("Check the username and password of the server's user mapping (ALTER USER MAPPING ... OPTIONS (SET password '...')).");
			break;
		case TABLE_READABLE:
		case TABLE_UNKNOWN:
			t->sqlstate = ERRCODE_FDW_ERROR;
			t->message = psprintf("could not tell whether login \"%s\" may read SQL Server table %s", login, table);
			t->detail = psprintf("%s", mssql_error_text(&p->err));
			t->hint = NULL;
			break;
	}
}
