/*
 * alloc_watch.c
 *     An allocator in libavro's form (realloc-like, with the old size) that
 *     keeps a list of what it handed out and is still live. libavro frees
 *     some allocations only on success (its string reader leaks the buffer
 *     of a string the input cuts short): the reader watches such a step,
 *     frees its own objects on failure, and then frees whatever the watch
 *     still lists, which nothing can reach any more. On success the list is
 *     forgotten: the objects own those blocks, and libavro's default
 *     allocator (realloc and free too) frees them later.
 *
 * The list is searched from its end: a watched step holds few blocks (the
 * current record's strings, the block being read), and the newest are the
 * ones freed first.
 */
#include <stdlib.h>

#include "lake/alloc_watch.h"

/*
 * No one block over 1 GiB, PostgreSQL's own limit for one allocation: a
 * corrupt length in a manifest is refused (libavro reports it cannot
 * allocate) rather than reserved.
 */
#define MAX_BLOCK ((size_t) 1 << 30)

/* Where a block is in the list; w->n when it is not (allocated before the watch). */
static size_t
find(const AllocWatch *w, const void *ptr)
{
	for (size_t i = w->n; ptr != NULL && i > 0; i--)
		if (w->live[i - 1] == ptr)
			return i - 1;
	return w->n;
}

/* Adds a block to the list; a block the list has no room for is only not watched. */
static void
remember(AllocWatch *w, void *ptr)
{
	if (w->n == w->cap)
	{
		size_t		cap = w->cap ? 2 * w->cap : 64;
		void	  **grown = realloc(w->live, cap * sizeof(void *));

		if (grown == NULL)
			return;
		w->live = grown;
		w->cap = cap;
	}
	w->live[w->n++] = ptr;
}

/*
 * The allocator: realloc (nsize 0: free) that keeps the list up to date.
 * The block's place is found before realloc, which may free it.
 */
void *
alloc_watch(void *watch, void *ptr, size_t osize, size_t nsize)
{
	AllocWatch *w = watch;
	size_t		at = find(w, ptr);
	void	   *out;

	(void) osize;
	if (at < w->n && nsize == 0)
		w->live[at] = w->live[--w->n];
	if (nsize == 0)
	{
		free(ptr);
		return NULL;
	}
	out = nsize > MAX_BLOCK ? NULL : realloc(ptr, nsize);
	if (out == NULL)
		return NULL;			/* ptr, if any, is still live and listed as it was */
	if (at < w->n)
		w->live[at] = out;
	else
		remember(w, out);
	return out;
}

/* Ends a watch: frees what it still lists when reap (a failed step), and the list. */
void
alloc_watch_end(AllocWatch *w, bool reap)
{
	for (size_t i = 0; reap && i < w->n; i++)
		free(w->live[i]);
	free(w->live);
	w->live = NULL;
	w->n = w->cap = 0;
}
