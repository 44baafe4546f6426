/*
 * delta_sql.c
 *     finalize_internal.delta_store: add_consumer's check of a Delta
 *     consumer's store, by the same rule the lake worker opens it with
 *     (store/store.c), so that a consumer is declared only where its
 *     worker will be able to read.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include "store/store.h"

PG_FUNCTION_INFO_V1(finalize_delta_store);

/*
 * finalize_internal.delta_store(store, who, delta_table): opens the store
 * for role who (raising the store's own error and its hint when who may
 * not, or it is misconfigured) and checks that the table's location is in
 * it; returns the store's name as the worker will open it.
 */
Datum
finalize_delta_store(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Oid			who = PG_GETARG_OID(1);
	char	   *location = text_to_cstring(PG_GETARG_TEXT_PP(2));
	ObjectStore store;

	store_open(name, who, &store);
	if (store_key_of(&store, location) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("location %s is not in store %s", store_location_shown(&store, location), name),
				 errdetail("The locations of %s begin with %s.", store_describe(&store), store_base(&store)),
				 errhint("Name the store that holds the table, or write its location as the store names it.")));
	PG_RETURN_TEXT_P(cstring_to_text(name));
}
