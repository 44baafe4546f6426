/*
 * Where finalize's internal functions are. Between `make install` plus a
 * restart and ALTER EXTENSION finalize UPDATE the library runs against an
 * older catalog; before 0.3.0 that catalog has no schema finalize_internal,
 * and anyone with CREATE on the database could make one and plant functions
 * that finalize would then run as the extension's owner or the bootstrap
 * superuser. So the schema counts only when it is a member of the extension.
 */
#include "postgres.h"

#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

#include "core/internal_schema.h"
#include "core/settings.h"

/* Whether schema finalize_internal exists and extension finalize owns it. */
bool
internal_schema_is_ours(void)
{
	Oid			nsp = get_namespace_oid(FINALIZE_INTERNAL_SCHEMA, true);
	Oid			ext = get_extension_oid("finalize", true);

	return OidIsValid(nsp) && OidIsValid(ext) && getExtensionOfObject(NamespaceRelationId, nsp) == ext;
}

/*
 * The qualified, quoted name of internal function name: finalize_internal.
 * <name>, or finalize._<name> in a catalog older than 0.3.0 (whose schema
 * finalize is the extension's own).
 */
char *
internal_function_name(const char *name)
{
	if (internal_schema_is_ours())
		return psprintf("%s.%s", FINALIZE_INTERNAL_SCHEMA, quote_identifier(name));
	return psprintf("%s.%s", FINALIZE_SCHEMA, quote_identifier(psprintf("_%s", name)));
}

/*
 * Whether the catalog has internal function signature (as to_regprocedure
 * reads it without its schema, such as "claim_delivery()") in the
 * extension's schema finalize_internal: false for a catalog older than the
 * library, whose steps then wait (the caller then names the function as
 * FINALIZE_INTERNAL_SCHEMA "." signature). Read from the system caches, no
 * statement: the background processes ask at every cycle.
 */
bool
internal_function_exists(const char *signature)
{
	LOCAL_FCINFO(fcinfo, 1);

	if (!internal_schema_is_ours())
		return false;
	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = CStringGetTextDatum(psprintf("%s.%s", FINALIZE_INTERNAL_SCHEMA, signature));
	fcinfo->args[0].isnull = false;
	(void) to_regprocedure(fcinfo);
	return !fcinfo->isnull;
}
