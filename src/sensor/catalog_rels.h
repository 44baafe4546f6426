/*
 * catalog_rels.h
 *     The relations of finalize's catalog that the sensors read directly,
 *     for catalog.c (the verdict) and losses.c (what losses hold): their
 *     OIDs and column numbers, cached per backend, and opening them.
 */
#ifndef FINALIZE_CATALOG_RELS_H
#define FINALIZE_CATALOG_RELS_H

#include "access/attnum.h"
#include "access/htup.h"
#include "utils/relcache.h"

#include "core/period.h"

/*
 * OIDs and column numbers of the relations the sensors read, looked up once
 * per backend and forgotten on any relcache invalidation of them (DROP or
 * ALTER EXTENSION, an upgrade adding columns): a sensor call then costs a
 * few index probes and no catalog lookups.
 */
typedef struct SensorCatalog
{
	bool		valid;
	Oid			tt_relid;		/* tracked_table */
	Oid			tt_name_idx;	/* tracked_table_active_name_idx */
	Oid			tt_pkey;		/* tracked_table_pkey */
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
	/* Losses: all InvalidOid before 0.2.0, which had none (no loss_blocked). */
	Oid			loss_relid;		/* loss */
	Oid			loss_table_idx; /* loss_table_idx (table_id) */
	AttrNumber	loss_id;
	AttrNumber	loss_table_id;
	AttrNumber	loss_lost_from;
	AttrNumber	loss_lost_to;
	AttrNumber	loss_created_at;
	Oid			ack_relid;		/* loss_ack */
	Oid			ack_table_idx;	/* loss_ack_table_idx (table_id) */
	AttrNumber	ack_table_id;
	AttrNumber	ack_period_from;
	AttrNumber	ack_period_to;
	AttrNumber	ack_acknowledged_at;
	Oid			con_relid;		/* consumer */
	Oid			con_pkey;		/* consumer_pkey (table_id, consumer) */
	AttrNumber	con_table_id;
	AttrNumber	con_required;
	AttrNumber	con_created_at;
} SensorCatalog;

/* The relations, in the order catalog_open_relations opens them. */
typedef enum SensorRel
{
	REL_TRACKED_TABLE,
	REL_WATERMARK,
	REL_DERIVED_INPUT,			/* NULL before 0.2.0 */
	REL_LOSS,					/* NULL before 0.2.0, and the two below */
	REL_LOSS_ACK,
	REL_CONSUMER,
	SENSOR_RELS
} SensorRel;

/* The verdict needs the first three; what losses hold, all. */
#define VERDICT_RELS (REL_DERIVED_INPUT + 1)

extern const SensorCatalog *catalog_open_relations(int count, Relation *rels);
extern void catalog_close_relations(int count, Relation *rels);
extern void catalog_table_periods(const SensorCatalog *c, Relation tt, HeapTuple tup, PeriodSpec *out);

#endif							/* FINALIZE_CATALOG_RELS_H */
