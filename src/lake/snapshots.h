/*
 * snapshots.h
 *     What an Iceberg table's snapshots prove about a pipeline's progress
 *     (docs/design/lake.md): the newest snapshot on a ref's ancestry that
 *     carries the LSN property, and whether the ref still descends from the
 *     snapshot recorded last. Pure: the metadata is parsed elsewhere
 *     (metadata.c), nothing here reads or writes anything.
 */
#ifndef FINALIZE_LAKE_SNAPSHOTS_H
#define FINALIZE_LAKE_SNAPSHOTS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/lsn.h"

/* One snapshot of a table's metadata, as far as the verdict needs it. */
typedef struct LakeSnapshot
{
	int64_t		id;
	bool		has_parent;
	int64_t		parent_id;
	int64_t		sequence;		/* sequence-number; 0 when absent (format v1) */
	int64_t		timestamp_ms;
	const char *operation;		/* the summary's operation, or NULL */
	const char *lsn_text;		/* the LSN property's value, or NULL */
	const char *manifest_list;	/* its manifest-list location, or NULL */
	const char *wap_id;			/* the summary's wap.id, or NULL */
	const void *summary;		/* the summary (a JsonbContainer, metadata.c), or NULL */
	/* The summary's file counts (-1: absent or not a count), for a release's audit. */
	int64_t		removed_files;	/* deleted-data-files + removed-delete-files */
	int64_t		total_data_files;
	int64_t		total_delete_files;
} LakeSnapshot;

/* The snapshots of a table and where its ref points. */
typedef struct LakeMetadata
{
	LakeSnapshot *snapshots;	/* sorted by id (lake_sort_snapshots) */
	int			nsnapshots;
	bool		ref_found;		/* the ref exists (a table without a
								 * snapshot has no main) */
	int64_t		ref_snapshot_id;
	bool		refs_listed;	/* the metadata says where its refs point
								 * ("refs", or v1's current-snapshot-id) */
	const char *table_uuid;		/* the table's table-uuid, or NULL */
} LakeMetadata;

/*
 * What was recorded: the LSN the ref proved, and the ref's head when that
 * was last proven to still hold it (recorded at every poll whose head
 * moved, so that the next poll's walk meets it, or its child, soon).
 */
typedef struct LakeSeen
{
	bool		any;			/* false before the first carrier */
	int64_t		head_id;
	int64_t		head_sequence;
	Lsn			lsn;
	const char *table_uuid;		/* the table-uuid then, or NULL */
} LakeSeen;

typedef enum LakeOutcome
{
	LAKE_NOTHING,				/* no snapshot of the ref carries the property */
	LAKE_SAME,					/* what was recorded still holds */
	LAKE_ADVANCE,				/* a newer carrier with a greater LSN */
	LAKE_ROLLBACK,				/* data the recorded LSN covered left the ref */
	LAKE_MALFORMED				/* the newest carrier's property is no LSN */
} LakeOutcome;

/* What one poll's metadata proves. */
typedef struct LakeVerdict
{
	LakeOutcome outcome;
	const LakeSnapshot *head;	/* where the ref points, or NULL */
	const LakeSnapshot *carrier;	/* the newest carrier on the ref's ancestry
									 * (since the recorded head), or NULL */
	bool		has_lsn;		/* lsn is the carrier's (ADVANCE, SAME with a
								 * carrier, ROLLBACK with a valid one) */
	Lsn			lsn;
	bool		held_known;		/* ROLLBACK: held_lsn is what the ref still
								 * provably holds (false: nothing) */
	Lsn			held_lsn;
	bool		descends;		/* the ref was shown to descend from the head
								 * seen last (SAME, ADVANCE, MALFORMED) */
	const char *reason;			/* ROLLBACK and MALFORMED: why, in English */
	int			walked;			/* snapshots looked at */
} LakeVerdict;

extern void lake_sort_snapshots(LakeMetadata *md);
extern const LakeSnapshot *lake_find_snapshot(const LakeMetadata *md, int64_t id);
extern LakeVerdict lake_judge(const LakeMetadata *md, const LakeSeen *seen);

#endif							/* FINALIZE_LAKE_SNAPSHOTS_H */
