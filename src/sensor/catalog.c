/*
 * catalog.c
 *     Direct reads of finalize's own tables for the hot sensor paths.
 *
 * Sensors poll finalized_until() and is_final() all day, so they skip SPI and
 * the executor and read the two rows they need through their unique indexes
 * (genam) under an MVCC snapshot, when verdict_cache.c has no current copy.
 * That also keeps them free of search_path and of table privileges: EXECUTE
 * on the function is the whole permission model. Everything else uses SQL:
 * among it, whether a loss holds a period (finalize_internal.loss_blocks) and where
 * losses stop finalized_until (finalize_internal.loss_cap), which are asked only
 * while the loss_blocked flag of the table or of a table it is built from
 * is set (finalize_internal.lineage_blocked, read here through derived_input), and
 * then as the extension's owner, so that EXECUTE on the sensor stays the
 * whole model.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "core/db.h"
#include "core/period_zone.h"
#include "core/settings.h"
#include "sensor/catalog.h"

/*
 * OIDs and column numbers of the relations the sensors read, looked up once
 * per backend and forgotten on any relcache invalidation of them (DROP or
 * ALTER EXTENSION, an upgrade adding columns): a sensor call then costs two
 * index probes and no catalog lookups.
 */
typedef struct SensorCatalog
{
	bool		valid;
	Oid			tt_relid;		/* tracked_table */
	Oid			tt_name_idx;	/* tracked_table_active_name_idx */
	Oid			wm_relid;		/* watermark */
	Oid			wm_pkey;		/* watermark_pkey */
	AttrNumber	tt_table_id;
	AttrNumber	tt_table_name;
	AttrNumber	tt_granularity;
	AttrNumber	tt_period_zone; /* InvalidAttrNumber before 0.3.0: UTC */
	AttrNumber	tt_untracked_at;
	AttrNumber	wm_table_id;
	AttrNumber	wm_finalized_until;
	AttrNumber	wm_loss_blocked;	/* InvalidAttrNumber before 0.2.0 */
	Oid			di_relid;		/* derived_input; InvalidOid before 0.2.0 */
	Oid			di_pkey;		/* derived_input_pkey (table_id, input_id) */
	AttrNumber	di_table_id;
	AttrNumber	di_input_id;
} SensorCatalog;

/* Tables of a lineage the sensors follow at most (track_derived refuses cycles). */
#define LINEAGE_MAX 1024

static SensorCatalog sensor_catalog;
static bool callback_registered = false;
/* An invalidation arrived while sensor_catalog_get was looking up names. */
static bool fill_interrupted = false;

/* Bumped whenever the cached OIDs are forgotten (see catalog.h). */
uint64		catalog_generation = 1;

/*
 * Forgets the cached OIDs when one of the relations changes (or all do).
 * Runs inside invalidation processing, so it only sets flags. Any
 * invalidation during a fill may concern the relations being looked up,
 * whose OIDs are not cached yet: that fill must not be trusted.
 */
static void
invalidate_sensor_catalog(Datum arg pg_attribute_unused(), Oid relid)
{
	fill_interrupted = true;
	if (!OidIsValid(relid) || relid == sensor_catalog.tt_relid ||
		relid == sensor_catalog.wm_relid || relid == sensor_catalog.tt_name_idx ||
		relid == sensor_catalog.wm_pkey || relid == sensor_catalog.di_relid || relid == sensor_catalog.di_pkey)
	{
		sensor_catalog.valid = false;
		catalog_generation++;
	}
}

/* Registers the relcache callback once per backend. */
void
catalog_register_callback(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(invalidate_sensor_catalog, (Datum) 0);
		callback_registered = true;
	}
}

/*
 * OID of one of the extension's relations; a missing one means the extension
 * is not (or not completely) installed in this database.
 */
static Oid
finalize_relid(const char *relname)
{
	Oid			nsp = get_namespace_oid(FINALIZE_SCHEMA, true);
	Oid			relid = OidIsValid(nsp) ? get_relname_relid(relname, nsp) : InvalidOid;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("relation %s.%s of extension finalize does not exist", FINALIZE_SCHEMA, relname),
				 errhint("Install the extension with CREATE EXTENSION finalize, or update it with ALTER EXTENSION finalize UPDATE.")));
	return relid;
}

/*
 * Attribute number of a column, looked up by name so that upgrade scripts
 * may add columns without breaking this file.
 */
