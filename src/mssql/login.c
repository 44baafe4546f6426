/*
 * login.c
 *     What a login to SQL Server needs besides DB-Library: the connection's
 *     private FreeTDS configuration, written before it; the watch that ends
 *     it on a cancel, a termination or its deadline; and the words for a
 *     login that failed. mssql.c runs the login itself: it is the one file
 *     that calls DB-Library, and nothing here does.
 *
 * A login cannot take DB-Library's interrupt callbacks (they belong to a
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
#include <sys/socket.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "core/io_interrupts.h"
#include "mssql/kerberos.h"
#include "mssql/login.h"
#include "mssql/tds_conf.h"
#include "mssql/tls_reason.h"

/* Highest file descriptor login_watch looks at. */
#define LOGIN_MAX_FD 4096
/* How often login_watch runs during a login. */
#define LOGIN_WATCH_MS 200

/*
 * The TCP and UDP sockets open when the login began (by descriptor): a pool worker's
 * kept connections to other sources, which login_watch must leave alone.
 */
static uint8 open_before_login[LOGIN_MAX_FD / 8];

/* The timeout that runs login_watch (registered once per process). */
static TimeoutId login_watch_id = MAX_TIMEOUTS;
/* When the login in progress must have ended, and whether it was too late. */
static TimestampTz login_deadline;
static volatile sig_atomic_t login_timed_out = false;

/*
 * Whether fd is a TCP or UDP socket (async-signal-safe): SQL Server's
 * connection, or a Kerberos KDC's (MIT asks over UDP first, then TCP).
 */
static bool
is_inet_socket(int fd)
{
	struct sockaddr_storage addr;
	socklen_t	addrlen = sizeof(addr);
	int			type;
	socklen_t	typelen = sizeof(type);

	return getsockname(fd, (struct sockaddr *) &addr, &addrlen) == 0 &&
		(addr.ss_family == AF_INET || addr.ss_family == AF_INET6) &&
		getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &typelen) == 0 && (type == SOCK_STREAM || type == SOCK_DGRAM);
}

/*
 * Runs every LOGIN_WATCH_MS during a login, in signal context: once a cancel
 * or a termination is pending, or the login's deadline has passed, shuts
 * down the login's TCP socket (and a KDC's UDP or TCP one while login_tickets
 * waits for tickets), so that FreeTDS's wait ends at once and it
 * fails the login and cleans up by itself; dbopen then returns and the
 * interrupt is served as usual. The login's socket is the TCP socket that
 * was not open when it began: a background worker holds no client
 * connection or listening socket, and the connections a pool worker keeps
 * to its other sources stay open during the login (one login at a time),
 * so their descriptors cannot be reused by it. It runs again until the
 * login ends, so a socket created after the signal (a slow name lookup) is
 * caught too.
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
		if ((open_before_login[fd / 8] & (1 << (fd % 8))) == 0 && is_inet_socket(fd))
			shutdown(fd, SHUT_RDWR);
	errno = save_errno;
}

/*
 * Marks the TCP and UDP sockets open now in open_before_login. Only the open
 * descriptors are looked at (/proc/self/fd): asking each of the
 * LOGIN_MAX_FD possible ones took two system calls apiece, most of the CPU
 * of a login. Without /proc every possible descriptor is asked.
 */
static void
mark_open_sockets(void)
{
	DIR		   *dir;
	struct dirent *de;

	memset(open_before_login, 0, sizeof(open_before_login));
	dir = AllocateDir("/proc/self/fd");
	if (dir == NULL)
	{
		for (int fd = 0; fd < LOGIN_MAX_FD; fd++)
			if (is_inet_socket(fd))
				open_before_login[fd / 8] |= 1 << (fd % 8);
		return;
	}
	while ((de = ReadDirExtended(dir, "/proc/self/fd", LOG)) != NULL)
	{
		char	   *end;
		long		fd = strtol(de->d_name, &end, 10);

		if (*end == '\0' && end != de->d_name && fd >= 0 && fd < LOGIN_MAX_FD && is_inet_socket((int) fd))
			open_before_login[fd / 8] |= 1 << (fd % 8);
	}
	FreeDir(dir);
}

