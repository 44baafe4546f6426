/*
 * inventory.h
 *     Sets of objects (a manifest's files, a store's listing) and their
 *     comparison (inventory.c; sorted_comparison.c for a manifest read from
 *     the store), whose findings (findings.c) go to a problem
 *     list (problem_list.h). Pure logic: no I/O, no catalog.
 */
#ifndef FINALIZE_INVENTORY_H
#define FINALIZE_INVENTORY_H

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "gate/inventory_codec.h"
#include "gate/problem_list.h"
#include "store/listing.h"
#include "store/store_key.h"

/*
 * A stream of objects in ascending jsonb key order (length, then bytes):
 * next() fills *out and returns true, or returns false at the end. Lets two
 * jsonb objects be compared by a merge, without copying or hashing.
 */
typedef struct InvCursor
{
	bool		(*next) (struct InvCursor *cursor, InvObject *out);
	void	   *state;
} InvCursor;

/*
 * A comparison of a manifest with a listing that arrives in batches
 * (inventory_compare_begin, _batch, _end). Besides the problems it keeps
 * what the release stores of the listing: how many objects and bytes, an
 * order-independent digest, and (when stored is set) the objects that differ
 * from the manifest in the compact stored form (inventory_codec.c).
 */
typedef struct InvComparison
{
	ListingSink sink;			/* first: the comparison is a sink */
	const Inventory *manifest;
	const char *prefix;
	int			prefix_len;
	struct pathtab_hash *tab;	/* manifest paths under the prefix */
	char	   *state;			/* per manifest object: unseen, seen, outside */
	ProblemList *out;
	int			first;			/* out's first problem of this comparison */
	MemoryContext cxt;			/* where problems and the stored form grow */
	int64		listed;
	int64		bytes;
	uint64		digest[2];
	StringInfo	stored;			/* NULL: not kept (compare_inventories) */
	InvEncoder *encoder;
	size_t		stored_max;		/* most bytes the stored form may take; 0:
								 * no limit */
	bool		stored_truncated;	/* records were left out past stored_max */
	struct SortedInventory *sorted_listing; /* sorted comparison: the listing
											 * goes here (no hash table) */
	bool		any_etag;		/* sorted: some manifest entry has an ETag */
	bool		etags_computed; /* sorted: the store computed every ETag (a
								 * file store); kept only where the manifest
								 * has one, as the hash path would */
	bool		strays_ignored; /* objects the manifest does not name are
								 * neither problems nor stored (an Iceberg
								 * directory holds other snapshots' files) */
} InvComparison;

/* in inventory.c */
extern void inventory_append_record(Inventory *inv, const InvRecord *r);
extern void inventory_compare(const Inventory *manifest, const Inventory *listing,
							  const char *prefix, ProblemList *out);
extern void inventory_compare_begin(InvComparison *c, const Inventory *manifest, const char *prefix,
									ProblemList *out, bool keep_stored);
extern void inventory_compare_batch(InvComparison *c, const Inventory *batch);
extern void inventory_compare_end(InvComparison *c);
extern bool inventory_wants_checksum(InvComparison *c, const char *path, int path_len);
extern void inventory_comparison_init(InvComparison *c, const char *prefix, ProblemList *out);
extern void inventory_keep_stored(InvComparison *c);
extern void inventory_keep_record(InvComparison *c, char kind, const InvObject *o);
extern char *inventory_digest_hex(const uint64 digest[2]);
extern void inventory_digest_add(uint64 digest[2], const char *path, int path_len, int64 size,
								 const char *etag, int etag_len);
extern bool inventory_rebuild(const Inventory *manifest, const char *prefix, const char *data, size_t len,
							  Inventory *out);
extern void inventory_merge(InvCursor *manifest, InvCursor *listing, const char *prefix, ProblemList *out);
extern char *location_with_slash(const char *location);

/* in sorted_comparison.c */
extern void inventory_compare_begin_sorted(InvComparison *c, const char *prefix, ProblemList *out,
										   bool any_etag);
extern void inventory_compare_end_sorted(InvComparison *c, InvCursor *manifest);

#endif							/* FINALIZE_INVENTORY_H */
