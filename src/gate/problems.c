/*
 * problems.c
 *     The problems of a release attempt: the list and its limit per code,
 *     the words of each finding of a comparison (a publisher must know what
 *     to fix), their order, and the jsonb that release_gate returns and
 *     stores. Pure logic: no I/O, no catalog.
 */
#include "postgres.h"

#include "utils/jsonb.h"

#include "core/json_build.h"
#include "gate/inventory.h"
#include "gate/inventory_merge.h"

/* Appends a problem whose path (palloc'd, or NULL) it takes as it is. */
static void
problem_push(ProblemList *list, const char *code, char *path, char *detail)
{
	if (list->n == list->capacity)
	{
		list->capacity = list->capacity ? list->capacity * 2 : 16;
		list->items = list->items ? repalloc_huge(list->items, sizeof(Problem) * list->capacity)
			: palloc_extended(sizeof(Problem) * list->capacity, MCXT_ALLOC_HUGE);
	}
	list->items[list->n].code = code;
	list->items[list->n].path = path;
	list->items[list->n].detail = detail;
	list->n++;
}

/*
 * Counts a problem of code and says whether it is to be listed: the first
 * max_per_code of each code are, the rest only counted, so that a listing
 * that disagrees on millions of files costs a counter, not a million
 * entries (callers ask before building the entry's strings).
 */
bool
problem_room(ProblemList *list, const char *code)
{
	ProblemTally *t = NULL;

	for (int i = 0; i < list->ncodes; i++)
		if (strcmp(list->tally[i].code, code) == 0)
		{
			t = &list->tally[i];
			break;
		}
	if (t == NULL)
	{
		if (list->ncodes == PROBLEM_CODES_MAX)
			return true;		/* not followed: listed, as before limits */
		t = &list->tally[list->ncodes++];
		t->code = code;
		t->kept = t->dropped = 0;
	}
	if (list->max_per_code > 0 && t->kept >= list->max_per_code)
	{
		t->dropped++;
		return false;
	}
	t->kept++;
	return true;
}

/* Appends a problem (the path is copied), unless its code has had its share. */
void
problem_add(ProblemList *list, const char *code, const char *path, char *detail)
{
	if (problem_room(list, code))
		problem_push(list, code, path ? pstrdup(path) : NULL, detail);
}

/*
 * Appends, after the listed problems, one entry per code that had more than
 * max_per_code, with the number left out: the result still says what is
 * wrong, of what kind and how much, and released stays false.
 */
void
problems_summarize(ProblemList *list)
{
	for (int i = 0; i < list->ncodes; i++)
	{
		ProblemTally *t = &list->tally[i];

		if (t->dropped == 0)
			continue;
		problem_push(list, t->code, NULL,
					 psprintf(INT64_FORMAT " more %s problems are not listed: an attempt lists at most %d of "
							  "each code (finalize.gate_max_problems).", t->dropped, t->code, list->max_per_code));
		t->dropped = 0;
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
 * Sorts the problems from first on (one comparison's) by path, then code,
 * for stable reports.
 */
void
problems_sort(ProblemList *list, int first)
{
	if (list->n - first > 1)
		qsort(list->items + first, list->n - first, sizeof(Problem), problem_cmp);
}

/*
 * The problems of one path found on both sides, by the one rule every
 * comparison shares (inv_verdict), in words a publisher can act on.
 */
void
problem_compare(const InvObject *m, const InvObject *l, ProblemList *out)
{
	switch (inv_verdict(m, l))
	{
		case INV_AGREE:
			break;
		case INV_SIZE_MISMATCH:
			if (!problem_room(out, "size_mismatch"))
				break;
			problem_push(out, "size_mismatch", pnstrdup(l->path, l->path_len),
						psprintf("The manifest says " INT64_FORMAT " bytes, the store has " INT64_FORMAT
								 " bytes: the object was overwritten or truncated.", m->size, l->size));
			break;
		case INV_CHECKSUM_MISMATCH:
			if (problem_room(out, "checksum_mismatch"))
			{
				char	   *want = etag_normalize(pnstrdup(m->etag, m->etag_len));

				problem_push(out, "checksum_mismatch", pnstrdup(l->path, l->path_len),
							l->etag ? psprintf("The manifest says checksum %s, the store has %s: the object was "
											   "overwritten with other content of the same size.",
											   want, etag_normalize(pnstrdup(l->etag, l->etag_len)))
							: psprintf("The manifest says checksum %s, but the store gave none to compare.", want));
			}
			break;
	}
}

/* A manifest path outside the generation's location. */
void
problem_wrong_prefix(const InvObject *m, const char *prefix, ProblemList *out)
{
	if (problem_room(out, "wrong_prefix"))
		problem_push(out, "wrong_prefix", pnstrdup(m->path, m->path_len),
				psprintf("The manifest lists it outside the generation's location \"%s\".", prefix));
}

/* A listed object the manifest does not have. */
void
problem_stray(const InvObject *l, const char *prefix, ProblemList *out)
{
	if (problem_room(out, "stray_object"))
		problem_push(out, "stray_object", pnstrdup(l->path, l->path_len),
				psprintf("It is in the store under \"%s\" (" INT64_FORMAT " bytes) but not in the manifest, "
						 "so readers of the location would read it too.", prefix, l->size));
}

/* A manifest object the store does not have. */
void
problem_missing(const InvObject *m, const char *prefix, ProblemList *out)
{
	if (problem_room(out, "missing_object"))
		problem_push(out, "missing_object", pnstrdup(m->path, m->path_len),
				psprintf("The manifest lists it with " INT64_FORMAT " bytes, but the store has no such "
						 "object under \"%s\".", m->size, prefix));
}

/* A file named twice by the same snapshot: its rows would be read twice. */
void
problem_duplicate(const InvObject *m, ProblemList *out)
{
	if (problem_room(out, "duplicate_file"))
		problem_push(out, "duplicate_file", pnstrdup(m->path, m->path_len),
					 psprintf("The snapshot's manifests reference this file more than once, so readers would "
							  "read its rows twice; rewrite the snapshot's manifests (for example with a "
							  "rewrite_manifests procedure) and audit again."));
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
