/*
 * snapshot_audit.c
 *     The audit of an Iceberg release: the partition's files of the audited
 *     snapshot against the store and the snapshot's own summaries (as the
 *     caller), and the CDC facts of its periods (as the owner, in SPI).
 *
 * A branch publish makes the whole audited snapshot what the branch's
 * readers see, not only the partition: every file added or removed since
 * the branch's head must be the partition's (or that change is published
 * unaudited, unaudited_change). Additions are told by the snapshot that
 * added each live entry; removals by the deleted entries the manifests
 * still hold, counted against what each snapshot's summary says it
 * removed (a rewritten manifest drops them: then which partition lost
 * files cannot be told, and that is a problem too).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/fmt.h"
#include "core/json_build.h"
#include "core/settings.h"
#include "gate/problem_list.h"
#include "gate/store_listing.h"
#include "publish/release_run.h"

/* PostgreSQL's epoch (2000-01-01) in microseconds since 1970, as file_bounds.c counts. */
#define UNIX_EPOCH_OFFSET_US \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

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

/* An instant as file_bounds.c counts (microseconds since 1970), saturated. */
static int64
unix_us(TimestampTz t)
{
	int64		us;

	return pg_add_s64_overflow(t, UNIX_EPOCH_OFFSET_US, &us) ? PG_INT64_MAX : us;
}

/* An instant of file_bounds.c (microseconds since 1970) as text of its own (two fit in one message). */
static const char *
instant_text(int64 us)
{
	TimestampTz t;

	if (pg_sub_s64_overflow(us, UNIX_EPOCH_OFFSET_US, &t) || !IS_VALID_TIMESTAMP(t))
		return "(out of range)";
	return fmt_instant(t);
}

/*
 * Adds the problems of files that may hold rows outside the release's
 * periods (by their bounds of the time column, whatever places them, and
 * rows where it is null), and, where nothing but bounds can place them (no
 * time field), of files without bounds or a null count and of a table
 * without a time column.
 */
static void
period_problems(IcebergRun *run)
{
	SnapshotFiles *f = &run->files;
	const char *span = psprintf("[%s, %s)", fmt_instant(run->m.period_start), fmt_instant(run->m.period_end));

	if (f->outside_period > 0)
		problem_add(&run->found, "files_outside_period", f->outside_period_example,
					psprintf("The partition has " INT64_FORMAT " data file(s) whose bounds of column \"%s\" reach "
							 "outside the periods released, %s (this one holds [%s, %s)): their rows are not all "
							 "the periods', and the periods' finality does not vouch for them. Release the periods "
							 "the files hold, or write each period's rows to files of their own (partition by a "
							 "time transform of the column).", f->outside_period, run->time_column, span,
							 instant_text(f->outside_lo_us), instant_text(f->outside_hi_us)));
	if (f->null_time > 0)
		problem_add(&run->found, "files_outside_period", f->null_time_example,
					psprintf("The partition has " INT64_FORMAT " data file(s) with rows whose column \"%s\" is null "
							 "(this is one, by its null_value_counts): such a row belongs to no period, so %s's "
							 "finality does not vouch for it, and in a count it stands in for a row of the periods "
							 "that may be missing. Write every row with its time, or keep the rows without one out "
							 "of the partition (a time transform of the column writes them to its null partition).",
							 f->null_time, run->time_column, span));
	if (!run->bounds_required)
		return;
	if (run->time_column == NULL)
		problem_add(&run->found, "time_column_unknown", NULL,
					psprintf("Partition %s has no time field, so only its files' bounds of a time column can show "
							 "that they hold %s alone, but %s. Name the column the table's periods are about in "
							 "\"time_column\" (a timestamptz).", run->r.partition_key, span, run->no_time_column));
	else if (f->unbounded > 0)
		problem_add(&run->found, "file_bounds_missing", f->unbounded_example,
					psprintf("The partition has " INT64_FORMAT " data file(s) without a lower and upper bound and a "
							 "null count of column \"%s\" (this is one), so whether they hold %s alone cannot be "
							 "proven: write them with column metrics (write.metadata.metrics.column.%s = full or "
							 "truncate(16); not none or counts), or partition the table by a time transform of "
							 "the column.", f->unbounded, run->time_column, span, run->time_column));
}

/*
 * Checks the files of every partition read from the manifests against the
 * audited snapshot's summary (total-data-files, total-delete-files): a
 * manifest list cut at a block boundary, or missing manifests, would read
 * as fewer files. An error: the snapshot's objects are not what it says.
 */
