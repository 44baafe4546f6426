/*
 * partition_match.h
 *     Which files of a snapshot belong to a release's partition: the
 *     request's partition fields resolved against each partition spec
 *     (their transforms), an entry's partition tuple matched against them,
 *     the periods a time transform's value holds, and the time column
 *     whose bounds prove which periods a file holds.
 */
#ifndef FINALIZE_PUBLISH_PARTITION_MATCH_H
#define FINALIZE_PUBLISH_PARTITION_MATCH_H

#include "core/period.h"
#include "lake/avro_manifest.h"
#include "lake/release_metadata.h"
#include "publish/file_bounds.h"
#include "publish/release_request.h"

/* One criterion as a spec's transform reads it. */
typedef struct SpecCriterion
{
	const PartitionCriterion *c;
	bool		timed;			/* a year, month, day or hour transform */
	int64		source_id;		/* timed: the column it transforms */
	EpochUnit	unit;
	int64		ordinal;		/* timed: the unit's count since 1970 */
	bool		is_date;		/* not timed, a value like 2026-11-27: an
								 * identity of a date column holds days */
	int64		days;
} SpecCriterion;

/* The request's partition as the files of one spec are matched against it. */
typedef struct SpecMatch
{
	int64		spec_id;
	const char *missing_field;	/* a requested field the spec has not:
								 * none of its files can be placed */
	int			ncriteria;
	SpecCriterion *criteria;
} SpecMatch;

extern void spec_match_prepare(const IcebergSpec *spec, const ReleaseRequest *r, SpecMatch *out);
extern bool entry_in_partition(const SpecMatch *m, const IcebergManifestEntry *e, const char **absent);
extern bool partition_period(const ReleaseRequest *r, const IcebergLayout *layout, TimestampTz *start,
							 TimestampTz *end);
extern const char *release_time_column(const ReleaseRequest *r, const IcebergLayout *layout, bool proof,
									   TimeColumn *col, char **why);

#endif							/* FINALIZE_PUBLISH_PARTITION_MATCH_H */
