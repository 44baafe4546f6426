/*
 * filestore.h
 *     Local stores (file:// URLs): the files under a prefix.
 */
#ifndef FINALIZE_FILESTORE_H
#define FINALIZE_FILESTORE_H

#include "store/listing.h"

extern char *filestore_root(const char *url);
extern bool filestore_read(const char *root, const char *key, size_t max_bytes, FileChunkFn fn, void *arg);
extern void filestore_list(const char *root, const char *prefix, ListingSink *sink,
						   WantsChecksum wants_checksum, void *arg, bool in_order);

#endif							/* FINALIZE_FILESTORE_H */