static void
check_totals(const IcebergRun *run)
{
	const LakeSnapshot *s = lake_find_snapshot(&run->it.md, run->audited_id);
	const SnapshotFiles *f = &run->files;

	if (s == NULL || s->total_data_files < 0 || s->total_delete_files < 0)
		return;					/* no totals: unverified_totals says it */
	if (s->total_data_files == f->all_data_files && s->total_delete_files == f->all_delete_files)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("the manifests of snapshot %lld of \"%s\" do not hold the files its summary counts",
					(long long) run->audited_id, run->r.iceberg_table),
			 errdetail("They hold " INT64_FORMAT " data and " INT64_FORMAT " delete files; the summary says %lld and "
					   "%lld. Nothing was released.", f->all_data_files, f->all_delete_files,
					   (long long) s->total_data_files, (long long) s->total_delete_files),
			 errhint("A manifest list or manifest was cut or replaced after the commit: audit a snapshot whose files are whole.")));
}

/*
 * Adds the problem of a snapshot whose summary has no file totals: then
 * nothing shows that its manifest list is whole (one cut at an Avro block
 * boundary reads as a valid, shorter list), so nothing is published.
 */
static void
totals_problem(IcebergRun *run)
{
	const LakeSnapshot *s = lake_find_snapshot(&run->it.md, run->audited_id);

	if (s != NULL && s->total_data_files >= 0 && s->total_delete_files >= 0)
		return;
	problem_add(&run->found, "catalog_mismatch", NULL,
				psprintf("The summary of snapshot %lld has no total-data-files and total-delete-files, so whether "
						 "its manifest list is whole cannot be checked; commit with a writer that writes them "
						 "(Spark, Flink, pyiceberg and Iceberg's Java library do).", (long long) run->audited_id));
}

/*
 * Adds the problems of changes since the target's head that the audit
 * did not cover: files of other partitions added or removed, and removals
 * the manifests no longer show (then their partitions are unknown).
 */
static void
change_problems(IcebergRun *run, const SinceHead *since)
{
	SnapshotFiles *f = &run->files;

	if (f->changed_outside > 0)
		problem_add(&run->found, "unaudited_change", f->changed_example,
					psprintf("Since %s \"%s\"'s head, " INT64_FORMAT " file(s) of other partitions were added or removed "
							 "(this is one): fast-forwarding would publish them unaudited. Audit a branch whose "
							 "commits since %s touch only this partition, or publish a tag.",
							 run->r.to_tag ? "tag" : "branch", run->it.target_name, f->changed_outside,
							 run->it.target_name));
	for (int k = 0; k < since->n; k++)
	{
		const LakeSnapshot *s = lake_find_snapshot(&run->it.md, since->ids[k]);
		int64		removed = s != NULL ? s->removed_files : -1;

		if (removed < 0 && s != NULL && s->operation != NULL && strcmp(s->operation, "append") == 0)
			removed = 0;
		if (removed == f->removed_seen[k])
			continue;
		problem_add(&run->found, "unaudited_change", NULL,
					removed < 0
					? psprintf("Snapshot %lld (since the target's head) does not say in its summary how many files "
							   "it removed, so what it changed cannot be told.", (long long) since->ids[k])
					: psprintf("Snapshot %lld (since the target's head) removed %lld file(s), of which the manifests "
							   "show " INT64_FORMAT " (the others were dropped when manifests were rewritten), so "
							   "which partitions lost files cannot be told.", (long long) since->ids[k],
							   (long long) removed, f->removed_seen[k]));
		break;
	}
}

/*
 * Collects the partition's files from the audited snapshot's manifests and
 * checks them against the store's listing of their common directory, as
 * the caller: missing_object, size_mismatch, duplicate_file (objects of
 * other snapshots there are no problem); then the snapshot's totals and,
 * for a branch, the changes since its head.
 */
