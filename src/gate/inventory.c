/*
 * inventory.c
 *     Comparison of a manifest's files with a store's listing.
 *
 * Three inventories must agree before a partition is released: the
 * manifest, the listing and the catalog. This file compares the first two
 * in O(F): the manifest goes into a hash table keyed by path, each listed
 * object is looked up once, and what was never seen is missing. Two jsonb
 * objects are already sorted the same way, so they are merged instead, in
 * one sequential pass with no copies (inventory_merge); a manifest too
 * large to hold is merged with the listing from sorted streams
 * (sorted_comparison.c). All give the same problems. File names alone
 * would miss an overwritten object, so sizes (and checksums, when the
 * manifest has them) are compared too.
 */
#include "postgres.h"

#include <inttypes.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "gate/findings.h"
#include "gate/inventory.h"
#include "gate/inventory_merge.h"

/*
 * A manifest entry in the hash table: the key is the manifest's object
 * itself, so a path is never copied (it points into the manifest's jsonb).
 */
typedef struct PathEntry
{
	const InvObject *key;
	uint32		hash;
	char		status;
} PathEntry;

#define SH_PREFIX pathtab
#define SH_ELEMENT_TYPE PathEntry
#define SH_KEY_TYPE const InvObject *
#define SH_KEY key
#define SH_HASH_KEY(tb, k) hash_bytes((const unsigned char *) (k)->path, (k)->path_len)
#define SH_EQUAL(tb, a, b) ((a)->path_len == (b)->path_len && memcmp((a)->path, (b)->path, (a)->path_len) == 0)
#define SH_SCOPE static inline
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) ((a)->hash)
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* What the comparison knows of each manifest object (by its index). */
#define M_UNSEEN 0
#define M_SEEN 1
#define M_OUTSIDE 2				/* not under the prefix: wrong_prefix */

/* Appends a copy of a decoded listed record (its strings copied here). */
void
inventory_append_record(Inventory *inv, const InvRecord *r)
{
	InvObject	o = {0};

	o.path = pnstrdup(r->path, r->path_len);
	o.path_len = r->path_len;
	o.size = r->size;
	o.etag = r->etag ? pnstrdup(r->etag, r->etag_len) : NULL;
	o.etag_len = r->etag_len;
	inventory_append(inv, &o);
}

/* Where a merge's findings go: problems only (compare_inventories). */
typedef struct MergeProblems
{
	const char *prefix;
	ProblemList *out;
	int			n;
} MergeProblems;

/* A merge's manifest path outside the prefix. */
static void
merge_outside(void *arg, const InvObject *m)
{
	MergeProblems *mp = arg;

	problem_wrong_prefix(m, mp->prefix, mp->out);
}

/* A merge's manifest object that is not listed. */
static void
merge_missing(void *arg, const InvObject *m)
{
	MergeProblems *mp = arg;

	if ((++mp->n & 1023) == 0)
		CHECK_FOR_INTERRUPTS();
	problem_missing(m, mp->prefix, mp->out);
}

/* A merge's listed object that the manifest lacks. */
static void
merge_stray(void *arg, const InvObject *l)
{
	MergeProblems *mp = arg;

	if ((++mp->n & 1023) == 0)
		CHECK_FOR_INTERRUPTS();
	problem_stray(l, mp->prefix, mp->out);
}

/* A merge's path found on both sides. */
static void
merge_both(void *arg, const InvObject *m, const InvObject *l)
{
	MergeProblems *mp = arg;

	if ((++mp->n & 1023) == 0)
		CHECK_FOR_INTERRUPTS();
	problem_compare(m, l, mp->out);
}

/*
 * Compares a manifest with a listing of the keys under prefix, both given as
 * streams in jsonb key order, and appends the same problems as
 * inventory_compare, in one merge pass.
 */
void
inventory_merge(InvCursor *manifest, InvCursor *listing, const char *prefix, ProblemList *out)
{
	MergeProblems mp = {prefix, out, 0};
	InvMergeEvents ev = {merge_outside, merge_missing, merge_stray, merge_both, &mp};
	int			first = out->n;

	inv_merge(manifest, listing, prefix, strlen(prefix), INV_ORDER_JSONB, &ev);
	problems_sort(out, first);
}

/*
 * The digest of a listing: the sum (mod 2^64, in two lanes with seeds 0
 * and 1) of the hash of "path\nsize\netag" of every object, so it does not
 * depend on the order the store gave them in. The same figure in SQL:
 * sum(hashtextextended(path || E'\n' || size || E'\n' || coalesce(etag, ''),
 * seed)) mod 2^64. It checks that a rebuilt listing is the one the gate
 * saw (against accidents, not an adversary: sums of hashes can be forged).
 */
