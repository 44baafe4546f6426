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
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <krb5.h>
#include <profile.h>
#include <gssapi/gssapi.h>
#include <gssapi/gssapi_krb5.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "mssql/kerberos.h"
#include "mssql/keytab_file.h"
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
 * A new credential cache in this process's memory (*cc, NULL when none
 * could be made) holding creds alone, for its client.
 */
static krb5_error_code
cache_holding(krb5_context ctx, krb5_creds *creds, krb5_ccache *cc)
{
	krb5_error_code rc = krb5_cc_new_unique(ctx, "MEMORY", NULL, cc);

	if (rc == 0)
		rc = krb5_cc_initialize(ctx, *cc, creds->client);
	if (rc == 0)
		rc = krb5_cc_store_cred(ctx, *cc, creds);
	return rc;
}

/*
 * Asks the KDC for the service ticket of server with the ticket-granting
 * ticket tgt (in a cache of its own, dropped after), and puts it alone in a
 * new cache that then replaces the source's: the login needs nothing else
 * (renewals start from the keytab), and the source keeps its old ticket
 * unless the new one was had. *endtime is the service ticket's end.
 */
static krb5_error_code
service_ticket(krb5_context ctx, krb5_creds *tgt, krb5_ccache cc, krb5_principal server, krb5_timestamp *endtime)
{
	krb5_ccache work = NULL;
	krb5_ccache only = NULL;
	krb5_creds	want;
	krb5_creds *got = NULL;
	krb5_error_code rc;

	rc = cache_holding(ctx, tgt, &work);
	if (rc == 0)
	{
		memset(&want, 0, sizeof(want));
		want.client = tgt->client;
		want.server = server;
		rc = krb5_get_credentials(ctx, 0, work, &want, &got);
	}
	if (rc == 0)
		rc = cache_holding(ctx, got, &only);
	if (rc == 0)
	{
		*endtime = got->times.endtime;
		rc = krb5_cc_move(ctx, only, cc);	/* destroys only, when it succeeds */
		if (rc == 0)
			only = NULL;
	}
	if (got != NULL)
		krb5_free_creds(ctx, got);
	if (only != NULL)
		krb5_cc_destroy(ctx, only);
	if (work != NULL)
		krb5_cc_destroy(ctx, work);
	return rc;
}

/*
 * The keytab file at path copied into a keytab in this process's memory
 * (*mem, closed by the caller, which frees it), so that the file can go
 * before the KDC is asked anything: it is removed here, whatever happens.
 */
static krb5_error_code
keytab_in_memory(krb5_context ctx, const char *path, const char *ktname, const char *memname, krb5_keytab *mem)
{
	krb5_keytab file = NULL;
	krb5_kt_cursor cursor;
	krb5_keytab_entry entry;
	krb5_error_code rc;

	rc = krb5_kt_resolve(ctx, ktname, &file);
	if (rc == 0)
		rc = krb5_kt_resolve(ctx, memname, mem);
	if (rc == 0)
		rc = krb5_kt_start_seq_get(ctx, file, &cursor);
	if (rc == 0)
	{
		while (rc == 0 && (rc = krb5_kt_next_entry(ctx, file, &entry, &cursor)) == 0)
		{
			rc = krb5_kt_add_entry(ctx, *mem, &entry);
			krb5_free_keytab_entry_contents(ctx, &entry);
		}
		if (rc == KRB5_KT_END)
			rc = 0;
		(void) krb5_kt_end_seq_get(ctx, file, &cursor);
	}
	if (file != NULL)
		krb5_kt_close(ctx, file);
	(void) unlink(path);
	return rc;
}

/*
 * Gets a ticket-granting ticket for client from the keytab, then the
 * service ticket for server, into the source's cache (service_ticket);
 * *endtime is the service ticket's end. The keytab is a file only while it
 * is copied into memory, before any request to the KDC.
 */