static AttrNumber
finalize_attnum(Oid relid, const char *attname)
{
	AttrNumber	attnum = get_attnum(relid, attname);

	if (attnum == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("column %s of relation %s.%s does not exist", attname, FINALIZE_SCHEMA, get_rel_name(relid)),
				 errhint("Update the extension with ALTER EXTENSION finalize UPDATE.")));
	return attnum;
}

/*
 * Attribute number of a column that a catalog of an older version may not
 * have yet (InvalidAttrNumber then: its callers say what that meant), of
 * type typid. A column of another type is a broken catalog, and guessing
 * could call a period final: lost tells what the sensors could not know.
 */
static AttrNumber
optional_attnum(Oid relid, const char *attname, Oid typid, const char *lost)
{
	AttrNumber	attnum = get_attnum(relid, attname);

	if (attnum != InvalidAttrNumber && get_atttype(relid, attnum) != typid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("column %s of relation %s.%s is not of type %s", attname, FINALIZE_SCHEMA,
						get_rel_name(relid), format_type_be(typid)),
				 errdetail("The verdict functions cannot tell %s.", lost),
				 errhint("Update the extension with ALTER EXTENSION finalize UPDATE, or reinstall it.")));
	return attnum;
}

/*
 * Fills the cache of OIDs and column numbers if it is not valid. It stays
 * not valid when an invalidation arrived during the look-ups (the caller,
 * open_sensor_relations, then looks them up again).
 */
static const SensorCatalog *
sensor_catalog_get(void)
{
	SensorCatalog c;

	if (sensor_catalog.valid)
		return &sensor_catalog;
	catalog_register_callback();
	fill_interrupted = false;
	c.tt_relid = finalize_relid("tracked_table");
	c.tt_name_idx = finalize_relid("tracked_table_active_name_idx");
	c.wm_relid = finalize_relid("watermark");
	c.wm_pkey = finalize_relid("watermark_pkey");
	c.tt_table_id = finalize_attnum(c.tt_relid, "table_id");
	c.tt_table_name = finalize_attnum(c.tt_relid, "table_name");
	c.tt_granularity = finalize_attnum(c.tt_relid, "granularity");
	/* Before 0.3.0 every table's periods were UTC's. */
	c.tt_period_zone = optional_attnum(c.tt_relid, "period_zone", TEXTOID, "which periods a table has");
	c.tt_untracked_at = finalize_attnum(c.tt_relid, "untracked_at");
	c.wm_table_id = finalize_attnum(c.wm_relid, "table_id");
	c.wm_finalized_until = finalize_attnum(c.wm_relid, "finalized_until");
	/* Before 0.2.0 there were no losses: "no loss" is the truth there. */
	c.wm_loss_blocked = optional_attnum(c.wm_relid, "loss_blocked", BOOLOID, "whether a loss holds a period");
	/* Before 0.2.0 there were no derived tables either. */
	c.di_relid = get_relname_relid("derived_input", get_namespace_oid(FINALIZE_SCHEMA, false));
	c.di_pkey = OidIsValid(c.di_relid) ? finalize_relid("derived_input_pkey") : InvalidOid;
	c.di_table_id = OidIsValid(c.di_relid) ? finalize_attnum(c.di_relid, "table_id") : InvalidAttrNumber;
	c.di_input_id = OidIsValid(c.di_relid) ? finalize_attnum(c.di_relid, "input_id") : InvalidAttrNumber;
	c.valid = !fill_interrupted;
	sensor_catalog = c;
	return &sensor_catalog;
}

/* The statement's snapshot, for reads that must see its own changes. */
static Snapshot
statement_snapshot(void)
{
	return ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
}

/*
 * The one error for a table name that is not tracked (the SQL functions raise
 * the same through finalize_internal.not_tracked).
 */
void
catalog_not_tracked(const char *table_name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("table \"%s\" is not tracked by finalize", table_name),
			 errhint("Check the name in finalize.status, or start tracking it with finalize.track_table().")));
}

/*
 * Opens tracked_table and watermark and returns the OIDs and column numbers
 * that describe them. The locks taken keep their layout still until they are
 * closed, but taking them processes invalidations, which may show the cached
 * description stale (say an ALTER EXTENSION UPDATE that adds a column, just
 * committed): then it is looked up again, so that no tuple is ever read with
 * the column numbers of another layout (a loss_blocked column unseen would
 * call a lost period final).
 */
