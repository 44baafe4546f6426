/*
 * dbhooks.c
 *     Keeps finalize's processes out of the way of DROP DATABASE (and of the
 *     other commands that need a database without connections).
 *
 * The scheduler and the source workers stay connected to finalize.database.
 * Before such a command runs, the database is marked paused (so nothing is
 * started in it), its finalize processes are sent SIGTERM and awaited; the
 * mark is cleared when the command ends, whether it succeeded or not.
 *
 * Only a command PostgreSQL will let run gets that far: the hook first
 * checks what the command itself checks (ownership of the database, a
 * transaction block), so a role that may not drop the database cannot stop
 * finalize's processes by trying.
 */
#include "postgres.h"

#include <signal.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/syscache.h"

#include "core/pg_compat.h"
#include "core/shmem.h"
#include "worker/worker.h"

/* How long to wait for finalize's processes to leave a database. */
#define STOP_WAIT_MS 10000

static ProcessUtility_hook_type prev_ProcessUtility = NULL;

/* The database a utility statement needs to itself, or NULL. */
static const char *
exclusive_database(Node *stmt)
{
	if (IsA(stmt, DropdbStmt))
		return ((DropdbStmt *) stmt)->dbname;
	if (IsA(stmt, RenameStmt) && ((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
		return ((RenameStmt *) stmt)->subname;
	if (IsA(stmt, AlterDatabaseStmt))
	{
		ListCell   *lc;

		foreach(lc, ((AlterDatabaseStmt *) stmt)->options)
			if (strcmp(((DefElem *) lfirst(lc))->defname, "tablespace") == 0)
				return ((AlterDatabaseStmt *) stmt)->dbname;
	}
	return NULL;
}

/*
 * Whether the current user may run the statement on the database, as far as
 * PostgreSQL checks before it needs the database to itself: the statement
 * fails otherwise, and must fail without touching finalize's processes.
 */
static bool
statement_allowed(Node *stmt, Oid dboid, ProcessUtilityContext context)
{
	bool		needs_top_level = IsA(stmt, DropdbStmt) || IsA(stmt, AlterDatabaseStmt);

	if (dboid == MyDatabaseId)
		return false;			/* "cannot drop the currently open database" */
	if (needs_top_level &&
		(context != PROCESS_UTILITY_TOPLEVEL || IsTransactionBlock() || IsSubTransaction()))
		return false;			/* "cannot run inside a transaction block" */
	if (!compat_database_ownercheck(dboid, GetUserId()))
		return false;
	if (IsA(stmt, RenameStmt))
	{
		/* Renaming also needs CREATEDB. */
		HeapTuple	tup = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
		bool		createdb;

		if (!HeapTupleIsValid(tup))
			return false;
		createdb = ((Form_pg_authid) GETSTRUCT(tup))->rolcreatedb;
		ReleaseSysCache(tup);
		if (!createdb && !superuser())
			return false;
	}
	return true;
}

/* Signals the database's finalize processes and waits until they are gone. */
static void
stop_database_processes(Oid dboid)
{
	int			waited = 0;

	slot_signal_database(dboid, SIGTERM);
	while (slot_signal_database(dboid, 0) > 0 && waited < STOP_WAIT_MS)
	{
		CHECK_FOR_INTERRUPTS();
		pg_usleep(20 * 1000L);
		waited += 20;
	}
}

/* Runs the statement through the previous hook or the standard code. */
static void
call_next(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
		  ProcessUtilityContext context, ParamListInfo params,
		  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
}

/* The hook: pauses finalize in a database a statement needs to itself. */
static void
finalize_ProcessUtility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
						ProcessUtilityContext context, ParamListInfo params,
						QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	const char *dbname = exclusive_database(pstmt->utilityStmt);
	Oid			dboid = (dbname != NULL && finalize_shared != NULL)
		? get_database_oid(dbname, true) : InvalidOid;

	if (!OidIsValid(dboid) || !statement_allowed(pstmt->utilityStmt, dboid, context) ||
		slot_signal_database(dboid, 0) == 0)
	{
		call_next(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		return;
	}
	set_paused_database(dboid);
	PG_TRY();
	{
		stop_database_processes(dboid);
		call_next(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		set_paused_database(InvalidOid);
	}
	PG_END_TRY();
}

/* Installs the hook (from _PG_init). */
void
dbhooks_install(void)
{
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = finalize_ProcessUtility;
}
