/*
 * inventory.c
 *     Comparison of a manifest's files with a store's listing.
 *
 * Three inventories must agree before a partition is released: the
 * manifest, the listing and the catalog. This file compares the first two
 * in O(F): the manifest goes into a hash table keyed by path, each listed
 * object is looked up once, and what was never seen is missing. Two jsonb
 * objects are already sorted the same way, so they are merged instead, in
 * one sequential pass with no copies (inventory_merge); both give the same
 * problems. File names alone would miss an overwritten object, so sizes
 * (and checksums, when the manifest has them) are compared too.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/jsonb.h"

#include "common/json_build.h"
#include "gate/inventory.h"

/* A manifest entry in the hash table. */
typedef struct PathEntry
{
	const char *key;
	uint32		hash;
	char		status;
	const InvObject *object;
	bool		seen;
} PathEntry;

#define SH_PREFIX pathtab
#define SH_ELEMENT_TYPE PathEntry
#define SH_KEY_TYPE const char *
#define SH_KEY key
#define SH_HASH_KEY(tb, k) hash_bytes((const unsigned char *) (k), strlen(k))
#define SH_EQUAL(tb, a, b) (strcmp((a), (b)) == 0)
#define SH_SCOPE static inline
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) ((a)->hash)
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* Appends an object to an inventory (the strings are copied). */
void
inventory_add(Inventory *inv, const char *path, int64 size, const char *etag)
{
	if (inv->n == inv->capacity)
	{
		inv->capacity = inv->capacity ? inv->capacity * 2 : 64;
		inv->items = inv->items ? repalloc_huge(inv->items, sizeof(InvObject) * inv->capacity)
			: palloc_extended(sizeof(InvObject) * inv->capacity, MCXT_ALLOC_HUGE);
	}
	inv->items[inv->n].path = pstrdup(path);
	inv->items[inv->n].path_len = strlen(path);
	inv->items[inv->n].size = size;
	inv->items[inv->n].etag = etag ? pstrdup(etag) : NULL;
	inv->items[inv->n].etag_len = etag ? strlen(etag) : 0;
	inv->n++;
}

/* Appends a problem. */
void
problem_add(ProblemList *list, const char *code, const char *path, char *detail)
{
	if (list->n == list->capacity)
	{
		list->capacity = list->capacity ? list->capacity * 2 : 16;
		list->items = list->items ? repalloc_huge(list->items, sizeof(Problem) * list->capacity)
			: palloc_extended(sizeof(Problem) * list->capacity, MCXT_ALLOC_HUGE);
	}
	list->items[list->n].code = code;
	list->items[list->n].path = path ? pstrdup(path) : NULL;
	list->items[list->n].detail = detail;
	list->n++;
}

/*
 * An ETag as compared: without the quotes S3 puts around it, lower case.
 * (A multipart ETag "abc-3" stays as it is, minus quotes.)
 */
char *
etag_normalize(const char *etag)
{
	size_t		len = strlen(etag);
	char	   *out;

	if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"')
	{
		etag++;
		len -= 2;
	}
	out = pnstrdup(etag, len);
	for (char *c = out; *c; c++)
		*c = pg_ascii_tolower((unsigned char) *c);
	return out;
}

/*
 * Whether a path of len bytes stays inside its store: relative, no empty,
 * "." or ".." parts, at most 1024 bytes (S3's key limit).
 */
bool
path_is_safe(const char *path, int len)
{
	const char *part = path;
	const char *end = path + len;

	if (len == 0 || path[0] == '/' || len > 1024 || memchr(path, '\0', len) != NULL)
		return false;
	for (const char *c = path;; c++)
	{
		if (c == end || *c == '/')
		{
			size_t		plen = c - part;

			if (plen == 0 && c != end)
				return false;
			if ((plen == 1 && part[0] == '.') || (plen == 2 && part[0] == '.' && part[1] == '.'))
				return false;
			if (c == end)
				return true;
			part = c + 1;
		}
	}
}

/* Two ETags equal once quotes and case are set aside. */
static bool
etags_equal(const char *a, int alen, const char *b, int blen)
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
	for (int i = 0; i < alen; i++)
		if (pg_ascii_tolower((unsigned char) a[i]) != pg_ascii_tolower((unsigned char) b[i]))
			return false;
	return true;
}

/* Problems sorted by path, then code, for stable reports. */
static int
problem_cmp(const void *a, const void *b)
{
	const Problem *pa = a;
	const Problem *pb = b;
	int			c = strcmp(pa->path ? pa->path : "", pb->path ? pb->path : "");

	return c != 0 ? c : strcmp(pa->code, pb->code);
}

/* The problems of one path found on both sides (size, then checksum). */
static void
compare_object(const InvObject *m, const InvObject *l, ProblemList *out)
{
	if (m->size != l->size)
		problem_add(out, "size_mismatch", pnstrdup(l->path, l->path_len),
					psprintf("The manifest says " INT64_FORMAT " bytes, the store has " INT64_FORMAT
							 " bytes: the object was overwritten or truncated.", m->size, l->size));
	else if (m->etag != NULL && (l->etag == NULL || !etags_equal(m->etag, m->etag_len, l->etag, l->etag_len)))
	{
		char	   *want = etag_normalize(pnstrdup(m->etag, m->etag_len));

		problem_add(out, "checksum_mismatch", pnstrdup(l->path, l->path_len),
					l->etag ? psprintf("The manifest says checksum %s, the store has %s: the object was "
									   "overwritten with other content of the same size.",
									   want, etag_normalize(pnstrdup(l->etag, l->etag_len)))
					: psprintf("The manifest says checksum %s, but the store gave none to compare.", want));
	}
}

