/*
 * cdc_reader.h
 *     Reading SQL Server's CDC state and ranges: the T-SQL of each batch (from
 *     tsql.c) and the decoding of its results, in one place. No PostgreSQL
 *     catalog access; the worker decides what to read and what it means.
 */
#ifndef FINALIZE_CDC_READER_H
#define FINALIZE_CDC_READER_H

#include "datatype/timestamp.h"

#include "common/lsn.h"
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

/* The aggregate of a range (start, end] of a capture instance. */
typedef struct CdcRange
{
	const char *instance;		/* in */
	Lsn			start;			/* in */
	Lsn			end;			/* in */
	CdcOutcome	outcome;
	int64		inserts;
	int64		updates;
	int64		deletes;
	bool		has_first;
	Timestamp	first_local;
	bool		has_last;
	Timestamp	last_local;
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
						   int64 *object_ids, int nnames, CdcState *snap, MssqlError *err);
extern bool cdc_read_ranges(MssqlConn *conn, CdcRange **ranges, int nranges, CdcInstance *insts, int ninsts,
							MssqlError *err);
extern bool cdc_map_lsns(MssqlConn *conn, CdcLsnMapping **maps, int nmaps, MssqlError *err);

#endif							/* FINALIZE_CDC_READER_H */
