/*
 * subxact.h
 *     Running a step that may fail without losing the transaction around it.
 */
#ifndef FINALIZE_SUBXACT_H
#define FINALIZE_SUBXACT_H

#include "fmgr.h"

extern bool subxact_try(void (*fn) (void *), void *arg, ErrorData **error);
extern void subxact_rolled_back(void (*fn) (void *), void *arg);
extern bool subxact_input(PGFunction infunc, const char *text, Datum *result);

#endif							/* FINALIZE_SUBXACT_H */
