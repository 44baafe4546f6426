/*
 * snapshot_files.h
 *     The files of an Iceberg snapshot that hold a release's partition:
 *     read from its manifest list and manifests in the store, as the
 *     caller (snapshot_files.c), and what their position deletes delete
 *     (delete_counts.c).
 */
#ifndef FINALIZE_PUBLISH_SNAPSHOT_FILES_H
#define FINALIZE_PUBLISH_SNAPSHOT_FILES_H

#include "gate/inventory.h"
#include "gate/manifest.h"
#include "store/store.h"
#include "lake/release_metadata.h"
#include "publish/file_bounds.h"
#include "publish/release_request.h"

/*
 * What the partition's data files' bounds of the time column are checked
 * against: the release's periods, microseconds since 1970 (active: the
 * time column is known).
 */
typedef struct PeriodCheck
{
	bool		active;
	TimeColumn	col;
	int64		start_us;
	int64		end_us;
} PeriodCheck;

/* A position-delete file of the partition, and the data file it names. */
typedef struct PositionDelete
{
	char	   *referenced;		/* the store key of its referenced_data_file, or NULL */
	int64		sequence;		/* its data sequence number, -1 unknown */
	int64		records;		/* rows it deletes */
} PositionDelete;

typedef struct SnapshotFiles
{
	Inventory	files;			/* data and delete files: store keys, sizes */
	int64	   *sequences;		/* per file: a data file's data sequence
								 * number (-1 unknown), -2 for a delete file */
	int			capacity;		/* of sequences */
	int64		data_files;
	int64		delete_files;
	int64		records;		/* rows the data files hold */
	PositionDelete *deletes;	/* the position-delete files */
	int			ndeletes;
	int			deletes_cap;
	int64		position_deletes;	/* rows they delete that can be counted
									 * (delete_counts.c) */
	int64		uncountable_deletes;	/* delete files whose rows cannot be
										 * counted (equality deletes, position
										 * deletes without one live data file) */
	int64		bytes;
	int64		manifests;		/* manifests read */
	int64		all_data_files; /* live entries of every partition */
	int64		all_delete_files;
	char	   *prefix;			/* the files' common directory, "" or ending in "/" */
	int64		outside;		/* files that are no object of the store */
	char	   *outside_example;
	int64		unplaced;		/* files of a spec without a requested field */
	const char *unplaced_field;
	int64		unplaced_spec;
	int64		changed_outside;	/* files of other partitions added or removed
									 * since the target's head */
	char	   *changed_example;
	int64	   *removed_seen;	/* per snapshot since the head: removals seen */
	int64		outside_period; /* data files whose bounds reach outside the periods */
	char	   *outside_period_example;
	int64		outside_lo_us;	/* ... and the instants it holds, [lo, hi) */
	int64		outside_hi_us;
	int64		unbounded;		/* data files without readable bounds or null
								 * count of the column */
	char	   *unbounded_example;
	int64		null_time;		/* data files with rows where the column is null */
	char	   *null_time_example;
} SnapshotFiles;

/* The snapshots a publish would add to the target branch (sorted ids). */
typedef struct SinceHead
{
	const int64 *ids;
	int			n;				/* 0: not checked (a tag) */
} SinceHead;

extern void snapshot_files_collect(const Manifest *m, const ObjectStore *store, const char *manifest_list,
								   const IcebergLayout *layout, const ReleaseRequest *r, const SinceHead *since,
								   const PeriodCheck *period, SnapshotFiles *out);

/* in delete_counts.c */
extern void count_position_deletes(SnapshotFiles *f);

#endif							/* FINALIZE_PUBLISH_SNAPSHOT_FILES_H */