static bool
new_tickets(krb5_context ctx, const MssqlConnInfo *k, krb5_ccache cc, krb5_principal client,
			krb5_principal server, krb5_timestamp *endtime, MssqlError *err)
{
	static int	keytabs = 0;
	krb5_keytab kt = NULL;
	krb5_get_init_creds_opt *opt = NULL;
	krb5_creds	tgt;
	krb5_timestamp end = 0;
	krb5_error_code rc;

	/* the process's own file: a session's check and the worker may log in at once */
	char	   *path = psprintf("%s.%d", k->keytab_path, MyProcPid);
	char	   *ktname = psprintf("FILE:%s", path);
	char	   *memname = psprintf("MEMORY:finalize-keytab-%d", ++keytabs);

	if (!keytab_file_write(k, path, err))
		return false;
	memset(&tgt, 0, sizeof(tgt));
	rc = keytab_in_memory(ctx, path, ktname, memname, &kt);
	if (rc == 0)
		rc = krb5_get_init_creds_opt_alloc(ctx, &opt);
	if (rc == 0)
		rc = krb5_get_init_creds_keytab(ctx, &tgt, client, kt, 0, NULL, opt);
	if (opt != NULL)
		krb5_get_init_creds_opt_free(ctx, opt);
	if (kt != NULL)
		krb5_kt_close(ctx, kt);	/* the last handle: the memory keytab is freed */
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
 * A source's last failed request for new tickets (by its cache's name): a
 * KDC that does not answer, or answers no, is asked again only after a
 * wait that doubles up to KRB_RETRY_MAX_SECONDS, so that one source's
 * outage does not hold a pool worker's other sources at every cycle.
 */
typedef struct KrbRetry
{
	char		cache[MAXPGPATH];
	uint32		login;			/* hash of the principal and keytab it failed with */
	TimestampTz next_try;
	int			delay;			/* seconds */
	MssqlError	error;			/* the failure, as it stands until next_try */
} KrbRetry;

#define KRB_RETRY_SLOTS 32
#define KRB_RETRY_FIRST_SECONDS 5
#define KRB_RETRY_MAX_SECONDS 60

static KrbRetry retries[KRB_RETRY_SLOTS];

/*
 * The retry state of a source's cache: its own slot, else a free one, else
 * the oldest. Another principal or keytab (the user mapping changed, say to
 * fix what failed) starts afresh: it is tried at once.
 */
static KrbRetry *
retry_of(const MssqlConnInfo *k)
{
	const char *cache = k->krb_cache;
	uint32		login = hash_bytes((const unsigned char *) k->keytab, strlen(k->keytab)) ^
		hash_bytes((const unsigned char *) k->principal, strlen(k->principal));
	KrbRetry   *pick = &retries[0];

	for (int i = 0; i < KRB_RETRY_SLOTS; i++)
	{
		if (strcmp(retries[i].cache, cache) == 0)
		{
			if (retries[i].login != login)
			{
				memset(&retries[i], 0, sizeof(retries[i]));
				strlcpy(retries[i].cache, cache, sizeof(retries[i].cache));
				retries[i].login = login;
			}
			return &retries[i];
		}
		if (retries[i].cache[0] == '\0' || retries[i].next_try < pick->next_try)
			pick = &retries[i];
	}
	memset(pick, 0, sizeof(*pick));
	strlcpy(pick->cache, cache, sizeof(pick->cache));
	pick->login = login;
	return pick;
}

/*
 * New tickets for a source whose cached one is due (or missing), unless
 * its last request failed and its wait has not passed: then the last
 * failure stands. When no new tickets are had but the cached ticket, ending
 * at endtime, still serves a login, that one is used (logged as a WARNING):
 * a KDC down for a while stops nothing until the ticket ends.
 */
