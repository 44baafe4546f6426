/*
 * source_config.h
 *     What a source's cycle reads at its start: the source's configuration,
 *     its tracked tables, their consumers and its hold.
 */
#ifndef FINALIZE_SOURCE_CONFIG_H
#define FINALIZE_SOURCE_CONFIG_H

#include "datatype/timestamp.h"
#include "foreign/foreign.h"
#include "pgtime.h"

#include "core/condition.h"
#include "mssql/mssql.h"
#include "worker/consumer_state.h"
#include "worker/plan.h"

/* A source: its foreign server options and its login. */
typedef struct SourceConfig
{
	Oid			serverid;
	char	   *server_name;
	char	   *database;
	char	   *timezone;
	pg_tz	   *tz;
	int64		stall_threshold;	/* capture_stall_threshold, microseconds */
	int64		clock_tolerance;	/* clock_tolerance, microseconds: verdicts hold back by it */
	MssqlConnInfo conn;
	Condition	held_by;		/* a condition holding the source, or COND_NONE */
	TimestampTz held_since;
} SourceConfig;

extern char *ws_source_config(ForeignServer *server, MemoryContext cxt, SourceConfig *cfg);
extern char *ws_load_source(Oid serverid, MemoryContext cxt, SourceConfig *cfg,
							TrackedSource **tables, int *ntables, SourceConsumer **consumers,
							int *nconsumers, bool *server_gone);

#endif							/* FINALIZE_SOURCE_CONFIG_H */
