/*
 * subxact.c
 *     The one way finalize catches an error and goes on: the step runs in a
 *     subtransaction that is rolled back when it fails, so whatever the step
 *     did (locks, buffers, half-written rows, open relations) is released by
 *     PostgreSQL, not guessed at by the caller. A read repeated while its
 *     caller waits (wait_final) runs in a subtransaction that is always
 *     rolled back, for the same reason: what it took is released at once.
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "core/db.h"

/*
 * Runs fn(arg) in a subtransaction. Returns true when it succeeded; false
 * when it raised an error, with the error copied into the caller's memory
 * context. A cancel or a shutdown request is never swallowed: it is raised
 * again once the subtransaction is rolled back.
 */
bool
subxact_try(void (*fn) (void *), void *arg, ErrorData **error)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool ok = true;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED ||
			edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN)
			ReThrowError(edata);
		ok = false;
	}
	PG_END_TRY();
	if (error != NULL)
		*error = edata;
	return ok;
}

/*
 * Runs fn(arg) in a subtransaction that is rolled back whatever happens, so
 * that everything the step took (its locks above all, which a subtransaction
 * that commits would hand to the transaction around it) is released at
 * once: for reads repeated while the caller waits. An error is raised again
 * once the subtransaction is rolled back. Allocations go to the caller's
 * memory context, which survives the rollback.
 */
void
subxact_rolled_back(void (*fn) (void *), void *arg)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		fn(arg);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		ReThrowError(edata);
	}
	PG_END_TRY();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(oldcxt);
	CurrentResourceOwner = oldowner;
}

/* One call of a type's input function, as a subxact_try step. */
typedef struct InputCall
{
	PGFunction	infunc;
	const char *text;
	Datum		result;
} InputCall;

/* Runs one input function call (the step subxact_input wraps). */
static void
input_step(void *arg)
{
	InputCall  *c = (InputCall *) arg;

	c->result = DirectFunctionCall3(c->infunc, CStringGetDatum(c->text),
									ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
}

/*
 * Reads a value with a type's input function (interval_in, timestamptz_in,
 * ...); false when the text is not a valid value, whose error then becomes
 * the caller's own clearer one.
 */
bool
subxact_input(PGFunction infunc, const char *text, Datum *result)
{
	InputCall	c = {infunc, text, (Datum) 0};

	if (!subxact_try(input_step, &c, NULL))
		return false;
	*result = c.result;
	return true;
}
