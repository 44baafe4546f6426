/*
 * event_columns.h
 *     Checking the event columns of event-time tables against the capture
 *     instances their plans read, before the ranges are read.
 */
#ifndef FINALIZE_EVENT_COLUMNS_H
#define FINALIZE_EVENT_COLUMNS_H

#include "mssql/mssql.h"
#include "worker/judge.h"

extern bool event_columns_check(MssqlConn *conn, const char *login, TableJob **jobs, int njobs,
								MssqlError *err);

#endif							/* FINALIZE_EVENT_COLUMNS_H */
