/*
 * Unit tests of the pure part of the loss rule (loss_sweep.c): how far a
 * table's acknowledgements reach from an instant, joined when adjacent or
 * overlapping, counted only when recorded after the loss, whatever order
 * they were read in; and when a loss was last repaired where it happened.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "sensor/loss_sweep.h"

#include "tap.h"

/* An hour, and hour h of a day, in microseconds (the instants are arbitrary). */
#define HOUR USECS_PER_HOUR
#define H(h) ((TimestampTz) (h) * HOUR)

/* The reach of acks (sorted first) from s toward e, for a loss recorded at since. */
static TimestampTz
reach_of(LossAck *acks, int n, TimestampTz s, TimestampTz e, TimestampTz since)
{
	loss_acks_sort(acks, n);
	return loss_ack_reach(acks, n, s, e, since);
}

/* Gaps, joins and the recorded-after rule of loss_ack_reach. */
static void
test_reach(void)
{
	LossAck		none[1];
	LossAck		gap[] = {{H(10), H(11), 5}, {H(12), H(13), 5}};
	LossAck		joined[] = {{H(12), H(14), 5}, {H(10), H(12), 5}, {H(11), H(13), 5}};
	LossAck		before[] = {{H(10), H(11), 5}, {H(11), H(13), 1}};
	LossAck		nested[] = {{H(9), H(15), 5}, {H(10), H(11), 5}};
	LossAck		later_start[] = {{H(11), H(13), 5}};
	LossAck		open_end[] = {{H(10), DT_NOEND, 5}};

	check(reach_of(none, 0, H(10), H(13), 0) == H(10), "no acknowledgement reaches nowhere");
	check(reach_of(gap, 2, H(10), H(13), 0) == H(11), "a gap stops the reach at its start");
	check(reach_of(joined, 3, H(10), H(13), 0) >= H(13), "adjacent and overlapping ones join, in any order read");
	check(reach_of(joined, 3, H(10), H(13), 0) == H(14), "the reach may pass e, to the end of what is covered");
	check(reach_of(before, 2, H(10), H(13), 3) == H(11), "one recorded before the loss does not count");
	check(reach_of(before, 2, H(10), H(13), 0) == H(13), "the same one counts for an earlier loss");
	check(reach_of(before, 2, H(10), H(13), 5) == H(10), "one recorded at the loss's own instant does not count");
	check(reach_of(nested, 2, H(10), H(13), 0) == H(15), "one starting before s covers from s");
	check(reach_of(later_start, 1, H(10), H(13), 0) == H(10), "one starting after s leaves s open");
	check(reach_of(gap, 2, H(13), H(13), 0) == H(13), "an empty span is reached where it starts");
	check(reach_of(open_end, 1, H(10), DT_NOEND, 0) == DT_NOEND, "an endless one covers an endless span");
}

/* loss_last_repair: the latest acknowledgement after the loss meeting its span. */
static void
test_last_repair(void)
{
	LossAck		acks[] = {{H(10), H(11), 7}, {H(12), H(13), 9}, {H(5), H(6), 20}, {H(10), H(11), 2}};
	TimestampTz at = 0;

	check(loss_last_repair(acks, 4, 3, H(10), H(13), &at) && at == 9,
		  "the latest one after the loss that meets the span");
	check(!loss_last_repair(acks, 4, 9, H(10), H(13), &at), "none after the loss: never repaired");
	check(!loss_last_repair(acks, 4, 0, H(11), H(12), &at), "touching the span's ends does not meet it");
	check(loss_last_repair(acks, 4, 0, H(10), H(11), &at) && at == 7, "one recorded before the loss is ignored");
}

/* Runs every check. */
int
main(void)
{
	test_reach();
	test_last_repair();
	return tap_done();
}
