/*
 * marker_path.h
 *     Where a publication's _SUCCESS marker goes, from its location
 *     (pure: unit-tested in test/unit/test_marker_path.c).
 */
#ifndef FINALIZE_MARKER_PATH_H
#define FINALIZE_MARKER_PATH_H

extern int	marker_root_len(const char *location_template);
extern const char *marker_relative_dir(const char *location, const char *base);

#endif							/* FINALIZE_MARKER_PATH_H */
