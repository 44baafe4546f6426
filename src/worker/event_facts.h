/*
 * event_facts.h
 *     The event-time facts of a range, from what SQL Server grouped
 *     (mssql/cdc_reader.h CdcEvents) to what _record_range stores: rows per
 *     event period, the lateness sketch, the event-time span.
 */
#ifndef FINALIZE_EVENT_FACTS_H
#define FINALIZE_EVENT_FACTS_H

#include "pgtime.h"

#include "mssql/cdc_reader.h"
#include "worker/plan.h"
#include "worker/worker_state.h"

extern int64 event_slot_seconds(const Interval *granularity);
extern bool event_type_supported(const char *sql_server_type, bool *utc);
extern char *event_facts_build(const CdcEvents *ev, const TrackedSource *t, const pg_tz *server_tz,
							   RangeFacts *f);

#endif							/* FINALIZE_EVENT_FACTS_H */
