/*
 * owner.c
 *     Running SQL as the extension's owner on behalf of a caller.
 *
 * Functions that write finalize's catalog run as the extension's owner.
 * SECURITY DEFINER would do that, but it hides who called: inside it, the
 * caller is known only as the session's role (GetOuterUserId), which is not
 * who runs the code when another role's code calls the function (an index
 * expression evaluated by ANALYZE or autovacuum, a SECURITY DEFINER function
 * of someone else). So the functions whose permission or audit depends on
 * the caller are C entry points (finalize_as_owner) that take the current
 * user first, then run their SQL body as the owner.
 *
 * The owner's part runs as a security-restricted operation (as VACUUM runs
 * an index function as the table's owner): the functions pin search_path
 * and name everything by schema, and nothing they run can take
 * session-level actions as the owner.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "core/db.h"
#include "core/error_boundary.h"
#include "core/internal_schema.h"
#include "core/settings.h"

PG_FUNCTION_INFO_V1(finalize_as_owner);

/* The role that owns a function (for finalize's functions: the extension's owner). */
Oid
function_owner(Oid fn)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", fn);
	owner = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Runs step(arg) as owner, in a security-restricted operation; the caller's
 * identity is restored even on error. The step is an error boundary
 * (error_boundary.c): an error the caller caused reaches them without the
 * stack of the SQL the step ran.
 */
void
run_as_owner(Oid owner, void (*step) (void *), void *arg)
{
	Oid			save_user;
	int			save_sec;
	ErrorBoundary boundary;

	GetUserIdAndSecContext(&save_user, &save_sec);
	error_boundary_enter(&boundary);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	PG_TRY();
	{
		step(arg);
	}
	PG_CATCH();
	{
		SetUserIdAndSecContext(save_user, save_sec);
		error_boundary_rethrow(&boundary);
	}
	PG_END_TRY();
	SetUserIdAndSecContext(save_user, save_sec);
	error_boundary_leave(&boundary);
}

/* One call of a SQL body on behalf of a caller. */
typedef struct OwnerCall
{
	const char *sql;
	int			nargs;
	Oid		   *types;
	Datum	   *values;
	char	   *nulls;
	Oid			rettype;
	Datum		result;
	bool		isnull;
} OwnerCall;

/* Runs the body and copies its result out of SPI's memory. */
static void
call_body(void *arg)
{
	OwnerCall  *c = (OwnerCall *) arg;
	int16		typlen;
	bool		typbyval;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(c->sql, c->nargs, c->types, c->values, c->nulls, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not run \"%s\"", c->sql);
	c->result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &c->isnull);
	get_typlenbyval(c->rettype, &typlen, &typbyval);
	if (!c->isnull && c->rettype != VOIDOID)
		c->result = SPI_datumTransfer(c->result, typbyval, typlen);
	SPI_finish();
}

/*
 * The entry point of finalize.<name>(args): runs finalize_internal.<name>(
 * caller, args) as the extension's owner, where caller is the current user at
 * the call, whoever's code made it. The SQL declaration gives the arguments
 * and their defaults; the internal one has the same after a first "caller
 * name".
 */
Datum
finalize_as_owner(PG_FUNCTION_ARGS)
{
	Oid			fn = fcinfo->flinfo->fn_oid;
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Form_pg_proc proc;
	OwnerCall	call;
	StringInfoData sql;
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	owner = proc->proowner;
	call.nargs = proc->pronargs + 1;
	call.rettype = proc->prorettype;
	call.types = palloc(sizeof(Oid) * call.nargs);
	call.values = palloc(sizeof(Datum) * call.nargs);
	call.nulls = palloc(call.nargs);

	/* Who calls: the current user, taken before anything switches it. */
	call.types[0] = NAMEOID;
	call.values[0] = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));
	call.nulls[0] = ' ';
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s($1", internal_function_name(NameStr(proc->proname)));
	for (int i = 0; i < proc->pronargs; i++)
	{
		call.types[i + 1] = proc->proargtypes.values[i];
		call.values[i + 1] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		call.nulls[i + 1] = PG_ARGISNULL(i) ? 'n' : ' ';
		appendStringInfo(&sql, ", $%d", i + 2);
	}
	appendStringInfoChar(&sql, ')');
	ReleaseSysCache(tup);
	call.sql = sql.data;

	run_as_owner(owner, call_body, &call);
	if (call.isnull || call.rettype == VOIDOID)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(call.result);
}
