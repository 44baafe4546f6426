/*
 * release_checks.h
 *     What the gate checks as the extension's owner before a release: the
 *     tracked table and the periods the manifest names, the catalog view
 *     of the partition and the CDC facts of its periods.
 */
#ifndef FINALIZE_RELEASE_CHECKS_H
#define FINALIZE_RELEASE_CHECKS_H

#include "core/period.h"
#include "gate/manifest.h"

/* The manifest's table, as the gate checks against it. */
typedef struct GateTable
{
	int64		table_id;
	PeriodSpec	periods;		/* its granularity in its zone */
	char	   *granularity;	/* as text, for messages */
	char	   *zone;
	char	   *verdict_table;	/* whose verdict decides: the table, or the
								 * partition's shard; NULL for an unknown shard */
	char	   *shard;			/* the partition's shard, or NULL */
	char	   *shard_problem;	/* why the shard is unknown, or NULL */
} GateTable;

/* The periods a release holds, from the manifest or the catalog. */
typedef struct GatePeriod
{
	bool		known;
	TimestampTz start;
	TimestampTz end;			/* exclusive */
} GatePeriod;

extern void gate_table_lookup(Manifest *m, GateTable *table);
extern void check_partition(const Manifest *m, const GateTable *table, int64 listed, ProblemList *problems,
							const char **catalog_json, const char **facts_json, GatePeriod *period);

#endif							/* FINALIZE_RELEASE_CHECKS_H */
