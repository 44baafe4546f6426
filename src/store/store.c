/*
 * store.c
 *     The one interface to the stores (store.h): which store a name is,
 *     whether a role may use it, where its locations point, and each
 *     request handed to the store's own file (objstore.c for S3,
 *     filestore.c and filestore_write.c for local directories). A new kind
 *     of store is one more case here; nothing above changes.
 *
 * A server is used as a role: its USAGE, and the role's user mapping (else
 * PUBLIC's) with the keys. A local store only by a role with the
 * privileges of pg_read_server_files, since its listings and objects
 * reveal the server's files.
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "commands/tablespace.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/acl.h"
#include "utils/guc.h"

#include "core/fdw_options.h"
#include "core/io_interrupts.h"
#include "core/pg_compat.h"
#include "core/redact.h"
#include "core/settings.h"
#include "store/filestore.h"
#include "store/azure_sign.h"
#include "store/filestore_write.h"
#include "store/store.h"

/*
 * Largest object copied to a temporary file when temp_file_limit is -1 (no
 * limit): 64 GiB, some hundred million manifest lines, past what one gate
 * call can compare in reasonable time; a bound so a wrong key cannot fill
 * the disk.
 */
#define OBJECT_COPY_MAX ((size_t) 64 << 30)

/* Sets an error's fields (store.c's own codes: opening a store). */
static bool
open_error(StoreError *err, const char *code, char *message)
{
	err->http_status = 0;
	strlcpy(err->code, code, sizeof(err->code));
	strlcpy(err->message, message, sizeof(err->message));
	return false;
}

/* Remembers a secret, for redaction, when it is long enough to be told from text. */
static void
keep_secret(ObjectStore *s, const char *value)
{
	if (value != NULL && strlen(value) >= REDACT_MIN_SECRET)
		s->secrets = lappend(s->secrets, pstrdup(value));
}

/*
 * Remembers the signature of a SAS token (its sig parameter) apart, as
 * sent and decoded: an error may quote it without the rest of the token.
 */
static void
keep_sas_signature(ObjectStore *s, const char *sas)
{
	const char *sig = sas ? strstr(sas, "sig=") : NULL;
	char	   *value;
	char	   *decoded;

	if (sig == NULL || (sig != sas && sig[-1] != '&'))
		return;
	value = pnstrdup(sig + 4, strcspn(sig + 4, "&"));
	decoded = palloc(strlen(value) + 1);
	keep_secret(s, value);
	if (azure_url_decode(value, strlen(value), decoded, strlen(value) + 1))
		keep_secret(s, decoded);
}

/*
 * A role as messages name it: "name", or its OID when it was dropped
 * meanwhile (a worker opens stores as roles that may vanish mid-poll).
 */
static char *
role_label(Oid role)
{
	const char *name = GetUserNameFromId(role, true);

	return name != NULL ? psprintf("\"%s\"", name) : psprintf("with OID %u (dropped)", role);
}

/*
 * Opens a local directory, a file:///absolute/path URL, for role: only
 * with the privileges of pg_read_server_files.
 */
static bool
open_file_store(const char *name, Oid role, ObjectStore *out, StoreError *err)
{
	if (strncmp(name, "file:///", 8) != 0)
		return open_error(err, "NotALocalStoreURL", psprintf("\"%s\" is not a local store URL", name));
	if (!has_privs_of_role(role, ROLE_PG_READ_SERVER_FILES))
		return open_error(err, "LocalStoreDenied", psprintf("permission denied to read local store \"%s\"", name));
	store_open_local(filestore_root(name), out);
	out->name = pstrdup(name);
	return true;
}

/*
 * The Blob endpoint of an account: the server's endpoint option without
 * its trailing "/", else https://<account>.blob.core.windows.net.
 */
static const char *
azure_endpoint(const char *option, const char *account)
{
	size_t		len;

	if (option == NULL)
		return psprintf("https://%s.blob.core.windows.net", account);
	len = strlen(option);
	while (len > 0 && option[len - 1] == '/')
		len--;
	return pnstrdup(option, len);
}

/*
 * Opens a finalize_s3 server for role: its options, the role's keys, the
 * limits of the settings.
 */
