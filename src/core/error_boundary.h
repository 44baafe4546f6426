/*
 * error_boundary.h
 *     Calls of user-facing functions as boundaries of the errors they raise:
 *     the user sees the error and their own code's context, not finalize's
 *     internal stack (see error_boundary.c).
 */
#ifndef FINALIZE_ERROR_BOUNDARY_H
#define FINALIZE_ERROR_BOUNDARY_H

#include "utils/elog.h"
#include "utils/palloc.h"

#include "core/pg_compat.h"

/* One boundary: what the call's caller had, restored on the way out. */
typedef struct ErrorBoundary
{
	ErrorContextCallback *outer;	/* the caller's error context stack */
	MemoryContext cxt;			/* the caller's memory context */
} ErrorBoundary;

extern void error_boundary_enter(ErrorBoundary *b);
extern void error_boundary_leave(ErrorBoundary *b);
pg_noreturn extern void error_boundary_rethrow(ErrorBoundary *b);
extern void error_boundary_install(void);

#endif							/* FINALIZE_ERROR_BOUNDARY_H */
