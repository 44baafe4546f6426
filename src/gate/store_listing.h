/*
 * store_listing.h
 *     The gate's listing step: the objects under a manifest's prefix in its
 *     store (a finalize_s3 server or a file:// URL), read as the caller.
 */
#ifndef FINALIZE_STORE_LISTING_H
#define FINALIZE_STORE_LISTING_H

#include "gate/manifest.h"
#include "gate/filestore.h"
#include "gate/manifest_lines.h"

extern void list_store(const Manifest *m, InvComparison *cmp);
extern void read_manifest_files(const Manifest *m, ManifestLines *lines);
extern char *store_location_base(const Manifest *m);
extern char *store_location_key(const char *location, const char *base);
extern bool store_read_object(const Manifest *m, const char *key, size_t max_bytes, FileChunkFn feed,
							  void *arg);

#endif							/* FINALIZE_STORE_LISTING_H */
