/*
 * inventory.c
 *     Comparison of a manifest's files with a store's listing.
 *
 * Three inventories must agree before a partition is released: the
 * manifest, the listing and the catalog. This file compares the first two
 * in O(F): the manifest goes into a hash table keyed by path, each listed
 * object is looked up once, and what was never seen is missing. File names
 * alone would miss an overwritten object, so sizes (and checksums, when the
 * manifest has them) are compared too.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/json.h"

#include "inventory.h"

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
	inv->items[inv->n].size = size;
	inv->items[inv->n].etag = etag ? pstrdup(etag) : NULL;
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
 * Whether a path stays inside its store: relative, no empty, "." or ".."
 * parts, at most 1024 bytes (S3's key limit).
 */
bool
path_is_safe(const char *path)
{
	const char *part = path;

	if (path[0] == '\0' || path[0] == '/' || strlen(path) > 1024)
		return false;
	for (const char *c = path;; c++)
	{
		if (*c == '/' || *c == '\0')
		{
			size_t		len = c - part;

			if (len == 0 && *c == '/')
				return false;
			if ((len == 1 && part[0] == '.') || (len == 2 && part[0] == '.' && part[1] == '.'))
				return false;
			if (*c == '\0')
				return true;
			part = c + 1;
		}
	}
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

/*
 * Compares a manifest with a listing of the keys under prefix and appends
 * the problems: wrong_prefix (a manifest path outside the prefix),
 * missing_object, stray_object, size_mismatch, checksum_mismatch.
 */
void
inventory_compare(const Inventory *manifest, const Inventory *listing,
				  const char *prefix, ProblemList *out)
{
	size_t		prefix_len = strlen(prefix);
	pathtab_hash *tab = pathtab_create(CurrentMemoryContext, Max(manifest->n, 16), NULL);
	int			first = out->n;

	for (int i = 0; i < manifest->n; i++)
	{
		const InvObject *m = &manifest->items[i];
		bool		found;
		PathEntry  *e;

		if (strncmp(m->path, prefix, prefix_len) != 0)
		{
			problem_add(out, "wrong_prefix", m->path,
						psprintf("The manifest lists it outside the generation's location \"%s\".", prefix));
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

		if (e == NULL)
		{
			problem_add(out, "stray_object", l->path,
						psprintf("It is in the store under \"%s\" (" INT64_FORMAT " bytes) but not in the manifest, "
								 "so readers of the location would read it too.", prefix, l->size));
			continue;
		}
		e->seen = true;
		if (e->object->size != l->size)
			problem_add(out, "size_mismatch", l->path,
						psprintf("The manifest says " INT64_FORMAT " bytes, the store has " INT64_FORMAT
								 " bytes: the object was overwritten or truncated.", e->object->size, l->size));
		else if (e->object->etag != NULL)
		{
			char	   *want = etag_normalize(e->object->etag);
			char	   *have = l->etag ? etag_normalize(l->etag) : NULL;

			if (have == NULL || strcmp(want, have) != 0)
				problem_add(out, "checksum_mismatch", l->path,
							have ? psprintf("The manifest says checksum %s, the store has %s: the object was "
											"overwritten with other content of the same size.", want, have)
							: psprintf("The manifest says checksum %s, but the store gave none to compare.", want));
		}
	}

	for (int i = 0; i < manifest->n; i++)
	{
		const InvObject *m = &manifest->items[i];
		PathEntry  *e;

		if (strncmp(m->path, prefix, prefix_len) != 0)
			continue;
		e = pathtab_lookup(tab, m->path);
		if (e != NULL && !e->seen)
		{
			e->seen = true;		/* report each path once */
			problem_add(out, "missing_object", m->path,
						psprintf("The manifest lists it with " INT64_FORMAT " bytes, but the store has no such "
								 "object under \"%s\".", m->size, prefix));
		}
	}
	pathtab_destroy(tab);
	if (out->n - first > 1)
		qsort(out->items + first, out->n - first, sizeof(Problem), problem_cmp);
}

/* The problems as a JSON array of {"code", "path", "detail"}. */
void
problems_to_json(const ProblemList *list, StringInfo buf)
{
	appendStringInfoChar(buf, '[');
	for (int i = 0; i < list->n; i++)
	{
		const Problem *p = &list->items[i];

		if (i > 0)
			appendStringInfoString(buf, ", ");
		appendStringInfoString(buf, "{\"code\": ");
		escape_json(buf, p->code);
		appendStringInfoString(buf, ", \"path\": ");
		if (p->path)
			escape_json(buf, p->path);
		else
			appendStringInfoString(buf, "null");
		appendStringInfoString(buf, ", \"detail\": ");
		escape_json(buf, p->detail);
		appendStringInfoChar(buf, '}');
	}
	appendStringInfoChar(buf, ']');
}

/* An inventory as a JSON object {"path": size} or {"path": {"size", "etag"}}. */
void
inventory_to_json(const Inventory *inv, StringInfo buf)
{
	appendStringInfoChar(buf, '{');
	for (int i = 0; i < inv->n; i++)
	{
		const InvObject *o = &inv->items[i];

		if (i > 0)
			appendStringInfoString(buf, ", ");
		escape_json(buf, o->path);
		if (o->etag)
		{
			appendStringInfo(buf, ": {\"size\": " INT64_FORMAT ", \"etag\": ", o->size);
			escape_json(buf, o->etag);
			appendStringInfoChar(buf, '}');
		}
		else
			appendStringInfo(buf, ": " INT64_FORMAT, o->size);
	}
	appendStringInfoChar(buf, '}');
}
