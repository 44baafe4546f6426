/*
 * snapshot_files.h
 *     The files of an Iceberg snapshot that hold a release's partition:
 *     read from its manifest list and manifests in the store, as the
 *     caller (snapshot_files.c).
 */
#ifndef FINALIZE_PUBLISH_SNAPSHOT_FILES_H
#define FINALIZE_PUBLISH_SNAPSHOT_FILES_H

#include "gate/inventory.h"
#include "gate/manifest.h"
#include "lake/release_metadata.h"
#include "publish/release_request.h"

typedef struct SnapshotFiles
{
	Inventory	files;			/* data and delete files: store keys, sizes */
	int64		data_files;
	int64		delete_files;
	int64		records;		/* rows the data files hold */
	int64		position_deletes;	/* rows the position-delete files delete */
	int64		equality_delete_files;
	int64		bytes;
	int64		manifests;		/* manifests read */
	int64		entries;		/* live entries read */
	char	   *prefix;			/* the files' common directory, "" or ending in "/" */
	int64		outside;		/* files that are no object of the store */
	char	   *outside_example;
	int64		unplaced;		/* files of a spec without a requested field */
	const char *unplaced_field;
	int64		unplaced_spec;
} SnapshotFiles;

extern void snapshot_files_collect(const Manifest *store, const char *base, const char *manifest_list,
								   const IcebergLayout *layout, const ReleaseRequest *r, SnapshotFiles *out);
extern char *iceberg_location(const char *location);

#endif							/* FINALIZE_PUBLISH_SNAPSHOT_FILES_H */
