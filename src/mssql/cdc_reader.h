/*
 * cdc_reader.h
 *     Reading SQL Server's CDC state (cdc_state.c) and ranges (cdc_reader.c):
 *     the T-SQL of each batch (from tsql.c) and the decoding of its results.
 *     No PostgreSQL catalog access; the worker decides what to read and what
 *     it means.
 */
#ifndef FINALIZE_CDC_READER_H
#define FINALIZE_CDC_READER_H

#include "datatype/timestamp.h"

#include "core/lsn.h"
#include "mssql/mssql.h"

/* A capture instance the login may read (sys.sp_cdc_help_change_data_capture). */
typedef struct CaptureInstance
{
	char	   *name;
	char	   *source_schema;
	char	   *source_table;
	bool		has_start;		/* start_lsn is NULL until capture first sees it */
	Lsn			start_lsn;
	int64		source_object_id;	/* OBJECT_ID of its source table (0: unknown) */
} CaptureInstance;

/* What SQL Server said about itself at the start of the cycle. */
typedef struct CdcState
{
	bool		has_max_lsn;
	Lsn			max_lsn;
	bool		has_max_time;
	Timestamp	max_time_local;
	Timestamp	utc_now;
	int64		tz_offset_minutes;
	bool		has_state;		/* the state row arrived and decoded */
	char	   *problem;		/* a value that did not decode */
	CaptureInstance *instances;
	int			ninstances;
	int			results;		/* result sets read */
} CdcState;

/* How one read ended. */
typedef struct CdcOutcome
{
	bool		ok;				/* every statement of it returned its result whole */
	const char *error;			/* the first error, when not ok */
	int			error_number;	/* SQL Server's number of that error, or 0 */
	int			position;		/* where in the batch that statement was */
	bool		never_ran;		/* an error ended the batch before one of its statements */
	bool		nolock_lost;	/* one of its statements ended with error 601 */
} CdcOutcome;

/* Rows of a range with one operation whose event times lie in one slot. */
typedef struct CdcEventSlot
{
	bool		null_event;		/* rows whose event time is NULL */
	int64		slot;			/* whole slots since 1900-01-01 (local), -1 before */
	int			op;				/* __$operation: 2 insert, 4 update, 1 delete */
	int64		rows;
} CdcEventSlot;

/* Rows of a range per lateness bucket (-1: zero lateness, -2: event after commit). */
typedef struct CdcLateBucket
{
	int64		bucket;
	int64		rows;
} CdcLateBucket;

/* The event-time facts of a range, computed on SQL Server (tsql_append_range_events). */
typedef struct CdcEvents
{
	const char *column;			/* in: the event column */
	bool		utc;			/* in: a datetimeoffset column, read in UTC */
	int			server_offset_minutes;	/* in: SQL Server's UTC offset now (its lateness is read in it) */
	int64		slot_seconds;	/* in */
	CdcOutcome	outcome;
	CdcEventSlot *slots;
	int			nslots;
	CdcLateBucket *buckets;
	int			nbuckets;
	bool		has_total;		/* the grand-total row arrived */
	int64		rows;			/* every row of the range */
	bool		has_span;		/* some row has an event time */
	int64		min_ms;			/* least and greatest event time, ms since 1900-01-01 */
	int64		max_ms;
	int			capacity;		/* of slots and buckets */
	bool		too_many;		/* more than CDC_MAX_EVENT_SLOTS slots */
} CdcEvents;

/* Slot rows one range may bring: beyond, its read fails with a message. */
#define CDC_MAX_EVENT_SLOTS 1000000

/* The captured columns of a capture instance (sys.sp_cdc_get_captured_columns). */
typedef struct CdcColumns
{
	const char *instance;		/* in */
	CdcOutcome	outcome;
	int			ncolumns;
	char	  **names;
	char	  **types;
	int			capacity;
} CdcColumns;

/* The aggregate of a range (start, end] of a capture instance. */
/* One piece of a split range: the rows committed between two split points. */
typedef struct CdcPiece
{
	int64		index;			/* k: before splits[k], not before splits[k - 1] */
	int64		inserts;
	int64		updates;
	int64		deletes;
	bool		has_first;
	Timestamp	first_local;
	bool		has_last;
	Timestamp	last_local;
	Lsn			first_lsn;		/* of its first and last row */
	Lsn			last_lsn;
} CdcPiece;

/* Most split points a range is read with (a longer span keeps its tail whole). */
#define CDC_MAX_SPLITS 256

typedef struct CdcRange
{
	const char *instance;		/* in */
	Lsn			start;			/* in */
	Lsn			end;			/* in */
	const Timestamp *splits;	/* in: server wall times to split at, ascending */
	int			nsplits;		/* in: 0 for one aggregate */
	CdcOutcome	outcome;
	int			npieces;		/* split: the pieces with rows, in any order */
	CdcPiece   *pieces;
	bool		has_total;		/* split: the grand total row arrived */
	int64		inserts;
	int64		updates;
	int64		deletes;
	bool		has_first;
	Timestamp	first_local;
	bool		has_last;
	Timestamp	last_local;
	CdcEvents  *events;			/* in: read the event-time facts too (or NULL) */
} CdcRange;

/* One DDL statement a capture instance recorded. */
typedef struct CdcDdl
{
	char	   *command;
	Lsn			lsn;
	bool		has_time;
	Timestamp	time_local;
} CdcDdl;

/* What was read about one capture instance after the ranges. */
typedef struct CdcInstance
{
	const char *name;			/* in */
	bool		want_ddl;		/* in */
	CdcOutcome	outcome;		/* its min LSN (and DDL if wanted) */
	bool		has_min;
	Lsn			min_lsn;
	bool		has_min_time;
	Timestamp	min_time_local;
	int			nddl;
	CdcDdl	   *ddl;
} CdcInstance;

/*
 * The greatest cdc.lsn_time_mapping row at or below an LSN a pipeline
 * reported. No row (cleanup removed every row up to it) is not an error.
 */
typedef struct CdcLsnMapping
{
	Lsn			lsn;			/* in */
	CdcOutcome	outcome;
	bool		found;
	Lsn			start_lsn;
	Timestamp	end_time_local;	/* tran_end_time, SQL Server's local time */
} CdcLsnMapping;

extern bool cdc_read_state(MssqlConn *conn, const char *tds_version, const char *const *names,
						   int64 *object_ids, int nnames, bool with_instances, CdcState *snap, MssqlError *err);
extern bool cdc_read_ranges(MssqlConn *conn, CdcRange **ranges, int nranges, CdcInstance *insts, int ninsts,
							MssqlError *err);
extern bool cdc_read_captured_columns(MssqlConn *conn, CdcColumns *cols, int ncols, MssqlError *err);
extern bool cdc_map_lsns(MssqlConn *conn, CdcLsnMapping **maps, int nmaps, MssqlError *err);

#endif							/* FINALIZE_CDC_READER_H */
