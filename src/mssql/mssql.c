/*
 * mssql.c
 *     The one interface to SQL Server: every DB-Library call of the extension
 *     is in this file (what a login needs besides DB-Library is login.c's).
 *
 * DB-Library reports problems through two process-global callbacks. They must
 * never longjmp (ereport) out of FreeTDS, so they only copy the first error
 * into the MssqlError of the call in progress and ask DB-Library to cancel;
 * the calling function returns false and the worker raises or records one
 * clear message that carries SQL Server's own number and text.
 *
 * Waits are interruptible: DB-Library polls the interrupt callbacks once a
 * second while it waits, and a cancel or a termination makes it give up and
 * drop the connection (other interrupts are served and the wait goes on, see
 * io_interrupts.c). A query timeout does the same, since a server that
 * stalls may never acknowledge an attention either; the next cycle
 * reconnects. A login has no such callbacks: login.c watches it.
 */
#include "postgres.h"

#include <poll.h>
#include <sys/socket.h>

#include "miscadmin.h"
#include "utils/datetime.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* MSDBLIB (set by the Makefile) gives Microsoft semantics: no exit(). */
#include <sybfront.h>
#include <sybdb.h>

#include "core/io_interrupts.h"
#include "core/wait_events.h"
#include "mssql/login.h"
#include "mssql/mssql.h"
#include "mssql/tsql.h"

struct MssqlConn
{
	DBPROCESS  *dbproc;
	bool		pending;		/* results of a batch not yet drained */
	int			query_timeout;
};

static bool dblib_ready = false;

/* Where the callbacks record the error of the call in progress. */
static MssqlError *current_error = NULL;

/*
 * Starts recording errors of a new call into err; pg_stat_activity shows
 * the wait until end_call. The wait's id is looked up first (the first
 * lookup takes a lock), before anything points at err.
 */
static void
begin_call(MssqlError *err, FinalizeWait wait)
{
	uint32		event = finalize_wait_event(wait);

	memset(err, 0, sizeof(*err));
	current_error = err;
	finalize_wait_begin(event);
}

/* Ends the call: errors are no longer recorded, the wait is over. */
static void
end_call(void)
{
	current_error = NULL;
	finalize_wait_end();
}

/*
 * DB-Library error callback. Keeps SQL Server's message when there is one
 * (SYBESMSG only says "check messages from the SQL Server"), and always
 * answers INT_CANCEL: with MSDBLIB that never exits the process, and for a
 * timeout it makes FreeTDS close the connection instead of waiting on a
 * server that does not answer.
 */
static int
on_dblib_error(DBPROCESS *dbproc pg_attribute_unused(), int severity, int dberr, int oserr,
			   char *dberrstr, char *oserrstr)
{
	MssqlError *err = current_error;

	if (err == NULL)
		return INT_CANCEL;
	if (dberr == SYBETIME)
	{
		err->interrupted = io_stop_requested();
		err->timed_out = !err->interrupted;
	}
	if (dberr == SYBESMSG && err->set)
		return INT_CANCEL;
	if (!err->set || (!err->from_server && dberr == SYBETIME))
	{
		err->set = true;
		err->from_server = false;
		err->number = dberr;
		err->severity = severity;
		if (dberr == SYBETIME && err->interrupted)
			mssql_error_set(err, "the wait for SQL Server was interrupted");
		else if (oserrstr != NULL && oserr != 0 && oserr != -1)
			snprintf(err->message, sizeof(err->message), "%s (%s)",
					 dberrstr ? dberrstr : "", oserrstr);
		else
			mssql_error_set(err, dberrstr);
	}
	return INT_CANCEL;
}

/*
 * DB-Library message callback: SQL Server's own messages. Informational
 * ones (severity 10 and below, such as 5701 "Changed database context") are
 * ignored; the first error of a call is kept.
 */
