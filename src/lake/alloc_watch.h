/*
 * alloc_watch.h
 *     An allocator that remembers what it handed out and is still live, so
 *     that what a library lost on an error path can be freed afterwards
 *     (avro_manifest.c installs it with avro_set_allocator around libavro's
 *     decoding of a header and of each record, whose failure leaks a
 *     string cut short), and that hands out no one block over 1 GiB.
 *     Plain malloc/realloc/free underneath, as libavro's own default, so
 *     what it allocated may be freed by that default later. No libavro here.
 *     A zeroed AllocWatch is an empty one.
 */
#ifndef FINALIZE_LAKE_ALLOC_WATCH_H
#define FINALIZE_LAKE_ALLOC_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The live allocations of one watch: a hash set of their addresses. */
typedef struct AllocWatch
{
	void	  **slots;			/* cap of them, NULL when empty */
	size_t		n;				/* the blocks listed */
	size_t		used;			/* the slots taken (freed ones included) */
	size_t		cap;			/* a power of 2, or 0 */
	uint64_t	probes;			/* slots looked at, all told (the unit test's) */
} AllocWatch;

extern void *alloc_watch(void *watch, void *ptr, size_t osize, size_t nsize);
extern void alloc_watch_end(AllocWatch *w, bool reap);

#endif							/* FINALIZE_LAKE_ALLOC_WATCH_H */
