/*
 * record_batch.c
 *     Records a whole cycle's writes: the plain ranges of all tables at once
 *     through finalize_internal.record_ranges, then every other write one table at
 *     a time (record.c).
 *
 * A cycle over thousands of tables cannot afford a subtransaction and a
 * dozen SPI statements per table. Most tables, most cycles, have one range
 * that continues their facts; those go in one statement per step, in one
 * subtransaction. _record_ranges takes only what its conditions prove plain
 * and hands back the rest, which record_write records with every check of
 * _record_range; if the batch fails as a whole (an error, a lock), every
 * table of it is recorded one by one, so a failure still costs only the
 * table that causes it.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/settings.h"
#include "worker/record.h"
#include "worker/worker_state.h"

/*
 * Tables recorded one by one in one transaction: each may take two
 * subtransactions (its write, then its condition), and PostgreSQL caches
 * 64 subtransaction xids per backend before snapshots overflow.
 */
#define ONE_BY_ONE_PER_TRANSACTION 30

/* _record_ranges and _held_conditions are planned once per process. */
static SPIPlanPtr record_ranges_plan = NULL;
static SPIPlanPtr held_conditions_plan = NULL;

/* The plain writes of a cycle, as the columns of _record_ranges. */
typedef struct RangeBatch
{
	int			n;
	TableWrite **writes;		/* the writes, in the order of the columns */
	Datum	   *table_ids;
	Datum	   *starts;
	Datum	   *ends;
	Datum	   *end_times;
	Datum	   *inserts;
	Datum	   *updates;
	Datum	   *deletes;
	Datum	   *first_times;
	Datum	   *last_times;
	bool	   *times_null;		/* first and last times: both or neither */
	Datum	   *instances;
	int64	   *left;			/* table ids handed back */
	int			nleft;
	/* writes that clear a condition (most tables, most cycles) */
	int			nclear;
	Datum	   *clear_ids;
	int64	   *held;			/* of those, tables with something to clear */
	int			nheld;
	int64		clock_tolerance;	/* the source's (every write's) */
} RangeBatch;

/*
 * Whether a write is one range that continues its table's facts with
 * nothing else to record: no event, no detail, no event-time facts, no
 * clock that went back, the instance it reads being the one it follows.
 * Anything else takes the one-by-one way, whose functions know what to do
 * with it.
 */
static bool
plain_range(const TableWrite *w)
{
	const RangeFacts *f = &w->facts[0];

	return w->kind == WRITE_RANGES && w->nfacts == 1 && f->has_start && f->event == NULL &&
		w->clock_step == CLOCK_STEADY &&
		f->detail == NULL && f->event_periods == NULL && f->sketch == NULL && !f->has_event_span &&
		f->capture_instance != NULL && w->capture_instance != NULL &&
		strcmp(f->capture_instance, w->capture_instance) == 0;
}

/* A one-dimensional array of n datums of a type, NULLs where nulls says. */
static Datum
array_of(Datum *values, bool *nulls, int n, Oid type)
{
	int16		len;
	bool		byval;
	char		align;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	switch (type)
	{
		case TEXTOID:
			len = -1, byval = false, align = TYPALIGN_INT;
			break;
		default:				/* int8, timestamptz */
			len = 8, byval = FLOAT8PASSBYVAL, align = TYPALIGN_DOUBLE;
			break;
	}
	return PointerGetDatum(construct_md_array(values, nulls, 1, dims, lbs, type, len, byval, align));
}

/* The int8 values of the first column of SPI's result. */
static int64 *
result_ids(int *n)
{
	int64	   *ids = palloc(sizeof(int64) * (SPI_processed + 1));

	*n = 0;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			ids[(*n)++] = DatumGetInt64(d);
	}
	return ids;
}

/*
 * Of the tables whose condition is to be cleared, asks which have one (or
 * an incident) at all: only those need _set_condition's write.
 */
