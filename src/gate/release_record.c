/*
 * release_record.c
 *     A release attempt as stored: its report, the attempt's row and (when
 *     it passed) the switch of the partition's published marker.
 *
 * Everything is written in the caller's transaction (as the extension's
 * owner, through the caller's SPI connection), so a release is all or
 * nothing: the marker never moves without the attempt that justified it.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "common/json_build.h"
#include "common/settings.h"
#include "gate/release_record.h"

/*
 * The report stored with a release attempt, so a refusal can be explained
 * later: the manifest's set, the listing, the catalog view, the CDC facts
 * and the problems. The two inventories (possibly millions of entries) are
 * pushed as values, not printed and parsed again.
 */
static Jsonb *
build_report(const ReleaseAttempt *a)
{
	JsonbParseState *st = NULL;

	jb_begin_object(&st, NULL);
	jb_begin_object(&st, "manifest");
	jb_text(&st, "prefix", a->manifest->prefix);
	jb_bool(&st, "empty", a->manifest->empty);
	inventory_push_jsonb(&st, "files", &a->manifest->files);
	jb_end_object(&st);
	inventory_push_jsonb(&st, "listing", a->listing);
	jb_json_text(&st, "catalog", a->catalog_json);
	jb_json_text(&st, "facts", a->facts_json);
	jb_jsonb(&st, "problems", a->problems);
	return jb_finish(jb_end_object(&st));
}

/*
 * Inserts the attempt's row; its release_id. The insert runs as a generic
 * plan: a custom plan would fold the report (possibly hundreds of
 * megabytes) into a constant, copying it.
 */
static Datum
insert_attempt(const ReleaseAttempt *a, Jsonb *report)
{
	const Manifest *m = a->manifest;
	Oid			types[10] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID, JSONBOID, JSONBOID, NAMEOID,
	TIMESTAMPTZOID};
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', m->has_period ? ' ' : 'n'};
	SPIPlanPtr	plan;
	bool		isnull;
	Datum		release_id;

	values[0] = Int64GetDatum(a->table_id);
	values[1] = CStringGetTextDatum(m->partition);
	values[2] = CStringGetTextDatum(m->generation);
	values[3] = CStringGetTextDatum(m->store);
	values[4] = CStringGetTextDatum(m->prefix);
	values[5] = BoolGetDatum(a->released);
	values[6] = JsonbPGetDatum(a->problems);
	values[7] = JsonbPGetDatum(report);
	values[8] = DirectFunctionCall1(namein, CStringGetDatum(a->requested_by));
	values[9] = m->has_period ? TimestampTzGetDatum(m->period_start) : (Datum) 0;

	plan = SPI_prepare_cursor("INSERT INTO " FINALIZE_SCHEMA ".release (table_id, partition, generation, store, "
							  "prefix, released, problems, report, requested_by, period_start) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING release_id",
							  10, types, CURSOR_OPT_GENERIC_PLAN);
	if (plan == NULL || SPI_execute_plan(plan, values, nulls, false, 1) != SPI_OK_INSERT_RETURNING ||
		SPI_processed != 1)
		elog(ERROR, "could not store the release attempt of partition \"%s\"", m->partition);
	release_id = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	SPI_freeplan(plan);
	return release_id;
}

/*
 * Switches the partition's published marker to this generation: what
 * readers of the published view see from the commit on.
 */
static void
publish(const ReleaseAttempt *a, Datum release_id)
{
	const Manifest *m = a->manifest;
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, INT8OID};
	Datum		values[5];

	values[0] = Int64GetDatum(a->table_id);
	values[1] = CStringGetTextDatum(m->partition);
	values[2] = CStringGetTextDatum(m->generation);
	values[3] = CStringGetTextDatum(m->prefix);
	values[4] = release_id;
	if (SPI_execute_with_args("INSERT INTO " FINALIZE_SCHEMA ".published AS p "
							  "(table_id, partition, generation, prefix, release_id, published_at) "
							  "VALUES ($1, $2, $3, $4, $5, pg_catalog.now()) "
							  "ON CONFLICT ON CONSTRAINT published_pkey DO UPDATE "
							  "SET generation = excluded.generation, prefix = excluded.prefix, "
							  "release_id = excluded.release_id, published_at = excluded.published_at",
							  5, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not publish partition \"%s\"", m->partition);
}

/*
 * Stores a release attempt with its full report and, when it passed,
 * switches the partition's published marker, in the caller's transaction.
 * Needs an SPI connection.
 */
void
record_release(const ReleaseAttempt *a)
{
	Datum		release_id = insert_attempt(a, build_report(a));

	if (a->released)
		publish(a, release_id);
}
