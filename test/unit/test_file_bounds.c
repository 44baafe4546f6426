/*
 * Unit tests of what a data file's bounds of a release's time column prove
 * (publish/file_bounds.c): Iceberg's single-value serialization of a date
 * (4 bytes little-endian days), a timestamp and timestamptz (8 bytes
 * little-endian microseconds) and the _ns types (nanoseconds), compared
 * with a period [start, end): bounds inside, touching either end, one
 * microsecond or nanosecond over, a date's whole day, before 1970, a
 * missing lower or upper bound, a column given twice, bounds of the wrong
 * length, a lower bound above the upper, values too far out to be
 * instants, rows where the column is null (or no null count to say there
 * are none), and the types that are no time column. Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "publish/file_bounds.h"

#include "tap.h"

#define HOUR_US INT64_C(3600000000)
#define DAY_US (24 * HOUR_US)
/* 2026-11-02 09:00 UTC, in microseconds since 1970 */
#define T09 (INT64_C(1793610000) * 1000000)

static char bytes[8][8];
static IcebergBound lows[4];
static IcebergBound highs[4];
static IcebergCount nulls[4];
static IcebergManifestEntry entry;

/* Serializes v as n little-endian bytes into slot k. */
static const char *
le(int k, int64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		bytes[k][i] = (char) ((uint64_t) v >> (8 * i));
	return bytes[k];
}

/*
 * An entry whose column 3 has the bounds lo and hi (n bytes each) and no
 * null value; other columns too (column 1 has nulls).
 */
static const IcebergManifestEntry *
file_with(int64_t lo, int64_t hi, size_t n)
{
	memset(&entry, 0, sizeof(entry));
	lows[0] = (IcebergBound) {1, "ab", 2};
	lows[1] = (IcebergBound) {3, le(0, lo, n), n};
	highs[0] = (IcebergBound) {3, le(1, hi, n), n};
	highs[1] = (IcebergBound) {1, "zz", 2};
	entry.lower_bounds = lows;
	entry.nlower_bounds = 2;
	entry.upper_bounds = highs;
	entry.nupper_bounds = 2;
	nulls[0] = (IcebergCount) {1, 7};
	nulls[1] = (IcebergCount) {3, 0};
	entry.null_value_counts = nulls;
	entry.nnull_value_counts = 2;
	return &entry;
}

/* The proof of entry e over the hour [09:00, 10:00) of 2026-11-02 for a column of unit. */
static BoundsProof
prove(const IcebergManifestEntry *e, TimeUnit unit, int64_t *lo, int64_t *hi)
{
	TimeColumn	col = {3, unit, true};

	return file_bounds_prove(&col, e, T09, T09 + HOUR_US, lo, hi);
}

static void
test_micros(void)
{
	int64_t		lo,
				hi;

	check(prove(file_with(T09 + 600000000, T09 + 3000000000, 8), TIME_MICROS, &lo, &hi) == BOUNDS_INSIDE &&
		  lo == T09 + 600000000 && hi == T09 + 3000000001,
		  "microseconds: 09:10 to 09:50 lie inside [09:00, 10:00): [lo, last value + 1 us)");
	check(prove(file_with(T09, T09 + HOUR_US - 1, 8), TIME_MICROS, &lo, &hi) == BOUNDS_INSIDE,
		  "microseconds: exactly 09:00:00 to 09:59:59.999999 is inside");
	check(prove(file_with(T09 - 1, T09 + 10, 8), TIME_MICROS, &lo, &hi) == BOUNDS_OUTSIDE,
		  "microseconds: one microsecond before 09:00 is outside");
	check(prove(file_with(T09, T09 + HOUR_US, 8), TIME_MICROS, &lo, &hi) == BOUNDS_OUTSIDE,
		  "microseconds: 10:00:00 exactly is outside (the end is exclusive)");
	check(prove(file_with(T09 - 60000000, T09 + 600000000, 8), TIME_MICROS, &lo, &hi) == BOUNDS_OUTSIDE,
		  "microseconds: an 08:59 row with 09:10 rows (the issue's unpartitioned table) is outside");
	check(prove(file_with(INT64_MIN, INT64_MAX, 8), TIME_MICROS, &lo, &hi) == BOUNDS_OUTSIDE &&
		  hi == INT64_MAX, "microseconds: the extremes saturate, never wrap into the period");
	check(prove(file_with(-1, 5, 8), TIME_MICROS, &lo, &hi) == BOUNDS_OUTSIDE && lo == -1,
		  "microseconds: before 1970 (negative) is read signed");
}

