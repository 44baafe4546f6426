/*
 * catalog.c
 *     Direct reads of finalize's own tables for the hot sensor paths.
 *
 * Sensors poll finalized_until() and is_final() all day, so they skip SPI and
 * the executor and read the two rows they need through their unique indexes
 * (genam) under an MVCC snapshot, when verdict_cache.c has no current copy.
 * That also keeps them free of search_path and of table privileges: EXECUTE
 * on the function is the whole permission model. Whether a loss may hold
 * periods is the loss_blocked flag of the table or of a table it is built
 * from (finalize_internal.lineage_blocked, read here through derived_input); which
 * periods it holds, losses.c reads from the same relations, opened here.
 */
#include "postgres.h"

#include "access/xact.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
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
#include "sensor/catalog_rels.h"

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
	const SensorCatalog *c = &sensor_catalog;
	const Oid	cached[] = {c->tt_relid, c->tt_name_idx, c->tt_pkey, c->wm_relid, c->wm_pkey, c->di_relid,
		c->di_pkey, c->loss_relid, c->loss_table_idx, c->ack_relid, c->ack_table_idx, c->con_relid, c->con_pkey};
	bool		ours = !OidIsValid(relid);

	fill_interrupted = true;
	for (int i = 0; i < lengthof(cached) && !ours; i++)
		ours = relid == cached[i];
	if (ours)
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
 * The OIDs and column numbers of loss, loss_ack and consumer, which the
 * loss rule reads (losses.c), in a catalog that has losses (loss_blocked):
 * one without them never asks.
 */
static void
fill_loss_catalog(SensorCatalog *c)
{
	if (c->wm_loss_blocked == InvalidAttrNumber)
	{
		c->loss_relid = c->loss_table_idx = c->ack_relid = c->ack_table_idx = InvalidOid;
		c->con_relid = c->con_pkey = InvalidOid;
		return;
	}
	c->loss_relid = finalize_relid("loss");
	c->loss_table_idx = finalize_relid("loss_table_idx");
	c->loss_id = finalize_attnum(c->loss_relid, "loss_id");
	c->loss_table_id = finalize_attnum(c->loss_relid, "table_id");
	c->loss_lost_from = finalize_attnum(c->loss_relid, "lost_from");
	c->loss_lost_to = finalize_attnum(c->loss_relid, "lost_to");
	c->loss_created_at = finalize_attnum(c->loss_relid, "created_at");
	c->ack_relid = finalize_relid("loss_ack");
	c->ack_table_idx = finalize_relid("loss_ack_table_idx");
	c->ack_table_id = finalize_attnum(c->ack_relid, "table_id");
	c->ack_period_from = finalize_attnum(c->ack_relid, "period_from");
	c->ack_period_to = finalize_attnum(c->ack_relid, "period_to");
	c->ack_acknowledged_at = finalize_attnum(c->ack_relid, "acknowledged_at");
	c->con_relid = finalize_relid("consumer");
	c->con_pkey = finalize_relid("consumer_pkey");
	c->con_table_id = finalize_attnum(c->con_relid, "table_id");
	c->con_required = finalize_attnum(c->con_relid, "required");
	c->con_created_at = finalize_attnum(c->con_relid, "created_at");
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
	c.tt_pkey = finalize_relid("tracked_table_pkey");
	fill_loss_catalog(&c);
	c.valid = !fill_interrupted;
	sensor_catalog = c;
	return &sensor_catalog;
}

/* The statement's snapshot, for reads that must see its own changes. */
Snapshot
catalog_statement_snapshot(void)
{
	return ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
}

/*
 * The latest committed state, which a sensor reads when the cache cannot
 * answer; during a parallel query (a sensor in a query that scans in
 * parallel: it runs in the leader) PostgreSQL takes no new snapshot, and
 * the statement's, older, is read instead: an answer as of the query's
 * start, never ahead of it.
 */
