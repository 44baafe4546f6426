/*
 * kerberos.c
 *     Kerberos tickets for Windows logins to SQL Server: the one file that
 *     calls MIT Kerberos (libkrb5, and GSSAPI's gss_krb5_ccache_name).
 *
 * FreeTDS logs in with GSSAPI from the default credential cache and, when
 * that fails, says only that the login failed (its reason goes to its debug
 * log). So finalize gets the tickets itself, before the login, and says
 * what went wrong in the library's own words: a ticket-granting ticket from
 * the user mapping's keytab, then the service ticket for SQL Server's SPN,
 * both kept in a credential cache of the source's own (MEMORY:, in this
 * process; never the process's default cache), which GSSAPI is pointed at
 * for the login alone. Two sources with two principals served by one pool
 * worker therefore never share a ticket.
 *
 * The keytab is a secret of the user mapping (base64): it is written to a
 * file of the data directory (mode 0600) only while the library reads it,
 * and removed at once. Each call takes a fresh library context, so a
 * changed krb5.conf counts at the next ticket.
 */
#include "postgres.h"

#include <fcntl.h>
#include <signal.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <krb5.h>
#include <gssapi/gssapi.h>
#include <gssapi/gssapi_krb5.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/timestamp.h"

#include "mssql/kerberos.h"
#include "mssql/mssql_options.h"

/* A ticket is asked for again when less than this much of it is left ... */
#define KRB_RENEW_SECONDS 300
/* ... or less than this part of its life (short-lived tickets). */
#define KRB_RENEW_PART 4

/*
 * What to do about a Kerberos error, by its code: the words the library
 * gives say what happened, these say what the operator can do.
 */
static const char *
krb_hint(krb5_error_code rc)
{
	switch (rc)
	{
		case KRB5KRB_AP_ERR_SKEW:
			return "This machine's clock and the KDC's differ by more than the allowed skew (5 minutes by "
				"default): synchronise both with NTP.";
		case KRB5KDC_ERR_C_PRINCIPAL_UNKNOWN:
			return "The KDC does not know the principal option of the user mapping: check its spelling and "
				"realm (user@REALM, the realm in capitals) and that the account exists.";
		case KRB5KDC_ERR_S_PRINCIPAL_UNKNOWN:
			return "No account holds SQL Server's service principal name: register it for SQL Server's "
				"service account (setspn -S MSSQLSvc/<fqdn>:<port> DOMAIN\\account), or set the server_spn "
				"option of the server to the SPN that is registered.";
		case KRB5KDC_ERR_PREAUTH_FAILED:
		case KRB5KRB_AP_ERR_BAD_INTEGRITY:
		case KRB5_KT_KVNONOTFOUND:
		case KRB5_PREAUTH_FAILED:
			return "The keytab's key no longer matches the account (its password was changed or the keytab "
				"was exported again): export a new keytab and set the keytab option of the user mapping.";
		case KRB5_KT_NOTFOUND:
			return "The keytab holds no key of this principal: export one for it (ktpass, ktutil or kadmin).";
		case KRB5KDC_ERR_KEY_EXP:
			return "The account's password has expired: renew it (or make it never expire, as for a service "
				"account) and export a new keytab.";
		case KRB5KDC_ERR_CLIENT_REVOKED:
			return "The account is disabled or locked out in the directory: enable it.";
		case KRB5_KDC_UNREACH:
		case KRB5_REALM_CANT_RESOLVE:
		case KRB5_REALM_UNKNOWN:
			return "No KDC of the realm answered: check the realm's kdc entries in krb5.conf (or its DNS SRV "
				"records) and that this machine reaches them.";
		default:
			return "See docs/troubleshooting.md#kerberos_failed.";
	}
}

/* Sets err from a library error: what was being done, its words, a hint. */
static bool
krb_fail(krb5_context ctx, krb5_error_code rc, MssqlError *err, const char *what)
{
	const char *words = krb5_get_error_message(ctx, rc);

	err->set = true;
	err->kerberos_failed = true;
	err->number = 0;
	snprintf(err->message, sizeof(err->message), "Kerberos: %s: %s. %s", what, words, krb_hint(rc));
	krb5_free_error_message(ctx, words);
	return false;
}