/* A manifest path outside the generation's location. */
static void
wrong_prefix(const InvObject *m, const char *prefix, ProblemList *out)
{
	problem_add(out, "wrong_prefix", pnstrdup(m->path, m->path_len),
				psprintf("The manifest lists it outside the generation's location \"%s\".", prefix));
}

/* A listed object the manifest does not have. */
static void
stray(const InvObject *l, const char *prefix, ProblemList *out)
{
	problem_add(out, "stray_object", pnstrdup(l->path, l->path_len),
				psprintf("It is in the store under \"%s\" (" INT64_FORMAT " bytes) but not in the manifest, "
						 "so readers of the location would read it too.", prefix, l->size));
}

/* A manifest object the store does not have. */
static void
missing(const InvObject *m, const char *prefix, ProblemList *out)
{
	problem_add(out, "missing_object", pnstrdup(m->path, m->path_len),
				psprintf("The manifest lists it with " INT64_FORMAT " bytes, but the store has no such "
						 "object under \"%s\".", m->size, prefix));
}

/* Whether a path starts with the prefix. */
static inline bool
under(const InvObject *o, const char *prefix, int prefix_len)
{
	return o->path_len >= prefix_len && memcmp(o->path, prefix, prefix_len) == 0;
}

/* jsonb key order: shorter first, then bytes. */
static inline int
key_cmp(const InvObject *a, const InvObject *b)
{
	if (a->path_len != b->path_len)
		return a->path_len < b->path_len ? -1 : 1;
	return memcmp(a->path, b->path, a->path_len);
}

/*
 * Compares a manifest with a listing of the keys under prefix, both given as
 * streams in jsonb key order, and appends the same problems as
 * inventory_compare, in one merge pass.
 */
void
inventory_merge(InvCursor *manifest, InvCursor *listing, const char *prefix, ProblemList *out)
{
	int			prefix_len = strlen(prefix);
	int			first = out->n;
	InvObject	m;
	InvObject	l;
	bool		have_m;
	bool		have_l;

	/* Next manifest object under the prefix; the others are wrong_prefix. */
#define NEXT_M() \
	do { \
		while ((have_m = manifest->next(manifest, &m)) && !under(&m, prefix, prefix_len)) \
			wrong_prefix(&m, prefix, out); \
	} while (0)

	NEXT_M();
	have_l = listing->next(listing, &l);
	while (have_m || have_l)
	{
		int			c = !have_m ? 1 : !have_l ? -1 : key_cmp(&m, &l);

		CHECK_FOR_INTERRUPTS();
		if (c < 0)
		{
			missing(&m, prefix, out);
			NEXT_M();
		}
		else if (c > 0)
		{
			stray(&l, prefix, out);
			have_l = listing->next(listing, &l);
		}
		else
		{
			compare_object(&m, &l, out);
			NEXT_M();
			have_l = listing->next(listing, &l);
		}
	}
#undef NEXT_M
	if (out->n - first > 1)
		qsort(out->items + first, out->n - first, sizeof(Problem), problem_cmp);
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
	int			prefix_len = strlen(prefix);
	pathtab_hash *tab = pathtab_create(CurrentMemoryContext, Max(manifest->n, 16), NULL);
	int			first = out->n;

	for (int i = 0; i < manifest->n; i++)
	{
		const InvObject *m = &manifest->items[i];
		bool		found;
		PathEntry  *e;

		if (!under(m, prefix, prefix_len))
		{
			wrong_prefix(m, prefix, out);
			continue;
		}
		e = pathtab_insert(tab, m->path, &found);
		e->object = m;
		e->seen = false;
	}

	for (int i = 0; i < listing->n; i++)
	{
		const InvObject *l = &listing->items[i];
		PathEntry  *e = pathtab_lookup(tab, l->path);

		CHECK_FOR_INTERRUPTS();
		if (e == NULL)
		{
			stray(l, prefix, out);
			continue;
		}
		e->seen = true;
		compare_object(e->object, l, out);
	}

	for (int i = 0; i < manifest->n; i++)
	{
		const InvObject *m = &manifest->items[i];
		PathEntry  *e;

		if (!under(m, prefix, prefix_len))
			continue;
		e = pathtab_lookup(tab, m->path);
		if (e != NULL && !e->seen)
		{
			e->seen = true;		/* report each path once */
			missing(m, prefix, out);
		}
	}
	pathtab_destroy(tab);
	if (out->n - first > 1)
		qsort(out->items + first, out->n - first, sizeof(Problem), problem_cmp);
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

/*
 * The problems as a jsonb array of {"code", "path", "detail"}: what
 * release_gate returns and stores, and what compare_inventories returns.
 */
Jsonb *
problems_to_jsonb(const ProblemList *list)
{
	JsonbParseState *st = NULL;

	jb_begin_array(&st, NULL);
	for (int i = 0; i < list->n; i++)
	{
		const Problem *p = &list->items[i];

		jb_begin_object(&st, NULL);
		jb_text(&st, "code", p->code);
		jb_text(&st, "path", p->path);
		jb_text(&st, "detail", p->detail);
		jb_end_object(&st);
	}
	return jb_finish(jb_end_array(&st));
}
