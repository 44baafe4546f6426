/*
 * event_time_sql.h
 *     Lateness sketches as stored (bytea), shared by the SQL functions and
 *     the worker that records them.
 */
#ifndef FINALIZE_EVENT_TIME_SQL_H
#define FINALIZE_EVENT_TIME_SQL_H

#include "core/sketch.h"

extern bytea *sketch_bytea(Sketch *s);

#endif							/* FINALIZE_EVENT_TIME_SQL_H */
