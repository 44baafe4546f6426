/*
 * losses.c
 *     What the loss rule needs, read from finalize's own tables in C
 *     (LossData): loss_rule.c tells from it which periods a loss holds,
 *     for the sensors and, through loss_sql.c, for SQL
 *     (finalize_internal.loss_ackers, ack_reach, loss_blocks, loss_cap...).
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
#include "miscadmin.h"
#include "utils/fmgroids.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "core/period_zone.h"
#include "sensor/catalog_rels.h"
#include "sensor/losses.h"


/* Tables of a lineage read at most (track_derived refuses cycles). */
#define LINEAGE_MAX 1024

/* A table of the lineage, with what was read of it so far. */
typedef struct LineageTable
{
	int64		table_id;
	bool		row_read;		/* its tracked_table row was looked for */
	bool		exists;			/* and found: periods and zone are set */
	PeriodSpec	periods;
	char	   *zone;			/* its period_zone (NULL: none) */
	bool		acks_read;		/* its acknowledgements were read */
	LossAck    *acks;			/* sorted by from */
	int			nacks;
} LineageTable;

/* One reading: the relations, the snapshot and what was read. */
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
	LossAcker  *ackers;
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
		l->loss_id = DatumGetInt64(heap_getattr(tup, c->loss_id, desc, &isnull));
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
	Relation	rel = s->rels[REL_TRACKED_TABLE];
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;

	if (lt->row_read)
		return lt;
	ScanKeyInit(&key, s->c->tt_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(lt->table_id));
	scan = systable_beginscan(rel, s->c->tt_pkey, true, s->snapshot, 1, &key);
	tup = systable_getnext(scan);
	lt->exists = HeapTupleIsValid(tup);
	if (lt->exists)
	{
		bool		isnull = true;
		Datum		zone = (Datum) 0;

		catalog_table_periods(s->c, rel, tup, &lt->periods);
		if (s->c->tt_period_zone != InvalidAttrNumber)
			zone = heap_getattr(tup, s->c->tt_period_zone, RelationGetDescr(rel), &isnull);
		lt->zone = isnull ? NULL : TextDatumGetCString(zone);
	}
	systable_endscan(scan);
	lt->row_read = true;
	return lt;
}

/*
 * The acknowledgements of one table (loss_ack_table_idx), sorted by their
 * start; *n is set to their number.
 */
static LossAck *
read_acks(const SensorCatalog *c, Relation rel, Snapshot snapshot, int64 table_id, int *n)
{
	TupleDesc	desc = RelationGetDescr(rel);
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	LossAck    *acks = NULL;
	bool		isnull;

	*n = 0;
	ScanKeyInit(&key, c->ack_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(table_id));
	scan = systable_beginscan(rel, c->ack_table_idx, true, snapshot, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		LossAck    *a;

		CHECK_FOR_INTERRUPTS();
		acks = grow(acks, *n, sizeof(LossAck));
		a = &acks[(*n)++];
		a->from = DatumGetTimestampTz(heap_getattr(tup, c->ack_period_from, desc, &isnull));
		a->to = DatumGetTimestampTz(heap_getattr(tup, c->ack_period_to, desc, &isnull));
		a->at = DatumGetTimestampTz(heap_getattr(tup, c->ack_acknowledged_at, desc, &isnull));
	}
	systable_endscan(scan);
	loss_acks_sort(acks, *n);
	return acks;
}

