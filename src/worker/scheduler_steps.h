/*
 * scheduler_steps.h
 *     The scheduler's SQL steps of a round (scheduler_steps.c).
 */
#ifndef FINALIZE_SCHEDULER_STEPS_H
#define FINALIZE_SCHEDULER_STEPS_H

extern bool scheduler_check_alerts(void);
extern bool scheduler_refresh_derived(void);
extern bool scheduler_catalog_restoring(void);

#endif							/* FINALIZE_SCHEDULER_STEPS_H */
