/*
 * Unit tests of the gate's comparison rules (inventory_merge.c), without a
 * server: the verdict on one manifest entry and its listed object (size
 * first, then the ETag without quotes and case), and the merge of two
 * sorted streams in both orders (C collation and jsonb keys), which must
 * report each missing, stray, outside and shared path exactly once.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "gate/inventory_merge.h"

#include "tap.h"

/* A cursor over a static array. */
typedef struct ArrayCursor
{
	const InvObject *items;
	int			n;
	int			i;
} ArrayCursor;

/* Next object of the array. */
static bool
array_next(InvCursor *cursor, InvObject *out)
{
	ArrayCursor *a = cursor->state;

	if (a->i >= a->n)
		return false;
	*out = a->items[a->i++];
	return true;
}

/* What the events saw, as one line of "code:path;". */
static char seen[4096];

/* Appends one finding. */
static void
note(const char *code, const InvObject *o)
{
	snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%s:%.*s;", code, o->path_len, o->path);
}

/* An event: a manifest path outside the prefix. */
static void
ev_outside(void *arg pg_attribute_unused(), const InvObject *m)
{
	note("outside", m);
}

/* An event: a manifest path not listed. */
static void
ev_missing(void *arg pg_attribute_unused(), const InvObject *m)
{
	note("missing", m);
}

/* An event: a listed path the manifest lacks. */
static void
ev_stray(void *arg pg_attribute_unused(), const InvObject *l)
{
	note("stray", l);
}

/* An event: both sides; the verdict decides what is noted. */
static void
ev_both(void *arg pg_attribute_unused(), const InvObject *m, const InvObject *l)
{
	InvVerdict v = inv_verdict(m, l);

	note(v == INV_AGREE ? "agree" : v == INV_SIZE_MISMATCH ? "size" : "checksum", l);
}

#define OBJ(p, s) {(char *) (p), sizeof(p) - 1, (s), NULL, 0}
#define OBJE(p, s, e) {(char *) (p), sizeof(p) - 1, (s), (char *) (e), sizeof(e) - 1}

/* Merges two arrays under prefix "p/" and returns what was seen. */
static const char *
merge(const InvObject *m, int mn, const InvObject *l, int ln, InvOrder order)
{
	ArrayCursor ma = {m, mn, 0};
	ArrayCursor la = {l, ln, 0};
	InvCursor	mc = {array_next, &ma};
	InvCursor	lc = {array_next, &la};
	InvMergeEvents ev = {ev_outside, ev_missing, ev_stray, ev_both, NULL};

	seen[0] = '\0';
	inv_merge(&mc, &lc, "p/", 2, order, &ev);
	return seen;
}

/*
 * The rule path_is_safe implements, written the plainest way (one byte at
 * a time): the reference the exhaustive check below compares with.
 */
static bool
path_is_safe_reference(const char *path, int len)
{
	const char *end = path + len;
	const char *part = path;

	if (len == 0 || path[0] == '/' || len > 1024)
		return false;
	for (const char *c = path;; c++)
	{
		if (c == end || *c == '/')
		{
			long		plen = c - part;

			if ((plen == 0 && c != end) || (plen == 1 && part[0] == '.') ||
				(plen == 2 && part[0] == '.' && part[1] == '.'))
				return false;
			if (c == end)
				return true;
			part = c + 1;
		}
		else if (*c == '\0')
			return false;
	}
}

/*
 * Whether path_is_safe agrees with the reference on every path of up to
 * six bytes drawn from the bytes that matter ("/", ".", "a", NUL): 5,461
 * paths, each edge (leading, trailing, doubled slashes, "." and ".." parts
 * anywhere, a NUL inside) among them.
 */
