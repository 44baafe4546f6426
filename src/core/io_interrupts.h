/*
 * io_interrupts.h
 *     What a wait for SQL Server or an object store does about PostgreSQL's
 *     interrupts.
 */
#ifndef FINALIZE_IO_INTERRUPTS_H
#define FINALIZE_IO_INTERRUPTS_H

#include <stdbool.h>

extern void io_interrupts_begin(void);
extern bool io_stop_requested(void);
extern bool io_must_stop(void);
extern void io_interrupts_rethrow(void);
extern void io_set_deadline(long timeout_ms);
extern bool io_deadline_passed(void);
extern long io_bounded_ms(long ms);

#endif							/* FINALIZE_IO_INTERRUPTS_H */