/* Table t of the lineage with its acknowledgements read, once. */
static const LineageTable *
table_acks(LossScan *s, int t)
{
	LineageTable *lt = &s->tables[t];

	if (!lt->acks_read)
		lt->acks = read_acks(s->c, s->rels[REL_LOSS_ACK], s->snapshot, lt->table_id, &lt->nacks);
	lt->acks_read = true;
	return lt;
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

/*
 * Adds table t as one a loss must be acknowledged on, with its span there
 * (finalize_internal.loss_span's rule), and reads its acknowledgements.
 */
static void
add_acker(LossScan *s, int loss, int t)
{
	const LineageTable *lt = table_row(s, t);
	const Loss *l = &s->losses[loss];
	LossAcker  *a;

	/* derived_input's foreign key keeps the row: a join would drop none. */
	if (!lt->exists)
		return;
	(void) table_acks(s, t);
	s->ackers = grow(s->ackers, s->nackers, sizeof(LossAcker));
	a = &s->ackers[s->nackers++];
	a->loss = loss;
	a->table = t;
	a->span_from = floor_or_infinite(&lt->periods, l->lost_from);
	a->span_to = ceil_or_infinite(&lt->periods, l->lost_to);
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
 * last repaired there (ever, while it was not).
 */
static void
find_ackers(LossScan *s)
{
	for (int i = 0; i < s->nlosses; i++)
	{
		const Loss *l = &s->losses[i];
		const LineageTable *lost;
		LossAcker	own;
		TimestampTz repaired = DT_NOEND;
		bool	   *on_path;

		add_acker(s, i, l->lost);
		if (s->nedges == 0 || s->nackers == 0 || s->ackers[s->nackers - 1].loss != i)
			continue;
		own = s->ackers[s->nackers - 1];
		lost = &s->tables[l->lost];
		if (!loss_last_repair(lost->acks, lost->nacks, l->created_at, own.span_from, own.span_to, &repaired))
			repaired = DT_NOEND;
		on_path = built_through(s, l->lost);
		for (int t = 0; t < s->ntables; t++)
			if (on_path[t] && required_consumer_before(s, t, repaired))
				add_acker(s, i, t);
		pfree(on_path);
	}
}

/* Where the next part of a chunk starts, after used bytes. */
#define CHUNK_PART(used) MAXALIGN(used)

/*
 * Sets the arrays of a LossData chunk to its parts, laid out after the
 * header in the order tables, losses, ackers, acks, names.
 */
static void
loss_data_place(LossData *d, Size names_len)
{
	char	   *base = (char *) d;
	Size		off = CHUNK_PART(sizeof(LossData));

	d->tables = (LossTable *) (base + off);
	off = CHUNK_PART(off + sizeof(LossTable) * d->ntables);
	d->losses = (Loss *) (base + off);
	off = CHUNK_PART(off + sizeof(Loss) * d->nlosses);
	d->ackers = (LossAcker *) (base + off);
	off = CHUNK_PART(off + sizeof(LossAcker) * d->nackers);
	d->acks = (LossAck *) (base + off);
	off = CHUNK_PART(off + sizeof(LossAck) * d->nacks);
	d->names = base + off;
	d->size = off + names_len;
}

/* What a scan read, as one chunk in cxt. */
static LossData *
flatten(const LossScan *s, MemoryContext cxt)
{
	LossData	shape = {0};
	LossData   *d;
	Size		names_len = 0;
	int			acks = 0;
	Size		names = 0;

	shape.ntables = s->ntables;
	shape.nlosses = s->nlosses;
	shape.nackers = s->nackers;
	for (int t = 0; t < s->ntables; t++)
	{
		shape.nacks += s->tables[t].nacks;
		names_len += s->tables[t].zone != NULL ? strlen(s->tables[t].zone) + 1 : 0;
	}
	loss_data_place(&shape, names_len);
	d = MemoryContextAllocZero(cxt, shape.size);
	*d = shape;
	loss_data_place(d, names_len);
	for (int t = 0; t < s->ntables; t++)
	{
		const LineageTable *lt = &s->tables[t];
		LossTable  *out = &d->tables[t];

		out->table_id = lt->table_id;
		out->exists = lt->exists;
		out->periods = lt->periods;
		out->zone = lt->zone != NULL ? (int) names : -1;
		if (lt->zone != NULL)
		{
			strcpy(d->names + names, lt->zone);
			names += strlen(lt->zone) + 1;
		}
		out->first_ack = acks;
		out->nacks = lt->nacks;
		if (lt->nacks > 0)
			memcpy(&d->acks[acks], lt->acks, sizeof(LossAck) * lt->nacks);
		acks += lt->nacks;
	}
	if (s->nlosses > 0)
		memcpy(d->losses, s->losses, sizeof(Loss) * s->nlosses);
	if (s->nackers > 0)
		memcpy(d->ackers, s->ackers, sizeof(LossAcker) * s->nackers);
	return d;
}

/*
 * Reads what the loss rule needs of table_id under snapshot: its lineage
 * (with its own tracked_table row), their losses, where each must be
 * acknowledged and those tables' acknowledgements. One chunk in cxt; what
 * the reading needed besides is freed.
 */
LossData *
loss_data_read(int64 table_id, Snapshot snapshot, MemoryContext cxt)
{
	MemoryContext scratch = AllocSetContextCreate(CurrentMemoryContext, "finalize losses", ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(scratch);
	LossScan	s;
	LossData   *d;

	memset(&s, 0, sizeof(s));
	s.c = catalog_open_relations(SENSOR_RELS, s.rels);
	s.snapshot = snapshot;
	read_lineage(&s, table_id);
	(void) table_row(&s, 0);
	/* A catalog before 0.2.0 had no losses. */
	if (s.rels[REL_LOSS] != NULL)
	{
		for (int t = 0; t < s.ntables; t++)
			read_losses(&s, t);
		find_ackers(&s);
	}
	catalog_close_relations(SENSOR_RELS, s.rels);
	d = flatten(&s, cxt);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(scratch);
	return d;
}

/* A copy of a LossData chunk in cxt. */
LossData *
loss_data_copy(const LossData *d, MemoryContext cxt)
{
	LossData   *copy = MemoryContextAlloc(cxt, d->size);

	memcpy(copy, d, d->size);
	loss_data_place(copy, d->size - (Size) (d->names - (const char *) d));
	return copy;
}

/*
 * The acknowledgements of one table under snapshot, sorted by their start
 * (finalize_internal.ack_reach's); *n is set to their number.
 */
LossAck *
loss_table_acks(int64 table_id, Snapshot snapshot, int *n)
{
	Relation	rels[SENSOR_RELS];
	const SensorCatalog *c = catalog_open_relations(SENSOR_RELS, rels);
	LossAck    *acks = NULL;

	*n = 0;
	if (rels[REL_LOSS_ACK] != NULL)
		acks = read_acks(c, rels[REL_LOSS_ACK], snapshot, table_id, n);
	catalog_close_relations(SENSOR_RELS, rels);
	return acks;
}
