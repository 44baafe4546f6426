/*
 * filestore_write.h
 *     One small object of a local store (file://) read whole or replaced
 *     whole, atomically (a publication's marker).
 */
#ifndef FINALIZE_FILESTORE_WRITE_H
#define FINALIZE_FILESTORE_WRITE_H

#include "store/objstore.h"

extern bool filestore_read_small(const char *root, const char *key, size_t max_bytes, char **body, size_t *len,
								 bool *found, StoreError *err);
extern bool filestore_replace(const char *root, const char *key, const char *body, size_t len, StoreError *err);

#endif							/* FINALIZE_FILESTORE_WRITE_H */
