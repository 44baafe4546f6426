/*
 * store_listing.c
 *     The gate's listing step: the objects under a manifest's prefix in its
 *     store, read as the caller.
 *
 * Everything here runs as the caller, never as the extension's owner: the
 * caller's user mapping holds the keys, the caller needs USAGE on the
 * server, and a local file:// store needs pg_read_server_files. Each
 * refusal names what the publisher (or an administrator) can do about it.
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_foreign_server.h"
#include "commands/tablespace.h"
#include "storage/fd.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/syscache.h"

#include "core/fdw_options.h"
#include "core/io_interrupts.h"
#include "core/pg_compat.h"
#include "core/settings.h"
#include "gate/filestore.h"
#include "gate/objstore.h"
#include "gate/store_listing.h"
#include "gate/store_object.h"

/*
 * For the file store: whether a listed file needs a checksum computed,
 * which only the manifest entries with an ETag do (hashing every file would
 * read the whole partition for nothing).
 */
static bool
manifest_has_etag(const char *path, void *arg)
{
	return inventory_wants_checksum((InvComparison *) arg, path, strlen(path));
}

/* A hint for an S3 error code: what the publisher can do. */
static const char *
s3_hint(const S3Error *err)
{
	if (strcmp(err->code, "AccessDenied") == 0 || strcmp(err->code, "InvalidAccessKeyId") == 0 ||
		strcmp(err->code, "SignatureDoesNotMatch") == 0)
		return "Check access_key_id and secret_access_key in your user mapping for the server, the server's region, and the bucket's policy.";
	if (strcmp(err->code, "NoSuchBucket") == 0)
		return "Check the bucket option of the server.";
	if (strcmp(err->code, "Timeout") == 0)
		return "The store did not answer within finalize.s3_timeout; try again, or raise it.";
	if (strcmp(err->code, "ConnectionFailed") == 0)
		return "Check the endpoint option of the server and that the store is reachable from the database server.";
	if (strcmp(err->code, "RepeatedContinuationToken") == 0 || strcmp(err->code, "TooManyPages") == 0)
		return "The store's listing does not end: check the endpoint, or (for a partition of that many objects) "
			"have a superuser raise finalize.s3_max_pages.";
	if (strcmp(err->code, "InvalidCredentials") == 0)
		return "Set the keys of your user mapping again: ALTER USER MAPPING FOR CURRENT_USER SERVER ... OPTIONS (SET ...).";
	if (strcmp(err->code, "MalformedResponse") == 0)
		return "The endpoint does not answer like S3; check the endpoint and url_style options.";
	if (err->http_status >= 500)
		return "The store had an internal problem; try again later.";
	return "Nothing was released; fix the cause and call finalize.release_gate again.";
}

/*
 * A local store is only for callers who could read the server's files
 * anyway: its listing and its objects reveal names, sizes and contents.
 */
static void
check_file_store_access(const Manifest *m, Oid caller)
{
	if (!has_privs_of_role(caller, ROLE_PG_READ_SERVER_FILES))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to list local store \"%s\"", m->store),
				 errdetail("Listing files on the database server needs the privileges of pg_read_server_files."),
				 errhint("Publish through a finalize_s3 server, or have an administrator grant pg_read_server_files.")));
}

/*
 * Lists a local file:// store: only for callers who could read the
 * server's files anyway, since the listing reveals names and sizes.
 */
static void
list_file_store(const Manifest *m, Oid caller, InvComparison *cmp)
{
	char	   *root;
	bool		any_etag = false;

	check_file_store_access(m, caller);
	root = filestore_root(m->store);
	any_etag = m->files_any_etag;
	cmp->etags_computed = cmp->sorted_listing != NULL && any_etag;
	for (int i = 0; i < m->files.n && !any_etag; i++)
		any_etag = m->files.items[i].etag != NULL;
	/* A sorted comparison spools a listing that comes in order instead of sorting it. */
	filestore_list(root, m->prefix, &cmp->sink, any_etag ? manifest_has_etag : NULL, cmp,
				   cmp->sorted_listing != NULL);
}

