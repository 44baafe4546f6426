/*
 * background.c
 *     finalize._in_background(): whether the calling process is one of
 *     finalize's own background workers.
 *
 * A verdict row locked by a transaction stays locked until that
 * transaction ends. finalize's background workers (the source workers and
 * the scheduler) commit within milliseconds, so they may take the verdicts
 * of the derived tables that follow a table they advance; a session's
 * transaction may be left open by a pipeline for as long as it likes, so
 * there an advance moves only the table it was asked to move
 * (_advance_dependents), and the scheduler brings the derived tables up to
 * date within a round (_refresh_derived). Sessions cannot pass for a
 * background worker: only the postmaster starts one, with the entry points
 * finalize registers.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"

PG_FUNCTION_INFO_V1(finalize_in_background);

/* finalize._in_background(): true in finalize's background workers only. */
Datum
finalize_in_background(PG_FUNCTION_ARGS pg_attribute_unused())
{
	PG_RETURN_BOOL(IsBackgroundWorker && MyBgworkerEntry != NULL &&
				   strcmp(MyBgworkerEntry->bgw_library_name, "finalize") == 0);
}
