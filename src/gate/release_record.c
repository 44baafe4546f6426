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

#include "core/json_build.h"
#include "core/settings.h"
#include "gate/release_record.h"

/*
 * The report stored with a release attempt, so a refusal can be explained
 * later: the catalog view, the CDC facts, the problems, and a summary of
 * the listing (objects, bytes, digest), and for a manifest that names its
 * files' object (files_location) that location with the count, bytes and
 * digest of what was read from it. The two inventories are not in it:
 * the manifest is stored as the publisher gave it (its own column) and the
 * listing as what differs from it (listing_delta, inventory_codec.c);
 * finalize.release_report() rebuilds the full report from the three.
 */
static Jsonb *
build_report(const ReleaseAttempt *a)
{
	JsonbParseState *st = NULL;
	const InvComparison *l = a->listing;
	const Manifest *m = a->manifest;

	jb_begin_object(&st, NULL);

	jb_begin_object(&st, "manifest");
	jb_text(&st, "prefix", m->prefix);
	jb_bool(&st, "empty", m->empty);
	if (m->files_location != NULL)
	{
		/* The files stay in the store's object: what was read of it. */
		jb_text(&st, "files_location", m->files_location);
		jb_begin_object(&st, "files_summary");
		jb_int(&st, "files", m->files_count);
		jb_int(&st, "bytes", m->files_bytes);
		jb_text(&st, "digest", inventory_digest_hex(m->files_digest));
		jb_end_object(&st);
	}
	jb_end_object(&st);
	jb_begin_object(&st, "listing_summary");
	jb_int(&st, "objects", l->listed);
	jb_int(&st, "bytes", l->bytes);
	jb_text(&st, "digest", inventory_digest_hex(l->digest));
	jb_int(&st, "manifest_files", m->files_location ? m->files_count : m->files.n);
	jb_int(&st, "stored_records", (int64) l->encoder->records);
	if (l->stored_truncated)
		jb_bool(&st, "delta_truncated", true);
	jb_end_object(&st);
	jb_json_text(&st, "catalog", a->catalog_json);
	jb_json_text(&st, "facts", a->facts_json);
	jb_jsonb(&st, "problems", a->problems);
	return jb_finish(jb_end_object(&st));
}

/*
 * Inserts the attempt's row; its release_id. The insert runs as a generic
 * plan: a custom plan would fold the manifest (possibly hundreds of
 * megabytes) into a constant, copying it.
 */
static Datum
insert_attempt(const ReleaseAttempt *a, Jsonb *report)
{
	const Manifest *m = a->manifest;
	Oid			types[13] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID, JSONBOID, JSONBOID, NAMEOID,
	TIMESTAMPTZOID, JSONBOID, BYTEAOID, TIMESTAMPTZOID};
	Datum		values[13];
	char		known = a->period.known ? ' ' : 'n';
	char		nulls[13] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', known, ' ', ' ', known};
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
	values[9] = a->period.known ? TimestampTzGetDatum(a->period.start) : (Datum) 0;
	values[10] = JsonbPGetDatum(a->manifest_jsonb);
	values[11] = PointerGetDatum(a->listing->stored->data);
	values[12] = a->period.known ? TimestampTzGetDatum(a->period.end) : (Datum) 0;

	plan = SPI_prepare_cursor("INSERT INTO " FINALIZE_SCHEMA ".release (table_id, partition, generation, store, "
							  "prefix, released, problems, report, requested_by, period_start, manifest, "
							  "listing_delta, period_end) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING release_id",
							  13, types, CURSOR_OPT_GENERIC_PLAN);
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