static bool
open_s3(ForeignServer *server, UserMapping *um, ObjectStore *out, StoreError *err)
{
	S3Location *loc = &out->remote.s3;

	out->kind = STORE_S3;
	loc->endpoint = fdw_option_value(server->options, "endpoint", "https://s3.amazonaws.com");
	loc->region = fdw_option_value(server->options, "region", "us-east-1");
	loc->bucket = fdw_option_value(server->options, "bucket", "");
	loc->virtual_host = strcmp(fdw_option_value(server->options, "url_style", "path"), "virtual") == 0;
	loc->access_key = fdw_option_value(um->options, "access_key_id", "");
	loc->secret_key = fdw_option_value(um->options, "secret_access_key", "");
	loc->session_token = fdw_option_value(um->options, "session_token", NULL);
	if (loc->bucket[0] == '\0')
		return open_error(err, "NoBucket", psprintf("server \"%s\" has no bucket option", server->servername));
	keep_secret(out, loc->access_key);
	keep_secret(out, loc->secret_key);
	keep_secret(out, loc->session_token);
	store_bases_s3(&out->bases, loc->bucket);
	return true;
}

/*
 * Opens a finalize_azure server for role: its options (azure_options.c
 * checked them), the role's credentials, which say the authorization:
 * account_key (Shared Key), sas_token, or client_id and client_secret
 * (Entra ID).
 */
static bool
open_azure(ForeignServer *server, UserMapping *um, ObjectStore *out, StoreError *err)
{
	AzureLocation *az = &out->remote.az;
	const char *tenant = fdw_option_value(um->options, "tenant_id", NULL);

	out->kind = STORE_AZURE;
	out->remote.azure = true;
	az->account = fdw_option_value(server->options, "account", "");
	az->container = fdw_option_value(server->options, "container", "");
	az->endpoint = azure_endpoint(fdw_option_value(server->options, "endpoint", NULL), az->account);
	az->page_size = atoi(fdw_option_value(server->options, "page_size", "5000"));
	out->remote.ca_file = fdw_option_value(server->options, "ca_file", NULL);
	az->account_key = fdw_option_value(um->options, "account_key", NULL);
	az->sas_token = fdw_option_value(um->options, "sas_token", NULL);
	az->client_id = fdw_option_value(um->options, "client_id", NULL);
	az->client_secret = fdw_option_value(um->options, "client_secret", NULL);
	az->scope = fdw_option_value(server->options, "scope", "https://storage.azure.com/.default");
	az->token_endpoint = fdw_option_value(server->options, "token_endpoint", NULL);
	if (az->token_endpoint == NULL && tenant != NULL)
		az->token_endpoint = psprintf("https://login.microsoftonline.com/%s/oauth2/v2.0/token", tenant);
	if (az->account[0] == '\0' || az->container[0] == '\0')
		return open_error(err, "NoContainer",
						  psprintf("server \"%s\" lacks its account or container option", server->servername));
	az->auth = az->account_key ? AZURE_SHARED_KEY : az->sas_token ? AZURE_SAS : AZURE_OAUTH;
	if (az->sas_token != NULL && az->sas_token[0] == '?')
		az->sas_token++;
	if (az->auth == AZURE_OAUTH && (az->client_id == NULL || az->client_secret == NULL || az->token_endpoint == NULL))
		return open_error(err, "NoCredentials",
						  psprintf("the user mapping for server \"%s\" has no account_key, sas_token, or tenant_id, "
								   "client_id and client_secret", server->servername));
	keep_secret(out, az->account_key);
	keep_secret(out, az->sas_token);
	keep_sas_signature(out, az->sas_token);
	keep_secret(out, az->client_secret);
	store_bases_azure(&out->bases, az->account, az->container, az->endpoint);
	return true;
}

/*
 * Opens the store called name (a server of a store's wrapper, or a
 * file:///path) for role; false with err set (never raising) when there is
 * none, role may not use it, or it is misconfigured. The codes:
 * NoSuchServer, NotAStore, PermissionDenied, NoUserMapping, NoBucket,
 * NoContainer, NoCredentials, NotALocalStoreURL, LocalStoreDenied.
 */
