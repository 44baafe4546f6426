/*
 * losses.h
 *     Which periods of a table a data loss holds (the loss rule in C).
 */
#ifndef FINALIZE_LOSSES_H
#define FINALIZE_LOSSES_H

#include "datatype/timestamp.h"
#include "utils/snapshot.h"

extern bool loss_blocks(int64 table_id, TimestampTz period_start, TimestampTz period_end, Snapshot snapshot);
extern TimestampTz loss_cap(int64 table_id, Snapshot snapshot);

#endif							/* FINALIZE_LOSSES_H */