/*
 * Starts watching a login that may take finalize.login_timeout seconds
 * (the timer is registered once per process); a Kerberos login's GSSAPI
 * reads the source's own credential cache meanwhile.
 */
void
login_watch_start(const MssqlConnInfo *info)
{
	int			login_timeout = (int) ((io_bounded_ms(info->login_timeout * 1000L) + 999) / 1000);

	if (info->auth == MSSQL_AUTH_KERBEROS)
		krb_cache_enter(info->krb_cache);
	if (login_watch_id == MAX_TIMEOUTS)
		login_watch_id = RegisterTimeout(USER_TIMEOUT, login_watch);
	mark_open_sockets();
	login_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), login_timeout * 1000);
	login_timed_out = false;
	enable_timeout_every(login_watch_id,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LOGIN_WATCH_MS), LOGIN_WATCH_MS);
}

/* Stops watching the login once it has ended (GSSAPI back to its default cache). */
void
login_watch_stop(const MssqlConnInfo *info)
{
	disable_timeout(login_watch_id, false);
	if (info->auth == MSSQL_AUTH_KERBEROS)
		krb_cache_leave();
}

/*
 * The login a connection makes, in *with: info itself, and for Kerberos
 * the SPN with its realm, once the source's credential cache holds a
 * service ticket (*expires its end; else 0). False with err set, in the
 * Kerberos library's words, when there is none.
 */
bool
login_tickets(const MssqlConnInfo *info, MssqlConnInfo *with, TimestampTz *expires, MssqlError *err)
{
	char	   *spn;

	bool		ok;

	*with = *info;
	*expires = 0;
	if (info->auth != MSSQL_AUTH_KERBEROS)
		return true;
	/* the KDC's answer is awaited like a login: within login_timeout, and a cancel ends it */
	login_watch_start(info);
	ok = krb_prepare(info, &spn, expires, err);
	login_watch_stop(info);
	/* past login_timeout the KDC's sockets were shut: the library then says it could not contact one */
	if (!ok && (ProcDiePending || QueryCancelPending))
		strlcpy(err->message, "Kerberos: the request to the KDC was interrupted", sizeof(err->message));
	if (ok)
		with->spn = spn;
	return ok;
}

/*
 * Writes the connection's private FreeTDS configuration (mode 0600) and
 * empties its log. False, with err set, when it cannot.
 */
bool
login_write_conf(const MssqlConnInfo *info, MssqlError *err)
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
 * Says why a login failed, once DB-Library has given up: what went wrong
 * in TLS when the connection itself failed (connect_failed: DB-Library's
 * 20002), the server rather than the configuration's section in its
 * message, and an interruption or the deadline above what DB-Library said.
 */
void
login_failed(const MssqlConnInfo *info, MssqlError *err, bool connect_failed)
{
	if (err->set)
	{
		char	   *at = strstr(err->message, info->section);

		if (connect_failed)
			explain_tls_failure(info, err);
		/* "connection failed (finalize-16384.invalid)" names the section, not the server. */
		if (!err->tls_failed && at != NULL)
			snprintf(at, sizeof(err->message) - (at - err->message), "%s:%d)", info->host, info->port);
	}
	if (ProcDiePending || QueryCancelPending)
	{
		err->set = true;
		err->from_server = false;
		err->number = 0;
		err->interrupted = true;
		err->tls_failed = false;
		strlcpy(err->message, "the login was interrupted", sizeof(err->message));
	}
	else if (login_timed_out)
	{
		err->set = true;
		err->from_server = false;
		err->number = 0;
		err->timed_out = true;
		err->tls_failed = false;
		snprintf(err->message, sizeof(err->message),
				 "SQL Server did not complete the login within finalize.login_timeout (%d s)", info->login_timeout);
	}
	if (!err->set)
	{
		err->set = true;
		strlcpy(err->message, "could not connect to SQL Server", sizeof(err->message));
	}
}