void
audit_files(IcebergRun *run)
{
	Manifest   *m = &run->m;
	ObjectStore store;
	SnapshotFiles *f = &run->files;
	SinceHead	since = {NULL, 0};
	int64	   *ids = NULL;
	PeriodCheck period = {0};

	gate_open_store(m, &store);
	if (!run->r.to_tag)
	{
		since.n = iceberg_since_head(&run->it, &ids);
		since.ids = ids;
		if (since.n < 0)
		{
			problem_add(&run->found, "catalog_moved", NULL,
						psprintf("Snapshot %lld does not descend from branch \"%s\"'s head %lld (or its ancestry was "
								 "expired), so publishing it would not be a fast-forward: audit a snapshot on top of "
								 "the branch.", (long long) run->audited_id, run->it.target_name,
								 (long long) run->target_before));
			since.n = 0;
		}
	}
	period.active = run->time_column != NULL;
	period.col = run->time_col;
	period.start_us = unix_us(m->period_start);
	period.end_us = unix_us(m->period_end);
	snapshot_files_collect(m, &store, run->manifest_list, &run->it.layout, &run->r, &since, &period, f);
	check_totals(run);
	m->files = f->files;
	m->prefix = f->prefix;
	m->empty = f->files.n == 0;
	m->files_location = (char *) run->manifest_list;
	m->files_count = f->files.n;
	m->files_bytes = f->bytes;
	for (int i = 0; i < f->files.n; i++)
		inventory_digest_add(m->files_digest, f->files.items[i].path, f->files.items[i].path_len,
							 f->files.items[i].size, NULL, 0);
	unchecked_problems(run);
	period_problems(run);
	change_problems(run, &since);
	totals_problem(run);
	inventory_compare_begin(&run->listing, &m->files, m->prefix, &run->found, true);
	run->listing.strays_ignored = true;
	run->listing.stored_max = (size_t) finalize_gate_max_delta_kb * 1024;
	if (f->files.n > 0)
		list_store(m, &run->listing);
	inventory_compare_end(&run->listing);
}

/*
 * The lake consumers that must hold the partition, with what the audited
 * snapshot holds of each (for _iceberg_checks and the report): an array of
 * {table_name, consumer, lsn_property, followed_elsewhere, committed_lsn,
 * lsn_carrier}.
 */
Jsonb *
lake_holders_json(const IcebergRun *run)
{
	JsonbParseState *st = NULL;
	char		lsn_text[LSN_TEXT_LEN + 1];

	jb_begin_array(&st, NULL);
	for (int i = 0; i < run->nlake; i++)
	{
		const LakeHolder *h = &run->lake[i];

		jb_begin_object(&st, NULL);
		jb_text(&st, "table_name", h->table);
		if (h->consumer != NULL)
		{
			jb_text(&st, "consumer", h->consumer);
			jb_text(&st, "lsn_property", h->lsn_property);
		}
		jb_bool(&st, "followed_elsewhere", h->followed_elsewhere);
		if (h->has_lsn)
		{
			lsn_format(&h->lsn, lsn_text);
			jb_text(&st, "committed_lsn", lsn_text);
			jb_int(&st, "lsn_carrier", h->carrier);
		}
		jb_end_object(&st);
	}
	return jb_finish(jb_end_array(&st));
}

/* A problem code of _iceberg_checks as a constant (problems keep codes by pointer). */
static const char *
facts_code(const char *code)
{
	static const char *const codes[] = {"row_count_mismatch", "row_count_unknown", "lake_consumer_missing"};

	for (int i = 0; i < (int) lengthof(codes); i++)
		if (strcmp(code, codes[i]) == 0)
			return codes[i];
	return "lake_behind";
}

/*
 * Adds what the CDC facts say against the partition beyond finality
 * (_iceberg_checks): its row count, and whether the snapshot holds the
 * change log of each table it holds (each shard's in its own LSNs) up to
 * the periods' end. Runs as the owner in SPI.
 */
void
check_iceberg_facts(IcebergRun *run, const GatePeriod *p)
{
	Oid			types[8] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT8OID, INT8OID, INT8OID, JSONBOID};
	Datum		values[8];

	if (run->table.verdict_table == NULL || !p->known)
		return;
	values[0] = CStringGetTextDatum(run->table.verdict_table);
	values[1] = TimestampTzGetDatum(p->start);
	values[2] = TimestampTzGetDatum(p->end);
	values[3] = CStringGetTextDatum(row_count_rule_name(run->r.rows));
	values[4] = Int64GetDatum(run->files.records);
	values[5] = Int64GetDatum(run->files.position_deletes);
	values[6] = Int64GetDatum(run->files.uncountable_deletes);
	values[7] = JsonbPGetDatum(run->lake_json);
	if (SPI_execute_with_args("SELECT c.code, c.detail FROM " FINALIZE_INTERNAL_SCHEMA
							  ".iceberg_checks($1, $2, $3, $4, $5, $6, $7, $8) c",
							  8, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not check the CDC facts of partition \"%s\"", run->m.partition);
	for (uint64 i = 0; i < SPI_processed; i++)
		problem_add(&run->found, facts_code(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1)), NULL,
					SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2));
}
