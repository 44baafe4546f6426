/*
 * target.c
 *     Reads a webhook target in the alerts worker's transaction: the
 *     finalize_webhook server's options and the secrets of the user mapping
 *     of its owner (else PUBLIC's), the mapping the owner set up, as the
 *     source workers read their logins.
 */
#include "postgres.h"

#include "foreign/foreign.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "alert/target.h"
#include "core/fdw_options.h"
#include "core/http.h"
#include "core/period.h"
#include "core/redact.h"

#define DEFAULT_TIMEOUT_MS 10000

/* A secret option copied into cxt and remembered for redaction; NULL when absent. */
static const char *
load_secret(AlertTarget *t, List *options, const char *name)
{
	const char *value = fdw_option_value(options, name, NULL);

	if (value == NULL)
		return NULL;
	value = pstrdup(value);
	t->secret_values = lappend(t->secret_values, (char *) value);
	return value;
}

/*
 * Remembers every part of a secret URL (from the user mapping) for
 * redaction, not only the whole: a receiver quotes the path it was sent,
 * curl names the host it could not resolve or reach (a service whose token
 * is a sub-domain), an error may quote the user info, the query or the
 * fragment; and each piece of them long enough to be a token (labels of
 * the host, segments of the path, names and values of the query).
 */
static void
redact_url_parts(AlertTarget *t)
{
	ListCell   *lc;

	foreach(lc, http_url_parts(t->url))
	{
		char	   *part = (char *) lfirst(lc);
		char	   *pieces = pstrdup(part);
		char	   *save = NULL;

		t->secret_values = lappend(t->secret_values, part);
		for (char *piece = strtok_r(pieces, "/?&=.:@;#", &save); piece; piece = strtok_r(NULL, "/?&=.:@;#", &save))
			if (strlen(piece) >= REDACT_MIN_SECRET)
				t->secret_values = lappend(t->secret_values, pstrdup(piece));
		pfree(pieces);
	}
}

/*
 * The target of a delivery by name (a dump and restore keeps names, not
 * OIDs), copied into cxt; NULL with *error set when it was dropped or
 * renamed, belongs to another wrapper, or has no URL anywhere. Errors name
 * the server, never a secret.
 */
AlertTarget *
alert_target_load(const char *name, MemoryContext cxt, char **error)
{
	ForeignServer *server = GetForeignServerByName(name, true);
	MemoryContext old;
	AlertTarget *t;
	List	   *um_options = NIL;
	Oid			serverid;

	*error = NULL;
	if (server == NULL)
	{
		*error = psprintf("webhook target \"%s\" was dropped or renamed before this delivery", name);
		return NULL;
	}
	serverid = server->serverid;
	if (strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_webhook") != 0)
	{
		*error = psprintf("server \"%s\" is no longer a finalize_webhook target", server->servername);
		return NULL;
	}
	um_options = fdw_user_mapping_options(server->owner, serverid);

	old = MemoryContextSwitchTo(cxt);
	t = palloc0(sizeof(AlertTarget));
	t->name = pstrdup(server->servername);
	t->format = pstrdup(fdw_option_value(server->options, "format", "json"));
	t->timeout_ms = fdw_option_timeout_ms(server->options, DEFAULT_TIMEOUT_MS);
	t->url = (char *) load_secret(t, um_options, "url");
	if (t->url != NULL)
		redact_url_parts(t);
	else if (fdw_option_value(server->options, "url", NULL) != NULL)
		t->url = (char *) load_secret(t, server->options, "url");
	t->secrets.bearer_token = load_secret(t, um_options, "bearer_token");
	t->secrets.routing_key = load_secret(t, um_options, "routing_key");
	t->secrets.api_key = load_secret(t, um_options, "api_key");
	t->secrets.hmac_key = load_secret(t, um_options, "hmac_key");
	MemoryContextSwitchTo(old);
	if (t->url == NULL)
	{
		*error = psprintf("webhook target \"%s\" has no url: set it on the server or in its owner's user mapping",
						  t->name);
		return NULL;
	}
	return t;
}

/*
 * A text (an answer's body, curl's words) with every secret of the target
 * replaced (core/redact.c), so that a receiver echoing a header or a URL
 * cannot put one into the delivery's last_error. Applied to the whole
 * text before it is cut.
 */
char *
alert_redact(const AlertTarget *target, const char *text)
{
	return redact_secrets(text, target->secret_values);
}
