/*
 * release_checks.c
 *     What the gate checks as the extension's owner before a release.
 *
 * A partition is released only when its manifest, the store's listing and
 * the catalog agree: the manifest's files must be what the store holds,
 * the catalog must send readers to this generation's location, the CDC
 * facts must say every period the partition holds is final, and an empty
 * location must be meant (and confirmed by the facts). Each disagreement
 * is a problem, in words a publisher can act on; the partition's lock
 * comes first, so a registration cannot change the catalog view between
 * the check and the release.
 *
 * A partition holds whole periods of its table (granularity in its
 * period_zone): the manifest's period_start must be a boundary (and its
 * period_end, for several periods, a later one), else the manifest is
 * refused before anything goes over the network. Without period_start the
 * period is the one registered with the partition; a release whose period
 * is known nowhere is refused (no_period): no release is published without
 * the finality check.
 *
 * A partition of a sharded table may hold one shard (the manifest's
 * "shard", else its key's shard=<label>): its periods are final when that
 * shard's are, and a shard the table does not have is unknown_shard.
 * A release publishes its whole location: where the catalog also places
 * another shard's partition there (a template without {shard}, a location
 * registered for two shards) or other periods (dt={date}/ on an hourly
 * table), one shard's verdict or the manifest's periods cannot release it.
 *
 * Every query is schema-qualified and uses no operator, cast or
 * unqualified name: it runs as the extension's owner.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/period_zone.h"
#include "core/settings.h"
#include "gate/manifest_error.h"
#include "gate/problem_list.h"
#include "gate/release_checks.h"

/* The catalog view of a partition, as the gate reads it. */
#define GATE_CATALOG_SQL \
	"SELECT c.catalog, c.source, c.location, c.in_range, c.range_start, c.range_end, " \
	"c.registered_at, c.registered_by FROM " FINALIZE_INTERNAL_SCHEMA ".gate_catalog($1, $2, $3, $4) AS c"

/* The columns of GATE_CATALOG_SQL, by position. */
enum
{
	CAT_CATALOG, CAT_SOURCE, CAT_LOCATION, CAT_IN_RANGE, CAT_RANGE_START, CAT_RANGE_END,
	CAT_REGISTERED_AT, CAT_REGISTERED_BY, CAT_NCOLS
};

/* The arguments that name a partition: table id, partition, period start, shard. */
typedef struct PartitionArgs
{
	Oid			types[4];
	Datum		values[4];
	char		nulls[4];
} PartitionArgs;

/*
 * Runs a catalog query that returns at most one row; its values as text
 * (NULL for NULL, all NULL for no row). Each takes a new snapshot, so it
 * sees what committed before the partition lock was granted.
 */
static char **
query_row(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int ncols)
{
	char	  **out = palloc0(sizeof(char *) * ncols);

	if (SPI_execute_with_args(sql, nargs, types, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not run \"%s\"", sql);
	if (SPI_processed == 1)
		for (int i = 0; i < ncols; i++)
			out[i] = db_text_copy(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, CurrentMemoryContext);
	return out;
}

/*
 * The gate binds periods and stores attempts in the catalog of its own
 * version: between `make install` plus a restart and ALTER EXTENSION
 * UPDATE, an older catalog would have it guess at what it may publish.
 */
static void
require_catalog_version(void)
{
	char	   *version = query_row("SELECT e.extversion FROM pg_catalog.pg_extension e "
									"WHERE e.extname OPERATOR(pg_catalog.=) 'finalize'", 0, NULL, NULL, NULL, 1)[0];

	if (version == NULL || strcmp(version, FINALIZE_VERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension finalize is at version %s in this database but the loaded library is version %s",
						version ? version : "(none)", FINALIZE_VERSION),
				 errdetail("The release gate publishes nothing until they match."),
				 errhint("Run ALTER EXTENSION finalize UPDATE as the extension's owner.")));
}

/*
 * Checks that the manifest's periods are whole periods of the table and
 * sets its period_end (the end of the one period at period_start when it
 * gives none). An instant inside a period would have the gate check the
 * wrong one (a local day's start read as the UTC day containing it).
 */
