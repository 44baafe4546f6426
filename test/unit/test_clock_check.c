/*
 * Unit tests of the checks of SQL Server's times (clock_check.c): zone,
 * commits ahead of the clock, a clock stepped back between two reads, clock
 * skew and stall, at their boundaries; and what a table's read says of a
 * clock that went back.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "worker/clock_check.h"

#include "tap.h"

/* A consistent reading: SQL Server at UTC+1, a commit 5 s before its clock. */
static SourceTimes
sane(void)
{
	SourceTimes t;

	t.server_now = (TimestampTz) 800000000 * USECS_PER_SEC;
	t.reported_offset_s = 3600;
	t.expected_offset_s = 3600;
	t.max_instant = t.server_now - 5 * USECS_PER_SEC;
	t.pg_now = t.server_now;
	t.max_skew_usecs = 300 * USECS_PER_SEC;
	t.stall_usecs = 15 * 60 * USECS_PER_SEC;
	t.tolerance_usecs = 60 * USECS_PER_SEC;
	t.has_previous = false;
	t.previous_max = 0;
	return t;
}

int
main(void)
{
	SourceTimes t = sane();

	check(check_source_times(&t) == TIMES_OK && !capture_stalled(&t), "a consistent reading passes");

	t.expected_offset_s = 7200;
	check(check_source_times(&t) == TIMES_ZONE_MISMATCH, "a timezone option off by an hour stops the cycle");
	t.expected_offset_s = 3600 + 30 * 60;
	check(check_source_times(&t) == TIMES_ZONE_MISMATCH, "off by half an hour too");
	t = sane();
	t.expected_offset_s = 0;
	t.reported_offset_s = (int64) 1073741824 * 60;
	check(check_source_times(&t) == TIMES_ZONE_MISMATCH,
		  "an offset that would wrap to zero in 32 bits is still a mismatch");
	t = sane();
	t.max_instant = t.server_now + 3600 * USECS_PER_SEC;
	t.pg_now = t.server_now + 7200 * USECS_PER_SEC;
	t.expected_offset_s = 0;
	check(check_source_times(&t) == TIMES_ZONE_MISMATCH, "the zone is checked first");

	t = sane();
	t.max_instant = t.server_now + t.tolerance_usecs + DATETIME_ROUNDING_USECS;
	check(check_source_times(&t) == TIMES_OK,
		  "a commit exactly the clock_tolerance (and a datetime's rounding) ahead of the clock passes");
	t.max_instant += 1;
	check(check_source_times(&t) == TIMES_COMMIT_AHEAD, "one microsecond beyond it does not");
	t.tolerance_usecs = 5 * 60 * USECS_PER_SEC;
	check(check_source_times(&t) == TIMES_OK, "a larger clock_tolerance accepts it");
	t.tolerance_usecs = 0;
	t.max_instant = t.server_now + DATETIME_ROUNDING_USECS;
	check(check_source_times(&t) == TIMES_OK, "with no tolerance a commit rounded up to its tick still passes");
	t.max_instant = t.server_now + USECS_PER_SEC;
	check(check_source_times(&t) == TIMES_COMMIT_AHEAD, "with no tolerance a commit a second ahead does not");
	t.max_instant = t.server_now + 3600 * USECS_PER_SEC;
	check(check_source_times(&t) == TIMES_COMMIT_AHEAD, "commits stamped an hour ahead (another zone) stop the cycle");
	t.max_instant = PG_INT64_MAX;
	t.server_now = PG_INT64_MIN + 1;
	t.pg_now = t.server_now;
	check(check_source_times(&t) == TIMES_COMMIT_AHEAD, "an overflowing difference counts as ahead");

	/* The clock went back between two reads: behind a max LSN commit time read before. */
	t = sane();
	t.has_previous = true;
	t.previous_max = t.server_now + t.tolerance_usecs + DATETIME_ROUNDING_USECS;
	check(check_source_times(&t) == TIMES_OK, "a clock back by exactly the tolerance since the last read passes");
	t.previous_max += 1;
	check(check_source_times(&t) == TIMES_CLOCK_BACK, "one microsecond more is a clock stepped back too far");
	t.has_previous = false;
	check(check_source_times(&t) == TIMES_OK, "without an earlier read there is nothing to compare");
	t.has_previous = true;
	t.max_instant = t.server_now + 3600 * USECS_PER_SEC;
	check(check_source_times(&t) == TIMES_COMMIT_AHEAD, "a commit ahead of the clock is checked first");
	t = sane();
	t.has_previous = true;
	t.previous_max = PG_INT64_MAX;
	t.server_now = PG_INT64_MIN + 1;
	t.max_instant = t.server_now;
	t.pg_now = t.server_now;
	check(check_source_times(&t) == TIMES_CLOCK_BACK, "an overflowing difference counts as a step back");

	t = sane();
	t.server_now = t.pg_now + t.max_skew_usecs;
	t.max_instant = t.server_now;
	check(check_source_times(&t) == TIMES_OK, "a clock ahead by exactly the allowed skew passes");
	t.server_now += 1;
	check(check_source_times(&t) == TIMES_CLOCK_SKEW, "one microsecond more is skew");
	t = sane();
	t.pg_now = t.server_now + 86400 * USECS_PER_SEC;
	check(check_source_times(&t) == TIMES_OK, "SQL Server's clock behind PostgreSQL's only lags the verdict");

	t = sane();
	t.max_instant = t.server_now - t.stall_usecs;
	check(!capture_stalled(&t), "a commit exactly the threshold behind the clock is not a stall");
	t.max_instant -= 1;
	check(capture_stalled(&t), "one microsecond more is a stall");
	check(check_source_times(&t) == TIMES_OK, "a stall does not stop the cycle (it only sets the condition)");
	t.max_instant = PG_INT64_MAX;
	t.server_now = PG_INT64_MIN + 1;
	check(capture_stalled(&t), "an overflowing lag counts as a stall");

	/* What one table's read says of the clock (times in whole hours from h0). */
	{
		TimestampTz h0 = (TimestampTz) 800000000 * USECS_PER_SEC;
		TimestampTz h = USECS_PER_HOUR;

		check(clock_step_of(h0 + h + 1, true, h0 + h, true, h0 + h, false) == CLOCK_STEADY,
			  "commits after the previous read's period and the verdict are steady");
		check(clock_step_of(h0 + h - 1, true, h0 + h, false, 0, false) == CLOCK_WENT_BACK,
			  "a commit in an earlier period than the previous read's max commit time went back");
		check(clock_step_of(h0 + h - 1, true, h0 + h, true, h0, false) == CLOCK_WENT_BACK,
			  "in a period not final yet, the verdict did not run ahead");
		check(clock_step_of(h0 + h - 1, true, h0 + h, true, h0 + h, false) == CLOCK_RAN_AHEAD,
			  "in a period already final, the verdict ran ahead");
		check(clock_step_of(h0 + h - 1, false, 0, true, h0 + h, false) == CLOCK_RAN_AHEAD,
			  "whatever the previous read says");
		check(clock_step_of(h0 + h, true, h0 + h, true, h0 + h, false) == CLOCK_STEADY,
			  "a commit at the verdict's boundary lies in a period not final yet");
		check(clock_step_of(h0 + 2 * h, true, h0 + h, true, h0 + h, true) == CLOCK_WENT_BACK,
			  "commits out of order across a boundary within the read went back");
		check(clock_step_of(h0, false, 0, false, 0, false) == CLOCK_STEADY,
			  "a table's first read has nothing to compare");
	}

	return tap_done();
}
