/*
 * release_iceberg.c
 *     finalize.release_iceberg(request): write-audit-publish for an Iceberg
 *     table, with the release gate as the audit. A partition of an audited
 *     snapshot (a WAP branch's head, a wap.id, a snapshot id) is published
 *     through the catalog only when its files exist with their sizes, its
 *     periods are final, its rows match the CDC facts, and (with a lake
 *     consumer) the snapshot holds the change log up to the periods' end.
 *
 * As the gate, it runs as its caller for everything outside PostgreSQL:
 * the catalog (the caller's user mapping of the finalize_iceberg server),
 * the manifests and the listing (the caller's of the store), and as the
 * extension's owner for finalize's catalog: the tracked table, the
 * partition's lock, the CDC facts and the attempt's record. The publish
 * (one catalog commit) is sent under the partition's lock, after every
 * check and before the record, in the caller's transaction: an attempt
 * is recorded with its outcome, and a commit that failed without an answer
 * is an error that records nothing (the next call finds out whether it was
 * applied). The catalog's commit is not part of the transaction: a caller
 * that rolls back after a published release leaves the ref moved, and
 * calling again records it without a second commit; an error after the
 * commit says so in its context. The same request again re-audits (the
 * facts may have changed) and, when nothing did, stores nothing.
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
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/fmt.h"
#include "core/json_build.h"
#include "core/settings.h"
#include "gate/manifest_error.h"
#include "gate/problem_list.h"
#include "gate/release_record.h"
#include "publish/partition_match.h"
#include "publish/release_run.h"

PG_FUNCTION_INFO_V1(finalize_release_iceberg);

/* A text column of SPI's first row, or NULL (no row, or NULL). */
static char *
first_text(int col)
{
	return SPI_processed > 0 ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col) : NULL;
}

/*
 * The periods the partition holds: its time fields' (over the table's
 * partition specs), which the request's period_start and period_end, when
 * given, must be; else the request's, which a partition without a time
 * field must give, and which then only its files' bounds can prove.
 */
static void
resolve_period(IcebergRun *run)
{
	ReleaseRequest *r = &run->r;
	TimestampTz start;
	TimestampTz end;

	if (partition_period(r, &run->it.layout, &start, &end))
	{
		if ((r->has_period && r->period_start != start) || (r->has_period_end && r->period_end != end))
			request_error(r->has_period && r->period_start != start ? "period_start" : "period_end",
						  "disagrees with the partition: its time fields hold [%s, %s)",
						  fmt_instant(start), fmt_instant(end));
		run->m.has_period = run->m.has_period_end = true;
		run->m.period_start = start;
		run->m.period_end = end;
		return;
	}
	if (!r->has_period)
		request_error("period_start", "is missing: partition %s has no year, month, day or hour field in the "
					  "table's partition specs, so the periods it holds must be given", r->partition_key);
	run->bounds_required = true;
	run->m.has_period = true;
	run->m.period_start = r->period_start;
	run->m.has_period_end = r->has_period_end;
	run->m.period_end = r->period_end;
}

/* Step: the tracked table (its periods bound to the manifest's, when known). */
static void
table_step(void *arg)
{
	IcebergRun *run = (IcebergRun *) arg;

	gate_table_lookup(&run->m, &run->table);
}

/* A text column of SPI's row i copied to cxt, or NULL. */
static char *
row_text(uint64 i, int col, MemoryContext cxt)
{
	char	   *v = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, col);

	return v != NULL ? MemoryContextStrdup(cxt, v) : NULL;
}

/*
 * Whether a shard named as the release's table takes a partition that may
 * hold other shards' rows (_iceberg_shard_scope): then its shard problem,
 * which refuses the release (unknown_shard), as the gate refuses a
 * manifest's "shard" for a location of every shard. Runs in SPI.
 */
