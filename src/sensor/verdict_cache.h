/*
 * verdict_cache.h
 *     Per-backend cache of verdicts for the sensor functions.
 */
#ifndef FINALIZE_VERDICT_CACHE_H
#define FINALIZE_VERDICT_CACHE_H

#include "sensor/catalog.h"

extern void verdict_cache_read(Datum table_name, TrackedVerdict *out);

#endif							/* FINALIZE_VERDICT_CACHE_H */
