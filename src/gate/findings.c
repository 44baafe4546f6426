/*
 * findings.c
 *     What a comparison of a manifest with a store finds, in words a
 *     publisher can act on (what differs, what to fix), added to the
 *     attempt's problem list (problem_list.c). Pure logic: no I/O, no catalog.
 */
#include "postgres.h"

#include "gate/findings.h"
#include "gate/inventory_merge.h"

/*
 * An ETag as compared: without the quotes S3 puts around it, lower case.
 * (A multipart ETag "abc-3" stays as it is, minus quotes.)
 */
static char *
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
