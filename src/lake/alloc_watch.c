/*
 * alloc_watch.c
 *     An allocator in libavro's form (realloc-like, with the old size) that
 *     keeps a set of what it handed out and is still live. libavro frees
 *     some allocations only on success (its string reader leaks the buffer
 *     of a string the input cuts short): the reader watches such a step,
 *     frees its own objects on failure, and then frees whatever the watch
 *     still lists, which nothing can reach any more. On success the set is
 *     forgotten: the objects own those blocks, and libavro's default
 *     allocator (realloc and free too) frees them later.
 *
 * The set is a hash table (open addressing, linear probing), so that each
 * allocation and free costs the same however many blocks are live: a
 * record of half a million strings, each freed when the next record is
 * read, took minutes with a list searched from its end, inside libavro
 * where nothing can be cancelled.
 */
#include <stdint.h>
#include <stdlib.h>

#include "lake/alloc_watch.h"

/*
 * No one block over 1 GiB, PostgreSQL's own limit for one allocation: the
 * last resort only, since libavro does not survive every refusal (a failed
 * array growth loses the array, avro_bound.c says more); the records it is
 * handed are checked first to need far less.
 */
#define MAX_BLOCK ((size_t) 1 << 30)

/* A slot whose block was freed: a probe goes on past it. */
#define TOMBSTONE ((void *) 1)

/* The slot a pointer's probe starts at (a multiplicative hash). */
static size_t
home(const AllocWatch *w, const void *ptr)
{
	return (size_t) (((uint64_t) (uintptr_t) ptr * UINT64_C(0x9E3779B97F4A7C15)) >> 20) & (w->cap - 1);
}

/* Where a block is in the set; SIZE_MAX when it is not (allocated before the watch). */
static size_t
find(AllocWatch *w, const void *ptr)
{
	if (ptr == NULL || w->cap == 0)
		return SIZE_MAX;
	for (size_t i = home(w, ptr), k = 0; k < w->cap; i = (i + 1) & (w->cap - 1), k++)
	{
		w->probes++;
		if (w->slots[i] == NULL)
			return SIZE_MAX;
		if (w->slots[i] == ptr)
			return i;
	}
	return SIZE_MAX;
}

/* Puts a block into a free slot of a table that has one. */
static void
place(AllocWatch *w, void *ptr)
{
	size_t		i = home(w, ptr);

	while (w->slots[i] != NULL && w->slots[i] != TOMBSTONE)
	{
		w->probes++;
		i = (i + 1) & (w->cap - 1);
	}
	if (w->slots[i] == NULL)
		w->used++;
	w->slots[i] = ptr;
	w->n++;
}

/* A table four times the live blocks, without tombstones; false when memory ran out. */
static bool
rebuild(AllocWatch *w)
{
	void	  **old = w->slots;
	size_t		oldcap = w->cap;
	size_t		cap = 64;

	while (cap < 4 * (w->n + 1))
		cap *= 2;
	w->slots = calloc(cap, sizeof(void *));
	if (w->slots == NULL)
	{
		w->slots = old;
		return false;
	}
	w->cap = cap;
	w->n = w->used = 0;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i] != NULL && old[i] != TOMBSTONE)
			place(w, old[i]);
	free(old);
	return true;
}

/* Adds a block to the set; a block the set has no room for is only not watched. */
static void
remember(AllocWatch *w, void *ptr)
{
	if (4 * (w->used + 1) > 3 * w->cap && !rebuild(w))
		return;
	place(w, ptr);
}

/*
 * The allocator: realloc (nsize 0: free) that keeps the set up to date.
 * The block's place is found before realloc, which may free it.
 */
void *
alloc_watch(void *watch, void *ptr, size_t osize, size_t nsize)
{
	AllocWatch *w = watch;
	size_t		at = find(w, ptr);
	void	   *out;

	(void) osize;
	if (at != SIZE_MAX && nsize == 0)
	{
		w->slots[at] = TOMBSTONE;
		w->n--;
	}
	if (nsize == 0)
	{
		free(ptr);
		return NULL;
	}
	out = nsize > MAX_BLOCK ? NULL : realloc(ptr, nsize);
	if (out == NULL)
		return NULL;			/* ptr, if any, is still live and listed as it was */
	if (at != SIZE_MAX)
	{
		w->slots[at] = TOMBSTONE;
		w->n--;
	}
	remember(w, out);
	return out;
}

/* Ends a watch: frees what it still lists when reap (a failed step), and the set. */
void
alloc_watch_end(AllocWatch *w, bool reap)
{
	for (size_t i = 0; reap && i < w->cap; i++)
		if (w->slots[i] != NULL && w->slots[i] != TOMBSTONE)
			free(w->slots[i]);
	free(w->slots);
	w->slots = NULL;
	w->n = w->used = w->cap = 0;
	w->probes = 0;
}