Snapshot
catalog_fresh_snapshot(void)
{
	return IsInParallelMode() ? catalog_statement_snapshot() : GetLatestSnapshot();
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

/* Closes what catalog_open_relations opened (NULL entries were not). */
void
catalog_close_relations(int count, Relation *rels)
{
	for (int i = count - 1; i >= 0; i--)
		if (rels[i] != NULL)
			relation_close(rels[i], AccessShareLock);
}

/*
 * Opens the first count relations of SensorRel (a relation the catalog
 * does not have yet is NULL) and returns the OIDs and column numbers that
 * describe them. The locks taken keep their layout still until they are
 * closed, but taking them processes invalidations, which may show the
 * cached description stale (say an ALTER EXTENSION UPDATE that adds a
 * column, just committed): then it is looked up again, so that no tuple is
 * ever read with the column numbers of another layout (a loss_blocked
 * column unseen would call a lost period final).
 */
const SensorCatalog *
catalog_open_relations(int count, Relation *rels)
{
	for (;;)
	{
		const SensorCatalog *c = sensor_catalog_get();
		const Oid	relids[SENSOR_RELS] = {c->tt_relid, c->wm_relid, c->di_relid, c->loss_relid, c->ack_relid,
		c->con_relid};
		bool		opened = true;

		Assert(count <= SENSOR_RELS);
		for (int i = 0; i < count; i++)
		{
			rels[i] = opened && OidIsValid(relids[i]) ? try_relation_open(relids[i], AccessShareLock) : NULL;
			opened = opened && (rels[i] != NULL || !OidIsValid(relids[i]));
		}
		if (opened && sensor_catalog.valid)
			return c;
		catalog_close_relations(count, rels);
		/* Dropped or changed under us: look everything up again. */
		sensor_catalog.valid = false;
		catalog_generation++;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The periods (granularity in period_zone) of the tracked table of tuple
 * tup of tracked_table, as the SQL functions cut them: period_start(ts,
 * granularity, period_zone), or before 0.3.0 period_start(ts,
 * granularity), UTC with the weeks of 0.2.0.
 */
void
catalog_table_periods(const SensorCatalog *c, Relation tt, HeapTuple tup, PeriodSpec *out)
{
	TupleDesc	desc = RelationGetDescr(tt);
	bool		isnull;
	Interval	granularity = *DatumGetIntervalP(heap_getattr(tup, c->tt_granularity, desc, &isnull));
	char	   *zone = NULL;
	const PeriodZone *pz;

	if (c->tt_period_zone != InvalidAttrNumber)
	{
		Datum		d = heap_getattr(tup, c->tt_period_zone, desc, &isnull);

		zone = isnull ? NULL : TextDatumGetCString(d);
	}
	/* 'UTC' and NULL (a catalog before 0.3.0) need no zone at all. */
	if (zone != NULL && strcmp(zone, "UTC") == 0)
		zone = NULL;
	if (!period_zone_lookup(zone, &pz))
	{
		char	   *name = TextDatumGetCString(heap_getattr(tup, c->tt_table_name, desc, &isnull));

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the period_zone \"%s\" of table \"%s\" is not a time zone this server knows", zone, name),
				 errdetail("The zone database of the server changed since the table was tracked."),
				 errhint("Set a zone it knows with finalize.alter_tracked_table(%s, period_zone => ...).",
						 quote_literal_cstr(name))));
	}
	/* A catalog before 0.3.0 counts weeks written in days from Saturday, as it did. */
	period_spec_of(&granularity, pz, c->tt_period_zone != InvalidAttrNumber, "granularity", out);
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
		catalog_table_periods(c, rel, tup, &out->periods);
		found = true;
		break;
	}
	systable_endscan(scan);
	return found;
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
	Relation	rels[VERDICT_RELS];
	const SensorCatalog *c = catalog_open_relations(VERDICT_RELS, rels);
	Relation	wm = rels[REL_WATERMARK];
	Relation	di = rels[REL_DERIVED_INPUT];
	bool		found;

	if (snapshot == NULL)
		snapshot = catalog_statement_snapshot();
	out->losses = NULL;
	found = read_tracked_table(c, rels[REL_TRACKED_TABLE], table_name, snapshot, out);
	if (found)
		read_watermark(c, wm, snapshot, out);
	if (found && !out->loss_blocked && di != NULL)
		out->loss_blocked = lineage_blocked(c, wm, di, snapshot, out->table_id);
	catalog_close_relations(VERDICT_RELS, rels);
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
	Relation	rels[VERDICT_RELS];
	const SensorCatalog *c = catalog_open_relations(VERDICT_RELS, rels);
	bool		blocked = rels[REL_DERIVED_INPUT] != NULL &&
		lineage_blocked(c, rels[REL_WATERMARK], rels[REL_DERIVED_INPUT], snapshot, table_id);

	catalog_close_relations(VERDICT_RELS, rels);
	return blocked;
}
