/*
 * losses.h
 *     Which periods of a table a data loss holds (the loss rule in C):
 *     losses.c reads what the rule needs (LossData), loss_rule.c tells
 *     from it which periods are held, loss_sweep.c is its pure part, and
 *     loss_sql.c gives SQL the same rule.
 */
#ifndef FINALIZE_LOSSES_H
#define FINALIZE_LOSSES_H

#include "datatype/timestamp.h"
#include "utils/palloc.h"
#include "utils/snapshot.h"

#include "core/period.h"
#include "sensor/loss_sweep.h"

/* A table of the lineage of the table asked about. */
typedef struct LossTable
{
	int64		table_id;
	bool		exists;			/* its tracked_table row was read and found */
	PeriodSpec	periods;		/* set when exists */
	int			zone;			/* its period_zone: offset in names, -1 if NULL */
	int			first_ack;		/* its acknowledgements, sorted: acks[first_ack..] */
	int			nacks;
} LossTable;

/* A loss of a table of the lineage. */
typedef struct Loss
{
	int64		loss_id;
	int			lost;			/* the table that lost the data (index) */
	TimestampTz lost_from;
	TimestampTz lost_to;
	TimestampTz created_at;
} Loss;

/* A table a loss must be acknowledged on, with the loss's periods there. */
typedef struct LossAcker
{
	int			loss;			/* index into losses */
	int			table;			/* index into tables */
	TimestampTz span_from;
	TimestampTz span_to;
} LossAcker;

/*
 * What the loss rule reads of one table under one snapshot: its lineage
 * (tables[0] is the table asked about), their losses, the tables each must
 * be acknowledged on and their acknowledgements. One chunk of memory, so
 * that the verdict cache can keep and copy it whole.
 */
typedef struct LossData
{
	Size		size;			/* of the whole chunk */
	int			ntables;
	int			nlosses;
	int			nackers;
	int			nacks;
	LossTable  *tables;
	Loss	   *losses;
	LossAcker  *ackers;
	LossAck    *acks;
	char	   *names;			/* NUL-terminated zone names */
} LossData;

/* losses.c: reading */
extern LossData *loss_data_read(int64 table_id, Snapshot snapshot, MemoryContext cxt);
extern LossData *loss_data_copy(const LossData *d, MemoryContext cxt);
extern LossAck *loss_table_acks(int64 table_id, Snapshot snapshot, int *n);

/* loss_rule.c: telling */
extern bool loss_acker_holds(const LossData *d, int acker, TimestampTz period_start, TimestampTz period_end);
extern bool loss_acker_open(const LossData *d, int acker);
extern bool loss_data_blocks(const LossData *d, TimestampTz period_start, TimestampTz period_end);
extern TimestampTz loss_data_cap(const LossData *d);
extern bool loss_blocks(int64 table_id, TimestampTz period_start, TimestampTz period_end, Snapshot snapshot);
extern TimestampTz loss_cap(int64 table_id, Snapshot snapshot);

#endif							/* FINALIZE_LOSSES_H */