bool
store_try_open(const char *name, Oid role, ObjectStore *out, StoreError *err)
{
	ForeignServer *server;
	UserMapping *um;
	const char *fdw;

	memset(out, 0, sizeof(*out));
	memset(err, 0, sizeof(*err));
	if (strncmp(name, "file:", 5) == 0)
		return open_file_store(name, role, out, err);
	server = GetForeignServerByName(name, true);
	if (server == NULL)
		return open_error(err, "NoSuchServer", psprintf("there is no server \"%s\"", name));
	fdw = GetForeignDataWrapper(server->fdwid)->fdwname;
	if (strcmp(fdw, "finalize_s3") != 0 && strcmp(fdw, "finalize_azure") != 0)
		return open_error(err, "NotAStore", psprintf("server \"%s\" is not an object store", name));
	out->kind = strcmp(fdw, "finalize_azure") == 0 ? STORE_AZURE : STORE_S3;	/* for the hints */
	if (compat_server_aclcheck(server->serverid, role) != ACLCHECK_OK)
		return open_error(err, "PermissionDenied", psprintf("permission denied for server %s", name));
	um = fdw_user_mapping(role, server->serverid);
	if (um == NULL)
		return open_error(err, "NoUserMapping", psprintf("no user mapping for role %s on server \"%s\"",
														 role_label(role), name));
	out->name = pstrdup(server->servername);
	out->serverid = server->serverid;
	out->remote.connect_timeout_ms = finalize_s3_connect_timeout_ms;
	out->remote.timeout_ms = finalize_s3_timeout_ms;
	out->remote.max_pages = finalize_s3_max_pages;
	if (strcmp(fdw, "finalize_azure") == 0)
		return open_azure(server, um, out, err);
	return open_s3(server, um, out, err);
}

/*
 * Opens the store called name for role as store_try_open does, raising
 * the failure (each says how to fix it).
 */
void
store_open(const char *name, Oid role, ObjectStore *out)
{
	StoreError	err;

	if (!store_try_open(name, role, out, &err))
	{
		out->name = name;
		store_raise(out, NULL, &err);
	}
}

/*
 * A local directory (an absolute path) whose use was allowed where it was
 * declared (a publication's marker directory).
 */
void
store_open_local(const char *root, ObjectStore *out)
{
	memset(out, 0, sizeof(*out));
	out->kind = STORE_FILE;
	out->root = pstrdup(root);
	out->name = psprintf("file://%s", root);
	store_bases_file(&out->bases, root);
}

/* The canonical beginning of the store's locations ("s3://bucket/"). */
const char *
store_base(const ObjectStore *s)
{
	return s->bases.text[0];
}

/*
 * The key a location names in the store (in any of its forms, store_key.c),
 * a pointer into location, or NULL when it is no object of the store.
 */
const char *
store_key_of(const ObjectStore *s, const char *location)
{
	return store_bases_key(&s->bases, location);
}

/*
 * Whether a location is a URL of the store with a query or a fragment (a
 * SAS token pasted with it): store_key_of refuses it, and the caller must
 * not echo it.
 */
bool
store_location_has_query(const ObjectStore *s, const char *location)
{
	return store_bases_query(&s->bases, location);
}

/*
 * A location as a message may show it: a URL of the store with a query or a
 * fragment (store_location_has_query) cut before them, since the query may
 * be a SAS token's signature; any other location whole.
 */
const char *
store_location_shown(const ObjectStore *s, const char *location)
{
	if (!store_location_has_query(s, location))
		return location;
	return psprintf("%.*s?...", (int) strcspn(location, "?#"), location);
}

/* The store as messages name it: bucket "b" of server "s", local store "file:///d". */
char *
store_describe(const ObjectStore *s)
{
	if (s->kind == STORE_S3)
		return psprintf("bucket \"%s\" of server \"%s\"", s->remote.s3.bucket, s->name);
	if (s->kind == STORE_AZURE)
		return psprintf("container \"%s\" of server \"%s\"", s->remote.az.container, s->name);
	return psprintf("local store \"%s\"", s->name);
}

/*
 * What the store is, to know it again: its server (a server dropped and
 * created again under its name is another) and where its objects live
 * (endpoint and bucket or container, or the directory). A table read
 * through a store whose identity changed may be another table.
 */
char *
store_identity(const ObjectStore *s)
{
	if (s->kind == STORE_S3)
		return psprintf("%u s3 %s %s%s", s->serverid, s->remote.s3.endpoint, s->remote.s3.bucket,
						s->remote.s3.virtual_host ? " virtual-host" : "");
	if (s->kind == STORE_AZURE)
		return psprintf("%u azure %s %s", s->serverid, s->remote.az.endpoint, s->remote.az.container);
	return psprintf("file %s", s->root != NULL ? s->root : s->name);
}

/* Whether the store's listings carry checksums it computed (a local store's MD5s). */
bool
store_etags_computed(const ObjectStore *s)
{
	return s->kind == STORE_FILE;
}

