/*
 * objstore.h
 *     The one interface to object stores (S3 over core/http.c): listings,
 *     objects read (to a file, or whole when small) and written.
 */
#ifndef FINALIZE_OBJSTORE_H
#define FINALIZE_OBJSTORE_H

#include "store/listing.h"

/* Where and how to list: a finalize_s3 server and the caller's keys. */
typedef struct S3Location
{
	const char *endpoint;		/* http(s)://host[:port] */
	const char *region;
	const char *bucket;
	bool		virtual_host;	/* bucket in the host name, not the path */
	const char *access_key;
	const char *secret_key;
	const char *session_token;	/* NULL when not given */
	long		connect_timeout_ms;
	long		timeout_ms;
	int			max_pages;		/* a longer listing is an error */
} S3Location;

/*
 * What went wrong, in the store's words when it said something (S3's Code
 * and Message; a local store's: the system's, see filestore_write.c).
 */
typedef struct StoreError
{
	long		http_status;	/* 0 when no HTTP answer */
	char		code[128];		/* S3's error code, or a local one */
	char		message[1024];
} StoreError;

extern bool objstore_get(const S3Location *loc, const char *key, int fd, size_t max_bytes, StoreError *err);
extern bool objstore_read(const S3Location *loc, const char *key, size_t max_bytes, char **body, size_t *len,
						  bool *found, StoreError *err);
extern bool objstore_put(const S3Location *loc, const char *key, const char *body, size_t len,
						 const char *content_type, StoreError *err);
extern bool objstore_list(const S3Location *loc, const char *prefix, ListingSink *sink, StoreError *err);

#endif							/* FINALIZE_OBJSTORE_H */
