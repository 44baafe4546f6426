/*
 * timeconv.h
 *     SQL Server local commit times to instants, conservatively.
 */
#ifndef FINALIZE_TIMECONV_H
#define FINALIZE_TIMECONV_H

#include "datatype/timestamp.h"
#include "pgtime.h"

extern TimestampTz local_to_instant_earliest(Timestamp local, const pg_tz *tz);
extern TimestampTz local_to_instant_latest(Timestamp local, const pg_tz *tz);
extern long local_offset_at(TimestampTz instant, const pg_tz *tz);
extern void local_offset_range(const pg_tz *tz, TimestampTz from, TimestampTz to, long *min_s, long *max_s);

#endif							/* FINALIZE_TIMECONV_H */
