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
 * calling again records it without a second commit.
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
#include "core/json_build.h"
#include "core/settings.h"
#include "gate/release_checks.h"
#include "gate/release_record.h"
#include "gate/store_listing.h"
#include "publish/iceberg_catalog.h"
#include "publish/partition_match.h"
#include "publish/snapshot_files.h"

PG_FUNCTION_INFO_V1(finalize_release_iceberg);

/* One release_iceberg call, shared by the steps that run as the owner. */
typedef struct IcebergRun
{
	ReleaseRequest r;
	Jsonb	   *request_jsonb;
	Manifest	m;				/* the gate's view of the release */
	GateTable	table;
	IcebergTable it;
	SnapshotFiles files;
	InvComparison listing;
	ProblemList found;
	char	   *lsn_property;	/* of the lake consumer, NULL without one */
	bool		has_lsn;
	Lsn			lsn;			/* what the audited snapshot holds */
	int64		carrier;
	int64		target_before;	/* the target's head as loaded (-1: none) */
	PublishOutcome outcome;
	bool		already;		/* published by an earlier call: a no-op */
	const char *requested_by;
	Jsonb	   *problems;
	bool		released;
} IcebergRun;

/* A text column of SPI's first row, or NULL (no row, or NULL). */
static char *
first_text(int col)
{
	return SPI_processed > 0 ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col) : NULL;
}

/*
 * The periods the partition holds: its time fields' (in the table's
 * default spec), which the request's period_start and period_end, when
 * given, must be; else the request's, which a partition without a time
 * field must give.
 */
static void
resolve_period(IcebergRun *run)
{
	ReleaseRequest *r = &run->r;
	const IcebergSpec *spec = lake_layout_spec(&run->it.layout, run->it.layout.default_spec_id);
	TimestampTz start;
	TimestampTz end;

	if (partition_period(r, spec, &start, &end))
	{
		if ((r->has_period && r->period_start != start) || (r->has_period_end && r->period_end != end))
			request_error(r->has_period && r->period_start != start ? "period_start" : "period_end",
						  "disagrees with the partition: its time fields hold [%s, %s)",
						  timestamptz_to_str(start), timestamptz_to_str(end));
		run->m.has_period = run->m.has_period_end = true;
		run->m.period_start = start;
		run->m.period_end = end;
		return;
	}
	if (!r->has_period)
		request_error("period_start", "is missing: partition %s has no year, month, day or hour field of the "
					  "table's partition spec, so the periods it holds must be given", r->partition_key);
	run->m.has_period = true;
	run->m.period_start = r->period_start;
	run->m.has_period_end = r->has_period_end;
	run->m.period_end = r->period_end;
}

/* Step: the tracked table (and its periods bound) and the lake consumer's LSN property. */
static void
lookup_step(void *arg)
{
	IcebergRun *run = (IcebergRun *) arg;
	MemoryContext caller_cxt = CurrentMemoryContext;
	Oid			types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3];
	char	   *prop;

	gate_table_lookup(&run->m, &run->table);
	SPI_connect();
	values[0] = Int64GetDatum(run->table.table_id);
	values[1] = CStringGetTextDatum(run->r.catalog);
	values[2] = CStringGetTextDatum(run->r.iceberg_table);
	if (SPI_execute_with_args("SELECT " FINALIZE_SCHEMA "._iceberg_lsn_property($1, $2, $3)", 3, types, values,
							  NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the lake consumers of \"%s\"", run->r.table);
	prop = first_text(1);
	run->lsn_property = prop != NULL ? MemoryContextStrdup(caller_cxt, prop) : NULL;
	SPI_finish();
}

/*
 * Step: locks the partition and looks for the release that already
 * published this snapshot to the same target (then this call is a no-op
 * returning its problems).
 */