/*
 * The manifest's object-store server, checked before any key is read: it
 * exists, it is a finalize_s3 server, the caller may use it and has a user
 * mapping for it (each failure says how to fix it).
 */
static ForeignServer *
s3_server(const Manifest *m, Oid caller)
{
	ForeignServer *server = GetForeignServerByName(m->store, true);

	if (server == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: field \"store\": there is no server \"%s\"", m->store),
				 errhint("Name a finalize_s3 server (CREATE SERVER ... FOREIGN DATA WRAPPER finalize_s3) or a file:///path.")));
	if (strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_s3") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: field \"store\": server \"%s\" is not an object store", m->store),
				 errhint("Name a server of the finalize_s3 foreign-data wrapper.")));
	if (compat_server_aclcheck(server->serverid, caller) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for server %s", server->servername),
				 errhint("An administrator can run GRANT USAGE ON FOREIGN SERVER %s TO the publishing role.",
						 quote_identifier(server->servername))));
	if (!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(caller),
							   ObjectIdGetDatum(server->serverid)) &&
		!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(InvalidOid),
							   ObjectIdGetDatum(server->serverid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("no user mapping for role \"%s\" on server \"%s\"",
						GetUserNameFromId(caller, false), server->servername),
				 errhint("Create one: CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (access_key_id '...', secret_access_key '...').",
						 quote_identifier(server->servername))));
	return server;
}

/*
 * Where and how objstore_list goes: the server's options, the caller's
 * keys from the user mapping, and the limits set by the settings.
 */
static void
s3_location(const ForeignServer *server, const UserMapping *um, S3Location *loc)
{
	if (!store_s3_location(server, um, loc))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("server \"%s\" has no bucket option", server->servername),
				 errhint("Name the bucket: ALTER SERVER %s OPTIONS (ADD bucket '...').",
						 quote_identifier(server->servername))));
}

/*
 * Lists a finalize_s3 server with the caller's keys; a failed listing is
 * raised here, in SQL terms, since objstore.c must not raise mid-transfer.
 */
static void
list_s3_store(const Manifest *m, Oid caller, InvComparison *cmp)
{
	ForeignServer *server = s3_server(m, caller);
	UserMapping *um = GetUserMapping(caller, server->serverid);
	S3Location	loc;
	S3Error		err;
	bool		ok;

	s3_location(server, um, &loc);
	ok = objstore_list(&loc, m->prefix, &cmp->sink, &err);
	/* An interrupt that arrived meanwhile (a cancel) is served first. */
	io_interrupts_rethrow();
	if (!ok)
	{
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("could not list \"%s\" in bucket \"%s\" of server \"%s\": %s",
						m->prefix, loc.bucket, server->servername, err.code),
				 err.http_status > 0
				 ? errdetail("The store answered HTTP %ld: %s", err.http_status, err.message)
				 : errdetail("%s", err.message),
				 errhint("%s", s3_hint(&err))));
	}
}

/*
 * Lists the manifest's prefix in its store, as the caller, with the
 * caller's credentials, into the comparison with the manifest (begun by
 * the caller), a batch at a time: the listing is never held whole.
 */
void
list_store(const Manifest *m, InvComparison *cmp)
{
	Oid			caller = GetUserId();

	if (strncmp(m->store, "file://", 7) == 0)
		list_file_store(m, caller, cmp);
	else
		list_s3_store(m, caller, cmp);
}

/*
 * The key a location (s3://bucket/key or file:///path) names in the
 * manifest's store, or NULL when it is not one of its objects: another
 * bucket, another server, a file outside the local store's root, a key
 * with empty, "." or ".." parts. base is "file://<root>/" or "s3://<bucket>/".
 */
