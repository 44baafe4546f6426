/*
 * record.h
 *     Recording the tables' writes (worker/judge.h) in the write transaction:
 *     a cycle's at once (record_batch.c), or one table's (record.c).
 */
#ifndef FINALIZE_RECORD_H
#define FINALIZE_RECORD_H

#include "worker/judge.h"

extern bool record_write(TableWrite *w);
extern bool record_writes(TableWrite *writes, int n);

#endif							/* FINALIZE_RECORD_H */
