/*
 * loss_sweep.h
 *     The pure part of the loss rule: how far a table's acknowledgements
 *     reach, and when a loss was first repaired where it happened. No
 *     catalog access, no error reporting; unit-tested in
 *     test/unit/test_loss_sweep.c.
 */
#ifndef FINALIZE_LOSS_SWEEP_H
#define FINALIZE_LOSS_SWEEP_H

#include "datatype/timestamp.h"

/* An acknowledgement: the periods in [from, to) repaired, said at `at`. */
typedef struct LossAck
{
	TimestampTz from;
	TimestampTz to;
	TimestampTz at;
} LossAck;

extern void loss_acks_sort(LossAck *acks, int n);
extern TimestampTz loss_ack_reach(const LossAck *acks, int n, TimestampTz s, TimestampTz e, TimestampTz since);
extern bool loss_last_repair(const LossAck *acks, int n, TimestampTz created_at, TimestampTz span_from,
							 TimestampTz span_to, TimestampTz *at);

#endif							/* FINALIZE_LOSS_SWEEP_H */