static void
test_nanos(void)
{
	int64_t		lo,
				hi;

	check(prove(file_with(T09 * 1000, (T09 + HOUR_US) * 1000 - 1, 8), TIME_NANOS, &lo, &hi) == BOUNDS_INSIDE &&
		  lo == T09 && hi == T09 + HOUR_US,
		  "nanoseconds: 09:00:00.000000000 to 09:59:59.999999999 is inside");
	check(prove(file_with(T09 * 1000 - 1, T09 * 1000 + 5, 8), TIME_NANOS, &lo, &hi) == BOUNDS_OUTSIDE &&
		  lo == T09 - 1, "nanoseconds: one nanosecond before 09:00 is outside");
	check(prove(file_with(T09 * 1000, (T09 + HOUR_US) * 1000, 8), TIME_NANOS, &lo, &hi) == BOUNDS_OUTSIDE,
		  "nanoseconds: 10:00:00.000000000 is outside");
	check(prove(file_with(-1500, -1, 8), TIME_NANOS, &lo, &hi) == BOUNDS_OUTSIDE && lo == -2 && hi == 0,
		  "nanoseconds: before 1970 they round down to their microsecond");
}

static void
test_days(void)
{
	int64_t		lo,
				hi;
	TimeColumn	col = {3, TIME_DAYS, false};
	int64_t		day = T09 / DAY_US;		/* 2026-11-02 */

	check(file_bounds_prove(&col, file_with(day, day, 4), day * DAY_US, (day + 1) * DAY_US, &lo, &hi) ==
		  BOUNDS_INSIDE && lo == day * DAY_US && hi == (day + 1) * DAY_US,
		  "a date holds its whole day: inside that day");
	check(file_bounds_prove(&col, file_with(day, day, 4), T09, T09 + HOUR_US, &lo, &hi) == BOUNDS_OUTSIDE,
		  "a date is outside one hour of its day (a day on one hour's finality is refused)");
	check(file_bounds_prove(&col, file_with(day, day + 1, 4), day * DAY_US, (day + 1) * DAY_US, &lo, &hi) ==
		  BOUNDS_OUTSIDE, "dates: the next day is outside");
	check(file_bounds_prove(&col, file_with(-1, -1, 4), -DAY_US, 0, &lo, &hi) == BOUNDS_INSIDE,
		  "dates: 1969-12-31 (negative days) is its own day");
	check(file_bounds_prove(&col, file_with(INT32_MIN, INT32_MAX, 4), INT64_MIN, INT64_MAX, &lo, &hi) !=
		  BOUNDS_MALFORMED, "dates: the extreme days are read (saturated), not refused as malformed");
}

