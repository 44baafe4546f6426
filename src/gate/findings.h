/*
 * findings.h
 *     What a comparison of a manifest with a store finds (findings.c), each
 *     added to a problem list in words a publisher can act on. Pure logic.
 */
#ifndef FINALIZE_FINDINGS_H
#define FINALIZE_FINDINGS_H

#include "gate/inventory.h"
#include "gate/problem_list.h"

extern void problem_compare(const InvObject *m, const InvObject *l, ProblemList *out);
extern void problem_wrong_prefix(const InvObject *m, const char *prefix, ProblemList *out);
extern void problem_stray(const InvObject *l, const char *prefix, ProblemList *out);
extern void problem_missing(const InvObject *m, const char *prefix, ProblemList *out);
extern void problem_duplicate(const InvObject *m, ProblemList *out);

#endif							/* FINALIZE_FINDINGS_H */
