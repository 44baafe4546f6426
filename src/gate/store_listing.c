/*
 * store_listing.c
 *     The gate's store steps: the objects under a manifest's prefix in its
 *     store, and the objects it reads there (the manifest's files_location,
 *     a snapshot's manifests), all as the caller, through store/store.h.
 *
 * Everything here runs as the caller, never as the extension's owner: the
 * caller's user mapping holds the keys, the caller needs USAGE on the
 * server, and a local file:// store needs pg_read_server_files (store.c
 * checks each, and says what to do about a refusal).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"

#include "gate/store_listing.h"

/*
 * For a local store: whether a listed file needs a checksum computed,
 * which only the manifest entries with an ETag do (hashing every file would
 * read the whole partition for nothing).
 */
static bool
manifest_has_etag(const char *path, void *arg)
{
	return inventory_wants_checksum((InvComparison *) arg, path, strlen(path));
}

/*
 * Opens the manifest's store as the caller (USAGE and a user mapping, or
 * pg_read_server_files), raising what stops it.
 */
void
gate_open_store(const Manifest *m, ObjectStore *out)
{
	StoreError	err;

	if (store_try_open(m->store, GetUserId(), out, &err))
		return;
	out->name = m->store;
	/* A name that is no store is the manifest's mistake; a refusal is the role's. */
	if (strcmp(err.code, "NoSuchServer") == 0 || strcmp(err.code, "NotAStore") == 0 ||
		strcmp(err.code, "NotALocalStoreURL") == 0)
		store_raise(out, "invalid manifest: field \"store\"", &err);
	store_raise(out, NULL, &err);
}

/*
 * Lists the manifest's prefix in its store, as the caller, with the
 * caller's credentials, into the comparison with the manifest (begun by
 * the caller), a batch at a time: the listing is never held whole.
 */
void
list_store(const Manifest *m, InvComparison *cmp)
{
	ObjectStore s;
	StoreError	err;
	bool		any_etag = m->files_any_etag;

	gate_open_store(m, &s);
	for (int i = 0; i < m->files.n && !any_etag; i++)
		any_etag = m->files.items[i].etag != NULL;
	cmp->etags_computed = store_etags_computed(&s) && cmp->sorted_listing != NULL && m->files_any_etag;
	/* A store that computes checksums computes only those the manifest has. */
	cmp->sink.wants_checksum = any_etag ? manifest_has_etag : NULL;
	/* A sorted comparison spools a listing that comes in order instead of sorting it. */
	cmp->sink.in_order = cmp->sorted_listing != NULL;
	if (!store_list(&s, m->prefix, &cmp->sink, &err))
		store_raise(&s, psprintf("list \"%s\" in %s", m->prefix, store_describe(&s)), &err);
}

/*
 * The key a manifest's files_location names in its own store, or an error:
 * the manifest must not make the gate read anything else with the
 * caller's credentials.
 */
static const char *
location_key(const Manifest *m, const ObjectStore *s)
{
	const char *key = store_key_of(s, m->files_location);

	if (store_location_has_query(s, m->files_location))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: field \"files_location\" is a URL with a query or a fragment"),
				 errdetail("A blob of the store \"%s\" is named by its URL alone; the query is not shown, since it "
						   "may hold a SAS token's signature.", m->store),
				 errhint("Write the location as %s<key>: the server's user mapping holds the credentials.",
						 store_base(s))));
	if (key == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: field \"files_location\" \"%s\" is not an object of the partition's store",
						m->files_location),
				 errdetail("The manifest's files are read from the store \"%s\" with the caller's rights, so the "
						   "location must be %s<key>, the key relative, without empty, \".\" or \"..\" parts.",
						   m->store, store_base(s)),
				 errhint("Write the manifest object into the same store as the data, next to the generation's prefix.")));
	return key;
}

/*
 * Raises the error for a manifest object larger than the temporary copy
 * may be: the object, the limit and what to change.
 */
static void
manifest_too_large(const Manifest *m, const ObjectStore *s)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("manifest object \"%s\" of server \"%s\" is too large", m->files_location, s->name),
			 temp_file_limit >= 0
			 ? errdetail("It is longer than temp_file_limit (%dkB): the object is copied to a temporary file "
						 "before its lines are read.", temp_file_limit)
			 : errdetail("It is longer than the most the gate copies to a temporary file when "
						 "temp_file_limit is -1 (64 GiB)."),
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
 * Reads an object of the store (the manifest's files_location when key is
 * NULL) a chunk at a time into feed, raising a failure of the store in its
 * words. False, with nothing past max_bytes fed, when the object is longer
 * than max_bytes.
 */
static bool
read_object(const Manifest *m, const ObjectStore *s, const char *given_key, size_t max_bytes,
			FileChunkFn feed, void *arg)
{
	const char *key = given_key != NULL ? given_key : location_key(m, s);
	const char *shown = given_key != NULL ? psprintf("%s%s", store_base(s), key) : m->files_location;
	StoreError	err;

	if (store_read_chunks(s, key, max_bytes, feed, arg, &err))
		return true;
	if (strcmp(err.code, "ResponseTooLarge") == 0)
		return false;
	if (strcmp(err.code, "TempFileLimit") == 0)
		manifest_too_large(m, s);
	store_raise_hint(s, psprintf("read %s \"%s\" of server \"%s\"", given_key != NULL ? "object" : "manifest object",
								 shown, s->name),
					 &err,
					 !store_object_missing(&err) ? NULL
					 : given_key != NULL ? "The table's metadata names an object the store does not have: check the snapshot, and that it was not expired."
					 : "Check the \"files_location\" field of the manifest: the pipeline writes that object before it calls the gate.");
	return false;
}

/*
 * Reads the manifest's files_location, as the caller and with the same
 * checks as the listing, into lines.
 */
void
read_manifest_files(const Manifest *m, ManifestLines *lines)
{
	ObjectStore s;

	gate_open_store(m, &s);
	(void) read_object(m, &s, NULL, SIZE_MAX, feed_lines, lines);
}

/*
 * Reads the object at key of the store s (opened by gate_open_store for
 * the manifest m), as the caller, a chunk at a time into feed: what a
 * release through an Iceberg catalog reads of a snapshot (its manifest
 * list and manifests). False, with nothing past max_bytes fed, when it is
 * longer than that.
 */
bool
store_read_object(const Manifest *m, const ObjectStore *s, const char *key, size_t max_bytes, FileChunkFn feed,
				  void *arg)
{
	return read_object(m, s, key, max_bytes, feed, arg);
}
