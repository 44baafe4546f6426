/*
 * losses.c
 *     Which periods of a table a data loss holds, read from finalize's own
 *     tables in C: the rule of finalize_internal.loss_ackers, _ack_reach,
 *     _loss_blocks and _loss_cap, which are these functions in SQL too.
 *
 * A loss holds the periods it intersects, on the table that lost the data
 * and on every table built from it, until acknowledgements recorded after
 * it cover them on each table it must be acknowledged on: the table that
 * lost the data, and every table on a path from the table asked about to
 * it (that table included) with a required consumer declared before the
 * loss was acknowledged where it happened, whose job may have built those
 * periods from the incomplete data. The sensors ask only while a loss flag
 * of the table's lineage is set, under the snapshot their verdict was read
 * with, so that both describe one committed state; SQL asks under its
 * statement's. The rows are read through the indexes as catalog.c reads
 * them: no SPI, no plan, no privilege of the caller (EXECUTE on the
 * calling function is the whole permission, as for the verdict).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "core/period_zone.h"
#include "sensor/catalog_rels.h"
#include "sensor/losses.h"

PG_FUNCTION_INFO_V1(finalize_loss_blocks);
PG_FUNCTION_INFO_V1(finalize_loss_cap);

/* Tables of a lineage read at most (track_derived refuses cycles). */
#define LINEAGE_MAX 1024

/* An acknowledgement: the periods in [from, to) repaired, said at `at`. */
typedef struct Ack
{
	TimestampTz from;
	TimestampTz to;
	TimestampTz at;
} Ack;

/* A table of the lineage, with what was read of it so far. */
typedef struct LineageTable
{
	int64		table_id;
	bool		row_read;		/* its tracked_table row was looked for */
	bool		exists;			/* and found: periods are set */
	PeriodSpec	periods;
	bool		acks_read;		/* its acknowledgements were read */
	Ack		   *acks;			/* sorted by from */
	int			nacks;
} LineageTable;

/* A loss of a table of the lineage. */
typedef struct Loss
{
	int			lost;			/* the table that lost the data (index) */
	TimestampTz lost_from;
	TimestampTz lost_to;
	TimestampTz created_at;
} Loss;

/* A table a loss must be acknowledged on, with the loss's periods there. */
typedef struct Acker
{
	int			loss;			/* index into losses */
	int			table;			/* index into tables */
	TimestampTz span_from;
	TimestampTz span_to;
} Acker;

/* One question: the relations, the snapshot and what was read. */
typedef struct LossScan
{
	const SensorCatalog *c;
	Relation	rels[SENSOR_RELS];
	Snapshot	snapshot;
	LineageTable *tables;		/* [0]: the table asked about */
	int			ntables;
	int		   *edge_table;		/* derived_input: edge_table[i] is built */
	int		   *edge_input;		/* from edge_input[i] (indexes) */
	int			nedges;
	Loss	   *losses;
	int			nlosses;
	Acker	   *ackers;
	int			nackers;
} LossScan;

/* Room for one more element of an array of n, doubled when full. */
static void *
grow(void *array, int n, Size size)
{
	if (n == 0)
		return palloc(size * 8);
	if (n >= 8 && (n & (n - 1)) == 0)
		return repalloc(array, size * n * 2);
	return array;
}

/* The index of a table of the lineage, added if new. */
static int
lineage_index(LossScan *s, int64 table_id)
{
	for (int i = 0; i < s->ntables; i++)
		if (s->tables[i].table_id == table_id)
			return i;
	if (s->ntables == LINEAGE_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("table %lld is built from more than %d tables", (long long) s->tables[0].table_id,
						LINEAGE_MAX),
				 errdetail("Whether a data loss holds its periods cannot be told."),
				 errhint("Check finalize.derived_input: track_derived builds no lineage this long.")));
	s->tables = grow(s->tables, s->ntables, sizeof(LineageTable));
	memset(&s->tables[s->ntables], 0, sizeof(LineageTable));
	s->tables[s->ntables].table_id = table_id;
	return s->ntables++;
}

