/*
 * mssql.h
 *     The one interface to SQL Server (FreeTDS DB-Library).
 */
#ifndef FINALIZE_MSSQL_H
#define FINALIZE_MSSQL_H

#include "datatype/timestamp.h"

#include "core/lsn.h"

/* What went wrong, in SQL Server's words when it said something. */
typedef struct MssqlError
{
	bool		set;
	bool		from_server;	/* SQL Server sent the message */
	bool		timed_out;		/* the query or login timed out */
	bool		interrupted;	/* a PostgreSQL interrupt cancelled the wait */
	bool		tls_failed;		/* the login failed in TLS (verification, negotiation) */
	bool		local_failed;	/* nothing was sent: this machine could not prepare the login */
	bool		kerberos_failed;	/* no Kerberos ticket for the login (the library's words) */
	int			number;			/* SQL Server's error number, or DB-Library's (20xxx) */
	int			severity;
	int			state;
	char		message[1024];
} MssqlError;

/* How a source logs in (the server's authentication option). */
typedef enum MssqlAuth
{
	MSSQL_AUTH_SQL,				/* a SQL Server login and its password */
	MSSQL_AUTH_KERBEROS,		/* a Windows account's keytab: Kerberos through GSSAPI */
	MSSQL_AUTH_NTLM				/* DOMAIN\user and its password: NTLMv2 */
} MssqlAuth;

/* How to reach a source: foreign server options and the user mapping. */
typedef struct MssqlConnInfo
{
	MssqlAuth	auth;
	const char *host;
	int			port;
	const char *database;
	const char *username;
	const char *password;
	const char *tds_version;	/* "7.1" .. "7.4" */
	int			login_timeout;	/* seconds */
	int			query_timeout;	/* seconds */
	const char *encrypt;		/* "off", "request" or "require" */
	const char *ca_file;		/* NULL: verify nothing; "system": the system's CAs */
	const char *conf_path;		/* the connection's private FreeTDS configuration */
	const char *log_path;		/* FreeTDS's log of the connection's errors */
	const char *section;		/* the configuration's section: finalize-<oid>.invalid */
	/* Kerberos only (kerberos.c) */
	const char *principal;		/* the service account, user@REALM */
	const char *keytab;			/* its keytab, base64 (a secret) */
	const char *spn;			/* SQL Server's service principal, with or without @REALM */
	const char *krb_cache;		/* the source's own credential cache (MEMORY:...) */
	const char *keytab_path;	/* where the keytab is written while a ticket is asked for */
} MssqlConnInfo;

typedef struct MssqlConn MssqlConn;

extern MssqlConn *mssql_connect(const MssqlConnInfo *info, TimestampTz *ticket_expires, MssqlError *err);
extern void mssql_close(MssqlConn *conn);
extern bool mssql_is_dead(MssqlConn *conn);
extern bool mssql_execute(MssqlConn *conn, const char *sql, MssqlError *err);
extern int	mssql_next_result(MssqlConn *conn, MssqlError *err);
extern void mssql_cancel(MssqlConn *conn);
extern bool mssql_run(MssqlConn *conn, const char *sql, MssqlError *err);
extern int	mssql_next_row(MssqlConn *conn, MssqlError *err);
extern int	mssql_num_columns(MssqlConn *conn);
extern const char *mssql_column_type_name(MssqlConn *conn, int col);
extern bool mssql_get_lsn(MssqlConn *conn, int col, Lsn *out);
extern bool mssql_get_int64(MssqlConn *conn, int col, int64 *out);
extern bool mssql_get_local_time(MssqlConn *conn, int col, Timestamp *out);
extern char *mssql_get_text(MssqlConn *conn, int col);
extern const char *mssql_error_text(const MssqlError *err);
extern void mssql_error_set(MssqlError *err, const char *text);
extern void mssql_error_fail(MssqlError *err, const char *text);

#endif							/* FINALIZE_MSSQL_H */
