/*
 * store.h
 *     The one interface to the stores finalize reads and writes: a
 *     finalize_s3 server's bucket, a finalize_azure server's container
 *     (store/objstore.c), a local directory (file://, store/filestore.c).
 *     The gate, release_iceberg, the markers and the lake worker call these
 *     and never choose between stores.
 *
 * store_open raises (a session's call); store_try_open never does, for a
 * background worker that turns a failure into a condition. The
 * transfers (store_list, store_read, store_read_chunks, store_put) never
 * raise mid-transfer for a failure of a remote store: false with err set,
 * and the caller raises (store_raise) or records it. A local store's
 * listing and chunked read raise in the system's words, as they always did.
 *
 * A worker: store_try_open(name, the declaring role, &s, &err), then
 * store_key_of(&s, location) for the key a location names (NULL: no object
 * of the store, in any of its forms), store_read/store_list, and err.code
 * (store_object_missing for an absent object; 401/403 in err.http_status,
 * or AuthenticationFailed, AuthorizationFailure, AccessDenied, ..., for
 * credentials refused) into a condition; its message is already in the
 * store's words, redact_secrets(err.message, s.secrets) before keeping it.
 */
#ifndef FINALIZE_STORE_H
#define FINALIZE_STORE_H

#include "nodes/pg_list.h"

#include "store/listing.h"
#include "store/objstore.h"
#include "store/store_key.h"

typedef enum StoreKind
{
	STORE_FILE,					/* a local directory (file://) */
	STORE_S3,					/* a finalize_s3 server's bucket */
	STORE_AZURE					/* a finalize_azure server's container */
} StoreKind;

/* Where objects are read and written; keys are relative to it. */
typedef struct ObjectStore
{
	StoreKind	kind;
	const char *name;			/* the server's name or the file:// URL */
	Oid			serverid;		/* the server (InvalidOid: file://) */
	const char *root;			/* STORE_FILE: the directory below which no
								 * link is followed */
	RemoteStore remote;			/* STORE_S3, STORE_AZURE */
	StoreBases	bases;			/* the forms of its locations (store_key.c) */
	List	   *secrets;		/* the user mapping's secrets: redacted from
								 * every text that store_raise shows */
} ObjectStore;

extern void store_open(const char *name, Oid role, ObjectStore *out);
extern bool store_try_open(const char *name, Oid role, ObjectStore *out, StoreError *err);
extern void store_open_local(const char *root, ObjectStore *out);
extern const char *store_base(const ObjectStore *s);
extern const char *store_key_of(const ObjectStore *s, const char *location);
extern bool store_location_has_query(const ObjectStore *s, const char *location);
extern const char *store_location_shown(const ObjectStore *s, const char *location);
extern char *store_describe(const ObjectStore *s);
extern char *store_identity(const ObjectStore *s);
extern bool store_etags_computed(const ObjectStore *s);
extern bool store_list(const ObjectStore *s, const char *prefix, ListingSink *sink, StoreError *err);
extern bool store_read(const ObjectStore *s, const char *key, size_t max_bytes, char **body, size_t *len,
					   bool *found, StoreError *err);
extern bool store_read_chunks(const ObjectStore *s, const char *key, size_t max_bytes, FileChunkFn feed,
							  void *arg, StoreError *err);
extern bool store_put(const ObjectStore *s, const char *key, const char *body, size_t len,
					  const char *content_type, StoreError *err);
extern bool store_object_missing(const StoreError *err);
extern const char *store_hint(const ObjectStore *s, const StoreError *err);
extern void store_raise(const ObjectStore *s, const char *doing, const StoreError *err);
extern void store_raise_hint(const ObjectStore *s, const char *doing, const StoreError *err, const char *hint);

#endif							/* FINALIZE_STORE_H */