/*
 * Every table the table asked about is built from, transitively, and the
 * derived_input edges between them (finalize_internal.loss_ackers's "up"):
 * breadth first by derived_input's primary key.
 */
static void
read_lineage(LossScan *s, int64 table_id)
{
	Relation	di = s->rels[REL_DERIVED_INPUT];

	(void) lineage_index(s, table_id);
	for (int next = 0; di != NULL && next < s->ntables; next++)
	{
		SysScanDesc scan;
		ScanKeyData key;
		HeapTuple	tup;
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		ScanKeyInit(&key, s->c->di_table_id, BTEqualStrategyNumber, F_INT8EQ,
					Int64GetDatum(s->tables[next].table_id));
		scan = systable_beginscan(di, s->c->di_pkey, true, s->snapshot, 1, &key);
		while (HeapTupleIsValid(tup = systable_getnext(scan)))
		{
			int64		input = DatumGetInt64(heap_getattr(tup, s->c->di_input_id, RelationGetDescr(di), &isnull));
			int			in = lineage_index(s, input);

			s->edge_table = grow(s->edge_table, s->nedges, sizeof(int));
			s->edge_input = grow(s->edge_input, s->nedges, sizeof(int));
			s->edge_table[s->nedges] = next;
			s->edge_input[s->nedges++] = in;
		}
		systable_endscan(scan);
	}
}

/* Adds the losses of table t of the lineage (by loss_table_idx). */
static void
read_losses(LossScan *s, int t)
{
	const SensorCatalog *c = s->c;
	Relation	rel = s->rels[REL_LOSS];
	TupleDesc	desc = RelationGetDescr(rel);
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	bool		isnull;

	ScanKeyInit(&key, c->loss_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(s->tables[t].table_id));
	scan = systable_beginscan(rel, c->loss_table_idx, true, s->snapshot, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Loss	   *l;

		CHECK_FOR_INTERRUPTS();
		s->losses = grow(s->losses, s->nlosses, sizeof(Loss));
		l = &s->losses[s->nlosses++];
		l->lost = t;
		/* All NOT NULL in the catalog. */
		l->lost_from = DatumGetTimestampTz(heap_getattr(tup, c->loss_lost_from, desc, &isnull));
		l->lost_to = DatumGetTimestampTz(heap_getattr(tup, c->loss_lost_to, desc, &isnull));
		l->created_at = DatumGetTimestampTz(heap_getattr(tup, c->loss_created_at, desc, &isnull));
	}
	systable_endscan(scan);
}

/* Table t of the lineage with its tracked_table row read (by primary key). */
static const LineageTable *
table_row(LossScan *s, int t)
{
	LineageTable *lt = &s->tables[t];
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;

	if (lt->row_read)
		return lt;
	ScanKeyInit(&key, s->c->tt_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(lt->table_id));
	scan = systable_beginscan(s->rels[REL_TRACKED_TABLE], s->c->tt_pkey, true, s->snapshot, 1, &key);
	tup = systable_getnext(scan);
	lt->exists = HeapTupleIsValid(tup);
	if (lt->exists)
		catalog_table_periods(s->c, s->rels[REL_TRACKED_TABLE], tup, &lt->periods);
	systable_endscan(scan);
	lt->row_read = true;
	return lt;
}