static void
shard_scope(IcebergRun *run, MemoryContext cxt)
{
	const IcebergLayout *layout = &run->it.layout;
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, BOOLOID};
	Datum		values[5];
	char		nulls[5] = "     ";
	bool		shard_field = false;
	char	   *why;

	for (int i = 0; i < layout->nspecs; i++)
		for (int j = 0; j < layout->specs[i].nfields; j++)
			shard_field |= strcmp(layout->specs[i].fields[j].name, "shard") == 0;
	values[0] = Int64GetDatum(run->table.table_id);
	values[1] = CStringGetTextDatum(run->m.partition);
	values[2] = CStringGetTextDatum(run->r.iceberg_table);
	values[3] = db_text_or_null(layout->table_uuid, nulls, 3);
	values[4] = BoolGetDatum(shard_field);
	if (SPI_execute_with_args("SELECT " FINALIZE_INTERNAL_SCHEMA ".iceberg_shard_scope($1, $2, $3, $4, $5)", 5, types,
							  values, nulls, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the shards of \"%s\"", run->r.table);
	if ((why = first_text(1)) != NULL)
		run->table.shard_problem = MemoryContextStrdup(cxt, why);
}

/*
 * Step: the tracked table with the periods bound, the lake consumers that
 * must hold the partition (_iceberg_lake_consumers: the table's own, its
 * shard's, or every shard's), each following this Iceberg table by its
 * name or its uuid, through any catalog server, and whether a shard named
 * as the table can take the partition as its own (shard_scope).
 */
static void
lookup_step(void *arg)
{
	IcebergRun *run = (IcebergRun *) arg;
	MemoryContext caller_cxt = CurrentMemoryContext;
	Oid			types[4] = {INT8OID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[4];
	char		nulls[4] = "    ";

	gate_table_lookup(&run->m, &run->table);
	SPI_connect();
	values[0] = Int64GetDatum(run->table.table_id);
	values[1] = db_text_or_null(run->table.shard, nulls, 1);
	values[2] = CStringGetTextDatum(run->r.iceberg_table);
	values[3] = db_text_or_null(run->it.layout.table_uuid, nulls, 3);
	if (SPI_execute_with_args("SELECT l.table_name, l.consumer, l.lsn_property, l.followed_elsewhere FROM "
							  FINALIZE_INTERNAL_SCHEMA ".iceberg_lake_consumers($1, $2, $3, $4) l", 4, types, values,
							  nulls, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the lake consumers of \"%s\"", run->r.table);
	run->lake = MemoryContextAllocZero(caller_cxt, sizeof(LakeHolder) * Max(SPI_processed, 1));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		LakeHolder *h = &run->lake[run->nlake++];
		char	   *elsewhere = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4);

		h->table = row_text(i, 1, caller_cxt);
		h->consumer = row_text(i, 2, caller_cxt);
		h->lsn_property = row_text(i, 3, caller_cxt);
		h->followed_elsewhere = elsewhere != NULL && strcmp(elsewhere, "t") == 0;
	}
	shard_scope(run, caller_cxt);
	SPI_finish();
}

/* The report's "catalog": the Iceberg side of the attempt, as JSON text. */
static char *
catalog_json(const IcebergRun *run)
{
	JsonbParseState *st = NULL;
	const SnapshotFiles *f = &run->files;
	static const char *const outcomes[] = {"published", "already_published", "catalog_moved"};
	static const char *const audits[] = {"branch", "wap_id", "snapshot_id"};

	jb_begin_object(&st, NULL);
	jb_text(&st, "catalog", run->r.catalog);
	jb_text(&st, "iceberg_table", run->r.iceberg_table);
	jb_text(&st, "target", run->it.target_name);
	jb_text(&st, "target_type", run->r.to_tag ? "tag" : "branch");
	if (run->target_before >= 0)
		jb_int(&st, "target_snapshot_before", run->target_before);
	jb_text(&st, "audited_by", audits[run->r.audit]);
	jb_int(&st, "snapshot_id", run->audited_id);
	jb_text(&st, "manifest_list", run->manifest_list);
	if (run->table.shard != NULL)
		jb_text(&st, "shard", run->table.shard);
	jb_text(&st, "row_count", row_count_rule_name(run->r.rows));
	jb_int(&st, "manifests", f->manifests);
	jb_int(&st, "data_files", f->data_files);
	jb_int(&st, "delete_files", f->delete_files);
	jb_int(&st, "records", f->records);
	jb_int(&st, "position_deletes", f->position_deletes);
	jb_int(&st, "uncountable_delete_files", f->uncountable_deletes);
	if (run->nlake > 0)
		jb_jsonb(&st, "lake_consumers", run->lake_json);
	if (run->time_column != NULL)
		jb_text(&st, "time_column", run->time_column);
	if (run->found.n == 0)
		jb_text(&st, "outcome", outcomes[run->outcome]);
	if (run->published && run->property_publication != NULL)
	{
		jb_begin_object(&st, "properties");
		jb_text(&st, "publication", run->property_publication);
		jb_text(&st, "event_id", run->property_event_id);
		jb_end_object(&st);
	}
	return jb_finish_text(jb_end_object(&st));
}