static void
bind_manifest_period(Manifest *m, const GateTable *t)
{
	TimestampTz near = 0;
	TimestampTz span_end = 0;
	const PeriodZone *zone = t->periods.zone;
	PeriodSpanFault fault;

	if (!m->has_period)
		return;
	fault = period_span_check(&t->periods, m->period_start, m->has_period_end, m->period_end, &span_end, &near);
	if (fault == SPAN_START_OFF)
		manifest_field_error(m->external_catalog, "period_start",
							 psprintf("%s is not a period boundary of table \"%s\": its %s",
									  period_format_local(zone, m->period_start), m->table,
									  period_nearest_text(&t->periods, t->zone, near)));
	if (fault == SPAN_END_OFF)
		manifest_field_error(m->external_catalog, "period_end",
							 psprintf("%s is not a period boundary of table \"%s\": its %s",
									  period_format_local(zone, m->period_end), m->table,
									  period_nearest_text(&t->periods, t->zone, near)));
	if (fault == SPAN_END_NOT_AFTER)
		manifest_field_error(m->external_catalog, "period_end",
							 psprintf("%s is not after \"period_start\" %s", period_format_local(zone, m->period_end),
									  period_format_local(zone, m->period_start)));
	m->period_end = span_end;
}

/* A text column of the first row of SPI's result, copied to cxt (NULL for NULL). */
static char *
result_text(int col, MemoryContext cxt)
{
	char	   *v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col);

	return v == NULL ? NULL : MemoryContextStrdup(cxt, v);
}

/*
 * The manifest's table (or the not-tracked error) with its periods, the
 * table whose verdict decides (on a sharded table, the partition's shard),
 * and the manifest's periods checked against them: all before anything
 * goes over the network. Needs no SPI connection of the caller's.
 */
void
gate_table_lookup(Manifest *m, GateTable *t)
{
	Oid			types[3] = {TEXTOID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', m->shard ? ' ' : 'n'};
	bool		isnull;
	const PeriodZone *zone;
	MemoryContext caller_cxt = CurrentMemoryContext;

	SPI_connect();
	require_catalog_version();
	values[0] = CStringGetTextDatum(m->table);
	values[1] = CStringGetTextDatum(m->partition);
	values[2] = m->shard ? CStringGetTextDatum(m->shard) : (Datum) 0;
	if (SPI_execute_with_args("SELECT t.table_id, t.granularity, t.period_zone, t.verdict_table, t.shard, "
							  "t.shard_problem FROM " FINALIZE_INTERNAL_SCHEMA ".gate_table($1, $2, $3) AS t",
							  3, types, values, nulls, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read tracked table \"%s\"", m->table);
	t->table_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	/* Out of SPI's memory, which SPI_finish frees. */
	t->granularity = result_text(2, caller_cxt);
	t->zone = result_text(3, caller_cxt);
	t->verdict_table = result_text(4, caller_cxt);
	t->shard = result_text(5, caller_cxt);
	t->shard_problem = result_text(6, caller_cxt);
	zone = period_zone_of(t->zone, "period_zone");
	period_spec_of(DatumGetIntervalP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
				   zone, true, "granularity", &t->periods);
	bind_manifest_period(m, t);
	SPI_finish();
}

/* Fills the arguments shared by the lock and the catalog view. */
static void
partition_args(const Manifest *m, const GateTable *t, const GatePeriod *p, PartitionArgs *a)
{
	a->types[0] = INT8OID;
	a->types[1] = TEXTOID;
	a->types[2] = TIMESTAMPTZOID;
	a->types[3] = TEXTOID;
	a->values[0] = Int64GetDatum(t->table_id);
	a->values[1] = CStringGetTextDatum(m->partition);
	a->values[2] = p->known ? TimestampTzGetDatum(p->start) : (Datum) 0;
	a->values[3] = t->shard ? CStringGetTextDatum(t->shard) : (Datum) 0;
	a->nulls[0] = ' ';
	a->nulls[1] = ' ';
	a->nulls[2] = p->known ? ' ' : 'n';
	a->nulls[3] = t->shard ? ' ' : 'n';
}

/*
 * The period registered with the partition, if one is (read with the
 * latest snapshot, after the partition's lock: see check_catalog_unchanged).
 */
static bool
registered_period(const Manifest *m, int64 table_id, TimestampTz *start, TimestampTz *end)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(table_id), CStringGetTextDatum(m->partition)};
	bool		null_start;
	bool		null_end;

	if (SPI_execute_with_args("SELECT r.period_start, r.period_end FROM " FINALIZE_INTERNAL_SCHEMA
							  ".registered_period($1, $2) AS r", 2, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the registration of partition \"%s\"", m->partition);
	if (SPI_processed != 1)
		return false;
	*start = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &null_start));
	*end = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &null_end));
	return !null_start && !null_end;
}