/* Orders acknowledgements by the start of what they cover. */
static int
ack_cmp(const void *a, const void *b)
{
	TimestampTz x = ((const Ack *) a)->from;
	TimestampTz y = ((const Ack *) b)->from;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/* The acknowledgements of table t of the lineage, read once (loss_ack_table_idx). */
static const LineageTable *
table_acks(LossScan *s, int t)
{
	LineageTable *lt = &s->tables[t];
	Relation	rel = s->rels[REL_LOSS_ACK];
	TupleDesc	desc = RelationGetDescr(rel);
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	bool		isnull;

	if (lt->acks_read)
		return lt;
	ScanKeyInit(&key, s->c->ack_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(lt->table_id));
	scan = systable_beginscan(rel, s->c->ack_table_idx, true, s->snapshot, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Ack		   *a;

		CHECK_FOR_INTERRUPTS();
		lt->acks = grow(lt->acks, lt->nacks, sizeof(Ack));
		a = &lt->acks[lt->nacks++];
		a->from = DatumGetTimestampTz(heap_getattr(tup, s->c->ack_period_from, desc, &isnull));
		a->to = DatumGetTimestampTz(heap_getattr(tup, s->c->ack_period_to, desc, &isnull));
		a->at = DatumGetTimestampTz(heap_getattr(tup, s->c->ack_acknowledged_at, desc, &isnull));
	}
	systable_endscan(scan);
	if (lt->nacks > 1)
		qsort(lt->acks, lt->nacks, sizeof(Ack), ack_cmp);
	lt->acks_read = true;
	return lt;
}

/*
 * How far from s the acknowledgements of table t recorded after since
 * reach without a gap, adjacent or overlapping ones joined: at least e
 * once they cover every instant of [s, e) (finalize_internal.ack_reach). One sweep
 * in order of their starts: the ones starting at or before the reach are
 * all that can extend it.
 */
static TimestampTz
ack_reach(LossScan *sc, int t, TimestampTz s, TimestampTz e, TimestampTz since)
{
	const LineageTable *lt = table_acks(sc, t);
	TimestampTz reach = s;
	TimestampTz best = s;
	int			i = 0;

	while (reach < e)
	{
		CHECK_FOR_INTERRUPTS();
		for (; i < lt->nacks && lt->acks[i].from <= reach; i++)
			if (lt->acks[i].at > since && lt->acks[i].to > best)
				best = lt->acks[i].to;
		if (best <= reach)
			return reach;
		reach = best;
	}
	return reach;
}

/* The start of the period of periods containing ts; an infinite ts stays. */
static TimestampTz
floor_or_infinite(const PeriodSpec *periods, TimestampTz ts)
{
	return TIMESTAMP_NOT_FINITE(ts) ? ts : period_start_of(periods, ts, "ts");
}

/* The end of the period of periods containing ts; an infinite ts stays. */
static TimestampTz
ceil_or_infinite(const PeriodSpec *periods, TimestampTz ts)
{
	return TIMESTAMP_NOT_FINITE(ts) ? ts : period_end_of(periods, period_start_of(periods, ts, "ts"));
}

/* Adds table t as one a loss must be acknowledged on, with its span there. */
static void
add_acker(LossScan *s, int loss, int t)
{
	const LineageTable *lt = table_row(s, t);
	const Loss *l = &s->losses[loss];
	Acker	   *a;

	/* derived_input's foreign key keeps the row: a join would drop none. */
	if (!lt->exists)
		return;
	s->ackers = grow(s->ackers, s->nackers, sizeof(Acker));
	a = &s->ackers[s->nackers++];
	a->loss = loss;
	a->table = t;
	a->span_from = floor_or_infinite(&lt->periods, l->lost_from);
	a->span_to = ceil_or_infinite(&lt->periods, l->lost_to);
}

/*
 * When the loss was first acknowledged where it happened (an
 * acknowledgement recorded after it that meets its periods there,
 * [span_from, span_to)): a consumer declared since builds from repaired
 * data. DT_NOEND while none is.
 */
static TimestampTz
first_repair(LossScan *s, const Loss *l, TimestampTz span_from, TimestampTz span_to)
{
	const LineageTable *lt = table_acks(s, l->lost);
	TimestampTz latest = DT_NOEND;
	bool		any = false;

	/* The latest one, as _loss_ackers compares: max(acknowledged_at). */
	for (int i = 0; i < lt->nacks; i++)
		if (lt->acks[i].at > l->created_at && lt->acks[i].from < span_to && lt->acks[i].to > span_from &&
			(!any || lt->acks[i].at > latest))
		{
			latest = lt->acks[i].at;
			any = true;
		}
	return latest;
}

/* Whether table t has a required consumer declared before `before`. */
static bool
required_consumer_before(LossScan *s, int t, TimestampTz before)
{
	Relation	rel = s->rels[REL_CONSUMER];
	TupleDesc	desc = RelationGetDescr(rel);
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	bool		found = false;
	bool		isnull;

	ScanKeyInit(&key, s->c->con_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(s->tables[t].table_id));
	scan = systable_beginscan(rel, s->c->con_pkey, true, s->snapshot, 1, &key);
	while (!found && HeapTupleIsValid(tup = systable_getnext(scan)))
		found = DatumGetBool(heap_getattr(tup, s->c->con_required, desc, &isnull)) &&
			DatumGetTimestampTz(heap_getattr(tup, s->c->con_created_at, desc, &isnull)) < before;
	systable_endscan(scan);
	return found;
}

/*
 * The tables of the lineage the given one is (transitively) built from
 * others through: those on a path from the table asked about to it, it
 * excluded. Over the edges read, until nothing changes.
 */
static bool *
built_through(LossScan *s, int lost)
{
	bool	   *on_path = palloc0(sizeof(bool) * s->ntables);
	bool		changed = true;

	while (changed)
	{
		CHECK_FOR_INTERRUPTS();
		changed = false;
		for (int i = 0; i < s->nedges; i++)
			if ((s->edge_input[i] == lost || on_path[s->edge_input[i]]) && !on_path[s->edge_table[i]])
				on_path[s->edge_table[i]] = changed = true;
	}
	return on_path;
}

/*
 * Every table each loss must be acknowledged on (finalize_internal.loss_ackers):
 * the table that lost the data, and each table on a path from the table
 * asked about to it with a required consumer declared before the loss was
 * first repaired there.
 */
static void
find_ackers(LossScan *s)
{
	for (int i = 0; i < s->nlosses; i++)
	{
		const Loss *l = &s->losses[i];
		Acker		lost;
		TimestampTz repaired;
		bool	   *on_path;

		add_acker(s, i, l->lost);
		if (s->nedges == 0 || s->nackers == 0 || s->ackers[s->nackers - 1].loss != i)
			continue;
		lost = s->ackers[s->nackers - 1];
		repaired = first_repair(s, l, lost.span_from, lost.span_to);
		on_path = built_through(s, l->lost);
		for (int t = 0; t < s->ntables; t++)
			if (on_path[t] && required_consumer_before(s, t, repaired))
				add_acker(s, i, t);
		pfree(on_path);
	}
}

/*
 * Reads what the loss rule needs of table_id under snapshot: its lineage,
 * their losses and where each must be acknowledged. In its own memory
 * context (the caller's current one's child), which loss_scan_end frees.
 */
static MemoryContext
loss_scan_begin(LossScan *s, int64 table_id, Snapshot snapshot)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "finalize losses", ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);

	memset(s, 0, sizeof(*s));
	s->c = catalog_open_relations(SENSOR_RELS, s->rels);
	s->snapshot = snapshot;
	/* A catalog before 0.2.0 had no losses. */
	if (s->rels[REL_LOSS] != NULL)
	{
		read_lineage(s, table_id);
		for (int t = 0; t < s->ntables; t++)
			read_losses(s, t);
		find_ackers(s);
	}
	MemoryContextSwitchTo(old);
	return cxt;
}

