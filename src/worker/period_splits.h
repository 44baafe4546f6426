/*
 * period_splits.h
 *     Where a commit-time table's next read splits its range: its period
 *     boundaries in the server's wall time (period_splits.c).
 */
#ifndef FINALIZE_PERIOD_SPLITS_H
#define FINALIZE_PERIOD_SPLITS_H

#include "worker/judge.h"

extern void job_splits(const SourceConfig *cfg, TimestampTz max_instant, TableJob *job);

#endif							/* FINALIZE_PERIOD_SPLITS_H */
