/*
 * lake_state.h
 *     The lake worker's PostgreSQL reads and writes: the Iceberg consumers
 *     it polls (finalize_internal.lake_consumers) and what it saw of each
 *     lake consumer, Iceberg or Delta (finalize_internal.lake_observe), in
 *     short transactions.
 */
#ifndef FINALIZE_LAKE_STATE_H
#define FINALIZE_LAKE_STATE_H

#include "lake/catalog.h"
#include "lake/snapshots.h"

/*
 * A consumer whose progress is an Iceberg table's, and what was recorded
 * of it. A Delta consumer (delta_worker.c) is recorded through the same
 * fields: iceberg_table holds its location, seen.head_id the version read
 * last and seen.head_sequence its commit time (milliseconds).
 */
typedef struct LakeConsumer
{
	int64		lake_id;		/* which declaration (a re-added one is another) */
	int64		table_id;
	char	   *table_name;
	char	   *consumer;
	bool		delta;			/* a Delta consumer */
	char	   *iceberg_table;
	char	   *ref;
	char	   *lsn_property;
	LakeSeen	seen;
	Oid			source_serverid;	/* whose worker resolves its reports */
	bool		quiet;			/* a poll that finds nothing new writes
								 * nothing (no condition to clear, polled_at
								 * fresh); cleared for every consumer a poll
								 * cut short reached */
	bool		allowed;		/* its declarer may still read through the
								 * server */
	char	   *seen_identity;	/* a Delta consumer's (delta_identity), or NULL */
} LakeConsumer;

/* What one poll found, to be recorded. */
typedef struct LakeObservation
{
	const LakeConsumer *consumer;
	LakeCondition condition;
	char	   *detail;			/* the condition's sentence */
	bool		has_head;		/* head_id: the ref's head (when read) */
	int64		head_id;
	int64		head_sequence;
	bool		has_carrier;	/* carrier_id: a new carrier's snapshot */
	int64		carrier_id;
	bool		has_lsn;		/* lsn: what the ref claims now */
	Lsn			lsn;
	const char *table_uuid;
	bool		rolled_back;
	bool		held_known;
	Lsn			held_lsn;
	const char *reason;
	const char *identity;		/* a Delta consumer's, to record (NULL: none) */
} LakeObservation;

extern char *lake_catalog_version_problem(void);
extern bool lake_load_consumers(Oid serverid, MemoryContext cxt, LakeCatalog **cat, LakeConsumer **consumers,
								int *nconsumers, char **problem);
extern bool lake_record(const LakeObservation *obs);
extern void lake_record_all(LakeObservation *obs, int n);
extern bool lake_needs_record(const LakeObservation *obs);
extern bool lake_observation_new(const LakeObservation *obs);

#endif							/* FINALIZE_LAKE_STATE_H */
