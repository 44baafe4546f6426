/*
 * store_object.h
 *     One object of a store read whole or replaced whole, whatever the
 *     store (a publication's marker): the store-neutral face of
 *     objstore.c (S3) and filestore_write.c (file://).
 */
#ifndef FINALIZE_STORE_OBJECT_H
#define FINALIZE_STORE_OBJECT_H

#include "foreign/foreign.h"

#include "gate/objstore.h"

typedef enum StoreKind
{
	STORE_FILE,					/* a local directory (file://) */
	STORE_S3					/* a finalize_s3 server's bucket */
} StoreKind;

/* Where objects are read and written; keys are relative to it. */
typedef struct ObjectStore
{
	StoreKind	kind;
	const char *root;			/* STORE_FILE: the directory below which no
								 * link is followed */
	S3Location	s3;				/* STORE_S3 */
} ObjectStore;

extern bool store_s3_location(const ForeignServer *server, const UserMapping *um, S3Location *loc);
extern bool store_object_read(const ObjectStore *store, const char *key, size_t max_bytes, char **body,
							  size_t *len, bool *found, S3Error *err);
extern bool store_object_put(const ObjectStore *store, const char *key, const char *body, size_t len,
							 const char *content_type, S3Error *err);

#endif							/* FINALIZE_STORE_OBJECT_H */
