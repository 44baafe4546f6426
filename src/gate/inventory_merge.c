/*
 * inventory_merge.c
 *     The gate's comparison rules, apart from any memory or I/O: whether a
 *     manifest entry and the listed object of its path agree, the merge of
 *     a manifest and a listing that arrive sorted alike, and which paths
 *     stay inside a store.
 *
 * Every way the gate compares (a hash lookup per listed object, the merge
 * of two jsonb objects, the merge of two tuplesorts for a manifest read
 * from the store) calls these, so a rule is written once. Pure, so the
 * unit tests (test/unit/test_inventory_merge.c) run them without a server:
 * what is found goes to the caller's events, which build the problems.
 */
#include "postgres.h"

#include "gate/inventory_merge.h"

/*
 * Two ETags equal once quotes and case are set aside (S3 quotes them; a
 * publisher may write either case).
 */
bool
inv_etags_equal(const char *a, int alen, const char *b, int blen)
{
	if (alen >= 2 && a[0] == '"' && a[alen - 1] == '"')
	{
		a++;
		alen -= 2;
	}
	if (blen >= 2 && b[0] == '"' && b[blen - 1] == '"')
	{
		b++;
		blen -= 2;
	}
	if (alen != blen)
		return false;
	if (memcmp(a, b, alen) == 0)
		return true;			/* the usual case: no case to fold */
	for (int i = 0; i < alen; i++)
		if (pg_ascii_tolower((unsigned char) a[i]) != pg_ascii_tolower((unsigned char) b[i]))
			return false;
	return true;
}

/*
 * The rule for one path found on both sides: the size first (an overwrite
 * or a truncation), then the checksum, only where the manifest gives one.
 */
InvVerdict
inv_verdict(const InvObject *m, const InvObject *l)
{
	if (m->size != l->size)
		return INV_SIZE_MISMATCH;
	if (m->etag != NULL && (l->etag == NULL || !inv_etags_equal(m->etag, m->etag_len, l->etag, l->etag_len)))
		return INV_CHECKSUM_MISMATCH;
	return INV_AGREE;
}

/*
 * Whether a listed object is exactly its manifest entry, byte for byte:
 * then the stored listing needs no record of it.
 */
bool
inv_same_as_manifest(const InvObject *m, const InvObject *l)
{
	if (m->size != l->size || (m->etag == NULL) != (l->etag == NULL))
		return false;
	return m->etag == NULL || (m->etag_len == l->etag_len && memcmp(m->etag, l->etag, m->etag_len) == 0);
}

/* Whether a path lies under the generation's prefix (which ends in "/"). */
bool
inv_under(const InvObject *o, const char *prefix, int prefix_len)
{
	return o->path_len >= prefix_len && memcmp(o->path, prefix, prefix_len) == 0;
}

/*
 * Compares two paths in the order their streams come in: jsonb objects
 * keep keys shorter first, a sort in the C collation bytes first.
 */
int
inv_order_cmp(InvOrder order, const InvObject *a, const InvObject *b)
{
	int			c;

	if (order == INV_ORDER_JSONB)
	{
		if (a->path_len != b->path_len)
			return a->path_len < b->path_len ? -1 : 1;
		return memcmp(a->path, b->path, a->path_len);
	}
	c = memcmp(a->path, b->path, Min(a->path_len, b->path_len));
	if (c != 0)
		return c;
	return (a->path_len > b->path_len) - (a->path_len < b->path_len);
}

/*
 * Merges a manifest and a listing of the keys under prefix, both streams
 * in the given order, in one sequential pass: each manifest entry outside
 * the prefix, missing from the listing, or found with its listed object,
 * and each listed object the manifest lacks, goes to the events. Neither
 * stream is held: a cursor's object is valid until its next call.
 */
void
inv_merge(InvCursor *manifest, InvCursor *listing, const char *prefix, int prefix_len, InvOrder order,
		  const InvMergeEvents *ev)
{
	InvObject	m;
	InvObject	l;
	bool		have_m;
	bool		have_l;

	/* The next manifest entry under the prefix; the others are outside. */
#define NEXT_M() \
	do { \
		while ((have_m = manifest->next(manifest, &m)) && !inv_under(&m, prefix, prefix_len)) \
			ev->outside(ev->arg, &m); \
	} while (0)

	NEXT_M();
	have_l = listing->next(listing, &l);
	while (have_m || have_l)
	{
		int			c = !have_m ? 1 : !have_l ? -1 : inv_order_cmp(order, &m, &l);

		if (c < 0)
		{
			ev->missing(ev->arg, &m);
			NEXT_M();
		}
		else if (c > 0)
		{
			ev->stray(ev->arg, &l);
			have_l = listing->next(listing, &l);
		}
		else
		{
			ev->both(ev->arg, &m, &l);
			NEXT_M();
			have_l = listing->next(listing, &l);
		}
	}
#undef NEXT_M
}
