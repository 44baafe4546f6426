/*
 * clock_steps.h
 *     SQL Server's clock: why a cycle's times cannot be trusted, the hold
 *     that stops a source's reads then, a table's read that shows the clock
 *     went back across a period boundary, and its record (clock_steps.c).
 */
#ifndef FINALIZE_CLOCK_STEPS_H
#define FINALIZE_CLOCK_STEPS_H

#include "worker/cycle.h"
#include "worker/judge.h"

extern Condition time_problem(TimeProblem problem, const SourceTimes *t, const SourceConfig *cfg,
							  const CdcState *snap, char **message);
extern void judge_clock_step(const SourceConfig *cfg, const TableJob *job, TableWrite *w);
extern void record_clock_step(const TableWrite *w);
extern void record_clock_went_back(const char *server_name, TimestampTz clock_at);
extern bool hold_refuses(SourceRun *run, const SourceConfig *cfg, CycleOutcome *out);

#endif							/* FINALIZE_CLOCK_STEPS_H */
