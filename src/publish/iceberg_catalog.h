/*
 * iceberg_catalog.h
 *     A release's Iceberg table as its caller reaches it through a
 *     finalize_iceberg catalog (iceberg_catalog.c): loaded, its audited
 *     snapshot and target ref resolved, and the atomic publish (a commit
 *     that fast-forwards a branch or creates a tag).
 */
#ifndef FINALIZE_PUBLISH_ICEBERG_CATALOG_H
#define FINALIZE_PUBLISH_ICEBERG_CATALOG_H

#include "lake/catalog.h"
#include "lake/release_metadata.h"
#include "lake/snapshots.h"
#include "publish/release_request.h"

typedef struct IcebergTable
{
	LakeCatalog *cat;
	HttpClient *client;
	char	   *body;			/* the last loadTable answer */
	IcebergLayout layout;
	LakeMetadata md;			/* its snapshots, with the LSN property */
	const LakeSnapshot *audited;
	const IcebergRef *target;	/* the target ref, NULL when it does not exist */
	char	   *target_name;
	char	   *property_update;	/* a set-properties update the publish
									 * carries (release_properties.c), or NULL */
} IcebergTable;

/* How a publish ended (a failure without an answer is an error). */
typedef enum PublishOutcome
{
	PUBLISH_DONE,				/* the commit moved or created the ref */
	PUBLISH_ALREADY,			/* the ref was at the audited snapshot already */
	PUBLISH_MOVED				/* the ref is elsewhere: catalog_moved */
} PublishOutcome;

extern void iceberg_open(const ReleaseRequest *r, IcebergTable *t);
extern void iceberg_resolve(const ReleaseRequest *r, IcebergTable *t);
extern bool iceberg_committed_lsn(const IcebergTable *t, const char *property, Lsn *lsn, int64 *carrier);
extern int	iceberg_since_head(const IcebergTable *t, int64 **ids);
extern PublishOutcome iceberg_publish(const ReleaseRequest *r, IcebergTable *t, char **detail);

#endif							/* FINALIZE_PUBLISH_ICEBERG_CATALOG_H */
