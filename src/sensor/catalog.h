/*
 * catalog.h
 *     Direct reads of finalize's own tables for the hot sensor paths.
 */
#ifndef FINALIZE_CATALOG_H
#define FINALIZE_CATALOG_H

#include "datatype/timestamp.h"
#include "utils/snapshot.h"

#include "core/pg_compat.h"
#include "core/period.h"

struct LossData;

/* What a sensor needs to know about one tracked table. */
typedef struct TrackedVerdict
{
	int64		table_id;
	PeriodSpec	periods;		/* granularity in period_zone */
	bool		has_watermark;	/* false while nothing is final */
	TimestampTz finalized_until;
	bool		loss_blocked;	/* a loss may hold periods: ask losses.c */
	/* What losses.c read under the verdict's snapshot; NULL: read afresh. */
	struct LossData *losses;
} TrackedVerdict;

/*
 * Changes whenever a relation the sensors read is altered, dropped or
 * re-created: anything cached from these relations is stale then.
 */
extern uint64 catalog_generation;

extern void catalog_register_callback(void);
extern void catalog_read_verdict(Datum table_name, TrackedVerdict *out, Snapshot snapshot);
extern Snapshot catalog_statement_snapshot(void);
extern Snapshot catalog_fresh_snapshot(void);
extern bool catalog_lineage_blocked(int64 table_id, Snapshot snapshot);
pg_noreturn extern void catalog_not_tracked(const char *table_name);

#endif							/* FINALIZE_CATALOG_H */
