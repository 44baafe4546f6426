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
 *
 * The listing is compared with the manifest while it is read, a batch at a
 * time (a directory, an S3 page), and never held whole: the gate's memory
 * is the manifest's (its jsonb and one hash entry per file) plus one batch.
 * A manifest that names its files' object (files_location) instead is
 * read from the store as the caller too, and both sides go through a
 * tuplesort (work_mem each) and are merged: nothing is held whole.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "core/db.h"
#include "core/json_build.h"
#include "core/settings.h"
#include "gate/inventory.h"
#include "gate/manifest.h"
#include "gate/problem_list.h"
#include "gate/release_checks.h"
#include "gate/release_record.h"
#include "gate/store_listing.h"

PG_FUNCTION_INFO_V1(finalize_release_gate);
PG_FUNCTION_INFO_V1(finalize_compare_inventories);
PG_FUNCTION_INFO_V1(finalize_release_report);

/* One release_gate call, shared by the steps that run as the owner. */
typedef struct GateRun
{
	Manifest   *m;
	Jsonb	   *manifest_jsonb;
	const InvComparison *listing;
	ProblemList *found;			/* the comparison's problems, then the rest */
	const char *requested_by;
	Jsonb	   *problems;		/* the problems found, as returned */
	GateTable	table;
	bool		released;
} GateRun;

/* Step: the tracked table of the manifest, and the manifest's periods checked against its. */
static void
lookup_step(void *arg)
{
	GateRun    *run = (GateRun *) arg;

	gate_table_lookup(run->m, &run->table);
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
	ReleaseAttempt attempt = {0};

	SPI_connect();
	attempt.table_id = run->table.table_id;
	attempt.manifest = run->m;
	attempt.manifest_jsonb = run->manifest_jsonb;
	attempt.listing = run->listing;
	attempt.requested_by = run->requested_by;
	check_partition(run->m, &run->table, run->listing->listed, run->found, &attempt.catalog_json,
					&attempt.facts_json, &attempt.period);

	/* The attempt, with its full report; the marker switches if it passed. */
	problems_summarize(run->found);
	attempt.released = run->found->n == 0;
	attempt.problems = problems_to_jsonb(run->found);
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
	Jsonb	   *manifest_jsonb;
	InvComparison listing;
	ProblemList found = {0};
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
	manifest_jsonb = PG_GETARG_JSONB_P(0);
	manifest_parse(manifest_jsonb, &m);
	run.m = &m;
	run.manifest_jsonb = manifest_jsonb;
	run.listing = &listing;
	run.found = &found;
	run.requested_by = GetUserNameFromId(GetUserId(), false);
	found.max_per_code = finalize_gate_max_problems;
	owner = function_owner(fcinfo->flinfo->fn_oid);

	/*
	 * An untracked table, or periods that are not the table's, are errors
	 * before anything goes over the network.
	 */
	run_as_owner(owner, lookup_step, &run);
	if (m.files_location == NULL)
	{
		/* The store, as the caller, compared with the manifest as it is listed. */
		inventory_compare_begin(&listing, &m.files, m.prefix, &found, true);
		listing.stored_max = (size_t) finalize_gate_max_delta_kb * 1024;
		list_store(&m, &listing);
		inventory_compare_end(&listing);
	}
	else
	{
		/*
		 * A manifest too large for one value: its files are read from the
		 * store and sorted, the listing too, then the two are merged.
		 */
		ManifestLines lines;
		InvCursor	files;

		manifest_lines_begin(&lines, m.files_location);
		read_manifest_files(&m, &lines);
		manifest_lines_end(&lines, &m);
		inventory_compare_begin_sorted(&listing, m.prefix, &found, m.files_any_etag);
		listing.stored_max = (size_t) finalize_gate_max_delta_kb * 1024;
		list_store(&m, &listing);
		sorted_inventory_cursor(lines.sort, &files, m.files_location);
		inventory_compare_end_sorted(&listing, &files);
		sorted_inventory_end(lines.sort);
	}
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
	problems.max_per_code = finalize_gate_max_problems;
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
	problems_summarize(&problems);
	PG_RETURN_JSONB_P(problems_to_jsonb(&problems));
}

/*
 * Pushes "listing_delta", what the listing had that differs from the
 * manifest's files, as decoded from its stored form (data, len): {"listed":
 * {"path": size | {"size", "etag"}}, "absent": ["path", ...]}, with
 * "truncated": true when the gate left records out (finalize.gate_max_delta).
 * For a manifest that named its files' object (files_location), whose files
 * were never held, the listing is the object's files under the prefix, less
 * the absent ones, with the listed ones in their place.
 */
