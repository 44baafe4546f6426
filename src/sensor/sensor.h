/*
 * sensor.h
 *     is_final's answer and argument checks, shared by the sensor functions
 *     and wait_final.
 */
#ifndef FINALIZE_SENSOR_H
#define FINALIZE_SENSOR_H

#include "datatype/timestamp.h"
#include "fmgr.h"

extern void sensor_require_table_name(FunctionCallInfo fcinfo);
extern void sensor_require_period_start(FunctionCallInfo fcinfo);
extern Datum *sensor_table_names_arg(FunctionCallInfo fcinfo, int *count);
extern bool sensor_period_final(const Datum *names, int count, TimestampTz ts, int64 *holding);

#endif							/* FINALIZE_SENSOR_H */
