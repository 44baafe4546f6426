/*
 * s3_request.h
 *     What S3 requests are made of: URLs (a listing's pages, an object)
 *     and the SHA-256 of a payload.
 */
#ifndef FINALIZE_S3_REQUEST_H
#define FINALIZE_S3_REQUEST_H

#include "store/objstore.h"

extern char *s3_list_url(const S3Location *loc, const char *prefix, const char *token);
extern char *s3_object_url(const S3Location *loc, const char *key);
extern bool s3_payload_sha256(const char *body, size_t len, char *hex);

#endif							/* FINALIZE_S3_REQUEST_H */
