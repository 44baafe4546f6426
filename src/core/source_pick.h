/*
 * source_pick.h
 *     Which source a source worker of the pool serves next: the entries of
 *     the shared source table (core/source_table.c) and the rule that picks
 *     one. Pure: no PostgreSQL state, no locks; unit-tested in
 *     test/unit/test_source_pick.c.
 */
#ifndef FINALIZE_SOURCE_PICK_H
#define FINALIZE_SOURCE_PICK_H

#include <stdbool.h>
#include <stdint.h>

/*
 * One source (one foreign server of finalize.database) as the pool sees it.
 * Times are TimestampTz values (microseconds).
 */
typedef struct PoolSource
{
	uint32_t	dboid;			/* 0: a free entry */
	uint32_t	serverid;
	int64_t		due;			/* when its next cycle is due */
	int64_t		last_end;		/* when its last cycle ended; 0: never ran */
	int32_t		failures;		/* consecutive failed cycles */
	bool		slow;			/* its last cycle took longer than a poll interval */
	int32_t		home;			/* pool index of the worker keeping its connection, or -1 */
	int32_t		busy;			/* pool index of the worker running its cycle, or -1 */
	int64_t		requested_at;	/* when a cycle was asked for (if requested) */
	bool		requested;		/* a cycle was asked for: due now */
	bool		removed;		/* no longer wanted: freed when its cycle ends */
} PoolSource;

/* What the picking worker knows besides the entries. */
typedef struct PickRules
{
	uint32_t	dboid;			/* the worker's database */
	int			me;				/* its pool index (-1 for a dedicated worker) */
	uint32_t	only_serverid;	/* a dedicated worker: its one source; 0 otherwise */
	int64_t		now;
	int64_t		steal_after;	/* how overdue another live worker's source must be to be taken */
	bool		retry_lane_open;	/* may a failing source (failures > 0) be taken now */
	const bool *home_alive;		/* by pool index: whether that worker runs */
	const bool *home_stuck;		/* by pool index: whether its cycle began over steal_after ago
								 * (NULL: every home counts as stuck) */
	int			nworkers;		/* length of home_alive */
} PickRules;

extern int	source_pick(const PoolSource *entries, int n, const PickRules *rules, int64_t *wake_at);
extern int	retry_lane_size(int nworkers);

#endif							/* FINALIZE_SOURCE_PICK_H */
