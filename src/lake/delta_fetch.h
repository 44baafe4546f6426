/*
 * delta_fetch.h
 *     What a poll of a Delta consumer fetches from its store
 *     (delta_fetch.c): listings of _delta_log/, commits read and parsed
 *     under the poll's memory, byte and time budgets, the identity of a
 *     commit, and a store's failure as the consumer's condition. Used by
 *     delta_read.c only.
 */
#ifndef FINALIZE_LAKE_DELTA_FETCH_H
#define FINALIZE_LAKE_DELTA_FETCH_H

#include "lake/delta_read.h"

/* Bytes of commits read for one consumer in one poll before its run ends early. */
#define DELTA_READ_BUDGET ((int64) 256 * 1024 * 1024)

/* What a listing of _delta_log/ says, from a version on. */
typedef struct LogListing
{
	ListingSink sink;			/* first: the listing is a sink */
	int64		from;			/* -1: the whole log */
	bool		from_listed;	/* from's commit is listed */
	int64		newest_commit;	/* -1: none */
	int64		newest_checkpoint;	/* -1: none */
	int64		want;			/* the commit whose identity to keep, or -1 */
	char	   *want_identity;	/* its size and ETag (or MD5), in cxt */
	MemoryContext cxt;
} LogListing;

extern bool delta_out_of_time(const DeltaReader *r);
extern void delta_store_failed(DeltaReader *r, const char *doing, const StoreError *err);
extern bool delta_file_identity(DeltaReader *r, int64 version, char **out);
extern bool delta_listed_identity(DeltaReader *r, int64 version, char **out);
extern bool delta_list_log(DeltaReader *r, int64 from, LogListing *l);
extern bool delta_read_commit(DeltaReader *r, int64 version, DeltaCommit *out, bool *found);

#endif							/* FINALIZE_LAKE_DELTA_FETCH_H */
