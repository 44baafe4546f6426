/*
 * login.h
 *     What a login to SQL Server needs besides DB-Library (login.c): the
 *     connection's FreeTDS configuration written before it, the watch that
 *     ends it on a cancel, a termination or its deadline, and the words for
 *     a login that failed. mssql.c, the one file that calls DB-Library, runs
 *     the login itself.
 */
#ifndef FINALIZE_LOGIN_H
#define FINALIZE_LOGIN_H

#include "mssql/mssql.h"

extern bool login_write_conf(const MssqlConnInfo *info, MssqlError *err);
extern void login_watch_start(const MssqlConnInfo *info);
extern void login_watch_stop(const MssqlConnInfo *info);
extern bool login_tickets(const MssqlConnInfo *info, MssqlConnInfo *with, TimestampTz *expires,
						  MssqlError *err);
extern void login_failed(const MssqlConnInfo *info, MssqlError *err, bool connect_failed);

#endif							/* FINALIZE_LOGIN_H */
