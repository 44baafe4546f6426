/*
 * inventory.h
 *     Sets of objects (a manifest's files, a store's listing) and their
 *     comparison. Pure logic: no I/O, no catalog.
 */
#ifndef FINALIZE_INVENTORY_H
#define FINALIZE_INVENTORY_H

#include "utils/jsonb.h"

/* One object: a path (key) inside a store, its size and its checksum. */
typedef struct InvObject
{
	char	   *path;			/* NUL-terminated, except in cursors (path_len) */
	int			path_len;
	int64		size;
	char	   *etag;			/* NULL when not given / not known */
	int			etag_len;
} InvObject;

/*
 * A stream of objects in ascending jsonb key order (length, then bytes):
 * next() fills *out and returns true, or returns false at the end. Lets two
 * jsonb objects be compared by a merge, without copying or hashing.
 */
typedef struct InvCursor
{
	bool		(*next) (struct InvCursor *cursor, InvObject *out);
	void	   *state;
} InvCursor;

typedef struct Inventory
{
	InvObject  *items;
	int			n;
	int			capacity;
} Inventory;

/* One reason not to release. */
typedef struct Problem
{
	const char *code;
	char	   *path;			/* NULL when about the partition as a whole */
	char	   *detail;
} Problem;

typedef struct ProblemList
{
	Problem    *items;
	int			n;
	int			capacity;
} ProblemList;

extern void inventory_add(Inventory *inv, const char *path, int64 size, const char *etag);
extern void problem_add(ProblemList *list, const char *code, const char *path, char *detail);
extern void inventory_compare(const Inventory *manifest, const Inventory *listing,
							  const char *prefix, ProblemList *out);
extern void inventory_merge(InvCursor *manifest, InvCursor *listing, const char *prefix, ProblemList *out);
extern char *etag_normalize(const char *etag);
extern bool path_is_safe(const char *path, int len);
extern char *location_with_slash(const char *location);
extern Jsonb *problems_to_jsonb(const ProblemList *list);

#endif							/* FINALIZE_INVENTORY_H */
