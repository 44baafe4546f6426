/*
 * release_record.h
 *     A release attempt as stored: its report, the attempt's row and (when
 *     it passed) the switch of the partition's published marker.
 */
#ifndef FINALIZE_RELEASE_RECORD_H
#define FINALIZE_RELEASE_RECORD_H

#include "gate/manifest.h"
#include "gate/release_checks.h"

/* One release attempt: what was checked and what was found. */
typedef struct ReleaseAttempt
{
	int64		table_id;
	const Manifest *manifest;
	Jsonb	   *manifest_jsonb;	/* the manifest as the publisher gave it */
	const InvComparison *listing;	/* the listing's summary and stored form */
	const char *catalog_json;	/* the catalog view, as JSON text */
	const char *facts_json;		/* the CDC facts, or NULL without a period */
	GatePeriod	period;			/* the periods checked, from the manifest or the catalog */
	Jsonb	   *problems;		/* an array; empty when released */
	bool		released;
	const char *requested_by;
} ReleaseAttempt;

extern void record_release(const ReleaseAttempt *a);

#endif							/* FINALIZE_RELEASE_RECORD_H */
