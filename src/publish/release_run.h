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
	char	   *lsn_property;	/* of the lake consumer, NULL without one */
	bool		has_lsn;
	Lsn			lsn;			/* what the audited snapshot holds */
	int64		carrier;
	int64		target_before;	/* the target's head as loaded (-1: none) */
	bool		target_at_audited;	/* ... and it is the audited snapshot */
	PublishOutcome outcome;
	bool		published;		/* this call moved the target */
	bool		noop;			/* the same request was released before: nothing stored */
	const char *requested_by;
	Jsonb	   *problems;
	bool		released;
} IcebergRun;

/* in snapshot_audit.c */
extern void audit_files(IcebergRun *run);
extern void check_iceberg_facts(IcebergRun *run, const GatePeriod *p);

#endif							/* FINALIZE_PUBLISH_RELEASE_RUN_H */
