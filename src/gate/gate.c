/*
 * gate.c
 *     The gate's SQL functions: finalize.release_gate(manifest), which
 *     releases a partition only when its manifest, the object-store listing
 *     and the catalog agree, and finalize.compare_inventories, the manifest
 *     against a listing alone.
 *
 * The gate runs as its caller for everything that touches the store (the
 * caller's user mapping holds the keys, the caller needs USAGE on the
 * server; local file:// stores need pg_read_server_files), then as the
 * extension's owner for the catalog: reading the catalog view and the CDC
 * facts, and storing the attempt. The attempt, its report and (when it
 * passed) the switch of the published marker are written in the caller's
 * transaction, so a release is all or nothing.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "common/owner.h"
#include "gate/inventory.h"
#include "gate/manifest.h"
#include "gate/release_checks.h"
#include "gate/release_record.h"
#include "gate/store_listing.h"

PG_FUNCTION_INFO_V1(finalize_release_gate);
PG_FUNCTION_INFO_V1(finalize_compare_inventories);

/* One release_gate call, shared by the steps that run as the owner. */
typedef struct GateRun
{
	const Manifest *m;
	const Inventory *listing;
	const char *requested_by;
	Jsonb	   *problems;		/* the problems found, as returned */
	int64		table_id;
	bool		released;
} GateRun;

/* Step: the tracked table of the manifest. */
static void
lookup_step(void *arg)
{
	GateRun    *run = (GateRun *) arg;

	run->table_id = tracked_table_id(run->m);
}

/*
 * Step: the catalog and facts checks, and storing the attempt; the
 * problems are copied out for the caller, since everything else lives in
 * SPI's memory, which SPI_finish frees.
 */
static void
check_step(void *arg)
{
	GateRun    *run = (GateRun *) arg;
	MemoryContext caller_cxt = CurrentMemoryContext;
	ProblemList problems = {0};
	ReleaseAttempt attempt = {0};

	SPI_connect();
	attempt.table_id = run->table_id;
	attempt.manifest = run->m;
	attempt.listing = run->listing;
	attempt.requested_by = run->requested_by;
	check_partition(run->m, run->table_id, run->listing, &problems, &attempt.catalog_json, &attempt.facts_json);

	/* The attempt, with its full report; the marker switches if it passed. */
	attempt.released = problems.n == 0;
	attempt.problems = problems_to_jsonb(&problems);
	record_release(&attempt);

	run->released = attempt.released;
	run->problems = MemoryContextAlloc(caller_cxt, VARSIZE(attempt.problems));
	memcpy(run->problems, attempt.problems, VARSIZE(attempt.problems));
	SPI_finish();
}

/*
 * finalize.release_gate(manifest jsonb) -> (released, generation, problems)
 *
 * A publisher's one call to release a generation of a partition: it is
 * published only when nothing disagrees, and every attempt is stored.
 */
Datum
finalize_release_gate(PG_FUNCTION_ARGS)
{
	Manifest	m;
	Inventory	listing = {0};
	TupleDesc	desc;
	Datum		result[3];
	bool		nulls[3] = {false, false, false};
	Oid			owner;
	GateRun		run = {0};

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: it is NULL")));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	manifest_parse(PG_GETARG_JSONB_P(0), &m);
	run.m = &m;
	run.listing = &listing;
	run.requested_by = GetUserNameFromId(GetUserId(), false);
	owner = function_owner(fcinfo->flinfo->fn_oid);

	/* An untracked table is an error before anything goes over the network. */
	run_as_owner(owner, lookup_step, &run);
	/* The store, as the caller. */
	list_store(&m, &listing);
	/* The catalog, as the extension's owner. */
	run_as_owner(owner, check_step, &run);

	result[0] = BoolGetDatum(run.released);
	result[1] = CStringGetTextDatum(m.generation);
	result[2] = JsonbPGetDatum(run.problems);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), result, nulls)));
}

/*
 * finalize.compare_inventories(manifest_files, listing, prefix) -> problems
 *
 * The gate's comparison alone, on a listing given as jsonb: for tests,
 * benchmarks and dry runs (no store, no catalog, nothing stored).
 */
Datum
finalize_compare_inventories(PG_FUNCTION_ARGS)
{
	Inventory	files = {0};
	Inventory	listing = {0};
	ProblemList problems = {0};
	JsonbValue	v;
	JsonbValue	w;
	InvCursor	mc;
	InvCursor	lc;
	char	   *prefix;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments manifest_files and listing must not be NULL")));
	prefix = PG_ARGISNULL(2) ? pstrdup("") : text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (prefix[0] != '\0')
		prefix = location_with_slash(prefix);

	v.type = jbvBinary;
	v.val.binary.data = &PG_GETARG_JSONB_P(0)->root;
	v.val.binary.len = 0;
	w = v;
	w.val.binary.data = &PG_GETARG_JSONB_P(1)->root;

	/* Two objects come sorted alike: merge them; else hash. */
	if (jsonb_files_cursor(&v, "manifest_files", &mc) && jsonb_files_cursor(&w, "listing", &lc))
		inventory_merge(&mc, &lc, prefix, &problems);
	else
	{
		inventory_from_jsonb(&v, "manifest_files", &files);
		inventory_from_jsonb(&w, "listing", &listing);
		inventory_compare(&files, &listing, prefix, &problems);
	}
	PG_RETURN_JSONB_P(problems_to_jsonb(&problems));
}
