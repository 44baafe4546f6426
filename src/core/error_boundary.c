/*
 * error_boundary.c
 *     What a user sees of an error raised inside one of finalize's
 *     functions: the error, and the context of the user's own code, never
 *     the stack of finalize's internals.
 *
 * An error a user causes (a bad argument, an unknown name, a missing
 * privilege) is raised deep inside finalize: in a PL/pgSQL helper that
 * checks a name, under the SPI statement an owner-run entry point runs,
 * under the function that called the helper. PostgreSQL reports each of
 * those frames as a CONTEXT line ("PL/pgSQL function
 * finalize_internal.not_tracked(text) line 3 at RAISE", "SQL statement "SELECT
 * finalize_internal.track_table($1, ...)""), which tells the user nothing they can
 * act on. So each call of a user-facing function is a boundary: while it
 * runs, the error context stack starts empty (its frames collect only
 * finalize's lines); an error that leaves it is raised again with the
 * context of the boundary's caller alone (a DO block's or the user's own
 * function's lines stay), and finalize's lines are dropped unless the
 * error is an internal failure (class XX, a failed assertion, a resource
 * or system error), whose stack a bug report needs.
 *
 * Two kinds of entry point are boundaries, through the same code: the C
 * entry points that run a body as the extension's owner (run_as_owner,
 * owner.c), and the SECURITY DEFINER PL/pgSQL and SQL functions of schema
 * finalize whose names do not begin with an underscore, through
 * PostgreSQL's fmgr_hook (called around every SECURITY DEFINER function;
 * sepgsql uses it the same way). The boundary catches the error only to
 * raise it again at once: nothing runs in between (subxact.c is the one
 * way finalize catches an error and goes on).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "fmgr.h"
#include "utils/elog.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "core/error_boundary.h"
#include "core/settings.h"

/* Nested boundaries of SECURITY DEFINER functions (deeper ones are not boundaries). */
#define MAX_DEFINER_BOUNDARIES 32

typedef struct DefinerBoundary
{
	FmgrInfo   *flinfo;			/* the call it belongs to */
	ErrorBoundary b;
} DefinerBoundary;

static DefinerBoundary definer_boundaries[MAX_DEFINER_BOUNDARIES];
static int	n_definer_boundaries = 0;
static fmgr_hook_type prev_fmgr_hook = NULL;

/* Enters a boundary: the error context stack starts empty until it is left. */
void
error_boundary_enter(ErrorBoundary *b)
{
	b->outer = error_context_stack;
	b->cxt = CurrentMemoryContext;
	error_context_stack = NULL;
}

/* Leaves a boundary normally: the caller's error context stack again. */
void
error_boundary_leave(ErrorBoundary *b)
{
	error_context_stack = b->outer;
}

/*
 * Whether an error is an internal failure rather than one the caller
 * caused: the classes PostgreSQL keeps for bugs, exhausted resources and
 * failing systems, and PL/pgSQL's ASSERT.
 */
static bool
internal_failure(int sqlerrcode)
{
	int			class = ERRCODE_TO_CATEGORY(sqlerrcode);

	return class == ERRCODE_TO_CATEGORY(ERRCODE_INTERNAL_ERROR) ||
		class == ERRCODE_TO_CATEGORY(ERRCODE_INSUFFICIENT_RESOURCES) ||
		class == ERRCODE_TO_CATEGORY(ERRCODE_SYSTEM_ERROR) ||
		sqlerrcode == ERRCODE_ASSERT_FAILURE;
}

/*
 * Raises the error being handled again from the boundary (called in a
 * PG_CATCH block): with the caller's context lines, after finalize's own
 * only for an internal failure. Everything else of the error (its
 * SQLSTATE, message, detail, hint, position) is kept.
 */
void
error_boundary_rethrow(ErrorBoundary *b)
{
	ErrorData  *edata;
	char	   *outer;

	MemoryContextSwitchTo(b->cxt);
	edata = CopyErrorData();
	FlushErrorState();
	error_context_stack = b->outer;
	/* The caller's lines, as PostgreSQL would have added them. */
	outer = b->outer != NULL ? GetErrorContextStack() : NULL;
	if (outer != NULL && outer[0] == '\0')
		outer = NULL;
	if (!internal_failure(edata->sqlerrcode))
	{
		edata->context = NULL;
		edata->internalquery = NULL;
		edata->internalpos = 0;
	}
	if (edata->context != NULL && outer != NULL)
		edata->context = psprintf("%s\n%s", edata->context, outer);
	else if (outer != NULL)
		edata->context = outer;
	ReThrowError(edata);
}

/*
 * Whether a function is one users call by name: of schema finalize, its
 * name without the underscore of internal functions.
 */
static bool
user_facing(Oid fn)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Form_pg_proc proc;
	bool		result;

	if (!HeapTupleIsValid(tup))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	result = NameStr(proc->proname)[0] != '_' &&
		proc->pronamespace == get_namespace_oid(FINALIZE_SCHEMA, true);
	ReleaseSysCache(tup);
	return result;
}

/*
 * fmgr_hook: makes each call of a user-facing SECURITY DEFINER function a
 * boundary. PostgreSQL calls it at the start of the call (before its
 * PG_TRY, which so saves the emptied stack), at the end, and when an error
 * leaves the call (in its PG_CATCH, where the error is raised again).
 */
static void
boundary_fmgr_hook(FmgrHookEventType event, FmgrInfo *flinfo, Datum *private)
{
	if (prev_fmgr_hook)
		prev_fmgr_hook(event, flinfo, private);
	if (event == FHET_START)
	{
		if (n_definer_boundaries < MAX_DEFINER_BOUNDARIES && user_facing(flinfo->fn_oid))
		{
			definer_boundaries[n_definer_boundaries].flinfo = flinfo;
			error_boundary_enter(&definer_boundaries[n_definer_boundaries].b);
			n_definer_boundaries++;
		}
		return;
	}
	/* The innermost boundary is this call's, if the call is one. */
	if (n_definer_boundaries == 0 || definer_boundaries[n_definer_boundaries - 1].flinfo != flinfo)
		return;
	n_definer_boundaries--;
	if (event == FHET_ABORT)
		error_boundary_rethrow(&definer_boundaries[n_definer_boundaries].b);
	error_boundary_leave(&definer_boundaries[n_definer_boundaries].b);
}

/*
 * Forgets the boundaries at the end of a transaction: a boundary never
 * outlives its call, but one left by a hook that failed between the
 * events must not be matched with a later call.
 */
static void
boundary_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
		n_definer_boundaries = 0;
}

/* Installs the hook (from _PG_init). */
void
error_boundary_install(void)
{
	prev_fmgr_hook = fmgr_hook;
	fmgr_hook = boundary_fmgr_hook;
	RegisterXactCallback(boundary_xact_callback, NULL);
}
