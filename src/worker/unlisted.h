/*
 * unlisted.h
 *     Why a tracked table has no capture instance its worker can read.
 */
#ifndef FINALIZE_UNLISTED_H
#define FINALIZE_UNLISTED_H

#include "mssql/mssql.h"
#include "worker/judge.h"
#include "worker/source_config.h"

extern void unlisted_details(MssqlConn *conn, const SourceConfig *cfg, TableJob *jobs, int njobs);

#endif							/* FINALIZE_UNLISTED_H */
