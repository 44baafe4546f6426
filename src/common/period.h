/*
 * period.h
 *     Period arithmetic of the verdict: pure functions, no catalog access.
 */
#ifndef FINALIZE_PERIOD_H
#define FINALIZE_PERIOD_H

#include "datatype/timestamp.h"

extern bool interval_usecs(const Interval *iv, int64 *out);
extern int64 period_stride(const Interval *granularity, const char *argname);
extern TimestampTz period_floor(TimestampTz ts, int64 stride, const char *argname);
extern TimestampTz period_end_of(TimestampTz start, int64 stride);
extern bool period_is_final(TimestampTz period_start, int64 stride,
							bool have_watermark, TimestampTz finalized_until);

#endif							/* FINALIZE_PERIOD_H */
