/*
 * clock_steps.h
 *     A table's read that shows SQL Server's clock went back across a
 *     period boundary, and its record (clock_steps.c).
 */
#ifndef FINALIZE_CLOCK_STEPS_H
#define FINALIZE_CLOCK_STEPS_H

#include "worker/judge.h"

extern void judge_clock_step(const SourceConfig *cfg, const TableJob *job, TableWrite *w);
extern void record_clock_step(const TableWrite *w);

#endif							/* FINALIZE_CLOCK_STEPS_H */
