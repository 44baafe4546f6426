/*
 * mssql.c
 *     The one interface to SQL Server: every DB-Library call of the extension
 *     is in this file.
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
 * reconnects. A login cannot take those callbacks (they belong to a
 * connection, which does not exist before the login ends), so a timer
 * watches for a cancel or a termination during a login and shuts the
 * login's socket down (login_watch).
 *
 * Every connection reads its own FreeTDS configuration (tds_conf.c): the
 * encryption it requires and the CA that must have signed the server's
 * certificate, never the machine's freetds.conf. A failed TLS handshake is
 * explained from FreeTDS's log of it, since DB-Library only says
 * "Adaptive Server connection failed".
 */
#include "postgres.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "miscadmin.h"
#include "utils/datetime.h"
#include "utils/memutils.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

/* MSDBLIB (set by the Makefile) gives Microsoft semantics: no exit(). */
#include <sybfront.h>
#include <sybdb.h>

#include "common/io_interrupts.h"
#include "mssql/mssql.h"
#include "mssql/tds_conf.h"
#include "mssql/tls_reason.h"
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

/* Starts recording errors of a new call into err. */
static void
begin_call(MssqlError *err)
{
	memset(err, 0, sizeof(*err));
	current_error = err;
}

/* Copies a message into an error, truncating safely. */
static void
set_message(MssqlError *err, const char *text)
{
	strlcpy(err->message, text ? text : "", sizeof(err->message));
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
			set_message(err, "the wait for SQL Server was interrupted");
		else if (oserrstr != NULL && oserr != 0 && oserr != -1)
			snprintf(err->message, sizeof(err->message), "%s (%s)",
					 dberrstr ? dberrstr : "", oserrstr);
		else
			set_message(err, dberrstr);
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
	set_message(err, msgtext);
	return 0;
}

/*
 * Interrupt check DB-Library calls once a second while it waits: true ends
 * the wait (a cancel or a termination); other interrupts are served here.
 */
static int
check_interrupt(void *dbproc pg_attribute_unused())
{
	return io_must_stop() ? TRUE : FALSE;
}

/* Highest file descriptor login_watch looks at. */
#define LOGIN_MAX_FD 4096
/* How often login_watch runs during a login. */
#define LOGIN_WATCH_MS 200

/* The timeout that runs login_watch (registered once per process). */
static TimeoutId login_watch_id = MAX_TIMEOUTS;
/* When the login in progress must have ended, and whether it was too late. */
static TimestampTz login_deadline;
static volatile sig_atomic_t login_timed_out = false;

/*
 * Runs every LOGIN_WATCH_MS during a login, in signal context: once a cancel
 * or a termination is pending, or the login's deadline has passed, shuts
 * down the login's TCP socket, so that FreeTDS's wait ends at once and it
 * fails the login and cleans up by itself; dbopen then returns and the
 * interrupt is served as usual. A worker has no other TCP sockets than
 * FreeTDS's (background workers hold no client connection or listening
 * socket), and it runs again until the login ends, so a socket created
 * after the signal (a slow name lookup) is caught too.
 *
 * The deadline is enforced here because FreeTDS counts its login timeout
 * in one-second polls and adds back any poll a signal interrupts: with these
 * ticks its own timeout would never expire. Only async-signal-safe calls
 * (GetCurrentTimestamp is what PostgreSQL's own SIGALRM handler calls).
 */
static void
login_watch(void)
{
	int			save_errno = errno;

	if (GetCurrentTimestamp() >= login_deadline)
		login_timed_out = true;
	if (!ProcDiePending && !QueryCancelPending && !login_timed_out)
		return;
	for (int fd = 0; fd < LOGIN_MAX_FD; fd++)
	{
		struct sockaddr_storage addr;
		socklen_t	addrlen = sizeof(addr);
		int			type;
		socklen_t	typelen = sizeof(type);

		if (getsockname(fd, (struct sockaddr *) &addr, &addrlen) == 0 &&
			(addr.ss_family == AF_INET || addr.ss_family == AF_INET6) &&
			getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &typelen) == 0 && type == SOCK_STREAM)
			shutdown(fd, SHUT_RDWR);
	}
	errno = save_errno;
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
	if (name != NULL && strcmp(name, "7.1") == 0)
		return DBVERSION_71;
	if (name != NULL && strcmp(name, "7.2") == 0)
		return DBVERSION_72;
	if (name != NULL && strcmp(name, "7.3") == 0)
		return DBVERSION_73;
	return DBVERSION_74;
}

