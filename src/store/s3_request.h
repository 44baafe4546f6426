/*
 * s3_request.h
 *     What S3 requests are made of: URLs (a listing's pages, an object)
 *     and the SHA-256 of a payload; and what Azure's share with them (a
 *     key in a URL, a short transaction for PostgreSQL's hashes).
 */
#ifndef FINALIZE_S3_REQUEST_H
#define FINALIZE_S3_REQUEST_H

#include "lib/stringinfo.h"

#include "store/objstore.h"

extern char *s3_list_url(const S3Location *loc, const char *prefix, const char *token);
extern char *s3_object_url(const S3Location *loc, const char *key);
extern bool s3_payload_sha256(const char *body, size_t len, char *hex);
extern void store_url_key(StringInfo url, const char *key);
extern bool store_crypto_begin(void);
extern void store_crypto_end(bool own, MemoryContext cxt);

#endif							/* FINALIZE_S3_REQUEST_H */
