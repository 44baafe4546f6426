/*
 * file_bounds.h
 *     What a data file's lower and upper bounds and null count of a
 *     release's time column prove about the instants its rows hold
 *     (file_bounds.c, pure: no
 *     PostgreSQL, no I/O). Bounds are Iceberg's single-value binary
 *     serialization: a date is 4 bytes little-endian days since
 *     1970-01-01, a timestamp 8 bytes little-endian microseconds (or
 *     nanoseconds for the _ns types) since 1970-01-01 00:00.
 */
#ifndef FINALIZE_PUBLISH_FILE_BOUNDS_H
#define FINALIZE_PUBLISH_FILE_BOUNDS_H

#include <stdbool.h>
#include <stdint.h>

#include "lake/avro_manifest.h"

/* How a time column's values, and so its bounds, are written. */
typedef enum TimeUnit
{
	TIME_DAYS,					/* date */
	TIME_MICROS,				/* timestamp, timestamptz */
	TIME_NANOS					/* timestamp_ns, timestamptz_ns */
} TimeUnit;

/* A time column of the table: the id its bounds are keyed by. */
typedef struct TimeColumn
{
	int32_t		field_id;
	TimeUnit	unit;
	bool		zoned;			/* timestamptz: its values are instants */
} TimeColumn;

/* What a data file's bounds and null count prove against a span of instants. */
typedef enum BoundsProof
{
	BOUNDS_INSIDE,				/* every row's value lies in the span */
	BOUNDS_OUTSIDE,				/* a value may lie outside it */
	BOUNDS_NULLS,				/* some rows' value is null: rows of no period */
	BOUNDS_MISSING,				/* no lower or upper bound, or no null count,
								 * of the column */
	BOUNDS_MALFORMED			/* a bound of another length, a lower bound
								 * above the upper, or a column given twice */
} BoundsProof;

extern bool time_column_type(const char *iceberg_type, TimeUnit *unit, bool *zoned);
extern BoundsProof file_bounds_prove(const TimeColumn *col, const IcebergManifestEntry *e, int64_t start_us,
									 int64_t end_us, int64_t *lo_us, int64_t *hi_us);

#endif							/* FINALIZE_PUBLISH_FILE_BOUNDS_H */
