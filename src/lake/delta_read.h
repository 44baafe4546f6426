/*
 * delta_read.h
 *     One poll of a Delta consumer's log through the store interface
 *     (delta_read.c), into an observation lake_observe records.
 */
#ifndef FINALIZE_LAKE_DELTA_READ_H
#define FINALIZE_LAKE_DELTA_READ_H

#include "datatype/timestamp.h"

#include "lake/delta_log.h"
#include "lake/lake_state.h"
#include "store/store.h"

/* What a poll of one Delta consumer reads with, and where it writes. */
typedef struct DeltaReader
{
	const ObjectStore *store;
	const char *location;		/* the table's location, for messages */
	const char *log;			/* the key prefix of its _delta_log/ */
	DeltaLsnFrom from;
	const char *store_identity; /* store_identity of store */
	const char *seen_identity;	/* what was recorded (delta_identity), or NULL */
	LakeObservation *obs;
	MemoryContext cxt;			/* where the poll of this consumer allocates */
	MemoryContext parse_cxt;	/* one commit's parse, reset after each */
	int64		bytes_read;		/* commits read this poll (DELTA_READ_BUDGET) */
	TimestampTz deadline;		/* when this consumer's poll stops reading (0: never) */
	int64		walk_floor;		/* a first read's walk stops above it (-1: none) */
	const char *lsn_from_text;	/* the consumer's lsn_from, for messages */
	bool		cut;			/* the poll's time ran out before a walk ended */
	int64		walk_next;		/* cut: the version the walk reads next */
	int			walk_steps;		/* cut: the commits it stepped */
} DeltaReader;

extern bool delta_read_consumer(DeltaReader *r, const LakeConsumer *c);

#endif							/* FINALIZE_LAKE_DELTA_READ_H */
