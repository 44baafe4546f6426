/*
 * period.h
 *     Period arithmetic of the verdict: pure functions, no catalog access,
 *     no error reporting (faults are returned), unit-tested in
 *     test/unit/test_period.c.
 *
 * A table's periods are cut in its zone (period_zone): the boundaries are
 * points of a grid of local wall times, each resolved to an instant. The
 * grid is that of a fixed stride counted from 2000-01-01 00:00 local time
 * (a stride of whole weeks written in days from Monday 2000-01-03, so that
 * '1 week' is the ISO week, unless the caller asks for 0.2.0's strides, as
 * the zoneless SQL forms do), or of calendar months (1, 2, 3, 4 or 6
 * months, or whole years, counted from January 2000). A wall time resolves to the earliest
 * instant that shows it, or, when none does (skipped by a DST gap), to the
 * instant the gap ends: so a DST day lasts 23 or 25 hours, a period whose
 * local start does not exist starts at the first instant after the gap,
 * and a repeated local hour belongs to one period only. In UTC wall time
 * is the instant, and the arithmetic is the plain integer arithmetic of
 * date_bin with origin 2000-01-01.
 */
#ifndef FINALIZE_PERIOD_H
#define FINALIZE_PERIOD_H

#include "datatype/timestamp.h"

/* A change of a zone's UTC offset: at instant `at`, from `before` to `after` seconds east. */
typedef struct ZoneChange
{
	TimestampTz at;
	int32		before;
	int32		after;
} ZoneChange;

/*
 * A time zone as the arithmetic sees it. NULL (or fixed with offset 0)
 * is UTC. The server's implementation reads PostgreSQL's zone library
 * (period_zone.c); the unit tests bring their own.
 */
typedef struct PeriodZone PeriodZone;
struct PeriodZone
{
	/* The UTC offset (seconds east) in effect at instant t. */
	int32		(*offset_at) (const PeriodZone *zone, TimestampTz t);

	/*
	 * The first change of offset strictly after `after` and at or before
	 * `until`; false when there is none.
	 */
	bool		(*next_change) (const PeriodZone *zone, TimestampTz after, TimestampTz until,
								ZoneChange *out);
	bool		fixed;			/* never changes offset: offset is `offset` */
	int32		offset;

	/*
	 * No change of offset after this instant (DT_NOEND: changes go on, as
	 * with DST): from then on the offset is offset_after, and the zone's
	 * periods are integer arithmetic (Asia/Seoul since 1988).
	 */
	TimestampTz fixed_after;
	int32		offset_after;
	const void *arg;			/* the implementation's own */
};

/* How a granularity cuts time. */
typedef enum PeriodUnit
{
	PERIOD_STRIDE,				/* a fixed length of wall time */
	PERIOD_MONTHS				/* calendar months */
} PeriodUnit;

/* The periods of a table: its granularity in its zone. */
typedef struct PeriodSpec
{
	PeriodUnit	unit;
	int64		stride;			/* PERIOD_STRIDE: microseconds of wall time */
	Timestamp	origin;			/* PERIOD_STRIDE: the grid's origin (local wall time) */
	int32		months;			/* PERIOD_MONTHS */
	const PeriodZone *zone;		/* NULL: UTC */
	Interval	granularity;	/* as given, for messages */
} PeriodSpec;

/* What is wrong with a granularity, if anything. */
typedef enum GranularityFault
{
	GRANULARITY_OK,
	GRANULARITY_MIXED_MONTHS,	/* months together with days or hours */
	GRANULARITY_BAD_MONTHS,		/* months that do not tile a year */
	GRANULARITY_OUT_OF_RANGE,
	GRANULARITY_NOT_POSITIVE
} GranularityFault;

/* What went wrong computing a period. */
typedef enum PeriodFault
{
	PERIOD_OK,
	PERIOD_INFINITE,			/* an infinite instant lies in no period */
	PERIOD_BEFORE_RANGE,		/* the period starts before the timestamp range */
	PERIOD_ZONE_FAILED			/* the zone gave no consistent answer */
} PeriodFault;

/* Microseconds in 15 minutes: every zone in use today is offset by a multiple. */
#define PERIOD_OFFSET_QUANTUM (15 * 60 * USECS_PER_SEC)

extern bool interval_usecs(const Interval *iv, int64 *out);
extern GranularityFault period_spec_make(const Interval *granularity, const PeriodZone *zone,
										 bool iso_weeks, PeriodSpec *out);
extern PeriodFault period_floor(const PeriodSpec *spec, TimestampTz ts, TimestampTz *start);
extern TimestampTz period_end_of(const PeriodSpec *spec, TimestampTz start);
extern bool period_is_final(const PeriodSpec *spec, TimestampTz period_start,
							bool have_watermark, TimestampTz finalized_until);
extern bool period_is_utc(const PeriodSpec *spec);

/* Local wall time and the calendar, as the arithmetic computes them. */
extern Timestamp period_wall_time(const PeriodZone *zone, TimestampTz t);
extern PeriodFault period_resolve_wall(const PeriodZone *zone, Timestamp wall, TimestampTz *out);
extern int64 civil_to_days(int year, int month, int day);

/* A calendar unit counted from 1970-01-01 00:00 UTC, as Iceberg's time transforms count. */
typedef enum EpochUnit
{
	EPOCH_YEAR,
	EPOCH_MONTH,
	EPOCH_DAY,
	EPOCH_HOUR
} EpochUnit;

extern bool epoch_unit_of(const char *transform, EpochUnit *unit);
extern bool epoch_unit_span(EpochUnit unit, int64 n, TimestampTz *start, TimestampTz *end);
extern bool epoch_unit_parse(EpochUnit unit, const char *text, int64 *n);
extern void days_to_civil(int64 days, int *year, int *month, int *day);

#endif							/* FINALIZE_PERIOD_H */
