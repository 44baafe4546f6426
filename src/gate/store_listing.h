/*
 * store_listing.h
 *     The gate's listing step: the objects under a manifest's prefix in its
 *     store (a finalize_s3 server or a file:// URL), read as the caller.
 */
#ifndef FINALIZE_STORE_LISTING_H
#define FINALIZE_STORE_LISTING_H

#include "gate/manifest.h"
#include "gate/manifest_lines.h"

extern void list_store(const Manifest *m, InvComparison *cmp);
extern void read_manifest_files(const Manifest *m, ManifestLines *lines);

#endif							/* FINALIZE_STORE_LISTING_H */
