/*
 * inventory_merge.h
 *     The comparison rules of the gate, shared by every way it compares:
 *     one manifest entry with one listed object, and the merge of two
 *     sorted streams. Pure: no memory allocation, no I/O, no errors raised.
 */
#ifndef FINALIZE_INVENTORY_MERGE_H
#define FINALIZE_INVENTORY_MERGE_H

#include "gate/inventory.h"

/* What one manifest entry and the listed object of the same path say. */
typedef enum InvVerdict
{
	INV_AGREE,					/* nothing to report */
	INV_SIZE_MISMATCH,			/* other size */
	INV_CHECKSUM_MISMATCH		/* same size, the manifest's ETag not matched */
} InvVerdict;

/* The order both streams of a merge come in. */
typedef enum InvOrder
{
	INV_ORDER_JSONB,			/* jsonb key order: shorter first, then bytes */
	INV_ORDER_BYTES				/* bytes, then shorter first (C collation) */
} InvOrder;

/* What a merge finds, one call per finding, in path order. */
typedef struct InvMergeEvents
{
	void		(*outside) (void *arg, const InvObject *m); /* manifest path not under the prefix */
	void		(*missing) (void *arg, const InvObject *m);
	void		(*stray) (void *arg, const InvObject *l);
	void		(*both) (void *arg, const InvObject *m, const InvObject *l);
	void	   *arg;
} InvMergeEvents;

extern bool inv_etags_equal(const char *a, int alen, const char *b, int blen);
extern InvVerdict inv_verdict(const InvObject *m, const InvObject *l);
extern bool inv_same_as_manifest(const InvObject *m, const InvObject *l);
extern bool inv_under(const InvObject *o, const char *prefix, int prefix_len);
extern int	inv_order_cmp(InvOrder order, const InvObject *a, const InvObject *b);
extern void inv_merge(InvCursor *manifest, InvCursor *listing, const char *prefix, int prefix_len,
					  InvOrder order, const InvMergeEvents *ev);

#endif							/* FINALIZE_INVENTORY_MERGE_H */