void
inventory_digest_add(uint64 digest[2], const char *path, int path_len, int64 size, const char *etag, int etag_len)
{
	char		local[1200];
	int			len = path_len + 2 + MAXINT8LEN + etag_len;
	char	   *buf = len <= (int) sizeof(local) ? local : palloc(len);
	int			n = 0;

	memcpy(buf, path, path_len);
	n = path_len;
	buf[n++] = '\n';
	n += pg_lltoa(size, buf + n);
	buf[n++] = '\n';
	if (etag != NULL)
	{
		memcpy(buf + n, etag, etag_len);
		n += etag_len;
	}
	digest[0] += hash_bytes_extended((const unsigned char *) buf, n, 0);
	digest[1] += hash_bytes_extended((const unsigned char *) buf, n, 1);
	if (buf != local)
		pfree(buf);
}

/* A digest as 32 hex digits (lane 0, then lane 1). */
char *
inventory_digest_hex(const uint64 digest[2])
{
	return psprintf("%016" PRIx64 "%016" PRIx64, digest[0], digest[1]);
}

/* Appends bytes to the comparison's stored form (the codec's writer). */
static void
stored_append(void *arg, const void *data, size_t len)
{
	appendBinaryStringInfo((StringInfo) arg, data, (int) len);
}

/* Most bytes one record of the stored form takes besides its key and ETag. */
#define RECORD_OVERHEAD 48

/*
 * Adds a record to the stored form, when one is kept. Past stored_max no
 * record is added and the form is marked truncated: the records kept still
 * decode, and the report says the listing cannot be rebuilt from them.
 */
void
inventory_keep_record(InvComparison *c, char kind, const InvObject *o)
{
	if (c->encoder == NULL || c->stored_truncated)
		return;
	if (c->stored_max > 0 &&
		(size_t) c->stored->len + o->path_len + o->etag_len + RECORD_OVERHEAD > c->stored_max)
	{
		c->stored_truncated = true;
		return;
	}
	if (!inv_encode(c->encoder, kind, o->path, o->path_len, o->size, o->etag, o->etag_len))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("object key of %d bytes is too long to store", o->path_len),
				 errdetail("The key begins \"%s\".", pnstrdup(o->path, Min(o->path_len, 64)))));
}

/* The listing's consumer: each batch is compared as it arrives. */
static void
comparison_consume(ListingSink *sink, const Inventory *batch)
{
	inventory_compare_batch((InvComparison *) sink, batch);
}

/*
 * What every comparison starts with: its problems go to out (from its
 * current end), its memory is the current context; the caller sets its
 * sink's consumer.
 */
void
inventory_comparison_init(InvComparison *c, const char *prefix, ProblemList *out)
{
	memset(c, 0, sizeof(*c));
	c->prefix = prefix;
	c->prefix_len = strlen(prefix);
	c->out = out;
	c->first = out->n;
	c->cxt = CurrentMemoryContext;
}

/* Starts the listing's stored form (inventory_codec.c) in the current context. */
void
inventory_keep_stored(InvComparison *c)
{
	c->stored = makeStringInfo();
	/* Room for a bytea's header, so the stored form needs no copy. */
	appendStringInfoSpaces(c->stored, VARHDRSZ);
	c->encoder = palloc(sizeof(InvEncoder));
	inv_encoder_init(c->encoder, stored_append, c->stored);
}

/*
 * Starts comparing a manifest with a listing of the keys under prefix that
 * will arrive in batches: the manifest's paths under the prefix go into a
 * hash table (pointing at the manifest, not copied); those outside are
 * wrong_prefix at once. With keep_stored, the listing's stored form is
 * built as well. Everything lives in the current memory context.
 */
void
inventory_compare_begin(InvComparison *c, const Inventory *manifest, const char *prefix, ProblemList *out,
						bool keep_stored)
{
	inventory_comparison_init(c, prefix, out);
	c->sink.consume = comparison_consume;
	c->manifest = manifest;
	c->tab = pathtab_create(CurrentMemoryContext, Max(manifest->n, 16), NULL);
	c->state = palloc0(Max(manifest->n, 1));
	for (int i = 0; i < manifest->n; i++)
	{
		const InvObject *m = &manifest->items[i];
		bool		found;

		if (!inv_under(m, prefix, c->prefix_len))
		{
			problem_wrong_prefix(m, prefix, out);
			c->state[i] = M_OUTSIDE;
			continue;
		}
		(void) pathtab_insert(c->tab, m, &found);
		/* A manifest of jsonb cannot name a file twice; an Iceberg snapshot's can. */
		if (found)
		{
			problem_duplicate(m, out);
			c->state[i] = M_OUTSIDE;
		}
	}
	if (keep_stored)
		inventory_keep_stored(c);
}

/*
 * Compares one batch of the listing: each object is looked up once;
 * stray_object, size_mismatch and checksum_mismatch are added, and what
 * the stored form needs is recorded. The batch may be freed afterwards.
 */