/*
 * Whether the cache holds a service ticket of client for server with more
 * than its renewal margin left; *endtime is its end.
 */
static bool
cached_ticket(krb5_context ctx, krb5_ccache cc, krb5_principal client, krb5_principal server,
			  krb5_timestamp *endtime)
{
	krb5_principal holder = NULL;
	krb5_creds	match;
	krb5_creds	found;
	krb5_timestamp now;
	bool		ok = false;

	if (krb5_cc_get_principal(ctx, cc, &holder) != 0)
		return false;
	if (krb5_principal_compare(ctx, holder, client))
	{
		memset(&match, 0, sizeof(match));
		match.client = client;
		match.server = server;
		if (krb5_cc_retrieve_cred(ctx, cc, 0, &match, &found) == 0)
		{
			krb5_timestamp start = found.times.starttime ? found.times.starttime : found.times.authtime;
			int64		life = (int64) (uint32) found.times.endtime - (int64) (uint32) start;
			int64		margin = Min(KRB_RENEW_SECONDS, life / KRB_RENEW_PART);

			ok = krb5_timeofday(ctx, &now) == 0 &&
				(int64) (uint32) found.times.endtime - (int64) (uint32) now > margin;
			*endtime = found.times.endtime;
			krb5_free_cred_contents(ctx, &found);
		}
	}
	krb5_free_principal(ctx, holder);
	return ok;
}

/*
 * Writes the user mapping's keytab (base64) to path, mode 0600.
 * False with err set when it is not base64 or cannot be written.
 */
static bool
write_keytab(const MssqlConnInfo *k, const char *path, MssqlError *err)
{
	int			n;
	char	   *raw = mssql_keytab_decode(k->keytab, &n);
	int			fd;
	bool		ok;

	if (raw == NULL)
	{
		mssql_error_fail(err, "Kerberos: the keytab option of the user mapping is not a keytab in base64 "
						 "(base64 -w0 file.keytab) of at most 64 kB");
		err->kerberos_failed = true;
		return false;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY, S_IRUSR | S_IWUSR);
	ok = fd >= 0 && write(fd, raw, n) == n;
	if (fd >= 0 && close(fd) != 0)
		ok = false;
	pfree(raw);
	if (!ok)
	{
		mssql_error_fail(err, psprintf("Kerberos: could not write the keytab to \"%s\": %m", path));
		err->local_failed = true;
		(void) unlink(path);
	}
	return ok;
}

/*
 * Asks the KDC for the service ticket of server with the ticket-granting
 * ticket tgt, both into a new cache of its own, which then replaces the
 * source's cache: the source keeps its old tickets unless both new ones
 * were had. *endtime is the service ticket's end.
 */
static krb5_error_code
service_ticket(krb5_context ctx, krb5_creds *tgt, krb5_ccache cc, krb5_principal server, krb5_timestamp *endtime)
{
	krb5_ccache fresh = NULL;
	krb5_creds	want;
	krb5_creds *got = NULL;
	krb5_error_code rc;

	rc = krb5_cc_new_unique(ctx, "MEMORY", NULL, &fresh);
	if (rc != 0)
		return rc;
	rc = krb5_cc_initialize(ctx, fresh, tgt->client);
	if (rc == 0)
		rc = krb5_cc_store_cred(ctx, fresh, tgt);
	if (rc == 0)
	{
		memset(&want, 0, sizeof(want));
		want.client = tgt->client;
		want.server = server;
		rc = krb5_get_credentials(ctx, 0, fresh, &want, &got);
	}
	if (rc == 0)
	{
		*endtime = got->times.endtime;
		krb5_free_creds(ctx, got);
		return krb5_cc_move(ctx, fresh, cc);	/* destroys fresh */
	}
	krb5_cc_destroy(ctx, fresh);
	return rc;
}

/*
 * Gets a ticket-granting ticket for client from the keytab, then the
 * service ticket for server, into the source's cache (service_ticket);
 * *endtime is the service ticket's end. The keytab file exists only
 * meanwhile.
 */