static int
on_server_message(DBPROCESS *dbproc pg_attribute_unused(), DBINT msgno, int msgstate, int severity,
				  char *msgtext, char *srvname pg_attribute_unused(), char *procname pg_attribute_unused(), int line pg_attribute_unused())
{
	MssqlError *err = current_error;

	if (err == NULL || severity <= 10 || (err->set && err->from_server))
		return 0;
	err->set = true;
	err->from_server = true;
	err->number = msgno;
	err->severity = severity;
	err->state = msgstate;
	mssql_error_set(err, msgtext);
	return 0;
}

/*
 * Interrupt check DB-Library calls once a second while it waits: true ends
 * the wait (a cancel or a termination; or the caller's deadline passed,
 * which DB-Library then reports as a timeout); other interrupts are served
 * here.
 */
static int
check_interrupt(void *dbproc pg_attribute_unused())
{
	return io_must_stop() || io_deadline_passed() ? TRUE : FALSE;
}

/* What DB-Library does about a pending interrupt: stop waiting. */
static int
handle_interrupt(void *dbproc pg_attribute_unused())
{
	return INT_CANCEL;
}

/*
 * Initializes DB-Library once per process (dbinit resets the handlers).
 * FreeTDS lets environment variables override any configuration, the host
 * whose name the certificate must carry included (TDSHOST), and TDSDUMP logs
 * every packet: none of them may reach a source's connection.
 */