static void
earlier_step(void *arg)
{
	IcebergRun *run = (IcebergRun *) arg;
	MemoryContext caller_cxt = CurrentMemoryContext;
	Oid			types[6] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[6];
	bool		isnull;

	SPI_connect();
	values[0] = Int64GetDatum(run->table.table_id);
	values[1] = CStringGetTextDatum(run->m.partition);
	if (SPI_execute_with_args("SELECT " FINALIZE_SCHEMA "._lock_partition($1, $2)", 2, types, values, NULL, false,
							  1) != SPI_OK_SELECT)
		elog(ERROR, "could not lock partition \"%s\"", run->m.partition);
	values[2] = CStringGetTextDatum(run->m.generation);
	values[3] = CStringGetTextDatum(run->r.catalog);
	values[4] = CStringGetTextDatum(run->r.iceberg_table);
	values[5] = CStringGetTextDatum(run->it.target_name);
	if (SPI_execute_with_args("SELECT e.problems FROM " FINALIZE_SCHEMA "._iceberg_released($1, $2, $3, $4, $5, $6) e",
							  6, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the releases of partition \"%s\"", run->m.partition);
	if (SPI_processed == 1)
	{
		Jsonb	   *p = DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

		run->already = true;
		run->released = true;
		run->problems = MemoryContextAlloc(caller_cxt, VARSIZE(p));
		memcpy(run->problems, p, VARSIZE(p));
	}
	SPI_finish();
}

/*
 * Adds the problems of files the audit cannot check or place: files that
 * are no object of the release's store, files of a spec without one of
 * the partition's fields.
 */
static void
unchecked_problems(IcebergRun *run)
{
	SnapshotFiles *f = &run->files;

	if (f->outside > 0)
		problem_add(&run->found, "foreign_file", f->outside_example,
					psprintf("The snapshot's partition has " INT64_FORMAT " file(s) outside store \"%s\" (this is "
							 "one), which the audit cannot check; name the store that holds them.", f->outside,
							 run->r.store));
	if (f->unplaced > 0)
		problem_add(&run->found, "catalog_mismatch", NULL,
					psprintf("The snapshot has " INT64_FORMAT " file(s) written under partition spec " INT64_FORMAT
							 ", which has no field \"%s\", so whether their rows belong to partition %s cannot be "
							 "told; rewrite them under the current spec and audit again.", f->unplaced,
							 f->unplaced_spec, f->unplaced_field, run->r.partition_key));
}

/*
 * Collects the partition's files from the audited snapshot's manifests and
 * checks them against the store's listing of their common directory, as
 * the caller: missing_object, size_mismatch, duplicate_file (objects of
 * other snapshots there are no problem).
 */
static void
audit_files(IcebergRun *run)
{
	Manifest   *m = &run->m;
	char	   *base = store_location_base(m);
	SnapshotFiles *f = &run->files;

	snapshot_files_collect(m, base, run->it.audited->manifest_list, &run->it.layout, &run->r, f);
	m->files = f->files;
	m->prefix = f->prefix;
	m->empty = f->files.n == 0;
	m->files_location = (char *) run->it.audited->manifest_list;
	m->files_count = f->files.n;
	m->files_bytes = f->bytes;
	for (int i = 0; i < f->files.n; i++)
		inventory_digest_add(m->files_digest, f->files.items[i].path, f->files.items[i].path_len,
							 f->files.items[i].size, NULL, 0);
	unchecked_problems(run);
	inventory_compare_begin(&run->listing, &m->files, m->prefix, &run->found, true);
	run->listing.strays_ignored = true;
	run->listing.stored_max = (size_t) finalize_gate_max_delta_kb * 1024;
	if (f->files.n > 0)
		list_store(m, &run->listing);
	inventory_compare_end(&run->listing);
}

/*
 * Adds what the CDC facts say against the partition beyond finality
 * (_iceberg_checks): its row count, and whether the snapshot holds the
 * change log up to the periods' end. Runs as the owner in SPI.
 */
static void
check_iceberg_facts(IcebergRun *run, const GatePeriod *p)
{
	Oid			types[10] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT8OID, INT8OID, INT8OID,
	TEXTOID, TEXTOID, INT8OID};
	Datum		values[10];
	char		nulls[10] = "          ";
	char		lsn_text[LSN_TEXT_LEN + 1];

	if (run->table.verdict_table == NULL || !p->known)
		return;
	values[0] = CStringGetTextDatum(run->table.verdict_table);
	values[1] = TimestampTzGetDatum(p->start);
	values[2] = TimestampTzGetDatum(p->end);
	values[3] = CStringGetTextDatum(row_count_rule_name(run->r.rows));
	values[4] = Int64GetDatum(run->files.records);
	values[5] = Int64GetDatum(run->files.position_deletes);
	values[6] = Int64GetDatum(run->files.equality_delete_files);
	values[7] = db_text_or_null(run->lsn_property, nulls, 7);
	if (run->has_lsn)
		lsn_format(&run->lsn, lsn_text);
	values[8] = db_text_or_null(run->has_lsn ? lsn_text : NULL, nulls, 8);
	values[9] = Int64GetDatum(run->carrier);
	if (SPI_execute_with_args("SELECT c.code, c.detail FROM " FINALIZE_SCHEMA
							  "._iceberg_checks($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) c",
							  10, types, values, nulls, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not check the CDC facts of partition \"%s\"", run->m.partition);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *code = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

		/* Problem codes are kept by pointer: the SQL's are copied into constants. */
		problem_add(&run->found, strcmp(code, "row_count_mismatch") == 0 ? "row_count_mismatch" :
					strcmp(code, "row_count_unknown") == 0 ? "row_count_unknown" : "lake_behind", NULL,
					SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2));
	}
}