static void
push_delta(JsonbParseState **st, const char *data, size_t len, int64 release_id, bool truncated)
{
	InvDecoder *d = palloc(sizeof(InvDecoder));
	InvRecord	r;
	Inventory	listed = {0};
	List	   *absent = NIL;
	ListCell   *lc;

	if (!inv_decoder_init(d, data, len))
		d->error = true;
	while (!d->error && inv_decode_next(d, &r))
	{
		if (r.kind == INVCODEC_LISTED)
			inventory_append_record(&listed, &r);
		else
			absent = lappend(absent, pnstrdup(r.path, r.path_len));
	}
	if (d->error)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("stored listing of release attempt " INT64_FORMAT " is corrupt", release_id)));
	jb_begin_object(st, "listing_delta");
	inventory_push_jsonb(st, "listed", &listed);
	jb_begin_array(st, "absent");
	foreach(lc, absent)
	{
		JsonbValue	p;

		p.type = jbvString;
		p.val.string.val = lfirst(lc);
		p.val.string.len = strlen(p.val.string.val);
		pushJsonbValue(st, WJB_ELEM, &p);
	}
	jb_end_array(st);
	if (truncated)
		jb_bool(st, "truncated", true);
	jb_end_object(st);
}

/*
 * Pushes the stored report's keys; with files (an inline manifest), the
 * "manifest" key gets the manifest's files back.
 */
static void
push_report(JsonbParseState **st, Jsonb *report, const Inventory *files)
{
	JsonbIterator *it = JsonbIteratorInit(&report->root);
	JsonbIteratorToken tok;
	JsonbValue	k;
	JsonbValue	v;

	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		(void) JsonbIteratorNext(&it, &v, true);
		if (files != NULL && k.val.string.len == 8 && memcmp(k.val.string.val, "manifest", 8) == 0 &&
			v.type == jbvBinary)
		{
			JsonbIterator *mit = JsonbIteratorInit(v.val.binary.data);
			JsonbValue	mk;
			JsonbValue	mv;

			jb_begin_object(st, "manifest");
			while ((tok = JsonbIteratorNext(&mit, &mk, true)) != WJB_DONE)
				if (tok == WJB_KEY)
				{
					(void) JsonbIteratorNext(&mit, &mv, true);
					pushJsonbValue(st, WJB_KEY, &mk);
					pushJsonbValue(st, WJB_VALUE, &mv);
				}
			inventory_push_jsonb(st, "files", files);
			jb_end_object(st);
			continue;
		}
		pushJsonbValue(st, WJB_KEY, &k);
		pushJsonbValue(st, WJB_VALUE, &v);
	}
}

/*
 * Whether the gate left records out of the attempt's listing_delta
 * (listing_summary.delta_truncated): the listing cannot be rebuilt then.
 */
static bool
delta_truncated(Jsonb *report)
{
	JsonbValue *summary = getKeyJsonValueFromContainer(&report->root, "listing_summary", 15, NULL);
	JsonbValue *t;

	if (summary == NULL || summary->type != jbvBinary)
		return false;
	t = getKeyJsonValueFromContainer(summary->val.binary.data, "delta_truncated", 15, NULL);
	return t != NULL && t->type == jbvBool && t->val.boolean;
}

/*
 * A rebuilt listing must be the one the gate saw: its count and digest are
 * those the report's listing_summary recorded at the time, or the stored
 * form was damaged (or the manifest column changed) and the report would
 * describe a listing that never was.
 */
