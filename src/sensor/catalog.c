/*
 * catalog.c
 *     Direct reads of finalize's own tables for the hot sensor paths.
 *
 * Sensors poll finalized_until() and is_final() all day, so they skip SPI and
 * the executor and read the two rows they need through their unique indexes
 * (genam) under an MVCC snapshot, when verdict_cache.c has no current copy.
 * That also keeps them free of search_path and of table privileges: EXECUTE
 * on the function is the whole permission model. Everything else uses SQL.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "sensor/catalog.h"
#include "common/settings.h"

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
	AttrNumber	tt_untracked_at;
	AttrNumber	wm_table_id;
	AttrNumber	wm_finalized_until;
} SensorCatalog;

static SensorCatalog sensor_catalog;
static bool callback_registered = false;

/* Bumped whenever the cached OIDs are forgotten (see catalog.h). */
uint64		catalog_generation = 1;

/*
 * Forgets the cached OIDs when one of the relations changes (or all do).
 * Runs inside invalidation processing, so it only sets flags.
 */
static void
invalidate_sensor_catalog(Datum arg pg_attribute_unused(), Oid relid)
{
	if (!OidIsValid(relid) || relid == sensor_catalog.tt_relid ||
		relid == sensor_catalog.wm_relid || relid == sensor_catalog.tt_name_idx ||
		relid == sensor_catalog.wm_pkey)
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

/* Fills the cache of OIDs and column numbers if it is not valid. */
static const SensorCatalog *
sensor_catalog_get(void)
{
	SensorCatalog c;

	if (sensor_catalog.valid)
		return &sensor_catalog;
	catalog_register_callback();
	c.tt_relid = finalize_relid("tracked_table");
	c.tt_name_idx = finalize_relid("tracked_table_active_name_idx");
	c.wm_relid = finalize_relid("watermark");
	c.wm_pkey = finalize_relid("watermark_pkey");
	c.tt_table_id = finalize_attnum(c.tt_relid, "table_id");
	c.tt_table_name = finalize_attnum(c.tt_relid, "table_name");
	c.tt_granularity = finalize_attnum(c.tt_relid, "granularity");
	c.tt_untracked_at = finalize_attnum(c.tt_relid, "untracked_at");
	c.wm_table_id = finalize_attnum(c.wm_relid, "table_id");
	c.wm_finalized_until = finalize_attnum(c.wm_relid, "finalized_until");
	c.valid = true;
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
 * the same through finalize._not_tracked).
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
 * Reads the granularity and verdict of the tracked table named table_name (a
 * text datum) under snapshot (NULL: the statement's); raises the not-tracked
 * error when there is none.
 */
void
catalog_read_verdict(Datum table_name, TrackedVerdict *out, Snapshot snapshot)
{
	const SensorCatalog *c = sensor_catalog_get();
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	bool		found = false;
	bool		isnull;

	if (snapshot == NULL)
		snapshot = statement_snapshot();

	/* The tracked table, by name among the active ones (partial index). */
	rel = table_open(c->tt_relid, AccessShareLock);
	ScanKeyInit(&key, c->tt_table_name, BTEqualStrategyNumber, F_TEXTEQ, table_name);
	scan = systable_beginscan(rel, c->tt_name_idx, true, snapshot, 1, &key);
	/* Without system indexes this is a heap scan: skip untracked rows. */
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		TupleDesc	desc = RelationGetDescr(rel);
		Datum		d;

		(void) heap_getattr(tup, c->tt_untracked_at, desc, &isnull);
		if (!isnull)
			continue;
		d = heap_getattr(tup, c->tt_table_id, desc, &isnull);
		out->table_id = DatumGetInt64(d);
		d = heap_getattr(tup, c->tt_granularity, desc, &isnull);
		out->granularity = *DatumGetIntervalP(d);
		found = true;
		break;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	if (!found)
		catalog_not_tracked(TextDatumGetCString(table_name));

	/* Its verdict, by primary key. */
	out->has_watermark = false;
	rel = table_open(c->wm_relid, AccessShareLock);
	ScanKeyInit(&key, c->wm_table_id, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(out->table_id));
	scan = systable_beginscan(rel, c->wm_pkey, true, snapshot, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		Datum		d = heap_getattr(tup, c->wm_finalized_until, RelationGetDescr(rel), &isnull);

		if (!isnull)
		{
			out->has_watermark = true;
			out->finalized_until = DatumGetTimestampTz(d);
		}
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
}
