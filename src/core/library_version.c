/*
 * finalize's version as this library was built (the control file's
 * default_version). Every generated update script asks for it first: a
 * server that still runs the previous library (it is preloaded, so a new
 * one takes effect at the next restart) must not get the new catalog.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(finalize_library_version);

/* SQL: finalize_internal.library_version() -> text, e.g. '0.3.0'. */
Datum
finalize_library_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(FINALIZE_VERSION));
}
