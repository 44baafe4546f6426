/*
 * store_listing.h
 *     The gate's store steps: the objects under a manifest's prefix in its
 *     store (store/store.h: a finalize_s3 server or a file:// URL), and the
 *     objects read there, as the caller.
 */
#ifndef FINALIZE_STORE_LISTING_H
#define FINALIZE_STORE_LISTING_H

#include "gate/manifest.h"
#include "gate/manifest_lines.h"
#include "store/store.h"

extern void gate_open_store(const Manifest *m, ObjectStore *out);
extern void list_store(const Manifest *m, InvComparison *cmp);
extern void read_manifest_files(const Manifest *m, ManifestLines *lines);
extern bool store_read_object(const Manifest *m, const ObjectStore *s, const char *key, size_t max_bytes,
							  FileChunkFn feed, void *arg);

#endif							/* FINALIZE_STORE_LISTING_H */
