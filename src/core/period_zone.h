/*
 * period_zone.h
 *     The period arithmetic in the server: zones from PostgreSQL's zone
 *     library, and the errors its faults become.
 */
#ifndef FINALIZE_PERIOD_ZONE_H
#define FINALIZE_PERIOD_ZONE_H

#include "pgtime.h"

#include "core/period.h"

extern bool period_zone_lookup(const char *name, const PeriodZone **zone);
extern const PeriodZone *period_zone_of(const char *name, const char *argname);
extern const PeriodZone *period_zone_of_tz(const pg_tz *tz);
extern char *period_zone_name(const char *name);
extern char *period_zone_canonical(const char *name, const char *argname);
extern void period_spec_of(const Interval *granularity, const PeriodZone *zone, bool iso_weeks,
						   const char *argname, PeriodSpec *out);
extern TimestampTz period_start_of(const PeriodSpec *spec, TimestampTz ts, const char *argname);
extern char *period_format_local(const PeriodZone *zone, TimestampTz ts);

/* What is wrong with a span of periods [start, end), if anything. */
typedef enum PeriodSpanFault
{
	SPAN_OK,
	SPAN_START_OFF,				/* start is no boundary */
	SPAN_END_NOT_AFTER,			/* end is not after start */
	SPAN_END_OFF				/* end is no boundary */
} PeriodSpanFault;

extern PeriodSpanFault period_span_check(const PeriodSpec *spec, TimestampTz start, bool has_end,
										 TimestampTz end, TimestampTz *span_end, TimestampTz *near);
extern char *period_nearest_text(const PeriodSpec *spec, const char *zone_name, TimestampTz near);
extern TimestampTz period_span_end(const PeriodSpec *spec, const char *zone_name, TimestampTz start,
								   bool has_end, TimestampTz end, const char *start_name,
								   const char *end_name, const char *what);

#endif							/* FINALIZE_PERIOD_ZONE_H */