static bool
renewed(krb5_context ctx, const MssqlConnInfo *k, krb5_ccache cc, krb5_principal client, krb5_principal server,
		krb5_timestamp *endtime, MssqlError *err)
{
	KrbRetry   *r = retry_of(k);
	TimestampTz now = GetCurrentTimestamp();
	krb5_timestamp kdc_now;
	bool		valid = *endtime != 0 && krb5_timeofday(ctx, &kdc_now) == 0 &&
		(int64) (uint32) *endtime > (int64) (uint32) kdc_now;

	if (r->next_try > now)
	{
		if (valid)
			return true;
		*err = r->error;
		return false;
	}
	if (new_tickets(ctx, k, cc, client, server, endtime, err))
	{
		r->next_try = 0;
		r->delay = 0;
		return true;
	}
	if (ProcDiePending || QueryCancelPending)
		return false;			/* the request was cut short: nothing learnt of the KDC */
	r->delay = r->delay == 0 ? KRB_RETRY_FIRST_SECONDS : Min(r->delay * 2, KRB_RETRY_MAX_SECONDS);
	r->next_try = TimestampTzPlusMilliseconds(now, r->delay * 1000);
	r->error = *err;
	if (!valid)
		return false;
	ereport(WARNING,
			(errmsg("finalize: %s", err->message),
			 errdetail("The current ticket serves logins until %s; finalize asks again in %d s.",
					   timestamptz_to_str(time_t_to_timestamptz((pg_time_t) (uint32) *endtime)), r->delay)));
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
 * A library context that asks KDCs over TCP first: the machine's krb5.conf
 * (or the files KRB5_CONFIG names) behind a file of finalize's own that
 * sets udp_preference_limit = 1, read first so that its value wins (MIT
 * then tries UDP only a second later). Whatever the transport, the login
 * watch (login.c) shuts the request's sockets at login_timeout or a cancel:
 * MIT's client would otherwise wait out its own timeouts, about 30 s per
 * KDC that does not answer. The file is written once per process, whole
 * (a temporary file renamed into place), so that a crash leaves no part.
 */
static krb5_error_code
tcp_context(krb5_context *ctx)
{
	static bool written = false;
	const char *ours = "pg_finalize/tds/krb5-tcp.conf";
	const char *text = "# written by finalize (kerberos.c): KDCs over TCP first\n"
		"[libdefaults]\n\tudp_preference_limit = 1\n";
	const char *theirs = getenv("KRB5_CONFIG");
	profile_t	profile = NULL;
	krb5_error_code rc;

	if (!written)
	{
		char	   *tmp = psprintf("%s.%d", ours, MyProcPid);
		int			fd;

		(void) unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | PG_BINARY, S_IRUSR | S_IWUSR);
		written = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t) strlen(text) && pg_fsync(fd) == 0;
		if (fd >= 0 && close(fd) != 0)
			written = false;
		written = written && rename(tmp, ours) == 0;	/* replaces a file or link, never writes through one */
		if (!written)
			(void) unlink(tmp);	/* the next call tries again; this one reads the system's files alone */
	}
	rc = profile_init_path(psprintf("%s:%s", ours, theirs != NULL && theirs[0] != '\0' ? theirs : "/etc/krb5.conf"),
						   &profile);
	if (rc != 0)
		return rc;
	rc = krb5_init_context_profile(profile, 0, ctx);
	profile_release(profile);
	return rc;
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
	rc = tcp_context(&ctx);
	if (rc != 0)
	{
		const char *words = krb5_get_error_message(NULL, rc);

		mssql_error_fail(err, psprintf("Kerberos: the library could not start: %s. Check krb5.conf (or the "
									   "file KRB5_CONFIG names in the server's environment).", words));
		krb5_free_error_message(NULL, words);
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
		else if ((ok = cached_ticket(ctx, cc, client, server, &endtime)))
			retry_of(k)->delay = 0;	/* (another process may have renewed it) */
		else
			ok = renewed(ctx, k, cc, client, server, &endtime, err);
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
	static char *last_host = NULL;
	static int	last_port = 0;
	static char *last_spn = NULL;
	static TimestampTz last_at = 0;
	struct addrinfo hints;
	struct addrinfo *addrs = NULL;
	char	   *spn;

	if (strchr(host, '.') != NULL)
		return psprintf("MSSQLSvc/%s:%d", host, port);
	/* the name lookup runs at most every 10 minutes for a host, not at every cycle's ticket check */
	if (last_host != NULL && strcmp(last_host, host) == 0 && last_port == port &&
		!TimestampDifferenceExceeds(last_at, GetCurrentTimestamp(), 600 * 1000))
		return pstrdup(last_spn);
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
	if (last_host != NULL)
	{
		pfree(last_host);
		pfree(last_spn);
	}
	last_host = MemoryContextStrdup(TopMemoryContext, host);
	last_spn = MemoryContextStrdup(TopMemoryContext, spn);
	last_port = port;
	last_at = GetCurrentTimestamp();
	return spn;
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
