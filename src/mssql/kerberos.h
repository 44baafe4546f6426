/*
 * kerberos.h
 *     Kerberos tickets for Windows logins to SQL Server: the one interface
 *     to MIT Kerberos (libkrb5, and GSSAPI's credential cache switch).
 */
#ifndef FINALIZE_KERBEROS_H
#define FINALIZE_KERBEROS_H

#include "datatype/timestamp.h"

#include "mssql/mssql.h"

extern bool krb_prepare(const MssqlConnInfo *k, char **spn_out, TimestampTz *expires, MssqlError *err);
extern char *krb_default_spn(const char *host, int port);
extern void krb_cache_enter(const char *cache);
extern void krb_cache_leave(void);

#endif							/* FINALIZE_KERBEROS_H */