/*
 * Writes the connection's private FreeTDS configuration (mode 0600) and
 * empties its log. False, with err set, when it cannot.
 */
static bool
write_conf(const MssqlConnInfo *info, MssqlError *err)
{
	TdsConf		conf;
	char		text[2048];
	int			len;
	int			fd;
	bool		ok;

	conf.section = info->section;
	conf.host = info->host;
	conf.port = info->port;
	conf.encrypt = info->encrypt;
	conf.ca_file = info->ca_file;
	conf.dump_path = info->log_path;
	len = tds_conf_format(text, sizeof(text), &conf);
	if (len < 0)
	{
		err->set = true;
		err->local_failed = true;
		snprintf(err->message, sizeof(err->message),
				 "FreeTDS's configuration cannot carry the host or ca_file option, or the data directory's "
				 "path \"%s\" (at most 200 characters, none of ; # [ ] = or control characters)",
				 info->log_path);
		return false;
	}
	errno = 0;
	fd = open(info->conf_path, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY, S_IRUSR | S_IWUSR);
	ok = fd >= 0 && write(fd, text, len) == len;
	if (fd >= 0 && !ok && errno == 0)
		errno = ENOSPC;			/* a short write without an error: the disk is full */
	if (fd >= 0 && close(fd) != 0)
		ok = false;
	if (ok && truncate(info->log_path, 0) != 0 && errno != ENOENT)
		ok = false;
	if (!ok)
	{
		err->set = true;
		err->local_failed = true;
		snprintf(err->message, sizeof(err->message), "could not write FreeTDS's configuration \"%s\": %m",
				 info->conf_path);
	}
	return ok;
}

/* FreeTDS's log of the last login (at most 64 kB), or NULL. */
static char *
read_log(const char *path)
{
	char	   *buf = palloc(65536);
	int			fd = open(path, O_RDONLY | PG_BINARY, 0);
	ssize_t		n = fd >= 0 ? read(fd, buf, 65535) : -1;

	if (fd >= 0)
		close(fd);
	if (n < 0)
	{
		pfree(buf);
		return NULL;
	}
	buf[n] = '\0';
	return buf;
}

/*
 * Replaces DB-Library's "Adaptive Server connection failed" by what went
 * wrong in TLS, when FreeTDS's log says so: the certificate's verification
 * status in GnuTLS's words, a name mismatch, a CA file it could not load, or
 * a server that did not agree to encrypt when encryption is required. The
 * connection is never retried in plaintext.
 */
