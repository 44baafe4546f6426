/*
 * release_checks.c
 *     What the gate checks as the extension's owner before a release.
 *
 * A partition is released only when its manifest, the store's listing and
 * the catalog agree: the manifest's files must be what the store holds,
 * the catalog must send readers to this generation's location, the CDC
 * facts must say the period is final, and an empty location must be meant
 * (and confirmed by the facts). Each disagreement is a problem, in words a
 * publisher can act on; the partition's lock comes first, so a
 * registration cannot change the catalog view between the check and the
 * release.
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

#include "common/settings.h"
#include "gate/release_checks.h"

/* The catalog view of a partition, as the gate reads it. */
#define GATE_CATALOG_SQL \
	"SELECT c.catalog, c.source, c.location, c.in_range, c.range_start, c.range_end, " \
	"c.registered_at, c.registered_by FROM " FINALIZE_SCHEMA "._gate_catalog($1, $2, $3) AS c"

/* The columns of GATE_CATALOG_SQL, by position. */
enum
{
	CAT_CATALOG, CAT_SOURCE, CAT_LOCATION, CAT_IN_RANGE, CAT_RANGE_START, CAT_RANGE_END,
	CAT_REGISTERED_AT, CAT_REGISTERED_BY, CAT_NCOLS
};

/* The arguments that name a partition: table id, partition, period start. */
typedef struct PartitionArgs
{
	Oid			types[3];
	Datum		values[3];
	char		nulls[3];
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
		{
			char	   *v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1);

			out[i] = v ? MemoryContextStrdup(CurrentMemoryContext, v) : NULL;
		}
	return out;
}

/*
 * The id of the manifest's table, or the not-tracked error: looked up
 * first, so an untracked table fails before anything goes over the network.
 */
int64
tracked_table_id(const Manifest *m)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int64		id;

	SPI_connect();
	values[0] = CStringGetTextDatum(m->table);
	id = pg_strtoint64(query_row("SELECT " FINALIZE_SCHEMA "._tracked_id($1)", 1, types, values, NULL, 1)[0]);
	SPI_finish();
	return id;
}