/* Closes the relations of a scan and frees what it read. */
static void
loss_scan_end(LossScan *s, MemoryContext cxt)
{
	catalog_close_relations(SENSOR_RELS, s->rels);
	MemoryContextDelete(cxt);
}

/*
 * Whether a loss holds the period [period_start, period_end) of the table
 * under snapshot (finalize_internal.loss_blocks): one of the table or of a table
 * it is built from intersects it, and a table it must be acknowledged on
 * has not acknowledged all of its periods that share instants with both.
 */
bool
loss_blocks(int64 table_id, TimestampTz period_start, TimestampTz period_end, Snapshot snapshot)
{
	LossScan	s;
	MemoryContext cxt = loss_scan_begin(&s, table_id, snapshot);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	/* The period's last instant ([start, end) holds end - 1 microsecond last). */
	TimestampTz last = TIMESTAMP_NOT_FINITE(period_end) ? period_end : period_end - 1;
	bool		blocks = false;

	for (int i = 0; i < s.nackers && !blocks; i++)
	{
		const Acker *a = &s.ackers[i];
		const Loss *l = &s.losses[a->loss];
		const PeriodSpec *periods = &s.tables[a->table].periods;
		TimestampTz from;
		TimestampTz to;

		if (!(l->lost_from < period_end && l->lost_to >= period_start))
			continue;
		from = period_start_of(periods, Max(period_start, l->lost_from), "ts");
		to = period_end_of(periods, period_start_of(periods, Min(last, l->lost_to), "ts"));
		blocks = ack_reach(&s, a->table, from, to, l->created_at) < to;
	}
	MemoryContextSwitchTo(old);
	loss_scan_end(&s, cxt);
	return blocks;
}

