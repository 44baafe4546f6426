/*
 * store_object.c
 *     One object of a store read whole or replaced whole, whatever the
 *     store: a finalize_s3 server's bucket (objstore.c) or a local
 *     directory (filestore_write.c). What a publication's marker uses, so
 *     that a new kind of store (Azure Blob Storage) is one more case here
 *     and nothing changes above.
 *
 * Neither raises for a failure of the store (the delivery runs with no
 * transaction open): the error comes back in the store's words.
 */
#include "postgres.h"

#include "core/fdw_options.h"
#include "core/settings.h"
#include "gate/filestore_write.h"
#include "gate/store_object.h"

/*
 * Where and how a finalize_s3 server is reached: its options (with their
 * defaults), the keys of a user mapping, and the limits set by the
 * settings. The strings are the options' own. False when the server names
 * no bucket.
 */
bool
store_s3_location(const ForeignServer *server, const UserMapping *um, S3Location *loc)
{
	loc->endpoint = fdw_option_value(server->options, "endpoint", "https://s3.amazonaws.com");
	loc->region = fdw_option_value(server->options, "region", "us-east-1");
	loc->bucket = fdw_option_value(server->options, "bucket", "");
	loc->virtual_host = strcmp(fdw_option_value(server->options, "url_style", "path"), "virtual") == 0;
	loc->access_key = fdw_option_value(um->options, "access_key_id", "");
	loc->secret_key = fdw_option_value(um->options, "secret_access_key", "");
	loc->session_token = fdw_option_value(um->options, "session_token", NULL);
	loc->connect_timeout_ms = finalize_s3_connect_timeout_ms;
	loc->timeout_ms = finalize_s3_timeout_ms;
	loc->max_pages = finalize_s3_max_pages;
	return loc->bucket[0] != '\0';
}

/*
 * Reads one small object whole into *body (palloc'd, NUL-terminated):
 * *found false, and true returned, when there is none at key; false with
 * err set when the store fails or the object is longer than max_bytes.
 */
bool
store_object_read(const ObjectStore *store, const char *key, size_t max_bytes, char **body, size_t *len,
				  bool *found, S3Error *err)
{
	memset(err, 0, sizeof(*err));
	if (store->kind == STORE_FILE)
		return filestore_read_small(store->root, key, max_bytes, body, len, found, err);
	return objstore_read(&store->s3, key, max_bytes, body, len, found, err);
}

/*
 * Writes one object whole, atomically: a reader sees the old object or
 * the new one. False with err set when the store fails.
 */
bool
store_object_put(const ObjectStore *store, const char *key, const char *body, size_t len,
				 const char *content_type, S3Error *err)
{
	memset(err, 0, sizeof(*err));
	if (store->kind == STORE_FILE)
		return filestore_replace(store->root, key, body, len, err);
	return objstore_put(&store->s3, key, body, len, content_type, err);
}
