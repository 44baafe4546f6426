/*
 * table_probe.h
 *     What SQL Server says of a source table a login is to read through its
 *     capture instance: whether it exists, has change data capture and may
 *     be read, with SQL Server's own words and what to do.
 */
#ifndef FINALIZE_TABLE_PROBE_H
#define FINALIZE_TABLE_PROBE_H

#include "mssql/mssql.h"

/* The answer, from the best case to the one that says nothing. */
typedef enum TableAccess
{
	TABLE_READABLE,				/* a capture instance of it is listed for the login */
	TABLE_MISSING,				/* no such table (Msg 208) */
	TABLE_NO_SELECT,			/* it exists, the login has no permission on it (Msg 229) */
	TABLE_NO_CDC,				/* the login sees it; change data capture is not enabled on it */
	TABLE_NO_CDC_DATABASE,		/* change data capture is not enabled on the database */
	TABLE_NOT_IN_ROLE,			/* CDC is on, but no instance of it is listed for the login */
	TABLE_NO_DATABASE,			/* the login has no user in the database (Msg 4060) */
	TABLE_LOGIN_REFUSED,		/* SQL Server refused the login (Msg 18456) */
	TABLE_UNKNOWN				/* no answer that tells: err says why */
} TableAccess;

typedef struct TableProbe
{
	TableAccess access;
	MssqlError	err;			/* SQL Server's words, or why it could not tell */
	const char *instance;		/* TABLE_READABLE: the capture instance listed */
} TableProbe;

/* What to tell a user about a probe's answer (not TABLE_READABLE). */
typedef struct TableProbeText
{
	int			sqlstate;
	char	   *message;		/* lower case, no period: an errmsg */
	char	   *detail;			/* full sentences */
	char	   *hint;
} TableProbeText;

extern void mssql_probe_table(MssqlConn *conn, const char *tds_version, const char *schema, const char *name,
							  TableProbe *out);
extern void mssql_probe_unlisted(MssqlConn *conn, const char *schema, const char *name, int64 object_id,
								 TableProbe *out);
extern bool table_probe_login(const MssqlError *err, TableProbe *out);
extern void table_probe_text(const TableProbe *p, const char *schema, const char *name, const char *database,
							 const char *login, TableProbeText *text);

#endif							/* FINALIZE_TABLE_PROBE_H */
