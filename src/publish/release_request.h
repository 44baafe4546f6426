/*
 * release_request.h
 *     A release request of an Iceberg table (finalize.release_iceberg):
 *     which tracked table, which catalog table and partition, which
 *     audited snapshot, and where to publish it. Parsed and validated from
 *     jsonb (release_request.c).
 */
#ifndef FINALIZE_PUBLISH_RELEASE_REQUEST_H
#define FINALIZE_PUBLISH_RELEASE_REQUEST_H

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

/* How the audited snapshot is named. */
typedef enum AuditKind
{
	AUDIT_BRANCH,				/* the head of a branch (the WAP branch) */
	AUDIT_WAP_ID,				/* the one snapshot whose summary has wap.id */
	AUDIT_SNAPSHOT				/* a snapshot id */
} AuditKind;

/* What the partition's row count must equal in the CDC facts of its periods. */
typedef enum RowCountRule
{
	ROWS_DEFAULT,				/* net for an event-time table, else none */
	ROWS_NONE,					/* not reconciled */
	ROWS_INSERTS,				/* an append-only table: rows = inserts */
	ROWS_NET,					/* a mirror: rows = inserts - deletes */
	ROWS_CHANGES				/* a change log: rows = inserts + updates + deletes */
} RowCountRule;

/* One field of the partition: {"field": "value"} ({"field": null}: the null partition). */
typedef struct PartitionCriterion
{
	char	   *field;
	bool		is_null;
	char	   *value;			/* as a string, numbers in decimal */
} PartitionCriterion;

typedef struct ReleaseRequest
{
	char	   *table;			/* the tracked table */
	char	   *catalog;		/* a finalize_iceberg server */
	char	   *iceberg_table;	/* "ns.table" */
	char	   *store;			/* a finalize_s3 or finalize_azure server, or file:///root */
	int			ncriteria;
	PartitionCriterion *criteria;	/* sorted by field name */
	char	   *partition_key;	/* "field=value/..." (or "all"): finalize's name */
	bool		has_period;
	TimestampTz period_start;
	bool		has_period_end;
	TimestampTz period_end;
	bool		has_built_at;
	TimestampTz built_at;
	AuditKind	audit;
	char	   *audit_name;		/* the branch or the wap.id */
	int64		audit_snapshot_id;	/* AUDIT_SNAPSHOT */
	bool		to_tag;			/* publish by creating a tag, not moving a branch */
	char	   *target;			/* the branch, or the tag (NULL: the default name) */
	RowCountRule rows;
	char	   *time_column;	/* the column whose bounds prove the periods, or NULL */
} ReleaseRequest;

extern void release_request_parse(Jsonb *jb, ReleaseRequest *r);
extern const char *row_count_rule_name(RowCountRule rule);

#endif							/* FINALIZE_PUBLISH_RELEASE_REQUEST_H */