static const SensorCatalog *
open_sensor_relations(Relation *tt, Relation *wm, Relation *di)
{
	for (;;)
	{
		const SensorCatalog *c = sensor_catalog_get();

		*tt = try_relation_open(c->tt_relid, AccessShareLock);
		*wm = *tt != NULL ? try_relation_open(c->wm_relid, AccessShareLock) : NULL;
		*di = *wm != NULL && OidIsValid(c->di_relid) ? try_relation_open(c->di_relid, AccessShareLock) : NULL;
		if (*wm != NULL && (*di != NULL || !OidIsValid(c->di_relid)) && sensor_catalog.valid)
			return c;
		if (*di != NULL)
			relation_close(*di, AccessShareLock);
		if (*wm != NULL)
			relation_close(*wm, AccessShareLock);
		if (*tt != NULL)
			relation_close(*tt, AccessShareLock);
		/* Dropped or changed under us: look everything up again. */
		sensor_catalog.valid = false;
		catalog_generation++;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Reads the id and periods (granularity in period_zone) of the active
 * tracked table named table_name (a text datum); false when there is none.
 */
static bool
read_tracked_table(const SensorCatalog *c, Relation rel, Datum table_name, Snapshot snapshot,
				   TrackedVerdict *out)
{
	TupleDesc	desc = RelationGetDescr(rel);
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	bool		found = false;
	bool		isnull;
	Interval	granularity;
	char	   *zone = NULL;
	const PeriodZone *pz;

	/* By name among the active ones (partial index). */
	ScanKeyInit(&key, c->tt_table_name, BTEqualStrategyNumber, F_TEXTEQ, table_name);
	scan = systable_beginscan(rel, c->tt_name_idx, true, snapshot, 1, &key);
	/* Without system indexes this is a heap scan: skip untracked rows. */
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		(void) heap_getattr(tup, c->tt_untracked_at, desc, &isnull);
		if (!isnull)
			continue;
		out->table_id = DatumGetInt64(heap_getattr(tup, c->tt_table_id, desc, &isnull));
		granularity = *DatumGetIntervalP(heap_getattr(tup, c->tt_granularity, desc, &isnull));
		if (c->tt_period_zone != InvalidAttrNumber)
		{
			Datum		d = heap_getattr(tup, c->tt_period_zone, desc, &isnull);

			zone = isnull ? NULL : TextDatumGetCString(d);
		}
		found = true;
		break;
	}
	systable_endscan(scan);
	if (!found)
		return false;
	/* 'UTC' and NULL (a catalog before 0.3.0) need no zone at all. */
	if (zone != NULL && strcmp(zone, "UTC") == 0)
		zone = NULL;
	if (!period_zone_lookup(zone, &pz))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the period_zone \"%s\" of table \"%s\" is not a time zone this server knows", zone,
						TextDatumGetCString(table_name)),
				 errdetail("The zone database of the server changed since the table was tracked."),
				 errhint("Set a zone it knows with finalize.alter_tracked_table(%s, period_zone => ...).",
						 quote_literal_cstr(TextDatumGetCString(table_name)))));
	/* A catalog before 0.3.0 counts weeks written in days from Saturday, as it did. */
	period_spec_of(&granularity, pz, c->tt_period_zone != InvalidAttrNumber, "granularity", &out->periods);
	return true;
}

/*
 * Reads the verdict and the loss flag of out->table_id from its one
 * watermark tuple (by primary key), so that the two always agree.
 */
static void
read_watermark(const SensorCatalog *c, Relation rel, Snapshot snapshot, TrackedVerdict *out)
{
	TupleDesc	desc = RelationGetDescr(rel);
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	Datum		d;
	bool		isnull;

	out->has_watermark = false;
	out->loss_blocked = false;
	ScanKeyInit(&key, c->wm_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(out->table_id));
	scan = systable_beginscan(rel, c->wm_pkey, true, snapshot, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		d = heap_getattr(tup, c->wm_finalized_until, desc, &isnull);
		if (!isnull)
		{
			out->has_watermark = true;
			out->finalized_until = DatumGetTimestampTz(d);
		}
		if (c->wm_loss_blocked != InvalidAttrNumber)
		{
			d = heap_getattr(tup, c->wm_loss_blocked, desc, &isnull);
			/* NOT NULL in the catalog; a NULL would be asked about, not ignored. */
			out->loss_blocked = isnull || DatumGetBool(d);
		}
	}
	systable_endscan(scan);
}