/*
 * Whether this very request (as stored) released this snapshot of the
 * partition before: then a success changes nothing and is not stored again.
 */
static bool
released_before(const IcebergRun *run)
{
	Oid			types[4] = {INT8OID, TEXTOID, TEXTOID, JSONBOID};
	Datum		values[4];

	values[0] = Int64GetDatum(run->table.table_id);
	values[1] = CStringGetTextDatum(run->m.partition);
	values[2] = CStringGetTextDatum(run->m.generation);
	values[3] = JsonbPGetDatum(run->stored);
	if (SPI_execute_with_args("SELECT " FINALIZE_INTERNAL_SCHEMA ".iceberg_released($1, $2, $3, $4)", 4, types, values,
							  NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read the releases of partition \"%s\"", run->m.partition);
	return strcmp(first_text(1), "t") == 0;
}

/*
 * Publishes (nothing disagreed): the commit, in the caller's memory (the
 * catalog's answers outlive SPI); a target elsewhere is catalog_moved.
 */
static void
publish_step(IcebergRun *run, MemoryContext caller_cxt)
{
	MemoryContext spi_cxt = MemoryContextSwitchTo(caller_cxt);
	char	   *moved;

	run->outcome = iceberg_publish(&run->r, &run->it, &moved);
	run->published = run->outcome == PUBLISH_DONE;
	MemoryContextSwitchTo(spi_cxt);
	if (run->outcome == PUBLISH_MOVED)
		problem_add(&run->found, "catalog_moved", NULL, moved);
}

/*
 * Step: the gate's checks of the partition (its lock, finality, late
 * data, emptiness), the Iceberg ones (row count, committed LSN), then,
 * when nothing disagrees, the publish, and the attempt recorded with its
 * outcome (unless this same request released it before and nothing
 * changed). The problems are copied out: SPI's memory is freed.
 */
static void
check_step(void *arg)
{
	IcebergRun *run = (IcebergRun *) arg;
	MemoryContext caller_cxt = CurrentMemoryContext;
	ReleaseAttempt attempt = {0};

	SPI_connect();
	attempt.table_id = run->table.table_id;
	attempt.manifest = &run->m;
	attempt.manifest_jsonb = run->stored;
	attempt.listing = &run->listing;
	attempt.requested_by = run->requested_by;
	check_partition(&run->m, &run->table, run->files.files.n, &run->found, &attempt.catalog_json,
					&attempt.facts_json, &attempt.period);
	check_iceberg_facts(run, &attempt.period);
	if (run->found.n == 0)
	{
		release_properties_plan(run, caller_cxt);
		publish_step(run, caller_cxt);
	}
	else if (run->target_at_audited)
		problem_add(&run->found, "already_published", NULL,
					psprintf("%s \"%s\" already points at snapshot %lld (published before, perhaps by a call whose "
							 "transaction rolled back), although these problems hold now: readers see it.",
							 run->r.to_tag ? "Tag" : "Branch", run->it.target_name, (long long) run->audited_id));
	problems_summarize(&run->found);
	attempt.released = run->found.n == 0;
	attempt.catalog_json = catalog_json(run);
	attempt.problems = problems_to_jsonb(&run->found);
	run->noop = attempt.released && run->outcome == PUBLISH_ALREADY && released_before(run);
	if (!run->noop)
		record_release(&attempt);
	run->released = attempt.released;
	run->problems = MemoryContextAlloc(caller_cxt, VARSIZE(attempt.problems));
	memcpy(run->problems, attempt.problems, VARSIZE(attempt.problems));
	SPI_finish();
}

/*
 * The manifest stored with the attempt: the request as given, and the
 * audited snapshot's manifest list as its files' location (so
 * finalize.release_report shows the listing's differences).
 */
static Jsonb *
stored_request(Jsonb *request, const char *manifest_list)
{
	JsonbParseState *st = NULL;

	jb_begin_object(&st, NULL);
	jb_jsonb(&st, "iceberg", request);
	jb_text(&st, "files_location", manifest_list);
	return jb_finish(jb_end_object(&st));
}

/*
 * Sets what the gate's view needs once the table is loaded: the target's
 * name (finalize/<table>/<partition> for a tag named by true), the
 * periods the partition holds and the time column whose bounds show it.
 */
static void
prepare_manifest(IcebergRun *run)
{
	Manifest   *m = &run->m;

	m->table = run->r.table;
	m->partition = run->r.partition_key;
	m->store = run->r.store;
	m->prefix = "";
	m->external_catalog = true;
	m->has_built_at = run->r.has_built_at;
	m->built_at = run->r.built_at;
	run->it.target_name = run->r.target != NULL ? run->r.target
		: psprintf("finalize/%s/%s", run->r.table, run->r.partition_key);
	resolve_period(run);
	run->time_column = release_time_column(&run->r, &run->it.layout, run->bounds_required, &run->time_col,
										   &run->no_time_column);
}

/* Says, in an error after the catalog commit, that the snapshot was published. */
static void
published_context(void *arg)
{
	IcebergRun *run = (IcebergRun *) arg;

	if (run->published)
		errcontext("snapshot %lld of \"%s\" was published to %s \"%s\" before this error; call "
				   "finalize.release_iceberg again with the same request to record it", (long long) run->audited_id,
				   run->r.iceberg_table, run->r.to_tag ? "tag" : "branch", run->it.target_name);
}

/*
 * Loads the catalog's table as the caller, binds the periods to the
 * tracked table's, resolves the audited snapshot and the target, and
 * reads what the snapshot holds by each lake consumer's LSN property.
 */
static void
open_release(IcebergRun *run, Oid owner)
{
	run->m.table = run->r.table;
	run->m.partition = run->r.partition_key;
	/* An untracked table is an error before anything goes over the network. */
	run_as_owner(owner, table_step, run);
	iceberg_open(&run->r, &run->it);
	prepare_manifest(run);
	run_as_owner(owner, lookup_step, run);
	iceberg_resolve(&run->r, &run->it);
	run->audited_id = run->it.audited->id;
	run->manifest_list = run->it.audited->manifest_list;
	run->target_before = run->it.target != NULL ? run->it.target->snapshot_id : -1;
	run->target_at_audited = run->target_before == run->audited_id;
	for (int i = 0; i < run->nlake; i++)
	{
		LakeHolder *h = &run->lake[i];

		CHECK_FOR_INTERRUPTS();	/* one walk of the ancestry per consumer */
		h->has_lsn = h->lsn_property != NULL &&
			iceberg_committed_lsn(&run->it, h->lsn_property, &h->lsn, &h->carrier);
	}
	run->lake_json = lake_holders_json(run);
	run->m.generation = psprintf("%lld", (long long) run->audited_id);
}

/*
 * finalize.release_iceberg(request jsonb) -> (released, generation, problems)
 *
 * A publisher's one call to publish an audited snapshot's partition of an
 * Iceberg table; generation is the snapshot's id. Every attempt is stored
 * in finalize.release; the same request after a success stores nothing.
 */
Datum
finalize_release_iceberg(PG_FUNCTION_ARGS)
{
	IcebergRun *run = palloc0(sizeof(IcebergRun));
	TupleDesc	desc;
	Datum		result[3];
	bool		nulls[3] = {false, false, false};
	Oid			owner = function_owner(fcinfo->flinfo->fn_oid);
	ErrorContextCallback context;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid release request: it is NULL")));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	run->request = PG_GETARG_JSONB_P(0);
	release_request_parse(run->request, &run->r);
	run->requested_by = GetUserNameFromId(GetUserId(), false);
	run->found.max_per_code = finalize_gate_max_problems;
	open_release(run, owner);
	run->stored = stored_request(run->request, run->manifest_list);
	audit_files(run);

	context.callback = published_context;
	context.arg = run;
	context.previous = error_context_stack;
	error_context_stack = &context;
	run_as_owner(owner, check_step, run);
	error_context_stack = context.previous;

	result[0] = BoolGetDatum(run->released);
	result[1] = CStringGetTextDatum(run->m.generation);
	result[2] = JsonbPGetDatum(run->problems);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), result, nulls)));
}
