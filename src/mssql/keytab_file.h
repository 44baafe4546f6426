/*
 * keytab_file.h
 *     A Kerberos source's keytab as a file of the data directory, only while
 *     the library copies it (keytab_file.c).
 */
#ifndef FINALIZE_KEYTAB_FILE_H
#define FINALIZE_KEYTAB_FILE_H

#include "mssql/mssql.h"

extern bool keytab_file_write(const MssqlConnInfo *k, const char *path, MssqlError *err);

#endif							/* FINALIZE_KEYTAB_FILE_H */
