/*
 * background.c
 *     finalize's background workers as PostgreSQL sees them: starting one,
 *     connecting it to its database, and finalize_internal.in_background(), whether
 *     the calling process is one of them.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/memutils.h"
#include "utils/guc.h"

#include "core/background.h"
#include "core/pg_compat.h"

PG_FUNCTION_INFO_V1(finalize_in_background);

/*
 * Registers a dynamic background worker of this library for a database (and
 * a source, or a pool index). The postmaster signals the caller when it
 * starts or stops. The handle is allocated in TopMemoryContext (the caller
 * pfrees it once the worker is seen stopped).
 */
bool
start_dynamic_worker(const char *function, const char *type, const char *name,
					 Oid dboid, Oid serverid, int32 index, BackgroundWorkerHandle **handle)
{
	BackgroundWorker bgw;
	MemoryContext oldcxt;
	bool		ok;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;	/* the parent restarts it */
	strlcpy(bgw.bgw_library_name, "finalize", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, function, BGW_MAXLEN);
	strlcpy(bgw.bgw_type, type, BGW_MAXLEN);
	strlcpy(bgw.bgw_name, name, BGW_MAXLEN);
	bgw.bgw_main_arg = ObjectIdGetDatum(serverid);
	memcpy(bgw.bgw_extra, &dboid, sizeof(Oid));
	memcpy(bgw.bgw_extra + sizeof(Oid), &index, sizeof(int32));
	bgw.bgw_notify_pid = MyProcPid;
	/* The handle outlives the caller's round: it is watched until the worker stops. */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	ok = RegisterDynamicBackgroundWorker(&bgw, handle);
	MemoryContextSwitchTo(oldcxt);
	return ok;
}

/*
 * Connects a scheduler or source worker to its database (as the bootstrap
 * superuser) with search_path pinned: everything these processes run is
 * schema-qualified, and nothing another role creates in a schema on the
 * default path can stand in for it.
 */
void
connect_worker_to_database(Oid dboid)
{
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * Every statement its own snapshot, whatever the database's default: the
	 * scheduler looks again at a loss flag after locking its table
	 * (_refresh_derived), and a write that skips or fails on a held row
	 * must see the next cycle's state.
	 */
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * finalize_internal.in_background(): true in finalize's background workers only.
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
Datum
finalize_in_background(PG_FUNCTION_ARGS pg_attribute_unused())
{
	PG_RETURN_BOOL(AmBackgroundWorkerProcess() && MyBgworkerEntry != NULL &&
				   strcmp(MyBgworkerEntry->bgw_library_name, "finalize") == 0);
}