/*
 * Lists every object whose key starts with prefix into sink, a batch at a
 * time; false with err set when a remote store fails (an interrupt that
 * arrived meanwhile is served first).
 */
bool
store_list(const ObjectStore *s, const char *prefix, ListingSink *sink, StoreError *err)
{
	bool		ok;

	memset(err, 0, sizeof(*err));
	if (s->kind == STORE_FILE)
	{
		filestore_list(s->root, prefix, sink, sink->wants_checksum, sink, sink->in_order);
		return true;
	}
	ok = objstore_list(&s->remote, prefix, sink, err);
	io_interrupts_rethrow();
	return ok;
}

/*
 * Reads one small object whole into *body (palloc'd, NUL-terminated):
 * *found false, and true returned, when there is none at key; false with
 * err set when the store fails or the object is longer than max_bytes
 * (ResponseTooLarge).
 */
bool
store_read(const ObjectStore *s, const char *key, size_t max_bytes, char **body, size_t *len, bool *found,
		   StoreError *err)
{
	bool		ok;

	memset(err, 0, sizeof(*err));
	if (s->kind == STORE_FILE)
		return filestore_read_small(s->root, key, max_bytes, body, len, found, err);
	ok = objstore_read(&s->remote, key, max_bytes, body, len, found, err);
	io_interrupts_rethrow();
	return ok;
}

/*
 * Reads a remote object through a temporary file: its body goes there as
 * it arrives (libcurl is on the stack meanwhile, and nothing may raise
 * there), then is read back a chunk at a time into feed. The file is
 * deleted on close, and at the end of the transaction whatever happens; it
 * goes to temp_tablespaces, and since libcurl writes it directly (fd.c
 * does not see those writes) the body is stopped at temp_file_limit here
 * (TempFileLimit).
 */
static bool
read_through_file(const ObjectStore *s, const char *key, size_t max_bytes, FileChunkFn feed, void *arg,
				  StoreError *err)
{
	size_t		temp_limit = temp_file_limit >= 0 ? (size_t) temp_file_limit * 1024 : OBJECT_COPY_MAX;
	size_t		limit = Min(temp_limit, max_bytes);
	File		tmp;
	char	   *buf;
	off_t		off = 0;
	int			n;
	bool		ok;

	/* OpenTemporaryFile uses temp_tablespaces only once they are prepared. */
	PrepareTempTablespaces();
	tmp = OpenTemporaryFile(false);
	ok = objstore_get(&s->remote, key, FileGetRawDesc(tmp), limit, err);
	io_interrupts_rethrow();
	if (!ok)
	{
		FileClose(tmp);
		if (strcmp(err->code, "ResponseTooLarge") == 0 && limit >= temp_limit)
			strlcpy(err->code, "TempFileLimit", sizeof(err->code));
		return false;
	}
	buf = palloc(65536);
	while ((n = FileRead(tmp, buf, 65536, off, 0)) != 0)
	{
		if (n < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read the temporary copy of object \"%s%s\": %m", store_base(s), key)));
		feed(arg, buf, n);
		off += n;
	}
	pfree(buf);
	FileClose(tmp);
	return true;
}

/*
 * Reads the object at key a chunk at a time into feed, of any size up to
 * max_bytes: false with err set when the store fails, the object is longer
 * than max_bytes (ResponseTooLarge, nothing past it fed) or than a
 * temporary copy may be (TempFileLimit). A local store's failures raise.
 */
bool
store_read_chunks(const ObjectStore *s, const char *key, size_t max_bytes, FileChunkFn feed, void *arg,
				  StoreError *err)
{
	memset(err, 0, sizeof(*err));
	if (s->kind == STORE_FILE)
	{
		if (filestore_read(s->root, key, max_bytes, feed, arg))
			return true;
		return open_error(err, "ResponseTooLarge", psprintf("the object is longer than %zu bytes", max_bytes));
	}
	return read_through_file(s, key, max_bytes, feed, arg, err);
}

/*
 * Writes one object whole, atomically: a reader sees the old object or
 * the new one. False with err set when the store fails.
 */
bool
store_put(const ObjectStore *s, const char *key, const char *body, size_t len, const char *content_type,
		  StoreError *err)
{
	bool		ok;

	memset(err, 0, sizeof(*err));
	if (s->kind == STORE_FILE)
		return filestore_replace(s->root, key, body, len, err);
	ok = objstore_put(&s->remote, key, body, len, content_type, err);
	io_interrupts_rethrow();
	return ok;
}