/* The loss flag of one table's watermark tuple (false when it has none). */
static bool
watermark_loss_blocked(const SensorCatalog *c, Relation rel, Snapshot snapshot, int64 table_id)
{
	TrackedVerdict v;

	v.table_id = table_id;
	read_watermark(c, rel, snapshot, &v);
	return v.loss_blocked;
}

/*
 * Whether the loss flag of any table out->table_id is built from
 * (transitively) is set: a transaction that gives a table a loss to wait
 * for sets the flag of the one table it holds, not of the tables built
 * from it (finalize_internal.lineage_blocked, the same rule in SQL). Breadth first
 * over derived_input by its primary key; a source table costs one probe.
 */
static bool
lineage_blocked(const SensorCatalog *c, Relation wm, Relation di, Snapshot snapshot, int64 table_id)
{
	int64		seen[LINEAGE_MAX];
	int			nseen = 1;
	bool		blocked = false;

	seen[0] = table_id;
	for (int next = 0; next < nseen && !blocked; next++)
	{
		SysScanDesc scan;
		ScanKeyData key;
		HeapTuple	tup;
		bool		isnull;

		ScanKeyInit(&key, c->di_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(seen[next]));
		scan = systable_beginscan(di, c->di_pkey, true, snapshot, 1, &key);
		while (!blocked && HeapTupleIsValid(tup = systable_getnext(scan)))
		{
			int64		input = DatumGetInt64(heap_getattr(tup, c->di_input_id, RelationGetDescr(di), &isnull));
			bool		known = false;

			for (int i = 0; i < nseen && !known; i++)
				known = seen[i] == input;
			if (known)
				continue;
			/* A lineage this long is not one track_derived builds: ask, do not guess. */
			if (nseen == LINEAGE_MAX)
				blocked = true;
			else
			{
				seen[nseen++] = input;
				blocked = watermark_loss_blocked(c, wm, snapshot, input);
			}
		}
		systable_endscan(scan);
	}
	return blocked;
}

/*
 * Reads the granularity, verdict and loss flag of the tracked table named
 * table_name (a text datum) under snapshot (NULL: the statement's); raises
 * the not-tracked error when there is none.
 */
void
catalog_read_verdict(Datum table_name, TrackedVerdict *out, Snapshot snapshot)
{
	Relation	tt;
	Relation	wm;
	Relation	di;
	const SensorCatalog *c = open_sensor_relations(&tt, &wm, &di);
	bool		found;

	if (snapshot == NULL)
		snapshot = statement_snapshot();
	found = read_tracked_table(c, tt, table_name, snapshot, out);
	if (found)
		read_watermark(c, wm, snapshot, out);
	if (found && !out->loss_blocked && di != NULL)
		out->loss_blocked = lineage_blocked(c, wm, di, snapshot, out->table_id);
	if (di != NULL)
		relation_close(di, AccessShareLock);
	relation_close(wm, AccessShareLock);
	relation_close(tt, AccessShareLock);
	if (!found)
		catalog_not_tracked(TextDatumGetCString(table_name));
}

/*
 * Whether a loss may hold periods of table_id, as catalog_read_verdict
 * reads it for a table whose own loss flag is clear: the flag of a table
 * it is built from (transitively) is set. Under snapshot; for
 * finalize_internal.sensor_until, whose caller gives the table's own flag.
 */
bool
catalog_lineage_blocked(int64 table_id, Snapshot snapshot)
{
	Relation	tt;
	Relation	wm;
	Relation	di;
	const SensorCatalog *c = open_sensor_relations(&tt, &wm, &di);
	bool		blocked = di != NULL && lineage_blocked(c, wm, di, snapshot, table_id);

	if (di != NULL)
		relation_close(di, AccessShareLock);
	relation_close(wm, AccessShareLock);
	relation_close(tt, AccessShareLock);
	return blocked;
}

/*
 * One question to a function of finalize's that the sensors ask as the
 * extension's owner (_loss_blocks, _loss_cap), and its answer.
 */