static void
check_rebuilt_listing(Jsonb *report, const Inventory *listing, int64 release_id)
{
	JsonbValue *summary = getKeyJsonValueFromContainer(&report->root, "listing_summary", 15, NULL);
	JsonbValue *objects;
	JsonbValue *digest;
	uint64		sum[2] = {0, 0};
	char	   *hex;

	if (summary == NULL || summary->type != jbvBinary)
		return;					/* written before summaries existed */
	objects = getKeyJsonValueFromContainer(summary->val.binary.data, "objects", 7, NULL);
	digest = getKeyJsonValueFromContainer(summary->val.binary.data, "digest", 6, NULL);
	for (int i = 0; i < listing->n; i++)
		inventory_digest_add(sum, listing->items[i].path, listing->items[i].path_len, listing->items[i].size,
							 listing->items[i].etag, listing->items[i].etag_len);
	hex = inventory_digest_hex(sum);
	/* Compared as numerics: a NaN, 1.5 or 1e30 is a mismatch, not a cast error. */
	if (objects == NULL || objects->type != jbvNumeric || digest == NULL || digest->type != jbvString ||
		!DatumGetBool(DirectFunctionCall2(numeric_eq, NumericGetDatum(objects->val.numeric),
										  NumericGetDatum(int64_to_numeric(listing->n)))) ||
		digest->val.string.len != (int) strlen(hex) || memcmp(digest->val.string.val, hex, strlen(hex)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("stored listing of release attempt " INT64_FORMAT " does not match its summary", release_id),
				 errdetail("The listing rebuilt from the manifest and listing_delta has %d objects and digest %s; the report's listing_summary recorded others.",
						   listing->n, hex),
				 errhint("The row of finalize.release was changed or damaged after the attempt; its report (catalog, facts, problems) is still as stored.")));
}

/*
 * finalize.release_report(release_id) -> jsonb
 *
 * A stored attempt's full report, as release_gate stored it before the
 * listing was kept compactly: {"manifest": {"prefix", "empty", "files"},
 * "listing", "catalog", "facts", "problems", "listing_summary"}. The
 * listing is rebuilt from the stored manifest and what differed from it; a
 * row stored whole (by 0.1.0) is returned as it is. When the manifest
 * named its files' object, or the gate cut the delta short, "listing_delta"
 * takes the listing's place. Reads the row as the caller (it needs SELECT
 * on finalize.release); NULL for no such attempt.
 */
Datum
finalize_release_report(PG_FUNCTION_ARGS)
{
	MemoryContext caller_cxt = CurrentMemoryContext;
	int64		release_id = PG_GETARG_INT64(0);
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {PG_GETARG_DATUM(0)};
	bool		isnull;
	Jsonb	   *report;
	Jsonb	   *manifest;
	bytea	   *delta;
	char	   *prefix;
	Inventory	files = {0};
	Inventory	listing = {0};
	JsonbValue *f;
	JsonbParseState *st = NULL;
	bool		streamed;
	bool		truncated;
	Jsonb	   *out;

	SPI_connect();
	if (SPI_execute_with_args("SELECT r.report, r.manifest, r.listing_delta, r.prefix FROM "
							  FINALIZE_SCHEMA ".release r WHERE r.release_id = $1",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read release attempt " INT64_FORMAT, release_id);
	if (SPI_processed == 0)
	{
		SPI_finish();
		PG_RETURN_NULL();
	}
	report = DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	manifest = DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (isnull)
	{
		/* Stored whole, before the compact form. */
		out = MemoryContextAlloc(caller_cxt, VARSIZE(report));
		memcpy(out, report, VARSIZE(report));
		SPI_finish();
		PG_RETURN_JSONB_P(out);
	}
	values[0] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("stored listing of release attempt " INT64_FORMAT " is corrupt", release_id),
				 errdetail("The attempt has a manifest but no listing_delta.")));
	delta = DatumGetByteaPP(values[0]);
	prefix = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);

	/* "files_location": null is an inline manifest, as manifest_parse reads it. */
	f = getKeyJsonValueFromContainer(&manifest->root, "files_location", 14, NULL);
	streamed = f != NULL && f->type != jbvNull;
	truncated = delta_truncated(report);
	if (!streamed)
	{
		f = getKeyJsonValueFromContainer(&manifest->root, "files", 5, NULL);
		inventory_from_jsonb(f, "files", &files);
	}
	jb_begin_object(&st, NULL);
	push_report(&st, report, streamed ? NULL : &files);
	if (streamed || truncated)
	{
		/* The files are in the store, or the delta is cut short: the differences only. */
		push_delta(&st, VARDATA_ANY(delta), VARSIZE_ANY_EXHDR(delta), release_id, truncated);
	}
	else
	{
		if (!inventory_rebuild(&files, prefix, VARDATA_ANY(delta), VARSIZE_ANY_EXHDR(delta), &listing))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("stored listing of release attempt " INT64_FORMAT " is corrupt", release_id)));
		check_rebuilt_listing(report, &listing, release_id);
		inventory_push_jsonb(&st, "listing", &listing);
	}
	MemoryContextSwitchTo(caller_cxt);
	out = jb_finish(jb_end_object(&st));
	SPI_finish();
	PG_RETURN_JSONB_P(out);
}