static bool
path_is_safe_agrees(void)
{
	static const char alphabet[] = {'/', '.', 'a', '\0'};
	char		path[8];

	for (int len = 0; len <= 6; len++)
	{
		int			total = 1;

		for (int i = 0; i < len; i++)
			total *= 4;
		for (int code = 0; code < total; code++)
		{
			int			x = code;

			for (int i = 0; i < len; i++, x /= 4)
				path[i] = alphabet[x % 4];
			if (path_is_safe(path, len) != path_is_safe_reference(path, len))
				return false;
		}
	}
	return true;
}

int
main(void)
{
	/* Byte order (C collation): "p/a" < "p/a/b" < "p/ab" < "p/b". */
	static const InvObject m_bytes[] = {
		OBJ("o/x", 1), OBJ("p/a", 1), OBJE("p/a/b", 2, "\"ABC\""), OBJ("p/ab", 3),
		OBJE("p/c", 4, "abc"), OBJ("p/d", 5)};
	static const InvObject l_bytes[] = {
		OBJE("p/a", 1, "zzz"), OBJE("p/a/b", 2, "abc"), OBJ("p/aa", 9), OBJ("p/ab", 4),
		OBJE("p/c", 4, "abd")};
	/* jsonb order: shorter first. */
	static const InvObject m_jsonb[] = {OBJ("p/b", 1), OBJ("p/aa", 2)};
	static const InvObject l_jsonb[] = {OBJ("p/aa", 2), OBJ("p/zzz", 1)};
	InvObject	a = OBJE("k", 5, "\"0A\"");
	InvObject	b = OBJE("k", 5, "0a");
	InvObject	c = OBJE("k", 6, "0b");
	InvObject	noetag = OBJ("k", 5);

	check(inv_verdict(&a, &b) == INV_AGREE, "ETags compare without quotes and case");
	check(inv_verdict(&a, &c) == INV_SIZE_MISMATCH, "a size mismatch is reported before the checksum");
	check(inv_verdict(&a, &noetag) == INV_CHECKSUM_MISMATCH, "a manifest ETag the store does not give is a mismatch");
	check(inv_verdict(&noetag, &a) == INV_AGREE, "without a manifest ETag only the size counts");
	check(!inv_same_as_manifest(&a, &b), "the stored form keeps an ETag that differs in spelling");
	check(inv_same_as_manifest(&a, &a), "an identical object needs no record");
	check(inv_order_cmp(INV_ORDER_BYTES, &m_bytes[2], &m_bytes[3]) < 0, "bytes order: p/a/b before p/ab");
	check(inv_order_cmp(INV_ORDER_JSONB, &m_jsonb[0], &m_jsonb[1]) < 0, "jsonb order: shorter first");
	check(strcmp(merge(m_bytes, 6, l_bytes, 5, INV_ORDER_BYTES),
				 "outside:o/x;agree:p/a;agree:p/a/b;stray:p/aa;size:p/ab;checksum:p/c;missing:p/d;") == 0,
		  "a byte-order merge reports every path once");
	check(strcmp(merge(m_jsonb, 2, l_jsonb, 2, INV_ORDER_JSONB), "missing:p/b;agree:p/aa;stray:p/zzz;") == 0,
		  "a jsonb-order merge reports every path once");
	check(strcmp(merge(NULL, 0, l_jsonb, 2, INV_ORDER_BYTES), "stray:p/aa;stray:p/zzz;") == 0,
		  "an empty manifest makes every listed object stray");
	check(strcmp(merge(m_jsonb, 2, NULL, 0, INV_ORDER_JSONB), "missing:p/b;missing:p/aa;") == 0,
		  "an empty listing makes every manifest object missing");
	check(path_is_safe_agrees(), "path_is_safe agrees with a byte-by-byte reading of its rule on every short path");
	check(path_is_safe("a/b/", 4) && !path_is_safe("a//b", 4) && !path_is_safe("a/../b", 6) &&
		  !path_is_safe("/a", 2) && !path_is_safe("a/.", 3), "path_is_safe: a trailing slash only is allowed");
	return tap_done();
}
