/*
 * consumer_state.h
 *     The worker's PostgreSQL reads and writes of consumers: the pipelines
 *     that write a tracked table and report the LSN they have applied.
 */
#ifndef FINALIZE_CONSUMER_STATE_H
#define FINALIZE_CONSUMER_STATE_H

#include "datatype/timestamp.h"

#include "core/lsn.h"

/* A consumer that reported an LSN (a row of finalize_internal.source_consumers). */
typedef struct SourceConsumer
{
	int64		table_id;
	char	   *consumer;
	Lsn			reported;		/* everything at or below it is applied */
	bool		has_resolved;
	Lsn			resolved_for;	/* the LSN the stored commit time answers for */
} SourceConsumer;

extern void ws_load_consumers(const char *server_name, MemoryContext cxt, SourceConsumer **consumers,
							  int *nconsumers);
extern void ws_consumer_resolved(int64 table_id, const char *consumer, const Lsn *for_lsn,
								 const Lsn *mapped_lsn, TimestampTz commit_time, int64 clock_tolerance);
extern void ws_consumer_unresolved(int64 table_id, const char *consumer, const Lsn *for_lsn,
								   const char *error);
extern void ws_consumer_ahead(int64 table_id, const char *consumer, const Lsn *reported,
							  const Lsn *max_lsn);
extern void ws_check_consumers(const char *server_name);

#endif							/* FINALIZE_CONSUMER_STATE_H */