static void
ensure_dblib(void)
{
	static const char *const overrides[] = {"TDSHOST", "TDSPORT", "TDSVER", "TDSDUMP", "TDSDUMPCONFIG"};

	if (dblib_ready)
		return;
	for (size_t i = 0; i < lengthof(overrides); i++)
		unsetenv(overrides[i]);
	if (dbinit() == FAIL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not initialize FreeTDS DB-Library")));
	dberrhandle(on_dblib_error);
	dbmsghandle(on_server_message);
	dblib_ready = true;
}

/* DB-Library's constant for a TDS version name the validator accepted. */
static BYTE
tds_version_code(const char *name)
{
	return name == NULL ? DBVERSION_74 : strcmp(name, "7.1") == 0 ? DBVERSION_71 :
		strcmp(name, "7.2") == 0 ? DBVERSION_72 : strcmp(name, "7.3") == 0 ? DBVERSION_73 : DBVERSION_74;
}

/*
 * Whether SQL Server's first reply after the login arrives inside TLS: a
 * TLS record (application data, 0x17, version 3.x) where a plaintext TDS
 * reply would start with its packet type. FreeTDS 1.3 accepts a server
 * that answers ENCRYPT_OFF to encrypt 'require' and encrypts the login only:
 * a machine in the middle that rewrites the PRELOGIN would then read and
 * change every LSN and commit time. A plaintext reply must start with a TDS
 * header FreeTDS can parse, which 0x17 is not, so the check cannot be
 * fooled that way. Sends a trivial batch and peeks at the reply's first
 * bytes before DB-Library reads them; the batch's results are drained.
 */
static bool
replies_encrypted(MssqlConn *conn, MssqlError *err)
{
	struct pollfd p;
	unsigned char head[3];
	ssize_t		n = 0;
	MssqlError	step;
	int			r;

	io_interrupts_begin();
	begin_call(err, FINALIZE_WAIT_SQLSERVER_READ);
	if (dbcmd(conn->dbproc, "SELECT 1") == FAIL || dbsqlsend(conn->dbproc) == FAIL)
	{
		end_call();
		mssql_error_fail(err, "the connection to SQL Server was lost");
		return false;
	}
	conn->pending = true;
	p.fd = dbiordesc(conn->dbproc);
	p.events = POLLIN;
	p.revents = 0;
	if (poll(&p, 1, (int) io_bounded_ms(conn->query_timeout * 1000L)) == 1)
		n = recv(p.fd, head, sizeof(head), MSG_PEEK);
	if (dbsqlok(conn->dbproc) == FAIL)
	{
		end_call();
		mssql_error_fail(err, "SQL Server refused the batch");
		return false;
	}
	end_call();
	while ((r = mssql_next_result(conn, &step)) > 0)
		while (mssql_next_row(conn, &step) == 1)
			;
	if (n == (ssize_t) sizeof(head) && head[0] == 0x17 && head[1] == 0x03 && head[2] >= 0x01 && head[2] <= 0x04)
		return true;
	err->set = true;
	err->tls_failed = true;
	err->number = 0;
	snprintf(err->message, sizeof(err->message),
			 "TLS: SQL Server's replies after the login are not encrypted, although encrypt is 'require': the "
			 "server encrypted only the login (it answered ENCRYPT_OFF; a machine in the middle may have rewritten "
			 "the negotiation); the connection is closed. Turn Force Encryption on in SQL Server");
	return false;
}

/*
 * A login record for the source's authentication, as application
 * "finalize", UTF-8, the given TDS version and database; NULL with err set
 * when none could be allocated. Sets DB-Library's login and query timeouts.
 */
static LOGINREC *
new_login(const MssqlConnInfo *info, MssqlError *err)
{
	LOGINREC   *login;

	dbsetlogintime((int) ((io_bounded_ms(info->login_timeout * 1000L) + 999) / 1000));
	dbsettime(info->query_timeout);

	login = dblogin();
	if (login == NULL)
	{
		err->set = true;
		mssql_error_set(err, "could not allocate a DB-Library login record");
		return NULL;
	}
	if (info->auth == MSSQL_AUTH_KERBEROS)
	{
		/* no user name: FreeTDS logs in with GSSAPI, for this SPN, mutually */
		DBSETLNETWORKAUTH(login, TRUE);
		DBSETLMUTUALAUTH(login, TRUE);
		DBSETLSERVERPRINCIPAL(login, info->spn);
	}
	else
	{
		/* a SQL login; or DOMAIN\user, which FreeTDS logs in with NTLM (v2 only) */
		DBSETLUSER(login, info->username);
		DBSETLPWD(login, info->password);
		DBSETLNTLMV2(login, TRUE);
	}
	DBSETLAPP(login, "finalize");
	DBSETLCHARSET(login, "UTF-8");
	DBSETLDBNAME(login, info->database);
	DBSETLVERSION(login, tds_version_code(info->tds_version));
	return login;
}

/*
 * Opens the connection with a login record, through the connection's
 * private FreeTDS configuration, under login.c's watch; frees the record.
 * NULL when the login failed (the callbacks recorded why).
 */
static DBPROCESS *
open_login(const MssqlConnInfo *info, LOGINREC *login)
{
	DBPROCESS  *dbproc;
	char		no_file[1] = "";

	login_watch_start(info);
	dbsetifile(unconstify(char *, info->conf_path));
	dbproc = (ProcDiePending || QueryCancelPending) ? NULL : dbopen(login, info->section);
	dbsetifile(no_file);
	login_watch_stop(info);
	dbloginfree(login);
	return dbproc;
}

/*
 * Logs in to SQL Server (SQL, Kerberos or NTLM authentication), as
 * application "finalize", UTF-8, the given TDS version and database,
 * through the connection's private FreeTDS configuration; *ticket_expires
 * is when a Kerberos login's ticket ends (else 0). NULL on failure, with
 * err set (no secret ever appears in it).
 */
MssqlConn *
mssql_connect(const MssqlConnInfo *info, TimestampTz *ticket_expires, MssqlError *err)
{
	LOGINREC   *login;
	DBPROCESS  *dbproc;
	MssqlConn  *conn;
	MssqlConnInfo with;

	if (!login_tickets(info, &with, ticket_expires, err))
		return NULL;
	info = &with;
	ensure_dblib();
	io_interrupts_begin();
	begin_call(err, FINALIZE_WAIT_SQLSERVER_LOGIN);
	if (!login_write_conf(info, err) || (login = new_login(info, err)) == NULL)
	{
		end_call();
		return NULL;
	}
	dbproc = open_login(info, login);
	end_call();
	if (dbproc == NULL)
	{
		/* DB-Library's 20002: what went wrong in TLS may be in FreeTDS's log. */
		login_failed(info, err, !err->from_server && err->number == SYBEFCON);
		return NULL;
	}
	dbsetinterrupt(dbproc, check_interrupt, handle_interrupt);

	conn = MemoryContextAllocZero(TopMemoryContext, sizeof(MssqlConn));
	conn->dbproc = dbproc;
	conn->query_timeout = info->query_timeout;
	if ((strcmp(info->encrypt, "require") == 0 && !replies_encrypted(conn, err)) ||
		!mssql_run(conn, tsql_session_setup(), err))
	{
		mssql_close(conn);
		return NULL;
	}
	return conn;
}

/* Closes a connection (also a dead one) and frees it. */
void
mssql_close(MssqlConn *conn)
{
	if (conn == NULL)
		return;
	if (conn->dbproc != NULL)
		dbclose(conn->dbproc);
	pfree(conn);
}

/* True when the connection can no longer be used (reset, EOF, timeout). */
bool
mssql_is_dead(MssqlConn *conn)
{
	return conn == NULL || conn->dbproc == NULL || dbdead(conn->dbproc);
}

/*
 * Sends a T-SQL batch and waits for the server to start answering. The
 * caller then walks the results with mssql_next_result/mssql_next_row.
 */
bool
mssql_execute(MssqlConn *conn, const char *sql, MssqlError *err)
{
	RETCODE		rc;

	io_interrupts_begin();
	begin_call(err, FINALIZE_WAIT_SQLSERVER_READ);
	if (conn->pending)
	{
		dbcancel(conn->dbproc);
		conn->pending = false;
	}
	/* No batch starts after the caller's deadline (a wait's end is checked once a second). */
	err->timed_out = io_deadline_passed();
	rc = err->timed_out ? FAIL : dbcmd(conn->dbproc, sql);
	/* From here on results may be pending, even if the batch fails. */
	conn->pending = true;
	if (rc != FAIL)
		rc = dbsqlexec(conn->dbproc);
	end_call();
	if (rc == FAIL)
	{
		mssql_error_fail(err, err->timed_out ? "the time given for the call ran out before the batch was sent"
						: dbdead(conn->dbproc) ? "the connection to SQL Server was lost"
						: "SQL Server refused the batch");
		return false;
	}
	return true;
}

/*
 * Moves to the next result of the batch: 1 there is one (its rows follow),
 * 0 the batch is done, -1 error (err set; the statement failed on the
 * server, or the connection broke).
 */
int
mssql_next_result(MssqlConn *conn, MssqlError *err)
{
	RETCODE		rc;

	begin_call(err, FINALIZE_WAIT_SQLSERVER_READ);
	rc = dbresults(conn->dbproc);
	end_call();
	if (rc == NO_MORE_RESULTS)
	{
		conn->pending = false;
		return 0;
	}
	if (rc == SUCCEED)
		return 1;
	mssql_error_fail(err, dbdead(conn->dbproc) ? "the connection to SQL Server was lost"
					: "a statement of the batch failed");
	return -1;
}

/*
 * Runs a batch that returns no rows the caller needs and drains its
 * results; false with err set when a statement failed.
 */
bool
mssql_run(MssqlConn *conn, const char *sql, MssqlError *err)
{
	MssqlError	step;
	int			r;

	if (!mssql_execute(conn, sql, err))
		return false;
	while ((r = mssql_next_result(conn, &step)) != 0)
	{
		if (r < 0)
		{
			*err = step;
			if (!mssql_is_dead(conn))
				mssql_cancel(conn);
			return false;
		}
		while ((r = mssql_next_row(conn, &step)) == 1)
			;
		if (r < 0 || step.set)
		{
			*err = step;
			return false;
		}
	}
	if (step.set)
		*err = step;
	return !err->set;
}

/* Abandons the results of the batch in progress. */
void
mssql_cancel(MssqlConn *conn)
{
	if (conn->dbproc != NULL && conn->pending)
		dbcancel(conn->dbproc);
	conn->pending = false;
}

/* Fetches the next row of the current result: 1 row, 0 no more, -1 error. */
int
mssql_next_row(MssqlConn *conn, MssqlError *err)
{
	STATUS		st;

	begin_call(err, FINALIZE_WAIT_SQLSERVER_READ);
	st = dbnextrow(conn->dbproc);
	end_call();
	if (st == NO_MORE_ROWS)
		return 0;
	if (st == REG_ROW)
		return 1;
	mssql_error_fail(err, dbdead(conn->dbproc) ? "the connection to SQL Server was lost while reading rows"
					: "SQL Server sent a row that could not be read");
	return -1;
}

/* Number of columns of the current result. */
int
mssql_num_columns(MssqlConn *conn)
{
	return dbnumcols(conn->dbproc);
}

/* SQL Server's name of a result column's type as it arrived, for messages. */
const char *
mssql_column_type_name(MssqlConn *conn, int col)
{
	const char *name = dbprtype(dbcoltype(conn->dbproc, col));

	return name != NULL && name[0] != '\0' ? name : "unknown";
}

/* Reads a binary(10) LSN; false for NULL (or a value of another size). */
bool
mssql_get_lsn(MssqlConn *conn, int col, Lsn *out)
{
	BYTE	   *data = dbdata(conn->dbproc, col);

	if (data == NULL || dbdatlen(conn->dbproc, col) != LSN_BYTES)
		return false;
	memcpy(out->b, data, LSN_BYTES);
	return true;
}

/* Reads an integer column of any width; false for NULL. */
bool
mssql_get_int64(MssqlConn *conn, int col, int64 *out)
{
	BYTE	   *data = dbdata(conn->dbproc, col);

	if (data == NULL)
		return false;
	switch (dbcoltype(conn->dbproc, col))
	{
		case SYBINT1:
			*out = *(DBTINYINT *) data;
			return true;
		case SYBINT2:
			*out = *(DBSMALLINT *) data;
			return true;
		case SYBINT4:
			*out = *(DBINT *) data;
			return true;
		case SYBINT8:
			*out = *(DBBIGINT *) data;
			return true;
		case SYBBIT:
			*out = *(DBBIT *) data;
			return true;
		default:
			return false;
	}
}

/*
 * Reads a datetime, smalldatetime or datetime2 as a PostgreSQL timestamp
 * without time zone (SQL Server's local clock). datetime is read from its
 * raw ticks (1/300 s), rounded down to the microsecond, so the value never
 * moves later than SQL Server's.
 */
bool
mssql_get_local_time(MssqlConn *conn, int col, Timestamp *out)
{
	BYTE	   *data = dbdata(conn->dbproc, col);
	int			type = dbcoltype(conn->dbproc, col);

	if (data == NULL)
		return false;
	if (type == SYBDATETIME)
	{
		DBDATETIME dt;
		int64		days_since_pg_epoch;

		memcpy(&dt, data, sizeof(dt));
		/* dtdays counts from 1900-01-01, dttime in 1/300 s since midnight */
		days_since_pg_epoch = (int64) dt.dtdays + date2j(1900, 1, 1) - POSTGRES_EPOCH_JDATE;
		*out = days_since_pg_epoch * USECS_PER_DAY + ((int64) dt.dttime * 10000) / 3;
		return true;
	}
	if (type == SYBDATETIME4 || type == SYBMSDATETIME2 || type == SYBMSDATE)
	{
		DBDATEREC2	rec;
		struct pg_tm tm;

		if (dbanydatecrack(conn->dbproc, &rec, type, data) == FAIL)
			return false;
		memset(&tm, 0, sizeof(tm));
		tm.tm_year = rec.year;
		tm.tm_mon = rec.month;
		tm.tm_mday = rec.day;
		tm.tm_hour = rec.hour;
		tm.tm_min = rec.minute;
		tm.tm_sec = rec.second;
		return tm2timestamp(&tm, rec.nanosecond / 1000, NULL, out) == 0;
	}
	return false;
}

/* Reads a character column as a palloc'd UTF-8 string; NULL for NULL. */
char *
mssql_get_text(MssqlConn *conn, int col)
{
	BYTE	   *data = dbdata(conn->dbproc, col);

	return data == NULL ? NULL : pnstrdup((const char *) data, dbdatlen(conn->dbproc, col));
}
