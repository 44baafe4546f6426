/*
 * mssql_options.h
 *     What the worker and SQL read of a finalize_mssql server's options
 *     beyond their text (mssql_options.c, which also validates them).
 */
#ifndef FINALIZE_MSSQL_OPTIONS_H
#define FINALIZE_MSSQL_OPTIONS_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/*
 * The clock_tolerance of a server without the option: a verdict holds
 * back by this much of SQL Server's clock, so that a step back of the
 * clock up to it never makes a commit land in a period already final.
 */
#define CLOCK_TOLERANCE_DEFAULT "60 s"
/* The largest clock_tolerance: every verdict lags by it. */
#define CLOCK_TOLERANCE_MAX ((int64) USECS_PER_HOUR)

/* The largest keytab a user mapping's keytab option may hold, decoded. */
#define KEYTAB_MAX (64 * 1024)

extern bool mssql_clock_tolerance(List *server_options, int64 *usecs);
extern char *mssql_keytab_decode(const char *value, int *len);

#endif							/* FINALIZE_MSSQL_OPTIONS_H */