/*
 * Where finalized_until must stop for the table under snapshot
 * (finalize_internal.loss_cap): the start of its earliest period (its own periods)
 * that a loss may still hold, for want of an acknowledgement on a table it
 * needs one on; DT_NOEND when none does, DT_NOBEGIN when such a loss has
 * no start. It may name an earlier period than the first one a loss holds
 * (acknowledgements count from a period start of the table they are on),
 * never a later one.
 */
TimestampTz
loss_cap(int64 table_id, Snapshot snapshot)
{
	LossScan	s;
	MemoryContext cxt = loss_scan_begin(&s, table_id, snapshot);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	TimestampTz cap = DT_NOEND;
	const LineageTable *self = s.ntables > 0 ? table_row(&s, 0) : NULL;

	for (int i = 0; self != NULL && self->exists && i < s.nackers; i++)
	{
		const Acker *a = &s.ackers[i];
		const Loss *l = &s.losses[a->loss];
		TimestampTz reach = ack_reach(&s, a->table, a->span_from, a->span_to, l->created_at);
		TimestampTz held;

		if (reach >= a->span_to)
			continue;
		held = Max(floor_or_infinite(&s.tables[a->table].periods, reach), l->lost_from);
		held = floor_or_infinite(&self->periods, held);
		if (held < cap)
			cap = held;
	}
	MemoryContextSwitchTo(old);
	loss_scan_end(&s, cxt);
	return cap;
}

/* The statement's snapshot, as SQL functions read under. */
static Snapshot
statement_snapshot(void)
{
	return ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
}

/*
 * A NULL argument of _loss_blocks or _loss_cap is a caller's bug: "no loss"
 * would be no proof of anything.
 */
static void
require_args(FunctionCallInfo fcinfo)
{
	for (int i = 0; i < PG_NARGS(); i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument %d of %s must not be NULL", i + 1, get_func_name(fcinfo->flinfo->fn_oid))));
}

/*
 * finalize_internal.loss_blocks(table_id, period_start, period_end): loss_blocks
 * under the statement's snapshot, for SQL that tells a verdict as the
 * sensors do (_final).
 */
Datum
finalize_loss_blocks(PG_FUNCTION_ARGS)
{
	require_args(fcinfo);
	PG_RETURN_BOOL(loss_blocks(PG_GETARG_INT64(0), PG_GETARG_TIMESTAMPTZ(1), PG_GETARG_TIMESTAMPTZ(2),
							   statement_snapshot()));
}

/*
 * finalize_internal.loss_cap(table_id): loss_cap under the statement's snapshot,
 * for SQL that caps a verdict as the sensors do (an event-time table's
 * advance).
 */
Datum
finalize_loss_cap(PG_FUNCTION_ARGS)
{
	require_args(fcinfo);
	PG_RETURN_TIMESTAMPTZ(loss_cap(PG_GETARG_INT64(0), statement_snapshot()));
}
