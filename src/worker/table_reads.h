/*
 * table_reads.h
 *     What a cycle reads on SQL Server about its tables before judging
 *     them: the event columns of event-time tables checked against their
 *     capture instances (event_columns.c), then the tables' ranges
 *     (range_reads.c).
 */
#ifndef FINALIZE_TABLE_READS_H
#define FINALIZE_TABLE_READS_H

#include "mssql/mssql.h"
#include "worker/judge.h"

/* How often a job is read again after error 601 (a NOLOCK scan lost its place). */
#define NOLOCK_RETRIES 3

/* in event_columns.c */
extern bool event_columns_check(MssqlConn *conn, const char *login, TableJob **jobs, int njobs,
								MssqlError *err);

/* in range_reads.c */
extern void read_table_jobs(MssqlConn *conn, TableJob **jobs, int njobs, MssqlError *err, int attempts,
							int server_offset_minutes);

#endif							/* FINALIZE_TABLE_READS_H */
