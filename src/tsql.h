/*
 * tsql.h
 *     The T-SQL the worker sends, built with every identifier and string
 *     quoted. Pure functions.
 */
#ifndef FINALIZE_TSQL_H
#define FINALIZE_TSQL_H

#include "postgres.h"
#include "lib/stringinfo.h"

#include "lsn.h"

extern const char *tsql_source_state(void);
extern void tsql_append_range_aggregate(StringInfo buf, const char *capture_instance,
										const Lsn *start_exclusive, const Lsn *end_inclusive);
extern void tsql_append_min_lsn(StringInfo buf, const char *capture_instance);
extern void tsql_append_ddl_history(StringInfo buf, const char *capture_instance);

#endif							/* FINALIZE_TSQL_H */