/*
 * Under REPEATABLE READ or SERIALIZABLE the gate reads the catalog with the
 * transaction's snapshot, which the partition's lock cannot refresh: a
 * registration committed while the gate waited for the lock would be
 * invisible, and the gate would publish against where readers no longer
 * look. So the catalog is read again with the latest snapshot; if it moved,
 * the transaction fails with a serialization failure, as any other write
 * based on stale data would there.
 */
static void
check_catalog_unchanged(const Manifest *m, const char *seen, PartitionArgs *a)
{
	SPIPlanPtr	plan = SPI_prepare(GATE_CATALOG_SQL, 4, a->types);
	char	   *latest;

	if (plan == NULL ||
		SPI_execute_snapshot(plan, a->values, a->nulls, GetLatestSnapshot(), InvalidSnapshot, true, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the catalog view of partition \"%s\"", m->partition);
	latest = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (latest == NULL || strcmp(latest, seen) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access to the catalog of partition \"%s\" of \"%s\"",
						m->partition, m->table),
				 errdetail("Another transaction changed where the catalog sends readers of the partition after "
						   "this transaction's snapshot was taken; nothing was released."),
				 errhint("Retry the transaction, or release in a READ COMMITTED transaction.")));
	SPI_freeplan(plan);
}

/* "[start, end)" in the table's zone, for problems. */
static char *
span_text(const GateTable *t, TimestampTz start, TimestampTz end)
{
	return psprintf("[%s, %s)", period_format_local(t->periods.zone, start), period_format_local(t->periods.zone, end));
}

/*
 * The problem with the catalog view, if any: readers must find the
 * partition, and find it at this generation's location (by registration
 * or by a projection whose range covers the period).
 */
static void
catalog_problem(const Manifest *m, const GatePeriod *p, char **row, ProblemList *problems)
{
	if (strcmp(row[CAT_SOURCE], "none") == 0)
		problem_add(problems, "catalog_mismatch", NULL,
					psprintf("Partition \"%s\" of \"%s\" is neither registered nor projected, so no reader can find "
							 "it; register it with finalize.register_partition(%s, %s, %s, period_start => ...) or "
							 "declare a projection.",
							 m->partition, m->table, quote_literal_cstr(m->table), quote_literal_cstr(m->partition),
							 quote_literal_cstr(m->prefix)));
	else if (strcmp(row[CAT_SOURCE], "registration") == 0)
	{
		if (strcmp(location_with_slash(row[CAT_LOCATION]), m->prefix) != 0)
			problem_add(problems, "catalog_mismatch", NULL,
						psprintf("The catalog registers partition \"%s\" at \"%s\" (by %s at %s), not at this "
								 "generation's location \"%s\": readers would still read another generation. "
								 "Register the new location in the same transaction as the release.",
								 m->partition, row[CAT_LOCATION], row[CAT_REGISTERED_BY], row[CAT_REGISTERED_AT],
								 m->prefix));
	}
	else if (!p->known)
		;						/* no_period says it: a projection places periods */
	else if (row[CAT_IN_RANGE] == NULL || strcmp(row[CAT_IN_RANGE], "t") != 0)
		problem_add(problems, "projection_gap", NULL,
					psprintf("The projection's range [%s, %s) omits this partition's period (starting %s), so "
							 "no reader sees it; extend it with finalize.set_projection().",
							 row[CAT_RANGE_START], row[CAT_RANGE_END], timestamptz_to_str(p->start)));
	else if (strcmp(location_with_slash(row[CAT_LOCATION]), m->prefix) != 0)
		problem_add(problems, "catalog_mismatch", NULL,
					psprintf("The projection places this partition at \"%s\", not at this generation's location "
							 "\"%s\".", row[CAT_LOCATION], m->prefix));
}