static char *
store_key(const char *location, const char *base)
{
	size_t		blen = strlen(base);
	const char *key = location + blen;

	if (strncmp(location, base, blen) != 0 || !path_is_safe(key, strlen(key)))
		return NULL;
	return pstrdup(key);
}

/*
 * The key a manifest's files_location names in its own store, or an error:
 * the manifest must not make the gate read anything else with the
 * caller's credentials.
 */
static char *
location_key(const Manifest *m, const char *base)
{
	char	   *key = store_key(m->files_location, base);

	if (key == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: field \"files_location\" \"%s\" is not an object of the partition's store",
						m->files_location),
				 errdetail("The manifest's files are read from the store \"%s\" with the caller's rights, so the "
						   "location must be %s<key>, the key relative, without empty, \".\" or \"..\" parts.",
						   m->store, base),
				 errhint("Write the manifest object into the same store as the data, next to the generation's prefix.")));
	return key;
}

/*
 * Largest manifest object copied from S3 when temp_file_limit is -1 (no
 * limit): 64 GiB, some hundred million lines, past what one gate call can
 * compare in reasonable time; a bound so a wrong key cannot fill the disk.
 */
#define MANIFEST_OBJECT_MAX ((size_t) 64 << 30)

/*
 * Raises the error for a manifest object larger than the temporary copy
 * may be: the object, the limit and what to change.
 */
static void
manifest_too_large(const Manifest *m, const ForeignServer *server, size_t limit)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("manifest object \"%s\" of server \"%s\" is too large", m->files_location, server->servername),
			 temp_file_limit >= 0
			 ? errdetail("It is longer than temp_file_limit (%dkB): the object is copied to a temporary file "
						 "before its lines are read.", temp_file_limit)
			 : errdetail("It is longer than %zu bytes, the most the gate copies to a temporary file when "
						 "temp_file_limit is -1.", limit),
			 errhint("Raise temp_file_limit for the session that calls finalize.release_gate (a superuser "
					 "setting), or check the \"files_location\" field of the manifest.")));
}

/* Feeds what a store's read gives to the manifest's lines. */
static void
feed_lines(void *arg, const char *data, size_t len)
{
	manifest_lines_feed((ManifestLines *) arg, data, len);
}

/*
 * The base of the manifest's store's locations, checked as the caller
 * (USAGE and a user mapping, or pg_read_server_files): "file://<root>/" or
 * "s3://<bucket>/"; a location that does not begin with it is no object of
 * the store.
 */
char *
store_location_base(const Manifest *m)
{
	Oid			caller = GetUserId();

	if (strncmp(m->store, "file://", 7) == 0)
	{
		char	   *root;

		check_file_store_access(m, caller);
		root = filestore_root(m->store);
		return psprintf("file://%s%s", root, strcmp(root, "/") == 0 ? "" : "/");
	}
	else
	{
		ForeignServer *server = s3_server(m, caller);
		S3Location	loc;

		s3_location(server, GetUserMapping(caller, server->serverid), &loc);
		return psprintf("s3://%s/", loc.bucket);
	}
}

/*
 * The key of a location in the manifest's store (see store_location_base),
 * or NULL when it is not one of its objects.
 */
char *
store_location_key(const char *location, const char *base)
{
	return store_key(location, base);
}

/*
 * Reads an object of a finalize_s3 server (the manifest's files_location,
 * or given_key when not NULL): a signed GET with the
 * caller's keys whose body goes to a temporary file as it arrives (libcurl
 * is on the stack meanwhile, and nothing may raise there), then read back
 * a chunk at a time into the manifest's lines. The file is deleted on
 * close, and at the end of the transaction whatever happens. It goes to
 * temp_tablespaces like any temporary file, and since libcurl writes it
 * directly (fd.c does not see those writes), the body is stopped at
 * temp_file_limit here. False, with nothing fed, when the object is
 * longer than max_bytes (the caller's limit, when it is the lower).
 */