static bool
new_tickets(krb5_context ctx, const MssqlConnInfo *k, krb5_ccache cc, krb5_principal client,
			krb5_principal server, krb5_timestamp *endtime, MssqlError *err)
{
	krb5_keytab kt = NULL;
	krb5_get_init_creds_opt *opt = NULL;
	krb5_creds	tgt;
	krb5_timestamp end = 0;
	krb5_error_code rc;

	/* the process's own file: a session's check and the worker may log in at once */
	char	   *path = psprintf("%s.%d", k->keytab_path, MyProcPid);

	if (!write_keytab(k, path, err))
		return false;
	memset(&tgt, 0, sizeof(tgt));
	rc = krb5_kt_resolve(ctx, psprintf("FILE:%s", path), &kt);
	if (rc == 0)
		rc = krb5_get_init_creds_opt_alloc(ctx, &opt);
	if (rc == 0)
		rc = krb5_get_init_creds_keytab(ctx, &tgt, client, kt, 0, NULL, opt);
	if (opt != NULL)
		krb5_get_init_creds_opt_free(ctx, opt);
	if (kt != NULL)
		krb5_kt_close(ctx, kt);
	(void) unlink(path);
	if (rc != 0)
		return krb_fail(ctx, rc, err, psprintf("could not get a ticket for \"%s\" with its keytab", k->principal));
	rc = service_ticket(ctx, &tgt, cc, server, &end);
	krb5_free_cred_contents(ctx, &tgt);
	if (rc != 0)
	{
		char	   *spn = NULL;

		(void) krb5_unparse_name(ctx, server, &spn);
		krb_fail(ctx, rc, err, psprintf("could not get a ticket for SQL Server's service principal \"%s\"",
										spn ? spn : "?"));
		krb5_free_unparsed_name(ctx, spn);
		return false;
	}
	*endtime = end;
	return true;
}

/*
 * After new tickets could not be had (err): whether the cached ticket that
 * was due for renewal, ending at endtime, still serves a login. Then the
 * failure is logged (at most once a minute per process, since every cycle
 * tries again) and err cleared: a KDC down for a while stops nothing
 * until the ticket ends.
 */
static bool
still_valid(krb5_context ctx, krb5_timestamp endtime, MssqlError *err)
{
	static TimestampTz last_warning = 0;
	krb5_timestamp now;
	TimestampTz at = GetCurrentTimestamp();

	if (endtime == 0 || krb5_timeofday(ctx, &now) != 0 || (int64) (uint32) endtime <= (int64) (uint32) now)
		return false;
	if (TimestampDifferenceExceeds(last_warning, at, 60 * 1000))
	{
		ereport(WARNING,
				(errmsg("finalize: %s", err->message),
				 errdetail("The current ticket serves logins until %s; finalize asks for a new one at every cycle.",
						   timestamptz_to_str(time_t_to_timestamptz((pg_time_t) (uint32) endtime)))));
		last_warning = at;
	}
	memset(err, 0, sizeof(*err));
	return true;
}

/*
 * SQL Server's service principal with a realm: the spn as given when it
 * names one, else in the client principal's realm (a service account and
 * SQL Server in one domain, as is usual).
 */
static char *
spn_in_realm(const char *spn, krb5_principal client)
{
	const krb5_data *realm = &client->realm;

	if (strchr(spn, '@') != NULL)
		return pstrdup(spn);
	return psprintf("%s@%.*s", spn, (int) realm->length, realm->data);
}

/*
 * Makes sure the source's credential cache holds a service ticket of
 * k->principal for SQL Server with more than its renewal margin left,
 * getting new tickets from the keytab when not. *spn_out is the service
 * principal with its realm (for FreeTDS), *expires the ticket's end. False
 * with err set (kerberos_failed, in the library's words) when it cannot.
 */
