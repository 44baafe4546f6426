/*
 * s3_url.h
 *     The URLs of S3 requests (a listing's pages, an object).
 */
#ifndef FINALIZE_S3_URL_H
#define FINALIZE_S3_URL_H

#include "gate/objstore.h"

extern char *s3_list_url(const S3Location *loc, const char *prefix, const char *token);
extern char *s3_object_url(const S3Location *loc, const char *key);

#endif							/* FINALIZE_S3_URL_H */