/*
 * The periods the release holds: the manifest's, else those registered
 * with the partition. A manifest and a registration that disagree are a
 * catalog_mismatch (readers were told the partition holds other periods);
 * periods known nowhere are no_period.
 */
static void
resolve_period(const Manifest *m, const GateTable *t, ProblemList *problems, GatePeriod *p)
{
	TimestampTz reg_start;
	TimestampTz reg_end;
	bool		registered = registered_period(m, t->table_id, &reg_start, &reg_end);

	p->known = m->has_period;
	if (m->has_period)
	{
		p->start = m->period_start;
		p->end = m->period_end;
		if (registered && (reg_start != p->start || reg_end != p->end))
			problem_add(problems, "catalog_mismatch", NULL,
						psprintf("The catalog registers partition \"%s\" as holding the periods %s, but the manifest "
								 "says %s; register the partition again with the periods it holds, or fix the "
								 "manifest.", m->partition, span_text(t, reg_start, reg_end),
								 span_text(t, p->start, p->end)));
	}
	else if (registered)
	{
		p->known = true;
		p->start = reg_start;
		p->end = reg_end;
	}
	else
		problem_add(problems, "no_period", NULL,
					psprintf("Neither the manifest nor the catalog says which periods partition \"%s\" of \"%s\" "
							 "holds, so whether they are final cannot be checked. Give \"period_start\" (and "
							 "\"period_end\" for several periods) in the manifest, or register the partition "
							 "with them: finalize.register_partition(%s, %s, %s, period_start => ...).",
							 m->partition, m->table, quote_literal_cstr(m->table), quote_literal_cstr(m->partition),
							 quote_literal_cstr(m->prefix)));
}

/*
 * Reads the catalog view of the partition (checked against the latest
 * snapshot where the transaction's own could be stale) and adds its
 * problem; the view as JSON text, for the report.
 */
static char *
check_catalog(const Manifest *m, const GatePeriod *p, PartitionArgs *a, ProblemList *problems)
{
	char	  **row = query_row(GATE_CATALOG_SQL, 4, a->types, a->values, a->nulls, CAT_NCOLS);

	if (row[CAT_CATALOG] == NULL)
		elog(ERROR, "could not read the catalog view of partition \"%s\"", m->partition);
	if (IsolationUsesXactSnapshot())
		check_catalog_unchanged(m, row[CAT_CATALOG], a);
	catalog_problem(m, p, row, problems);
	return row[CAT_CATALOG];
}

/* The columns of the CDC facts query, by position. */
enum
{
	FACT_FACTS, FACT_IS_FINAL, FACT_COVERED, FACT_EXACT, FACT_CHANGES, FACT_STRADDLING, FACT_REASON,
	FACT_NCOLS
};

/*
 * An intentionally empty partition with nothing listed is released only
 * when the CDC facts confirm no change was committed in its periods.
 */
static void
empty_problem(char **f, ProblemList *problems)
{
	if (f[FACT_COVERED] == NULL || strcmp(f[FACT_COVERED], "t") != 0)
		problem_add(problems, "empty_location", NULL,
					psprintf("The manifest says the partition is empty, but the CDC facts do not cover its "
							 "periods (tracking began later, or the facts were lost or expired), so that "
							 "cannot be confirmed."));
	else if (strcmp(f[FACT_CHANGES], "0") != 0)
		problem_add(problems, "empty_location", NULL,
					psprintf("The manifest says the partition is empty, but the CDC facts record %s change(s) "
							 "committed in its periods%s, so it cannot be empty.", f[FACT_CHANGES],
							 strcmp(f[FACT_EXACT], "t") == 0 ? "" : " (ranges that straddle their boundaries may hold some)"));
	else if (strcmp(f[FACT_EXACT], "t") != 0 && strcmp(f[FACT_STRADDLING], "0") == 0)
		problem_add(problems, "empty_location", NULL,
					psprintf("The manifest says the partition is empty, but its periods are not final yet, so rows "
							 "may still arrive in them and that cannot be confirmed."));
	else if (strcmp(f[FACT_EXACT], "t") != 0)
		problem_add(problems, "empty_location", NULL,
					psprintf("The manifest says the partition is empty, but %s CDC range(s) with changes "
							 "straddle its boundaries, so that cannot be confirmed.", f[FACT_STRADDLING]));
}