void
inventory_compare_batch(InvComparison *c, const Inventory *batch)
{
	MemoryContext old = MemoryContextSwitchTo(c->cxt);

	for (int i = 0; i < batch->n; i++)
	{
		const InvObject *l = &batch->items[i];
		PathEntry  *e;

		if ((i & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		c->listed++;
		c->bytes += l->size;
		inventory_digest_add(c->digest, l->path, l->path_len, l->size, l->etag, l->etag_len);
		e = pathtab_lookup(c->tab, l);
		if (e == NULL && c->strays_ignored)
			continue;
		if (e == NULL)
		{
			problem_stray(l, c->prefix, c->out);
			inventory_keep_record(c, INVCODEC_LISTED, l);
			continue;
		}
		c->state[e->key - c->manifest->items] = M_SEEN;
		problem_compare(e->key, l, c->out);
		if (!inv_same_as_manifest(e->key, l))
			inventory_keep_record(c, INVCODEC_LISTED, l);
	}
	MemoryContextSwitchTo(old);
}

/*
 * Whether the manifest gives path a checksum: a local store computes one
 * only for those (reading every file would dominate the gate's cost).
 */
bool
inventory_wants_checksum(InvComparison *c, const char *path, int path_len)
{
	InvObject	key = {.path = (char *) path,.path_len = path_len};
	PathEntry  *e;

	if (c->tab == NULL)
		return c->any_etag;		/* sorted: the manifest is not at hand */
	e = pathtab_lookup(c->tab, &key);

	return e != NULL && e->key->etag != NULL;
}

/*
 * Ends the comparison: every manifest object under the prefix that was not
 * listed is missing_object; the comparison's problems are sorted.
 */
void
inventory_compare_end(InvComparison *c)
{
	MemoryContext old = MemoryContextSwitchTo(c->cxt);

	for (int i = 0; i < c->manifest->n; i++)
		if (c->state[i] == M_UNSEEN)
		{
			problem_missing(&c->manifest->items[i], c->prefix, c->out);
			inventory_keep_record(c, INVCODEC_ABSENT, &c->manifest->items[i]);
		}
	pathtab_destroy(c->tab);
	c->tab = NULL;
	if (c->stored != NULL)
		SET_VARSIZE(c->stored->data, c->stored->len);
	problems_sort(c->out, c->first);
	MemoryContextSwitchTo(old);
}

/*
 * Compares a manifest with a listing of the keys under prefix and appends
 * the problems: wrong_prefix (a manifest path outside the prefix),
 * missing_object, stray_object, size_mismatch, checksum_mismatch.
 */
void
inventory_compare(const Inventory *manifest, const Inventory *listing,
				  const char *prefix, ProblemList *out)
{
	InvComparison c;

	inventory_compare_begin(&c, manifest, prefix, out, false);
	inventory_compare_batch(&c, listing);
	inventory_compare_end(&c);
}

/*
 * Rebuilds a listing from its manifest and its stored form (data, len): the
 * manifest's objects under the prefix, less those recorded absent, with
 * those recorded listed in their place, plus the listed ones the manifest
 * lacks. False when the stored form is malformed.
 */
bool
inventory_rebuild(const Inventory *manifest, const char *prefix, const char *data, size_t len, Inventory *out)
{
	int			prefix_len = strlen(prefix);
	pathtab_hash *tab = pathtab_create(CurrentMemoryContext, Max(manifest->n, 16), NULL);
	char	   *state = palloc0(Max(manifest->n, 1));
	InvDecoder *d = palloc(sizeof(InvDecoder));
	InvRecord	r;

	for (int i = 0; i < manifest->n; i++)
	{
		bool		found;

		if (inv_under(&manifest->items[i], prefix, prefix_len))
			(void) pathtab_insert(tab, &manifest->items[i], &found);
		else
			state[i] = M_OUTSIDE;
	}
	if (!inv_decoder_init(d, data, len))
		return false;
	while (inv_decode_next(d, &r))
	{
		InvObject	key = {.path = (char *) r.path,.path_len = r.path_len};
		PathEntry  *e = pathtab_lookup(tab, &key);

		/* The manifest's own entry gives way to the record. */
		if (e != NULL)
			state[e->key - manifest->items] = M_SEEN;
		if (r.kind == INVCODEC_LISTED)
			inventory_append_record(out, &r);
	}
	if (d->error)
		return false;
	for (int i = 0; i < manifest->n; i++)
		if (state[i] == M_UNSEEN)
			inventory_append(out, &manifest->items[i]);
	pathtab_destroy(tab);
	return true;
}

/*
 * A location as compared: with one trailing slash, so a location written
 * with or without it compares equal, and "day=27" cannot match the keys of
 * "day=270/".
 */
char *
location_with_slash(const char *location)
{
	size_t		len = strlen(location);

	return len > 0 && location[len - 1] == '/' ? pstrdup(location) : psprintf("%s/", location);
}
