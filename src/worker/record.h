/*
 * record.h
 *     Recording a table's write (worker/judge.h) in the write transaction.
 */
#ifndef FINALIZE_RECORD_H
#define FINALIZE_RECORD_H

#include "worker/judge.h"

extern void record_write(TableWrite *w);

#endif							/* FINALIZE_RECORD_H */