/* Fills the arguments shared by the lock and the catalog view. */
static void
partition_args(const Manifest *m, int64 table_id, PartitionArgs *a)
{
	a->types[0] = INT8OID;
	a->types[1] = TEXTOID;
	a->types[2] = TIMESTAMPTZOID;
	a->values[0] = Int64GetDatum(table_id);
	a->values[1] = CStringGetTextDatum(m->partition);
	a->values[2] = m->has_period ? TimestampTzGetDatum(m->period_start) : (Datum) 0;
	a->nulls[0] = ' ';
	a->nulls[1] = ' ';
	a->nulls[2] = m->has_period ? ' ' : 'n';
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
	SPIPlanPtr	plan = SPI_prepare(GATE_CATALOG_SQL, 3, a->types);
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

/*
 * The problem with the catalog view, if any: readers must find the
 * partition, and find it at this generation's location (by registration
 * or by a projection whose range covers the period).
 */
static void
catalog_problem(const Manifest *m, char **row, ProblemList *problems)
{
	if (strcmp(row[CAT_SOURCE], "none") == 0)
		problem_add(problems, "catalog_mismatch", NULL,
					psprintf("Partition \"%s\" of \"%s\" is neither registered nor projected, so no reader can find "
							 "it; register it with finalize.register_partition(%s, %s, %s) or declare a projection.",
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
	else if (row[CAT_LOCATION] == NULL)
		problem_add(problems, "catalog_mismatch", NULL,
					psprintf("The table uses a projection (%s), but the manifest has no period_start to project; "
							 "add period_start.", row[CAT_CATALOG]));
	else if (row[CAT_IN_RANGE] == NULL || strcmp(row[CAT_IN_RANGE], "t") != 0)
		problem_add(problems, "projection_gap", NULL,
					psprintf("The projection's range [%s, %s) omits this partition's period (starting %s), so "
							 "no reader sees it; extend it with finalize.set_projection().",
							 row[CAT_RANGE_START], row[CAT_RANGE_END], timestamptz_to_str(m->period_start)));
	else if (strcmp(location_with_slash(row[CAT_LOCATION]), m->prefix) != 0)
		problem_add(problems, "catalog_mismatch", NULL,
					psprintf("The projection places this partition at \"%s\", not at this generation's location "
							 "\"%s\".", row[CAT_LOCATION], m->prefix));
}

/*
 * Reads the catalog view of the partition (checked against the latest
 * snapshot where the transaction's own could be stale) and adds its
 * problem; the view as JSON text, for the report.
 */
static char *
check_catalog(const Manifest *m, PartitionArgs *a, ProblemList *problems)
{
	char	  **row = query_row(GATE_CATALOG_SQL, 3, a->types, a->values, a->nulls, CAT_NCOLS);

	if (row[CAT_CATALOG] == NULL)
		elog(ERROR, "could not read the catalog view of partition \"%s\"", m->partition);
	if (IsolationUsesXactSnapshot())
		check_catalog_unchanged(m, row[CAT_CATALOG], a);
	catalog_problem(m, row, problems);
	return row[CAT_CATALOG];
}

/* The columns of the CDC facts query, by position. */
enum
{
	FACT_FACTS, FACT_IS_FINAL, FACT_COVERED, FACT_EXACT, FACT_CHANGES, FACT_STRADDLING, FACT_NCOLS
};

/*
 * An intentionally empty partition with nothing listed is released only
 * when the CDC facts confirm no change was committed in its period.
 */
static void
empty_problem(char **f, ProblemList *problems)
{
	if (f[FACT_COVERED] == NULL || strcmp(f[FACT_COVERED], "t") != 0)
		problem_add(problems, "empty_location", NULL,
					psprintf("The manifest says the partition is empty, but the CDC facts do not cover its "
							 "period (tracking began later, or the facts were lost or expired), so that "
							 "cannot be confirmed."));
	else if (strcmp(f[FACT_CHANGES], "0") != 0)
		problem_add(problems, "empty_location", NULL,
					psprintf("The manifest says the partition is empty, but the CDC facts record %s change(s) "
							 "committed in its period%s, so it cannot be empty.", f[FACT_CHANGES],
							 strcmp(f[FACT_EXACT], "t") == 0 ? "" : " (ranges that straddle its boundaries may hold some)"));
	else if (strcmp(f[FACT_EXACT], "t") != 0 && strcmp(f[FACT_STRADDLING], "0") == 0)
		problem_add(problems, "empty_location", NULL,
					psprintf("The manifest says the partition is empty, but its period is not final yet, so rows "
							 "may still arrive in it and that cannot be confirmed."));
	else if (strcmp(f[FACT_EXACT], "t") != 0)
		problem_add(problems, "empty_location", NULL,
					psprintf("The manifest says the partition is empty, but %s CDC range(s) with changes "
							 "straddle its boundaries, so that cannot be confirmed.", f[FACT_STRADDLING]));
}

/*
 * Adds the late_data problem of an event-time table's partition whose
 * period received late rows after its previous release, unless the
 * manifest's built_at says its data was read after the last of them.
 */
static void
late_data_problem(const Manifest *m, ProblemList *problems)
{
	Oid			types[4] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[4] = {CStringGetTextDatum(m->table), CStringGetTextDatum(m->partition),
	TimestampTzGetDatum(m->period_start), TimestampTzGetDatum(m->built_at)};
	char		nulls[4] = {' ', ' ', ' ', m->has_built_at ? ' ' : 'n'};
	char	  **why;

	/*
	 * A catalog older than this library (before ALTER EXTENSION UPDATE) has
	 * no event-time tables, so none of its partitions can have late data.
	 */
	why = query_row("SELECT pg_catalog.to_regprocedure('" FINALIZE_SCHEMA "._late_data_problem(text, text, "
					"timestamptz, timestamptz)') IS NOT NULL", 0, NULL, NULL, NULL, 1);
	if (why[0] == NULL || strcmp(why[0], "t") != 0)
		return;
	why = query_row("SELECT " FINALIZE_SCHEMA "._late_data_problem($1, $2, $3, $4)", 4, types, values, nulls, 1);
	if (why[0] != NULL)
		problem_add(problems, "late_data", NULL, why[0]);
}

/*
 * Reads what the CDC facts say about the manifest's period and adds their
 * problems: a period that is not final yet (with the verdict's reason), an
 * emptiness they do not confirm. The facts as JSON text, for the report.
 */
static char *
check_period_facts(const Manifest *m, int64 listed, ProblemList *problems)
{
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2] = {CStringGetTextDatum(m->table), TimestampTzGetDatum(m->period_start)};
	char	  **f;

	f = query_row("SELECT x.facts, x.is_final, x.covered, x.exact, x.changes, x.straddling_ranges "
				  "FROM " FINALIZE_SCHEMA "._period_facts($1, $2) AS x", 2, types, values, NULL, FACT_NCOLS);
	if (f[FACT_IS_FINAL] == NULL || strcmp(f[FACT_IS_FINAL], "t") != 0)
	{
		char	  **why = query_row("SELECT v.reason FROM " FINALIZE_SCHEMA ".explain_verdict($1, $2) AS v",
									2, types, values, NULL, 1);

		problem_add(problems, "not_finalized", NULL, why[0] ? why[0] : pstrdup("The period is not final yet."));
	}
	late_data_problem(m, problems);
	if (listed == 0 && m->empty)
		empty_problem(f, problems);
	return f[FACT_FACTS];
}

/*
 * Locks the partition, then checks the catalog view and the CDC facts, in
 * that order, adding every problem found after those of the manifest
 * against the listing (compared while it was listed, as the caller; listed
 * is how many objects the store had). Runs as the owner, inside the
 * caller's SPI connection. Returns the catalog view and the facts (NULL
 * without a period) as JSON text.
 */
void
check_partition(const Manifest *m, int64 table_id, int64 listed, ProblemList *problems,
				const char **catalog_json, const char **facts_json)
{
	PartitionArgs a;

	partition_args(m, table_id, &a);
	(void) query_row("SELECT " FINALIZE_SCHEMA "._lock_partition($1, $2)", 2, a.types, a.values, NULL, 1);

	/* The catalog view of the partition. */
	*catalog_json = check_catalog(m, &a, problems);
	/* What the CDC facts say about the period. */
	*facts_json = m->has_period ? check_period_facts(m, listed, problems) : NULL;
	if (listed == 0 && !m->empty)
		problem_add(problems, "empty_location", NULL,
					psprintf("There are no objects under \"%s\": an empty location is never a release by itself. "
							 "A partition that is empty on purpose says \"empty\": true in its manifest.", m->prefix));
}