static void
find_held(RangeBatch *b)
{
	Datum		values[1];
	int			rc;

	if (held_conditions_plan == NULL)
	{
		Oid			types[1] = {INT8ARRAYOID};
		SPIPlanPtr	plan = SPI_prepare("SELECT t FROM " FINALIZE_INTERNAL_SCHEMA ".held_conditions($1) t", 1, types);

		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "could not prepare finalize_internal.held_conditions: %s", SPI_result_code_string(SPI_result));
		held_conditions_plan = plan;
	}
	values[0] = array_of(b->clear_ids, NULL, b->nclear, INT8OID);
	rc = SPI_execute_plan(held_conditions_plan, values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "finalize_internal.held_conditions failed: %s", SPI_result_code_string(rc));
	b->held = result_ids(&b->nheld);
}

/*
 * Runs _record_ranges over the batch and _held_conditions over the clears
 * (inside subxact_try), and keeps what they hand back.
 */
static void
run_batch(void *arg)
{
	RangeBatch *b = (RangeBatch *) arg;
	Datum		values[11];
	int			rc;

	if (b->nclear > 0)
		find_held(b);
	if (b->n == 0)
		return;

	if (record_ranges_plan == NULL)
	{
		Oid			types[11] = {INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID,
			INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, TEXTARRAYOID,
		INTERVALOID};
		SPIPlanPtr	plan = SPI_prepare("SELECT t FROM " FINALIZE_INTERNAL_SCHEMA ".record_ranges($1, $2, $3, $4, $5, $6, "
									   "$7, $8, $9, $10, $11) t", 11, types);

		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "could not prepare finalize_internal.record_ranges: %s", SPI_result_code_string(SPI_result));
		record_ranges_plan = plan;
	}
	values[0] = array_of(b->table_ids, NULL, b->n, INT8OID);
	values[1] = array_of(b->starts, NULL, b->n, TEXTOID);
	values[2] = array_of(b->ends, NULL, b->n, TEXTOID);
	values[3] = array_of(b->end_times, NULL, b->n, TIMESTAMPTZOID);
	values[4] = array_of(b->inserts, NULL, b->n, INT8OID);
	values[5] = array_of(b->updates, NULL, b->n, INT8OID);
	values[6] = array_of(b->deletes, NULL, b->n, INT8OID);
	values[7] = array_of(b->first_times, b->times_null, b->n, TIMESTAMPTZOID);
	values[8] = array_of(b->last_times, b->times_null, b->n, TIMESTAMPTZOID);
	values[9] = array_of(b->instances, NULL, b->n, TEXTOID);
	values[10] = db_usecs_datum(b->clock_tolerance);

	rc = SPI_execute_plan(record_ranges_plan, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "finalize_internal.record_ranges failed: %s", SPI_result_code_string(rc));
	b->left = result_ids(&b->nleft);
}

/* Orders table ids, for finding the writes handed back. */
static int
cmp_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/*
 * Gathers the plain ranges of a cycle's writes into the batch's columns,
 * and the tables whose condition is to be cleared (arrays for n writes, in
 * the current memory context).
 */
static void
gather_batch(TableWrite *writes, int n, RangeBatch *b)
{
	b->writes = palloc(sizeof(TableWrite *) * (n + 1));
	b->table_ids = palloc(sizeof(Datum) * (n + 1));
	b->starts = palloc(sizeof(Datum) * (n + 1));
	b->ends = palloc(sizeof(Datum) * (n + 1));
	b->end_times = palloc(sizeof(Datum) * (n + 1));
	b->inserts = palloc(sizeof(Datum) * (n + 1));
	b->updates = palloc(sizeof(Datum) * (n + 1));
	b->deletes = palloc(sizeof(Datum) * (n + 1));
	b->first_times = palloc(sizeof(Datum) * (n + 1));
	b->last_times = palloc(sizeof(Datum) * (n + 1));
	b->times_null = palloc(sizeof(bool) * (n + 1));
	b->instances = palloc(sizeof(Datum) * (n + 1));
	b->clear_ids = palloc(sizeof(Datum) * (n + 1));
	for (int i = 0; i < n; i++)
	{
		const RangeFacts *f = &writes[i].facts[0];
		int			k = b->n;

		if (writes[i].kind == WRITE_CONDITION && writes[i].condition == COND_NONE)
		{
			b->clear_ids[b->nclear++] = Int64GetDatum(writes[i].table->table_id);
			continue;
		}
		if (!plain_range(&writes[i]))
			continue;
		b->writes[k] = &writes[i];
		b->clock_tolerance = writes[i].clock_tolerance;
		b->table_ids[k] = Int64GetDatum(f->table_id);
		b->starts[k] = db_lsn_datum(&f->start);
		b->ends[k] = db_lsn_datum(&f->end);
		b->end_times[k] = TimestampTzGetDatum(f->end_time);
		b->inserts[k] = Int64GetDatum(f->inserts);
		b->updates[k] = Int64GetDatum(f->updates);
		b->deletes[k] = Int64GetDatum(f->deletes);
		b->times_null[k] = !f->has_rows;
		b->first_times[k] = f->has_rows ? TimestampTzGetDatum(f->first_time) : (Datum) 0;
		b->last_times[k] = f->has_rows ? TimestampTzGetDatum(f->last_time) : (Datum) 0;
		b->instances[k] = CStringGetTextDatum(f->capture_instance);
		b->n++;
	}
}