static void
test_refusals(void)
{
	int64_t		lo,
				hi;
	const IcebergManifestEntry *e;

	e = file_with(T09, T09 + 10, 8);
	entry.nupper_bounds = 0;
	check(prove(e, TIME_MICROS, &lo, &hi) == BOUNDS_MISSING, "no upper bound of the column: missing");
	e = file_with(T09, T09 + 10, 8);
	entry.lower_bounds = lows;
	entry.nlower_bounds = 1;	/* only column 1's */
	check(prove(e, TIME_MICROS, &lo, &hi) == BOUNDS_MISSING, "no lower bound of the column: missing");
	memset(&entry, 0, sizeof(entry));
	check(prove(&entry, TIME_MICROS, &lo, &hi) == BOUNDS_MISSING,
		  "no bounds at all (write.metadata.metrics.default=none): missing");
	e = file_with(T09, T09 + 10, 8);
	lows[2] = (IcebergBound) {3, le(2, T09 + 5, 8), 8};
	entry.nlower_bounds = 3;
	check(prove(e, TIME_MICROS, &lo, &hi) == BOUNDS_MALFORMED, "a column's bound given twice: malformed");
	check(prove(file_with(T09, T09 + 10, 4), TIME_MICROS, &lo, &hi) == BOUNDS_MALFORMED,
		  "a timestamp's bound of 4 bytes: malformed");
	check(prove(file_with(20000, 20000, 8), TIME_DAYS, &lo, &hi) == BOUNDS_MALFORMED,
		  "a date's bound of 8 bytes: malformed");
	check(prove(file_with(T09 + 600000000, T09 - 60000000, 8), TIME_MICROS, &lo, &hi) == BOUNDS_MALFORMED,
		  "a lower bound (09:10) above the upper bound (08:59): malformed, never inside");
}

static void
test_nulls(void)
{
	int64_t		lo,
				hi;
	const IcebergManifestEntry *e;

	e = file_with(T09 + 600000000, T09 + 1800000000, 8);
	nulls[1].count = 1;
	check(prove(e, TIME_MICROS, &lo, &hi) == BOUNDS_NULLS,
		  "bounds inside, one row whose time is null (a row of no period): nulls");
	e = file_with(T09 + 600000000, T09 + 1800000000, 8);
	entry.nnull_value_counts = 1;	/* only column 1's */
	check(prove(e, TIME_MICROS, &lo, &hi) == BOUNDS_MISSING,
		  "bounds inside, no null count of the column (metrics that leave it out): missing");
	e = file_with(T09 + 600000000, T09 + 1800000000, 8);
	entry.nlower_bounds = entry.nupper_bounds = 0;
	nulls[1].count = 4;
	check(prove(e, TIME_MICROS, &lo, &hi) == BOUNDS_NULLS, "no bounds, every row null: nulls, not missing");
	e = file_with(T09 - 60000000, T09 + 1800000000, 8);
	nulls[1].count = 1;
	check(prove(e, TIME_MICROS, &lo, &hi) != BOUNDS_INSIDE, "bounds outside and a null: never inside");
	e = file_with(T09 + 600000000, T09 + 1800000000, 8);
	nulls[2] = (IcebergCount) {3, 1};
	entry.nnull_value_counts = 3;
	check(prove(e, TIME_MICROS, &lo, &hi) == BOUNDS_MALFORMED, "a column's null count given twice: malformed");
}

static void
test_types(void)
{
	TimeUnit	unit = TIME_DAYS;
	bool		zoned = true;
	bool		ok = true;
	const char *const no[] = {"string", "long", "int", "time", "timestamp_tz", "", "decimal(9,2)"};

	ok = time_column_type("timestamptz", &unit, &zoned) && unit == TIME_MICROS && zoned &&
		time_column_type("timestamp", &unit, &zoned) && unit == TIME_MICROS && !zoned &&
		time_column_type("timestamptz_ns", &unit, &zoned) && unit == TIME_NANOS && zoned &&
		time_column_type("timestamp_ns", &unit, &zoned) && unit == TIME_NANOS && !zoned &&
		time_column_type("date", &unit, &zoned) && unit == TIME_DAYS && !zoned;
	check(ok, "time columns: timestamptz and timestamptz_ns have a zone; timestamp, timestamp_ns and date not");
	ok = !time_column_type(NULL, &unit, &zoned);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		ok = ok && !time_column_type(no[i], &unit, &zoned);
	check(ok, "no time column: strings, numbers, a time of day, a nested type (NULL), misspellings");
}

int
main(void)
{
	test_micros();
	test_nanos();
	test_days();
	test_refusals();
	test_nulls();
	test_types();
	return tap_done();
}
