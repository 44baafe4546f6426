/*
 * sorted_comparison.c
 *     The comparison of a manifest too large to hold (read from the store)
 *     with a store's listing: the listing goes into a sorted set as it
 *     arrives (sorted_inventory.c) and is merged at the end with the
 *     manifest's sorted stream, by the rules every comparison shares
 *     (inventory_merge.c), giving the same problems, summary and stored
 *     form as the hash comparison of inventory.c.
 */
#include "postgres.h"

#include "miscadmin.h"

#include "gate/findings.h"
#include "gate/inventory.h"
#include "gate/inventory_merge.h"
#include "gate/sorted_inventory.h"

/* The listing's consumer: objects go into the sorted set, compared at the merge. */
static void
sorted_consume(ListingSink *sink, const Inventory *batch)
{
	InvComparison *c = (InvComparison *) sink;

	for (int i = 0; i < batch->n; i++)
	{
		if ((i & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		sorted_inventory_put(c->sorted_listing, &batch->items[i]);
	}
}

/*
 * Starts a comparison whose manifest is too large to hold (read from the
 * store): the listing is sorted as it arrives (sorted_inventory.c) and
 * merged with the manifest's sorted stream at the end. The stored form is
 * always kept. any_etag says whether a file store must compute checksums
 * (for every file: the manifest cannot be asked per path).
 */
void
inventory_compare_begin_sorted(InvComparison *c, const char *prefix, ProblemList *out, bool any_etag)
{
	inventory_comparison_init(c, prefix, out);
	c->sink.consume = sorted_consume;
	c->any_etag = any_etag;
	c->sorted_listing = sorted_inventory_begin("listing");
	inventory_keep_stored(c);
}

/* A sorted merge's manifest path outside the prefix. */
static void
sorted_outside(void *arg, const InvObject *m)
{
	InvComparison *c = arg;

	problem_wrong_prefix(m, c->prefix, c->out);
}

/* A sorted merge's manifest object that is not listed: stored as absent. */
static void
sorted_missing(void *arg, const InvObject *m)
{
	InvComparison *c = arg;

	problem_missing(m, c->prefix, c->out);
	inventory_keep_record(c, INVCODEC_ABSENT, m);
}

/* Counts a listed object into the listing's summary. */
static void
sorted_count(InvComparison *c, const InvObject *l)
{
	c->listed++;
	c->bytes += l->size;
	inventory_digest_add(c->digest, l->path, l->path_len, l->size, l->etag, l->etag_len);
}

/* A sorted merge's listed object that the manifest lacks: stored. */
static void
sorted_stray(void *arg, const InvObject *l_in)
{
	InvComparison *c = arg;
	InvObject	l = *l_in;

	/* A file store computed its checksum only because it could not ask. */
	if (c->etags_computed)
		l.etag = NULL, l.etag_len = 0;
	sorted_count(c, &l);
	problem_stray(&l, c->prefix, c->out);
	inventory_keep_record(c, INVCODEC_LISTED, &l);
}

/* A sorted merge's path on both sides: stored unless exactly the manifest's. */
static void
sorted_both(void *arg, const InvObject *m, const InvObject *l_in)
{
	InvComparison *c = arg;
	InvObject	l = *l_in;

	if (c->etags_computed && m->etag == NULL)
		l.etag = NULL, l.etag_len = 0;
	sorted_count(c, &l);
	problem_compare(m, &l, c->out);
	if (!inv_same_as_manifest(m, &l))
		inventory_keep_record(c, INVCODEC_LISTED, &l);
}

/*
 * Ends a sorted comparison: the listing's sort is merged with the
 * manifest's (a cursor in INV_ORDER_BYTES), by the rules every comparison
 * shares, and both sorts' temporary files go.
 */
void
inventory_compare_end_sorted(InvComparison *c, InvCursor *manifest)
{
	MemoryContext old = MemoryContextSwitchTo(c->cxt);
	InvMergeEvents ev = {sorted_outside, sorted_missing, sorted_stray, sorted_both, c};
	InvCursor	listing;

	sorted_inventory_cursor(c->sorted_listing, &listing, NULL);
	inv_merge(manifest, &listing, c->prefix, c->prefix_len, INV_ORDER_BYTES, &ev);
	sorted_inventory_end(c->sorted_listing);
	c->sorted_listing = NULL;
	SET_VARSIZE(c->stored->data, c->stored->len);
	problems_sort(c->out, c->first);
	MemoryContextSwitchTo(old);
}
