/*
 * consumers.h
 *     The consumer step of a cycle: each pipeline's reported LSN resolved to
 *     a commit time on SQL Server (after the ranges, no transaction open),
 *     then recorded in the cycle's write transaction.
 */
#ifndef FINALIZE_CONSUMERS_H
#define FINALIZE_CONSUMERS_H

#include "datatype/timestamp.h"

#include "core/lsn.h"
#include "mssql/cdc_reader.h"
#include "mssql/mssql.h"
#include "worker/consumer_state.h"
#include "worker/plan.h"
#include "worker/source_config.h"

/* One consumer's resolution this cycle. */
typedef struct ConsumerJob
{
	const SourceConsumer *consumer;
	const char *table_name;		/* for messages */
	ConsumerAction action;		/* CONSUMER_AT_MAX, CONSUMER_LOOKUP or CONSUMER_AHEAD */
	Lsn			target;			/* the reported LSN: what it is resolved for */
	Lsn			max_lsn;		/* AHEAD: the cycle's max LSN, which it lies beyond */
	CdcLsnMapping *map;			/* LOOKUP: the read, shared by equal targets */
	bool		resolved;
	Lsn			mapped;			/* the mapping row found (max_lsn when AT_MAX) */
	TimestampTz commit_time;	/* its commit time, the earliest instant it may denote */
	int64		clock_tolerance;	/* the source's, which the verdict holds back by */
	char	   *error;			/* why it stays unresolved */
} ConsumerJob;

extern int	consumers_plan(const SourceConsumer *consumers, int nconsumers, const TrackedSource *tables,
						   const TablePlan *plans, int ntables, const Lsn *max_lsn, TimestampTz max_instant,
						   ConsumerJob **jobs);
extern bool consumers_read(MssqlConn *conn, const SourceConfig *cfg, TimestampTz max_instant,
						   ConsumerJob *jobs, int njobs, char **logged);
extern void consumers_record(const char *server_name, int64 clock_tolerance, ConsumerJob *jobs, int njobs);

#endif							/* FINALIZE_CONSUMERS_H */