/* The report's "catalog": the Iceberg side of the attempt, as JSON text. */
static char *
catalog_json(const IcebergRun *run)
{
	JsonbParseState *st = NULL;
	const SnapshotFiles *f = &run->files;
	static const char *const outcomes[] = {"published", "already_published", "catalog_moved"};
	static const char *const audits[] = {"branch", "wap_id", "snapshot_id"};
	char		lsn_text[LSN_TEXT_LEN + 1];

	jb_begin_object(&st, NULL);
	jb_text(&st, "catalog", run->r.catalog);
	jb_text(&st, "iceberg_table", run->r.iceberg_table);
	jb_text(&st, "target", run->it.target_name);
	jb_text(&st, "target_type", run->r.to_tag ? "tag" : "branch");
	if (run->target_before >= 0)
		jb_int(&st, "target_snapshot_before", run->target_before);
	jb_text(&st, "audited_by", audits[run->r.audit]);
	jb_int(&st, "snapshot_id", run->it.audited->id);
	jb_text(&st, "manifest_list", run->it.audited->manifest_list);
	jb_text(&st, "row_count", row_count_rule_name(run->r.rows));
	jb_int(&st, "manifests", f->manifests);
	jb_int(&st, "data_files", f->data_files);
	jb_int(&st, "delete_files", f->delete_files);
	jb_int(&st, "records", f->records);
	jb_int(&st, "position_deletes", f->position_deletes);
	jb_int(&st, "equality_delete_files", f->equality_delete_files);
	if (run->lsn_property != NULL)
		jb_text(&st, "lsn_property", run->lsn_property);
	if (run->has_lsn)
	{
		lsn_format(&run->lsn, lsn_text);
		jb_text(&st, "committed_lsn", lsn_text);
		jb_int(&st, "lsn_carrier", run->carrier);
	}
	if (run->found.n == 0)
		jb_text(&st, "outcome", outcomes[run->outcome]);
	return jb_finish_text(jb_end_object(&st));
}

/*
 * Step: the gate's checks of the partition (its lock, finality, late
 * data, emptiness), the Iceberg ones (row count, committed LSN), then,
 * when nothing disagrees, the publish (the catalog commit), and the
 * attempt recorded with its outcome. The problems are copied out for the
 * caller: everything else lives in SPI's memory.
 */
static void
check_step(void *arg)
{
	IcebergRun *run = (IcebergRun *) arg;
	MemoryContext caller_cxt = CurrentMemoryContext;
	ReleaseAttempt attempt = {0};
	char	   *moved;

	SPI_connect();
	attempt.table_id = run->table.table_id;
	attempt.manifest = &run->m;
	attempt.manifest_jsonb = run->request_jsonb;
	attempt.listing = &run->listing;
	attempt.requested_by = run->requested_by;
	check_partition(&run->m, &run->table, run->files.files.n, &run->found, &attempt.catalog_json,
					&attempt.facts_json, &attempt.period);
	check_iceberg_facts(run, &attempt.period);
	if (run->found.n == 0)
	{
		run->outcome = iceberg_publish(&run->r, &run->it, &moved);
		if (run->outcome == PUBLISH_MOVED)
			problem_add(&run->found, "catalog_moved", NULL, moved);
	}
	problems_summarize(&run->found);
	attempt.released = run->found.n == 0;
	attempt.catalog_json = catalog_json(run);
	attempt.problems = problems_to_jsonb(&run->found);
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
 * name (finalize/<table>/<partition> for a tag named by true) and the
 * periods the partition holds.
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
}

/*
 * finalize.release_iceberg(request jsonb) -> (released, generation, problems)
 *
 * A publisher's one call to publish an audited snapshot's partition of an
 * Iceberg table; generation is the snapshot's id. Every attempt is stored
 * in finalize.release; the same request after a success is a no-op.
 */
Datum
finalize_release_iceberg(PG_FUNCTION_ARGS)
{
	IcebergRun *run = palloc0(sizeof(IcebergRun));
	TupleDesc	desc;
	Datum		result[3];
	bool		nulls[3] = {false, false, false};
	Oid			owner = function_owner(fcinfo->flinfo->fn_oid);

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid release request: it is NULL")));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	release_request_parse(PG_GETARG_JSONB_P(0), &run->r);
	run->requested_by = GetUserNameFromId(GetUserId(), false);
	run->found.max_per_code = finalize_gate_max_problems;

	/* An untracked table is an error before anything goes over the network. */
	run->m.table = run->r.table;
	run->m.partition = run->r.partition_key;
	run_as_owner(owner, lookup_step, run);
	/* The catalog's table, as the caller; then the periods bound to the table's. */
	iceberg_open(&run->r, &run->it);
	prepare_manifest(run);
	run_as_owner(owner, lookup_step, run);
	iceberg_resolve(&run->r, run->lsn_property != NULL ? run->lsn_property : "", &run->it);
	run->target_before = run->it.target != NULL ? run->it.target->snapshot_id : -1;
	run->has_lsn = run->lsn_property != NULL && iceberg_committed_lsn(&run->it, &run->lsn, &run->carrier);
	run->m.generation = psprintf("%lld", (long long) run->it.audited->id);
	run->request_jsonb = stored_request(PG_GETARG_JSONB_P(0), run->it.audited->manifest_list);

	run_as_owner(owner, earlier_step, run);
	if (!run->already)
	{
		audit_files(run);
		run_as_owner(owner, check_step, run);
	}
	result[0] = BoolGetDatum(run->released);
	result[1] = CStringGetTextDatum(run->m.generation);
	result[2] = JsonbPGetDatum(run->problems);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), result, nulls)));
}
