/*
 * file_bounds.c
 *     What a data file's bounds of the time column prove: the instants
 *     [lo, hi) every value of the column in the file lies in (Iceberg's
 *     spec: a lower bound is at most, an upper bound at least, every
 *     non-null value), and whether that lies inside a release's periods.
 *     Bounds say nothing of the rows where the column is null: only the
 *     file's null count of the column (0) shows there are none, and a row
 *     without a time belongs to no period (it could stand in for a missing
 *     row of the periods in a count).
 *
 * Instants are microseconds since 1970-01-01 00:00 UTC. A date holds a
 * whole day, a microsecond value the microsecond [v, v + 1), a nanosecond
 * value the microsecond it falls in. A value of a column without a zone
 * (timestamp, date) is read as UTC, as Iceberg's time transforms read it:
 * the caller decides whether that proves anything. A value too far out to
 * be an instant saturates, which no period contains. Pure: no PostgreSQL.
 */
#include <string.h>

#include "publish/file_bounds.h"

#define USECS_PER_DAY INT64_C(86400000000)

/*
 * The unit of a column of an Iceberg type and whether it has a zone;
 * false for a type that is no date or time of day with a date.
 */
bool
time_column_type(const char *iceberg_type, TimeUnit *unit, bool *zoned)
{
	static const struct
	{
		const char *name;
		TimeUnit	unit;
		bool		zoned;
	}			types[] = {
		{"date", TIME_DAYS, false}, {"timestamp", TIME_MICROS, false}, {"timestamptz", TIME_MICROS, true},
		{"timestamp_ns", TIME_NANOS, false}, {"timestamptz_ns", TIME_NANOS, true},
	};

	for (size_t i = 0; iceberg_type != NULL && i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(iceberg_type, types[i].name) == 0)
		{
			*unit = types[i].unit;
			*zoned = types[i].zoned;
			return true;
		}
	return false;
}

/* A little-endian integer of n bytes (4 or 8), sign-extended. */
static int64_t
little_endian(const char *p, size_t n)
{
	uint64_t	v = 0;

	for (size_t i = 0; i < n; i++)
		v |= (uint64_t) (unsigned char) p[i] << (8 * i);
	if (n == 4)
		return (int64_t) (int32_t) (uint32_t) v;
	return (int64_t) v;
}

/* a * b + c, saturated to the int64 range. */
static int64_t
saturated(int64_t a, int64_t b, int64_t c)
{
	int64_t		m;
	int64_t		r;

	if (__builtin_mul_overflow(a, b, &m) || __builtin_add_overflow(m, c, &r))
		return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
	return r;
}

/* a divided by b (positive), rounded down. */
static int64_t
floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && a < 0);
}

/*
 * The first instant a lower bound allows (upper: the instant just after
 * the last one an upper bound allows); false when its bytes are not the
 * unit's length.
 */
static bool
bound_instant(TimeUnit unit, const IcebergBound *b, bool upper, int64_t *out)
{
	int64_t		v;

	if (b->len != (unit == TIME_DAYS ? 4 : 8))
		return false;
	v = little_endian(b->value, b->len);
	if (unit == TIME_DAYS)
		*out = saturated(v, USECS_PER_DAY, upper ? USECS_PER_DAY : 0);
	else if (unit == TIME_MICROS)
		*out = saturated(v, 1, upper ? 1 : 0);
	else
		*out = saturated(floor_div(v, 1000), 1, upper ? 1 : 0);
	return true;
}

/*
 * The one element of a column in a map of n items of size bytes, each
 * beginning with its column's id (IcebergBound, IcebergCount), or NULL;
 * *twice when it is there more than once.
 */
static const void *
find_column(const void *map, int n, size_t size, int32_t field_id, bool *twice)
{
	const void *found = NULL;

	for (int i = 0; i < n; i++)
	{
		const void *item = (const char *) map + i * size;
		int32_t		id;

		memcpy(&id, item, sizeof(id));
		if (id == field_id)
		{
			*twice |= found != NULL;
			found = item;
		}
	}
	return found;
}

/*
 * What a data file's bounds and null count of the column prove against
 * [start_us, end_us): its values lie in [*lo_us, *hi_us) (set when both
 * bounds are readable), inside the span or not, and none is null.
 */
BoundsProof
file_bounds_prove(const TimeColumn *col, const IcebergManifestEntry *e, int64_t start_us, int64_t end_us,
				  int64_t *lo_us, int64_t *hi_us)
{
	bool		twice = false;
	const IcebergBound *lower = find_column(e->lower_bounds, e->nlower_bounds, sizeof(IcebergBound),
											col->field_id, &twice);
	const IcebergBound *upper = find_column(e->upper_bounds, e->nupper_bounds, sizeof(IcebergBound),
											col->field_id, &twice);
	const IcebergCount *nulls = find_column(e->null_value_counts, e->nnull_value_counts, sizeof(IcebergCount),
											col->field_id, &twice);

	if (twice)
		return BOUNDS_MALFORMED;
	if (nulls != NULL && nulls->count != 0)
		return BOUNDS_NULLS;	/* a file of nulls alone has no bounds */
	if (lower == NULL || upper == NULL)
		return BOUNDS_MISSING;
	if (!bound_instant(col->unit, lower, false, lo_us) || !bound_instant(col->unit, upper, true, hi_us) ||
		*lo_us >= *hi_us)
		return BOUNDS_MALFORMED;
	if (*lo_us < start_us || *hi_us > end_us)
		return BOUNDS_OUTSIDE;
	return nulls != NULL ? BOUNDS_INSIDE : BOUNDS_MISSING;
}