static bool
read_s3_object(const Manifest *m, Oid caller, const char *given_key, size_t max_bytes, FileChunkFn feed,
			   void *arg)
{
	ForeignServer *server = s3_server(m, caller);
	UserMapping *um = GetUserMapping(caller, server->serverid);
	S3Location	loc;
	S3Error		err;
	File		tmp;
	size_t		temp_limit = temp_file_limit >= 0 ? (size_t) temp_file_limit * 1024 : MANIFEST_OBJECT_MAX;
	size_t		limit = Min(temp_limit, max_bytes);
	char	   *key;
	char	   *buf;
	off_t		off = 0;
	int			n;
	const char *shown;

	s3_location(server, um, &loc);
	key = given_key != NULL ? pstrdup(given_key) : location_key(m, psprintf("s3://%s/", loc.bucket));
	shown = given_key != NULL ? psprintf("s3://%s/%s", loc.bucket, key) : m->files_location;
	/* OpenTemporaryFile uses temp_tablespaces only once they are prepared. */
	PrepareTempTablespaces();
	tmp = OpenTemporaryFile(false);
	if (!objstore_get(&loc, key, FileGetRawDesc(tmp), limit, &err))
	{
		io_interrupts_rethrow();
		FileClose(tmp);
		if (strcmp(err.code, "ResponseTooLarge") == 0 && limit < temp_limit)
			return false;
		if (strcmp(err.code, "ResponseTooLarge") == 0)
			manifest_too_large(m, server, limit);
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("could not read %s \"%s\" of server \"%s\": %s",
						given_key != NULL ? "object" : "manifest object", shown, server->servername, err.code),
				 err.http_status > 0
				 ? errdetail("The store answered HTTP %ld: %s", err.http_status, err.message)
				 : errdetail("%s", err.message),
				 errhint("%s", strcmp(err.code, "NoSuchKey") != 0 ? s3_hint(&err)
						 : given_key != NULL ? "The table's metadata names an object the store does not have: check the snapshot, and that it was not expired."
						 : "Check the \"files_location\" field of the manifest: the pipeline writes that object before it calls the gate.")));
	}
	io_interrupts_rethrow();
	buf = palloc(65536);
	while ((n = FileRead(tmp, buf, 65536, off, 0)) != 0)
	{
		if (n < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read the temporary copy of object \"%s\": %m", shown)));
		feed(arg, buf, n);
		off += n;
	}
	pfree(buf);
	FileClose(tmp);
	return true;
}

/*
 * Reads the manifest's files_location, as the caller and with the same
 * checks as the listing, into lines: a local store's file below its root,
 * or an object of the server's bucket.
 */
void
read_manifest_files(const Manifest *m, ManifestLines *lines)
{
	Oid			caller = GetUserId();

	if (strncmp(m->store, "file://", 7) == 0)
	{
		char	   *root;
		char	   *key;

		check_file_store_access(m, caller);
		root = filestore_root(m->store);
		key = location_key(m, psprintf("file://%s%s", root, strcmp(root, "/") == 0 ? "" : "/"));
		(void) filestore_read(root, key, SIZE_MAX, feed_lines, lines);
	}
	else
		(void) read_s3_object(m, caller, NULL, SIZE_MAX, feed_lines, lines);
}

/*
 * Reads the object at key of the manifest's store (see store_location_key),
 * as the caller, a chunk at a time into feed: what a release through an
 * Iceberg catalog reads of a snapshot (its manifest list and manifests).
 * False, with nothing past max_bytes fed, when it is longer than that.
 */
bool
store_read_object(const Manifest *m, const char *key, size_t max_bytes, FileChunkFn feed, void *arg)
{
	Oid			caller = GetUserId();

	if (strncmp(m->store, "file://", 7) == 0)
	{
		check_file_store_access(m, caller);
		return filestore_read(filestore_root(m->store), key, max_bytes, feed, arg);
	}
	return read_s3_object(m, caller, key, max_bytes, feed, arg);
}