typedef struct OwnerQuestion
{
	const char *function;		/* its name in schema finalize */
	SPIPlanPtr *plan;			/* where its kept plan is */
	int			nargs;
	Oid			types[3];
	Datum		args[3];
	Snapshot	snapshot;
	Datum		answer;			/* copied out of SPI's memory */
	bool		isnull;
} OwnerQuestion;

/*
 * The queries, prepared once per backend and kept: planning the inlined
 * bodies (lineage, losses, acknowledgements) costs more than running them.
 * The plan cache replans one when the functions it inlined change (ALTER
 * EXTENSION), always inside ask_as_owner, hence as the owner.
 */
static SPIPlanPtr loss_blocks_plan = NULL;
static SPIPlanPtr loss_cap_plan = NULL;

/*
 * Asks the question, as run_as_owner's step: schema-qualified with typed
 * parameters, so that nothing of the caller's search_path takes part, and
 * under the given snapshot, so that the answer and the verdict it
 * qualifies describe one committed state.
 */
static void
ask_as_owner(void *arg)
{
	OwnerQuestion *q = (OwnerQuestion *) arg;
	Form_pg_attribute att;
	Datum		d;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (*q->plan == NULL)
	{
		StringInfoData sql;
		SPIPlanPtr	plan;

		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT %s.%s(", quote_identifier(FINALIZE_INTERNAL_SCHEMA),
						 quote_identifier(q->function));
		for (int i = 0; i < q->nargs; i++)
			appendStringInfo(&sql, "%s$%d", i > 0 ? ", " : "", i + 1);
		appendStringInfoChar(&sql, ')');
		plan = SPI_prepare(sql.data, q->nargs, q->types);
		if (plan == NULL)
			elog(ERROR, "could not prepare \"%s\": %s", sql.data, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "could not keep the plan of \"%s\"", sql.data);
		*q->plan = plan;
	}
	if (SPI_execute_snapshot(*q->plan, q->args, NULL, q->snapshot, InvalidSnapshot, true, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not ask %s.%s", FINALIZE_INTERNAL_SCHEMA, q->function);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &q->isnull);
	att = TupleDescAttr(SPI_tuptable->tupdesc, 0);
	q->answer = q->isnull ? (Datum) 0 : SPI_datumTransfer(d, att->attbyval, att->attlen);
	SPI_finish();
}

/*
 * Whether a loss holds the period [period_start, period_end) of the table,
 * asked under snapshot (registered by the caller, the one its verdict was
 * read with) as owner: the extension's owner, because the caller only needs
 * EXECUTE on the sensor function, not on finalize's internals. The query
 * runs as a security-restricted operation (see core/owner.c).
 */
bool
catalog_loss_blocks(Oid owner, int64 table_id, TimestampTz period_start,
					TimestampTz period_end, Snapshot snapshot)
{
	OwnerQuestion q = {0};

	q.function = "loss_blocks";
	q.plan = &loss_blocks_plan;
	q.nargs = 3;
	q.types[0] = INT8OID;
	q.types[1] = TIMESTAMPTZOID;
	q.types[2] = TIMESTAMPTZOID;
	q.args[0] = Int64GetDatum(table_id);
	q.args[1] = TimestampTzGetDatum(period_start);
	q.args[2] = TimestampTzGetDatum(period_end);
	q.snapshot = snapshot;
	run_as_owner(owner, ask_as_owner, &q);
	/* No answer is no proof that nothing was lost. */
	return q.isnull || DatumGetBool(q.answer);
}

/*
 * Where finalized_until must stop for the table while a loss may hold some
 * of its periods (finalize_internal.loss_cap): the start of the earliest period an
 * unacknowledged loss may hold, infinity when none does, -infinity when
 * such a loss has no start. Asked as catalog_loss_blocks asks; false when
 * there is no answer, which proves nothing (the caller then calls nothing
 * final).
 */
bool
catalog_loss_cap(Oid owner, int64 table_id, Snapshot snapshot, TimestampTz *cap)
{
	OwnerQuestion q = {0};

	q.function = "loss_cap";
	q.plan = &loss_cap_plan;
	q.nargs = 1;
	q.types[0] = INT8OID;
	q.args[0] = Int64GetDatum(table_id);
	q.snapshot = snapshot;
	run_as_owner(owner, ask_as_owner, &q);
	if (q.isnull)
		return false;
	*cap = DatumGetTimestampTz(q.answer);
	return true;
}