static void
explain_tls_failure(const MssqlConnInfo *info, MssqlError *err)
{
	char	   *log;
	char		detail[512];
	char		status_text[512];
	unsigned	status;
	TlsFailure	failure;
	const char *against = info->ca_file == NULL ? "nothing" :
		strcmp(info->ca_file, "system") == 0 ? "the system's trusted CAs" : info->ca_file;

	if (err->from_server || err->number != SYBEFCON)
		return;
	log = read_log(info->log_path);
	failure = tds_conf_tls_failure(log, &status, detail, sizeof(detail));
	if (log != NULL)
		pfree(log);				/* a source that keeps failing retries for days */
	if (failure != TLS_FAILURE_NONE && strcmp(info->encrypt, "off") == 0)
	{
		/* It offered no encryption; the server asked for it (REQ) and hung up. */
		snprintf(err->message, sizeof(err->message),
				 "TLS: SQL Server requires encryption (Force Encryption) and closed the connection, which "
				 "encrypt 'off' does not offer (SQL Server logs error 17835); set encrypt to 'require' "
				 "(FreeTDS: %s)", detail[0] ? detail : "login refused");
		err->tls_failed = true;
		return;
	}
	switch (failure)
	{
		case TLS_FAILURE_NONE:
			return;
		case TLS_FAILURE_CERT_STATUS:
			tls_status_text(status, status_text, sizeof(status_text));
			snprintf(err->message, sizeof(err->message),
					 "TLS: SQL Server's certificate failed verification against %s: %s (GnuTLS status %u)",
					 against, status_text, status);
			break;
		case TLS_FAILURE_HOSTNAME:
			snprintf(err->message, sizeof(err->message),
					 "TLS: SQL Server's certificate does not name the host \"%s\" (%s)", info->host, detail);
			break;
		case TLS_FAILURE_STEP:
			/* GnuTLS loads no certificate from an empty or DER file, and says "Success". */
			if (strncmp(detail, "loading CA file failed: Success", 31) == 0)
				snprintf(err->message, sizeof(err->message), "TLS: the ca_file %s holds no PEM certificate",
						 against);
			else
				snprintf(err->message, sizeof(err->message), "TLS: %s (ca_file: %s)", detail, against);
			break;
		case TLS_FAILURE_NOT_NEGOTIATED:
			if (strcmp(info->encrypt, "require") != 0)
				return;
			snprintf(err->message, sizeof(err->message),
					 "TLS: SQL Server did not agree to encrypt the connection, which encrypt 'require' demands "
					 "(does the server have a certificate?)");
			break;
	}
	err->tls_failed = true;
	err->number = 0;			/* the message says it all; 20002 would only mislead */
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
	begin_call(err);
	if (dbcmd(conn->dbproc, "SELECT 1") == FAIL || dbsqlsend(conn->dbproc) == FAIL)
	{
		current_error = NULL;
		if (!err->set)
		{
			err->set = true;
			set_message(err, "the connection to SQL Server was lost");
		}
		return false;
	}
	conn->pending = true;
	p.fd = dbiordesc(conn->dbproc);
	p.events = POLLIN;
	p.revents = 0;
	if (poll(&p, 1, conn->query_timeout * 1000) == 1)
		n = recv(p.fd, head, sizeof(head), MSG_PEEK);
	if (dbsqlok(conn->dbproc) == FAIL)
	{
		current_error = NULL;
		if (!err->set)
		{
			err->set = true;
			set_message(err, "SQL Server refused the batch");
		}
		return false;
	}
	current_error = NULL;
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
 * Logs in to SQL Server with SQL authentication, as application "finalize",
 * UTF-8, the given TDS version and database, through the connection's
 * private FreeTDS configuration. NULL on failure, with err set (the
 * password never appears in it).
 */
MssqlConn *
mssql_connect(const MssqlConnInfo *info, MssqlError *err)
{
	LOGINREC   *login;
	DBPROCESS  *dbproc;
	MssqlConn  *conn;
	char		no_file[1] = "";

	ensure_dblib();
	io_interrupts_begin();
	begin_call(err);
	if (!write_conf(info, err))
	{
		current_error = NULL;
		return NULL;
	}

	dbsetlogintime(info->login_timeout);
	dbsettime(info->query_timeout);

	login = dblogin();
	if (login == NULL)
	{
		err->set = true;
		set_message(err, "could not allocate a DB-Library login record");
		current_error = NULL;
		return NULL;
	}
	DBSETLUSER(login, info->username);
	DBSETLPWD(login, info->password);
	DBSETLAPP(login, "finalize");
	DBSETLCHARSET(login, "UTF-8");
	DBSETLDBNAME(login, info->database);
	DBSETLVERSION(login, tds_version_code(info->tds_version));

	if (login_watch_id == MAX_TIMEOUTS)
		login_watch_id = RegisterTimeout(USER_TIMEOUT, login_watch);
	login_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), info->login_timeout * 1000);
	login_timed_out = false;
	enable_timeout_every(login_watch_id,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LOGIN_WATCH_MS), LOGIN_WATCH_MS);
	dbsetifile(unconstify(char *, info->conf_path));
	dbproc = (ProcDiePending || QueryCancelPending) ? NULL : dbopen(login, info->section);
	dbsetifile(no_file);
	disable_timeout(login_watch_id, false);
	dbloginfree(login);
	current_error = NULL;
	if (dbproc == NULL && err->set)
	{
		char	   *at = strstr(err->message, info->section);

		explain_tls_failure(info, err);
		/* "connection failed (finalize-16384.invalid)" names the section, not the server. */
		if (!err->tls_failed && at != NULL)
			snprintf(at, sizeof(err->message) - (at - err->message), "%s:%d)", info->host, info->port);
	}
	if (dbproc == NULL && (ProcDiePending || QueryCancelPending))
	{
		err->set = true;
		err->from_server = false;
		err->number = 0;
		err->interrupted = true;
		err->tls_failed = false;
		set_message(err, "the login was interrupted");
	}
	else if (dbproc == NULL && login_timed_out)
	{
		err->set = true;
		err->from_server = false;
		err->number = 0;
		err->timed_out = true;
		err->tls_failed = false;
		snprintf(err->message, sizeof(err->message),
				 "SQL Server did not complete the login within finalize.login_timeout (%d s)", info->login_timeout);
	}

	if (dbproc == NULL)
	{
		if (!err->set)
		{
			err->set = true;
			set_message(err, "could not connect to SQL Server");
		}
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
	begin_call(err);
	if (conn->pending)
	{
		dbcancel(conn->dbproc);
		conn->pending = false;
	}
	rc = dbcmd(conn->dbproc, sql);
	/* From here on results may be pending, even if the batch fails. */
	conn->pending = true;
	if (rc != FAIL)
		rc = dbsqlexec(conn->dbproc);
	current_error = NULL;
	if (rc == FAIL)
	{
		if (!err->set)
		{
			err->set = true;
			set_message(err, dbdead(conn->dbproc) ? "the connection to SQL Server was lost"
						: "SQL Server refused the batch");
		}
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

	begin_call(err);
	rc = dbresults(conn->dbproc);
	current_error = NULL;
	if (rc == NO_MORE_RESULTS)
	{
		conn->pending = false;
		return 0;
	}
	if (rc == SUCCEED)
		return 1;
	if (!err->set)
	{
		err->set = true;
		set_message(err, dbdead(conn->dbproc) ? "the connection to SQL Server was lost"
					: "a statement of the batch failed");
	}
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

	begin_call(err);
	st = dbnextrow(conn->dbproc);
	current_error = NULL;
	if (st == NO_MORE_ROWS)
		return 0;
	if (st == REG_ROW)
		return 1;
	if (!err->set)
	{
		err->set = true;
		set_message(err, dbdead(conn->dbproc) ? "the connection to SQL Server was lost while reading rows"
					: "SQL Server sent a row that could not be read");
	}
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
		if (tm2timestamp(&tm, rec.nanosecond / 1000, NULL, out) != 0)
			return false;
		return true;
	}
	return false;
}

/* Reads a character column as a palloc'd UTF-8 string; NULL for NULL. */
char *
mssql_get_text(MssqlConn *conn, int col)
{
	BYTE	   *data = dbdata(conn->dbproc, col);
	DBINT		len = dbdatlen(conn->dbproc, col);

	if (data == NULL)
		return NULL;
	return pnstrdup((const char *) data, len);
}

/*
 * One line describing an error, for logs, status and explain_verdict:
 * "SQL Server error 208 (severity 16): Invalid object name 'x'." or the
 * DB-Library error.
 */
const char *
mssql_error_text(const MssqlError *err)
{
	static char buf[sizeof(err->message) + 64];

	if (!err->set)
		return "unknown error";
	if (err->from_server)
		snprintf(buf, sizeof(buf), "SQL Server error %d (severity %d, state %d): %s",
				 err->number, err->severity, err->state, err->message);
	else if (err->number != 0)
		snprintf(buf, sizeof(buf), "DB-Library error %d: %s", err->number, err->message);
	else
		snprintf(buf, sizeof(buf), "%s", err->message);
	return buf;
}
