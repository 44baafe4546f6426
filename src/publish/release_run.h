/*
 * release_run.h
 *     One finalize.release_iceberg call, as its steps share it: the
 *     request, the gate's view of the release, the catalog's table, the
 *     audited snapshot's files and what was found (release_iceberg.c runs
 *     the steps, snapshot_audit.c audits the files and the facts).
 */
#ifndef FINALIZE_PUBLISH_RELEASE_RUN_H
#define FINALIZE_PUBLISH_RELEASE_RUN_H

#include "gate/release_checks.h"
#include "publish/iceberg_catalog.h"
#include "publish/snapshot_files.h"

/*
 * A lake consumer of a table the partition holds (the table, its shard, or
 * each shard), and the LSN the audited snapshot holds in its property; or
 * a table in scope that no consumer of this Iceberg table follows.
 */
typedef struct LakeHolder
{
	char	   *table;			/* the consumer's table: the table or a shard */
	char	   *consumer;		/* NULL: none follows this Iceberg table there */
	char	   *lsn_property;
	bool		followed_elsewhere; /* none here, while another shard has one */
	bool		has_lsn;		/* a snapshot on the ancestry carries it */
	Lsn			lsn;
	int64		carrier;		/* the snapshot that carries it */
} LakeHolder;

typedef struct IcebergRun
{
	ReleaseRequest r;
	Jsonb	   *request;		/* as the caller gave it */
	Jsonb	   *stored;			/* as stored with the attempt */
	Manifest	m;				/* the gate's view of the release */
	GateTable	table;
	IcebergTable it;
	int64		audited_id;		/* kept: it.audited may be reloaded */
	const char *manifest_list;
	SnapshotFiles files;
	InvComparison listing;
	ProblemList found;
	bool		bounds_required;	/* no time field places the files: only
									 * their bounds prove their periods */
	const char *time_column;	/* whose bounds are checked, or NULL */
	TimeColumn	time_col;
	char	   *no_time_column; /* why there is none, or NULL */
	LakeHolder *lake;			/* the lake consumers that must hold the partition */
	int			nlake;
	Jsonb	   *lake_json;		/* them as the checks and the report take them */
	int64		target_before;	/* the target's head as loaded (-1: none) */
	bool		target_at_audited;	/* ... and it is the audited snapshot */
	PublishOutcome outcome;
	bool		published;		/* this call moved the target */
	bool		noop;			/* the same request was released before: nothing stored */
	const char *requested_by;
	Jsonb	   *problems;
	bool		released;
	/* The publication whose properties the publish carries, or NULL. */
	const char *property_publication;
	const char *property_event_id;
	TimestampTz property_until;
} IcebergRun;

/* in snapshot_audit.c */
extern void audit_files(IcebergRun *run);
extern void check_iceberg_facts(IcebergRun *run, const GatePeriod *p);
extern Jsonb *lake_holders_json(const IcebergRun *run);

/* in release_properties.c */
extern void release_properties_plan(IcebergRun *run, MemoryContext cxt);

#endif							/* FINALIZE_PUBLISH_RELEASE_RUN_H */