/*
 * Marks done what the batch recorded: its ranges, unless handed back, and
 * the conditions to clear where there was none to clear.
 */
static void
mark_batch_done(const RangeBatch *b, TableWrite *writes, int n, bool *done)
{
	/* Taken by the batch, unless handed back. */
	if (b->nleft > 0)
		qsort(b->left, b->nleft, sizeof(int64), cmp_int64);
	for (int k = 0; k < b->n; k++)
	{
		int64		id = b->writes[k]->facts[0].table_id;

		if (b->nleft == 0 || bsearch(&id, b->left, b->nleft, sizeof(int64), cmp_int64) == NULL)
			done[b->writes[k] - writes] = true;
	}
	/* A condition to clear where there is none needs no write. */
	if (b->nheld > 0)
		qsort(b->held, b->nheld, sizeof(int64), cmp_int64);
	for (int i = 0; i < n; i++)
		if (writes[i].kind == WRITE_CONDITION && writes[i].condition == COND_NONE &&
			(b->nheld == 0 || bsearch(&writes[i].table->table_id, b->held, b->nheld, sizeof(int64), cmp_int64) == NULL))
			done[i] = true;
}

/*
 * Records every write of a cycle in the current (write) transaction: the
 * plain ranges in one batch, every other write, and any the batch handed
 * back or could not record, one table at a time. False when a table's write
 * failed (the table got a condition instead).
 */
bool
record_writes(TableWrite *writes, int n)
{
	RangeBatch	b = {0};
	bool		all_recorded = true;
	/* outlives the commits of the one-by-one writes below */
	bool	   *done = MemoryContextAllocZero(db_caller_context(), sizeof(bool) * (n + 1));
	int			one_by_one = 0;
	ErrorData  *e;

	gather_batch(writes, n, &b);
	if ((b.n > 0 || b.nclear > 0) && subxact_try(run_batch, &b, &e))
		mark_batch_done(&b, writes, n, done);
	else if (b.n > 0 || b.nclear > 0)
	{
		/* at most one LOG every 10 minutes: a failure that persists is the same news each cycle */
		static TimestampTz last_logged = 0;
		TimestampTz now = GetCurrentTimestamp();
		bool		say = TimestampDifferenceExceeds(last_logged, now, 10 * 60 * 1000);

		if (say)
			last_logged = now;
		ereport(say ? LOG : DEBUG1,
				(errmsg("finalize records %d tables one by one this cycle: recording them at once failed: %s",
						b.n + b.nclear, e->message)));
	}

	for (int i = 0; i < n; i++)
	{
		if (done[i])
			continue;
		/*
		 * Commit every ONE_BY_ONE_PER_TRANSACTION tables: a committed
		 * subtransaction keeps its memory (its NOTIFY, its context) until
		 * the transaction ends, about 50 kB a table, and more than 64 of
		 * them with an xid make every other session's snapshots overflow
		 * to pg_subtrans. A first cycle over 10,000 tables held 500 MB.
		 * Each table's write is whole in one transaction either way.
		 */
		if (one_by_one > 0 && one_by_one % ONE_BY_ONE_PER_TRANSACTION == 0)
			db_commit_and_continue("finalize: recording facts");
		one_by_one++;
		if (!record_write(&writes[i]))
			all_recorded = false;
	}
	return all_recorded;
}
