/*
 * manifest_lines.h
 *     A manifest's files read from a JSON Lines object (files_location), a
 *     chunk at a time, into a sorted inventory.
 */
#ifndef FINALIZE_MANIFEST_LINES_H
#define FINALIZE_MANIFEST_LINES_H

#include "gate/manifest.h"
#include "gate/sorted_inventory.h"

/* Longest line of a manifest object (a 1024-byte key, escaped, and more). */
#define MANIFEST_LINE_MAX (64 * 1024)

typedef struct ManifestLines
{
	const char *source;			/* the object's URL, for errors */
	SortedInventory *sort;		/* where the files go */
	int64		line_no;		/* lines read so far */
	StringInfoData partial;		/* a line not yet ended */
	MemoryContext line_cxt;		/* parsing, reset every thousand lines */
	int			in_batch;
	int64		count;
	int64		bytes;
	uint64		digest[2];
	bool		any_etag;
} ManifestLines;

extern void manifest_lines_begin(ManifestLines *r, const char *source);
extern void manifest_lines_feed(ManifestLines *r, const char *data, size_t len);
extern void manifest_lines_end(ManifestLines *r, Manifest *m);

#endif							/* FINALIZE_MANIFEST_LINES_H */