/*
 * Adds the late_data problem of an event-time table's partition whose
 * periods received late rows after its previous release, unless the
 * manifest's built_at says its data was read after the last of them (on
 * a sharded table, the late rows of the partition's shard, or of all).
 */
static void
late_data_problem(const Manifest *m, const GateTable *t, const GatePeriod *p, ProblemList *problems)
{
	Oid			types[6] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[6] = {CStringGetTextDatum(m->table), CStringGetTextDatum(m->partition),
		TimestampTzGetDatum(p->start), TimestampTzGetDatum(p->end), TimestampTzGetDatum(m->built_at),
	t->shard ? CStringGetTextDatum(t->shard) : (Datum) 0};
	char		nulls[6] = {' ', ' ', ' ', ' ', m->has_built_at ? ' ' : 'n', t->shard ? ' ' : 'n'};
	char	  **why;

	why = query_row("SELECT " FINALIZE_INTERNAL_SCHEMA ".late_data_problem($1, $2, $3, $4, $5, $6)", 6, types, values, nulls,
					1);
	if (why[0] != NULL)
		problem_add(problems, "late_data", NULL, why[0]);
}

/*
 * Reads what the CDC facts of the table whose verdict decides (a shard's,
 * for a shard's partition) say about the periods and adds their problems:
 * a period that is not final yet (with the verdict's reason for the first
 * one), an emptiness they do not confirm. The facts as JSON text, for the
 * report.
 */
static char *
check_period_facts(const Manifest *m, const GateTable *t, const GatePeriod *p, int64 listed,
				   ProblemList *problems)
{
	Oid			types[3] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[3] = {CStringGetTextDatum(t->verdict_table), TimestampTzGetDatum(p->start),
	TimestampTzGetDatum(p->end)};
	char	  **f;

	f = query_row("SELECT x.facts, x.is_final, x.covered, x.exact, x.changes, x.straddling_ranges, "
				  "x.not_final_reason FROM " FINALIZE_INTERNAL_SCHEMA ".period_facts($1, $2, $3) AS x", 3, types, values,
				  NULL, FACT_NCOLS);
	/* No answer is no proof: only a true is_final passes. */
	if (f[FACT_IS_FINAL] == NULL || strcmp(f[FACT_IS_FINAL], "t") != 0)
		problem_add(problems, "not_finalized", NULL,
					f[FACT_REASON] ? f[FACT_REASON] : pstrdup("The period is not final yet."));
	late_data_problem(m, t, p, problems);
	if (listed == 0 && m->empty)
		empty_problem(f, problems);
	return f[FACT_FACTS];
}

/* The columns of the location sharers query, by position. */
enum
{
	SHARE_CODE, SHARE_ENTRY, SHARE_HOLDS, SHARE_START, SHARE_END, SHARE_SCOPE, SHARE_SHARDED, SHARE_NCOLS
};

/*
 * Adds the problems of a location that the catalog shares with what this
 * release does not check (_location_sharers): another shard's or every
 * shard's partition placed at or inside it, when the release is one
 * shard's (unknown_shard), or other periods (catalog_mismatch). Its
 * listing would be released whole, on the verdict of one shard and of the
 * manifest's periods.
 */
