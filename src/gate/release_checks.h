/*
 * release_checks.h
 *     What the gate checks as the extension's owner before a release: the
 *     tracked table, the manifest against the listing, the catalog view of
 *     the partition and the CDC facts of its period.
 */
#ifndef FINALIZE_RELEASE_CHECKS_H
#define FINALIZE_RELEASE_CHECKS_H

#include "gate/manifest.h"

extern int64 tracked_table_id(const Manifest *m);
extern void check_partition(const Manifest *m, int64 table_id, int64 listed, ProblemList *problems,
							const char **catalog_json, const char **facts_json);

#endif							/* FINALIZE_RELEASE_CHECKS_H */
