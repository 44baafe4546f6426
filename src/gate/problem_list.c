/*
 * problem_list.c
 *     The problems of a release attempt as a list: its limit per code (a
 *     listing that disagrees on millions of files costs counters, not
 *     entries), its order, and the jsonb that release_gate returns and
 *     stores. What each problem says is the caller's (findings.c for a
 *     comparison's). Pure logic: no I/O, no catalog.
 */
#include "postgres.h"

#include "utils/jsonb.h"

#include "core/json_build.h"
#include "gate/problem_list.h"

/*
 * Appends a problem whose path (palloc'd, or NULL) it takes as it is: for
 * the findings, which ask problem_room first and then build the path.
 */
void
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