bool
krb_prepare(const MssqlConnInfo *k, char **spn_out, TimestampTz *expires, MssqlError *err)
{
	krb5_context ctx;
	krb5_principal client = NULL;
	krb5_principal server = NULL;
	krb5_ccache cc = NULL;
	krb5_timestamp endtime = 0;
	krb5_error_code rc;
	bool		ok;

	memset(err, 0, sizeof(*err));
	rc = krb5_init_context(&ctx);
	if (rc != 0)
	{
		mssql_error_fail(err, psprintf("Kerberos: the library could not start (error %d): is krb5.conf valid?",
									   (int) rc));
		err->kerberos_failed = true;
		return false;
	}
	rc = krb5_parse_name(ctx, k->principal, &client);
	if (rc != 0)
		ok = krb_fail(ctx, rc, err, psprintf("the principal option \"%s\" is not a principal", k->principal));
	else
	{
		*spn_out = spn_in_realm(k->spn != NULL && k->spn[0] != '\0' ? k->spn :
								krb_default_spn(k->host, k->port), client);
		rc = krb5_parse_name(ctx, *spn_out, &server);
		if (rc == 0)
			rc = krb5_cc_resolve(ctx, k->krb_cache, &cc);
		if (rc != 0)
			ok = krb_fail(ctx, rc, err, psprintf("SQL Server's service principal \"%s\" cannot be used", *spn_out));
		else if (!(ok = cached_ticket(ctx, cc, client, server, &endtime)))
			ok = new_tickets(ctx, k, cc, client, server, &endtime, err) || still_valid(ctx, endtime, err);
	}
	if (ok)
		*expires = time_t_to_timestamptz((pg_time_t) (uint32) endtime);
	if (cc != NULL)
		krb5_cc_close(ctx, cc);
	krb5_free_principal(ctx, server);
	krb5_free_principal(ctx, client);
	krb5_free_context(ctx);
	return ok;
}

/*
 * SQL Server's service principal name as SQL Server registers it and
 * FreeTDS asks for it: MSSQLSvc/<fully qualified host>:<port>, the host's
 * canonical name when it was given without a domain.
 */
char *
krb_default_spn(const char *host, int port)
{
	struct addrinfo hints;
	struct addrinfo *addrs = NULL;
	char	   *spn;

	if (strchr(host, '.') != NULL)
		return psprintf("MSSQLSvc/%s:%d", host, port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_CANONNAME;
	if (getaddrinfo(host, NULL, &hints, &addrs) == 0 && addrs->ai_canonname != NULL &&
		strchr(addrs->ai_canonname, '.') != NULL)
		spn = psprintf("MSSQLSvc/%s:%d", addrs->ai_canonname, port);
	else
		spn = psprintf("MSSQLSvc/%s:%d", host, port);
	if (addrs != NULL)
		freeaddrinfo(addrs);
	return spn;
}

/*
 * Removes the keytab files of processes that are gone (pg_finalize/tds/
 * <oid>.keytab.<pid>): a process that died between writing its file and
 * removing it would leave a secret in the data directory, and in its base
 * backups. Run by the launcher when it starts (after a crash, too).
 */
void
krb_sweep_keytabs(void)
{
	const char *dirname = "pg_finalize/tds";
	DIR		   *dir = AllocateDir(dirname);
	struct dirent *de;

	if (dir == NULL)
		return;					/* no source has logged in yet */
	while ((de = ReadDirExtended(dir, dirname, LOG)) != NULL)
	{
		const char *dot = strstr(de->d_name, ".keytab.");
		char	   *end;
		long		pid;

		if (dot == NULL)
			continue;
		errno = 0;
		pid = strtol(dot + 8, &end, 10);
		if (errno == 0 && *end == '\0' && pid > 0 && kill((pid_t) pid, 0) != 0 && errno == ESRCH &&
			unlink(psprintf("%s/%s", dirname, de->d_name)) == 0)
			ereport(LOG,
					(errmsg("finalize: removed the keytab file \"%s/%s\" of process %ld, which is gone",
							dirname, de->d_name, pid)));
	}
	FreeDir(dir);
}

/* Points GSSAPI at a source's credential cache, for the login that follows. */
void
krb_cache_enter(const char *cache)
{
	OM_uint32	minor;

	(void) gss_krb5_ccache_name(&minor, cache, NULL);
}

/* Points GSSAPI back at the default cache once the login has ended. */
void
krb_cache_leave(void)
{
	OM_uint32	minor;

	(void) gss_krb5_ccache_name(&minor, NULL, NULL);
}
