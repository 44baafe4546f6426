/*
 * marker_path.c
 *     Where a publication's _SUCCESS marker goes: the root of a local
 *     store a file:// location template names, and the directory a
 *     rendered location names below its store's base. Pure (no I/O, no
 *     allocation): unit-tested in test/unit/test_marker_path.c.
 *
 * A file:// template's root is the directory its fixed part names, before
 * its first placeholder: file:///lake/orders/dt={date}/ has the root
 * /lake/orders, below which no link is followed and directories are made
 * (store/filestore_write.c). The root itself may be reached through links,
 * as a gate's local store may: an administrator's choice.
 */
#include "postgres.h"

#include "gate/inventory.h"
#include "push/marker_path.h"

/*
 * The length of the root a file:// location template names, counted from
 * just after "file://" ("/lake/orders" of file:///lake/orders/dt={date}/):
 * the fixed part up to its last "/" before the first placeholder, without
 * that "/". -1 when the template is not file:///absolute/..., has no
 * placeholder, or its root would be "/" (the whole file system).
 */
int
marker_root_len(const char *location_template)
{
	const char *path = location_template + strlen("file://");
	const char *brace;
	const char *slash = NULL;

	if (strncmp(location_template, "file://", 7) != 0 || path[0] != '/')
		return -1;
	brace = strchr(path, '{');
	if (brace == NULL)
		return -1;
	for (const char *s = path; s < brace; s++)
		if (*s == '/')
			slash = s;
	if (slash == NULL || slash == path)
		return -1;
	return (int) (slash - path);
}

/*
 * The directory of a rendered location relative to its store's base
 * ("s3://<bucket>/" or "file://<root>/"): what follows the base, ending in
 * "/", without empty, "." or ".." parts (gate/inventory_merge.c's rule for
 * keys). "" when the location is the base itself; NULL when it is not
 * below the base or not such a directory.
 */
const char *
marker_relative_dir(const char *location, const char *base)
{
	size_t		blen = strlen(base);
	const char *rel = location + blen;
	size_t		rlen;

	if (blen == 0 || base[blen - 1] != '/' || strncmp(location, base, blen) != 0)
		return NULL;
	rlen = strlen(rel);
	if (rlen == 0)
		return rel;
	if (rel[rlen - 1] != '/' || !path_is_safe(rel, (int) rlen - 1))
		return NULL;
	return rel;
}