static void
location_sharers_problems(const Manifest *m, const GateTable *t, const GatePeriod *p, ProblemList *problems)
{
	Oid			types[6] = {INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[6] = {Int64GetDatum(t->table_id), CStringGetTextDatum(m->partition),
		CStringGetTextDatum(m->prefix), TimestampTzGetDatum(p->start), TimestampTzGetDatum(p->end),
	t->shard ? CStringGetTextDatum(t->shard) : (Datum) 0};
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', t->shard ? ' ' : 'n'};

	if (SPI_execute_with_args("SELECT s.code, s.entry, s.holds, s.entry_start, s.entry_end, s.scope, "
							  "s.sharded_table FROM " FINALIZE_INTERNAL_SCHEMA ".location_sharers($1, $2, $3, $4, $5, $6) AS s",
							  6, types, values, nulls, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read what else the catalog places at \"%s\"", m->prefix);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *v[SHARE_NCOLS];
		bool		null_start;
		bool		null_end;
		TimestampTz start = DatumGetTimestampTz(SPI_getbinval(row, desc, SHARE_START + 1, &null_start));
		TimestampTz end = DatumGetTimestampTz(SPI_getbinval(row, desc, SHARE_END + 1, &null_end));

		for (int c = 0; c < SHARE_NCOLS; c++)
			v[c] = SPI_getvalue(row, desc, c + 1);
		if (strcmp(v[SHARE_CODE], "unknown_shard") == 0)
			problem_add(problems, "unknown_shard", NULL,
						psprintf("Partition \"%s\" of \"%s\" is released as shard \"%s\"'s alone, but the catalog "
								 "%s, at or inside this generation's location \"%s\", which therefore holds %s as "
								 "well: shard \"%s\"'s verdict cannot release them. Give each shard's partitions "
								 "locations of their own (a projection of \"%s\" with {shard}, or a registration "
								 "per shard), or release the partition of \"%s\" without a shard once every shard "
								 "is final.",
								 m->partition, m->table, v[SHARE_SCOPE], v[SHARE_ENTRY], m->prefix,
								 v[SHARE_HOLDS] ? psprintf("shard \"%s\"'s rows", v[SHARE_HOLDS])
								 : pstrdup("every shard's rows"),
								 v[SHARE_SCOPE], v[SHARE_SHARDED], v[SHARE_SHARDED]));
		else
			problem_add(problems, "catalog_mismatch", NULL,
						psprintf("Partition \"%s\" of \"%s\" holds the periods %s, but the catalog %s, at or "
								 "inside this generation's location \"%s\", which therefore holds %s as well, "
								 "whose finality this release does not check. Give \"period_end\" (or register "
								 "the partition with the periods) so that it holds every period its location "
								 "does, or give each partition a location of its own.",
								 m->partition, m->table, span_text(t, p->start, p->end), v[SHARE_ENTRY], m->prefix,
								 null_start || null_end ? pstrdup("periods it does not name")
								 : psprintf("the periods %s", span_text(t, start, end))));
	}
}

/*
 * Locks the partition, then resolves the periods it holds and checks the
 * catalog view and the CDC facts, in that order, adding every problem
 * found after those of the manifest against the listing (compared while
 * it was listed, as the caller; listed is how many objects the store
 * had). Runs as the owner, inside the caller's SPI connection. Returns the
 * catalog view and the facts (NULL without a period) as JSON text, and
 * the periods checked.
 */
void
check_partition(const Manifest *m, const GateTable *t, int64 listed, ProblemList *problems,
				const char **catalog_json, const char **facts_json, GatePeriod *period)
{
	PartitionArgs a;
	GatePeriod	none = {0};

	partition_args(m, t, &none, &a);
	(void) query_row("SELECT " FINALIZE_INTERNAL_SCHEMA ".lock_partition($1, $2)", 2, a.types, a.values, NULL, 1);

	/*
	 * The periods the release holds, then the catalog view of the
	 * partition; one in another catalog comes with its periods (bound to
	 * the table's by gate_table_lookup) and its view (*catalog_json, given).
	 */
	if (m->external_catalog)
	{
		period->known = m->has_period;
		period->start = m->period_start;
		period->end = m->period_end;
	}
	else
	{
		resolve_period(m, t, problems, period);
		partition_args(m, t, period, &a);
		*catalog_json = check_catalog(m, period, &a, problems);
	}
	/* A shard the sharded table does not have has no verdict to check against. */
	if (t->shard_problem != NULL)
		problem_add(problems, "unknown_shard", NULL, t->shard_problem);
	/* Nor may its location hold what another shard or other periods hold. */
	if (!m->external_catalog && period->known)
		location_sharers_problems(m, t, period, problems);
	/* What the CDC facts say about those periods. */
	*facts_json = period->known && t->verdict_table != NULL ?
		check_period_facts(m, t, period, listed, problems) : NULL;
	if (listed == 0 && !m->empty)
		problem_add(problems, "empty_location", NULL,
					psprintf("There are no objects under \"%s\": an empty location is never a release by itself. "
							 "A partition that is empty on purpose says \"empty\": true in its manifest.", m->prefix));
}
