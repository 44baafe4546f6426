/*
 * worker_state.h
 *     The worker's writes of PostgreSQL state (SPI): the facts of a range,
 *     events, conditions and the source's status.
 */
#ifndef FINALIZE_WORKER_STATE_H
#define FINALIZE_WORKER_STATE_H

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

#include "core/condition.h"
#include "core/lsn.h"

/* One range for _record_range. */
typedef struct RangeFacts
{
	int64		table_id;
	bool		has_start;
	Lsn			start;
	Lsn			end;
	TimestampTz end_time;
	int64		inserts;
	int64		updates;
	int64		deletes;
	bool		has_rows;
	TimestampTz first_time;
	TimestampTz last_time;
	const char *capture_instance;
	const char *event;			/* NULL, schema_change, instance_switch */
	const Jsonb *detail;
	/* event-time tables: rows per event period, lateness sketch, event-time span */
	const Jsonb *event_periods;
	const bytea *sketch;
	bool		has_event_span;
	TimestampTz first_event;
	TimestampTz last_event;
	int64		clock_tolerance;	/* the source's: the verdict holds back by it */
} RangeFacts;

extern bool ws_still_tracked(int64 table_id);
extern void ws_record_range(void *facts);
extern void ws_record_event(int64 table_id, const char *event, const Lsn *start, const Lsn *end,
							const char *capture_instance, const Jsonb *detail,
							const char *new_state, const char *state_detail);
extern void ws_set_condition(int64 table_id, Condition condition, const char *detail);
extern void ws_set_capture_instance(int64 table_id, const char *capture_instance);
extern void ws_source_ok(const char *server_name, const Lsn *max_lsn, TimestampTz max_time,
						 TimestampTz server_time, Condition condition, const char *message,
						 TimestampTz started);
extern void ws_resume_after_loss(int64 table_id, const Lsn *new_offset, TimestampTz new_offset_time,
								 TimestampTz lost_until, const char *capture_instance, bool automatic,
								 const Jsonb *detail, int64 clock_tolerance);
extern bool ws_lock_source(Oid serverid, const char *server_name);
extern void ws_source_ticket(const char *server_name, TimestampTz expires);
extern void ws_source_failed(const char *server_name, Condition condition, const char *error,
							 TimestampTz next_attempt);
extern void ws_purge_facts(const char *when_whole);

#endif							/* FINALIZE_WORKER_STATE_H */
