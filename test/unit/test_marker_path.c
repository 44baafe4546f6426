/*
 * Unit tests of where a publication's _SUCCESS marker goes
 * (push/marker_path.c): the root a file:// location template names, below
 * which no link is followed and directories are made, and the directory a
 * rendered location names below its store. Built and run by
 * test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "push/marker_path.h"

#include "tap.h"

/* Whether marker_relative_dir gives want (NULL: refused). */
static bool
rel_is(const char *location, const char *base, const char *want)
{
	const char *got = marker_relative_dir(location, base);

	return want == NULL ? got == NULL : got != NULL && strcmp(got, want) == 0;
}

int
main(void)
{
	check(marker_root_len("file:///lake/orders/dt={date}/") == (int) strlen("/lake/orders"),
		  "the root is the fixed directory before the first placeholder");
	check(marker_root_len("file:///lake/orders/dt={date}/hour={hour}/") == (int) strlen("/lake/orders"),
		  "later placeholders do not move the root");
	check(marker_root_len("file:///lake/orders/{year}/{month}/") == (int) strlen("/lake/orders"),
		  "a placeholder that is a whole directory name");
	check(marker_root_len("file:///lake/o{date}/") == (int) strlen("/lake"),
		  "a placeholder inside a name: the root is that name's parent");
	check(marker_root_len("file:///dt={date}/") == -1, "the whole file system is no root");
	check(marker_root_len("file:///lake/orders/") == -1, "a template without a placeholder has no root");
	check(marker_root_len("file://lake/{date}/") == -1, "a relative path (two slashes) is refused");
	check(marker_root_len("s3://lake/{date}/") == -1, "an s3:// template has no local root");
	check(marker_root_len("file:///{date}/") == -1, "a placeholder right after file:/// is refused");

	check(rel_is("s3://lake/orders/dt=2026-03-01/", "s3://lake/", "orders/dt=2026-03-01/"),
		  "an s3:// directory below its bucket");
	check(rel_is("file:///data/lake/dt=2026-03-01/", "file:///data/lake/", "dt=2026-03-01/"),
		  "a file:// directory below its root");
	check(rel_is("s3://lake/", "s3://lake/", ""), "the base itself: the marker at the bucket's top");
	check(rel_is("s3://other/orders/", "s3://lake/", NULL), "another bucket is refused");
	check(rel_is("s3://lakehouse/orders/", "s3://lake/", NULL), "a bucket whose name starts alike is refused");
	check(rel_is("file:///data/lake/../etc/", "file:///data/lake/", NULL), "a .. part is refused");
	check(rel_is("file:///data/lake/./x/", "file:///data/lake/", NULL), "a . part is refused");
	check(rel_is("file:///data/lake//x/", "file:///data/lake/", NULL), "an empty part is refused");
	check(rel_is("file:///data/lake/x", "file:///data/lake/", NULL), "a location that is no directory is refused");
	check(rel_is("file:///data/lake/x/", "file:///data/lake", NULL), "a base without its slash is refused");
	return tap_done();
}
