/*
 * Unit tests of the checks of SQL Server's times (clock_check.c): zone,
 * commits ahead of the clock, clock skew and stall, at their boundaries.
 * Built and run by test/integration/test_unit_c.py; prints TAP.
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
	t.max_instant = t.server_now + (int64) COMMIT_AHEAD_TOLERANCE_S * USECS_PER_SEC;
	check(check_source_times(&t) == TIMES_OK, "a commit exactly at the tolerance ahead of the clock passes");
	t.max_instant += 1;
	check(check_source_times(&t) == TIMES_COMMIT_AHEAD, "one microsecond beyond it does not");
	t.max_instant = t.server_now + 3600 * USECS_PER_SEC;
	check(check_source_times(&t) == TIMES_COMMIT_AHEAD, "commits stamped an hour ahead (another zone) stop the cycle");
	t.max_instant = PG_INT64_MAX;
	t.server_now = PG_INT64_MIN + 1;
	t.pg_now = t.server_now;
	check(check_source_times(&t) == TIMES_COMMIT_AHEAD, "an overflowing difference counts as ahead");

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

	return tap_done();
}
