/*
 * catalog_config.c
 *     Reads a finalize_iceberg server in the lake worker's transaction: its
 *     options (the validator checked each, iceberg_options.c) and the
 *     credentials of its owner's user mapping (else PUBLIC's), as the
 *     alerts worker reads a webhook's; a release's, with its caller's.
 */
#include "postgres.h"

#include "foreign/foreign.h"
#include "utils/syscache.h"

#include "core/fdw_options.h"
#include "lake/catalog.h"

#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_POLL_MS 10000

/* A copy of an option, remembered for redaction when it is a secret; NULL when absent. */
static char *
option(LakeCatalog *cat, List *options, const char *name, bool secret)
{
	const char *value = fdw_option_value(options, name, NULL);

	if (value == NULL)
		return NULL;
	if (secret)
		cat->secrets = lappend(cat->secrets, pstrdup(value));
	return pstrdup(value);
}

/* An interval option in milliseconds (the validator checked it). */
static long
option_ms(List *options, const char *name, long dflt)
{
	const char *text = fdw_option_value(options, name, NULL);
	int64		usecs;

	if (text == NULL || !fdw_option_usecs(text, &usecs) || usecs <= 0)
		return dflt;
	return (long) Max(usecs / 1000, 1);
}

/*
 * The catalog of a foreign server, copied into cxt, with the credentials
 * of its owner's user mapping (the lake worker's); NULL with *error (a
 * sentence naming the server) when it is gone or is another wrapper's, or
 * its options do not go together.
 */
LakeCatalog *
lake_catalog_config(Oid serverid, MemoryContext cxt, char **error)
{
	return lake_catalog_config_as(serverid, GetForeignServer(serverid)->owner, cxt, error);
}

/*
 * The catalog of a foreign server with the credentials of user's mapping
 * (else PUBLIC's, else none): a release reads and commits as its caller.
 */
LakeCatalog *
lake_catalog_config_as(Oid serverid, Oid user, MemoryContext cxt, char **error)
{
	ForeignServer *server = GetForeignServer(serverid);
	List	   *um = NIL;
	MemoryContext old;
	LakeCatalog *cat;
	const char *region;
	size_t		n;

	*error = NULL;
	if (strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_iceberg") != 0)
	{
		*error = psprintf("server \"%s\" is not a finalize_iceberg catalog", server->servername);
		return NULL;
	}
	um = fdw_user_mapping_options(user, serverid);

	old = MemoryContextSwitchTo(cxt);
	cat = palloc0(sizeof(LakeCatalog));
	cat->name = pstrdup(server->servername);
	cat->uri = option(cat, server->options, "uri", false);
	cat->warehouse = option(cat, server->options, "warehouse", false);
	cat->prefix = option(cat, server->options, "prefix", false);
	cat->scope = option(cat, server->options, "scope", false);
	cat->token = option(cat, um, "token", true);
	cat->client_id = option(cat, um, "client_id", false);
	cat->client_secret = option(cat, um, "client_secret", true);
	cat->access_key_id = option(cat, um, "access_key_id", false);
	cat->secret_access_key = option(cat, um, "secret_access_key", true);
	cat->session_token = option(cat, um, "session_token", true);
	cat->timeout_ms = option_ms(server->options, "timeout", DEFAULT_TIMEOUT_MS);
	cat->poll_interval_ms = option_ms(server->options, "poll_interval", DEFAULT_POLL_MS);
	if (cat->uri != NULL)
	{
		n = strlen(cat->uri);
		while (n > 0 && cat->uri[n - 1] == '/')
			cat->uri[--n] = '\0';
	}
	cat->oauth_uri = option(cat, server->options, "oauth_uri", false);
	if (cat->oauth_uri == NULL && cat->uri != NULL)
		cat->oauth_uri = psprintf("%s/v1/oauth/tokens", cat->uri);
	region = fdw_option_value(server->options, "region", NULL);
	if (cat->access_key_id != NULL && region != NULL)
		cat->sigv4 = psprintf("aws:amz:%s:%s", region, fdw_option_value(server->options, "signing_name", "glue"));
	MemoryContextSwitchTo(old);

	if (cat->uri == NULL)
		*error = psprintf("server \"%s\" has no option uri", server->servername);
	else if (cat->access_key_id != NULL && region == NULL)
		*error = psprintf("server \"%s\" has AWS keys in its user mapping but no option region to sign with",
						  server->servername);
	return *error == NULL ? cat : NULL;
}
