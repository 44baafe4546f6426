/*
 * cycle.c
 *     One cycle of a source worker: read state in PostgreSQL, ask SQL Server
 *     with no transaction open, record everything in one short transaction.
 *
 *   1. tracked tables and the source's options          (short transaction)
 *   2. max LSN, its commit time, SQL Server's clock and offset, the capture
 *      instances                                          (SQL Server, batch 1)
 *   3. per table, its range(s) aggregated on the server; then, AFTER all of
 *      them, each instance's min LSN and the DDL it recorded (SQL Server, batch 2)
 *   4. per table: record_range, a data-loss or schema event, a resume, or
 *      why it could not be read; the source's status     (short transaction)
 *
 * The rules that decide what is read and when a range is complete are in
 * plan.c; this file carries them out and turns results into writes.
 */
#include "postgres.h"

#include "common/int.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/cycle.h"
#include "common/settings.h"
#include "common/io_interrupts.h"
#include "worker/plan.h"
#include "common/subxact.h"
#include "common/timeconv.h"
#include "mssql/tsql.h"
#include "worker/worker_state.h"

/*
 * How far a commit time may lie after SQL Server's clock reading (taken
 * after max LSN) before it is called impossible: both are datetime values
 * (1/300 s, rounded), and a clock may be stepped back by NTP or a resumed
 * VM. Stamps in another zone are off by at least 15 minutes.
 */
#define COMMIT_AHEAD_TOLERANCE_S 60

/* What SQL Server said about itself at the start of the cycle. */
typedef struct SourceSnapshot
{
	bool		has_max_lsn;
	Lsn			max_lsn;
	bool		has_max_time;
	Timestamp	max_time_local;
	Timestamp	utc_now;
	int64		tz_offset_minutes;
	bool		has_state;		/* the state row arrived and decoded */
	const char *tds_version;
	char	   *problem;		/* a value that did not decode */
	CaptureInstance *instances;
	int			ninstances;
	int			results;		/* result sets read */
} SourceSnapshot;

/* The aggregate of one range segment. */
typedef struct SegmentRead
{
	bool		ok;
	int64		inserts;
	int64		updates;
	int64		deletes;
	bool		has_first;
	Timestamp	first_local;
	bool		has_last;
	Timestamp	last_local;
} SegmentRead;

/* One DDL statement a capture instance recorded. */
typedef struct DdlEntry
{
	char	   *command;
	Lsn			lsn;
	bool		has_time;
	Timestamp	time_local;
} DdlEntry;

/* What was read about one capture instance after the ranges. */
typedef struct InstanceRead
{
	const char *name;
	bool		want_ddl;
	bool		ok;				/* min LSN (and DDL if wanted) read */
	bool		has_min;
	Lsn			min_lsn;
	bool		has_min_time;
	Timestamp	min_time_local;
	int			nddl;
	DdlEntry   *ddl;
} InstanceRead;

/* One table's reads in batch 2. */
typedef struct TableJob
{
	const TrackedSource *table;
	TablePlan  *plan;
	SegmentRead seg[2];
	InstanceRead *inst[2];		/* per segment, or [0] for RESUME and GAP */
	char	   *error;			/* set when its reads failed */
} TableJob;

/* What the cycle does for one table in the write transaction. */
typedef enum WriteKind
{
	WRITE_NONE,
	WRITE_RANGES,
	WRITE_DATA_LOSS,
	WRITE_SCHEMA_BLOCKED,
	WRITE_RESUME,
	WRITE_CONDITION
} WriteKind;

typedef struct TableWrite
{
	WriteKind	kind;
	const TrackedSource *table;
	const char *capture_instance;	/* followed after the write */
	int			nfacts;
	RangeFacts	facts[3];		/* WRITE_RANGES: a baseline, two segments */
	Lsn			event_start;	/* DATA_LOSS, SCHEMA_BLOCKED: the range */
	Lsn			event_end;
	char	   *detail_json;
	char	   *state_detail;	/* NULL: the table stays active */
	bool		resume;			/* DATA_LOSS or RESUME: restart at resume_at */
	bool		automatic;
	Lsn			resume_at;
	TimestampTz resume_time;
	char	   *resume_json;
	const char *condition;		/* WRITE_CONDITION (NULL clears) */
	char	   *condition_detail;
} TableWrite;

/* Formats an LSN into a palloc'd string. */
static char *
lsn_text(const Lsn *lsn)
{
	char	   *text = palloc(LSN_TEXT_LEN + 1);

	lsn_format(lsn, text);
	return text;
}

/* Appends "key": value (a JSON string, or raw JSON when raw) to an object. */
static void
json_kv(StringInfo buf, const char *key, const char *value, bool raw)
{
	if (buf->len > 1)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	if (raw)
		appendStringInfoString(buf, value);
	else
		escape_json(buf, value);
}

/* A local datetime as text, for messages. */
static const char *
local_text(Timestamp ts)
{
	return DatumGetCString(DirectFunctionCall1(timestamp_out, TimestampGetDatum(ts)));
}

/* An instant as text in the session's zone, for messages. */
static const char *
instant_text(TimestampTz ts)
{
	/* timestamptz_to_str returns a static buffer: copy, so two fit in one message. */
	return pstrdup(timestamptz_to_str(ts));
}

/*
 * Reads one decoded value of batch 1 or fails with the reason: a column
 * that does not decode must fail the cycle, never leave a default behind.
 */
static bool
snapshot_problem(SourceSnapshot *snap, MssqlConn *conn, int col, const char *what)
{
	snap->problem = psprintf("SQL Server's %s arrived as %s and could not be decoded (tds_version %s).",
							 what, mssql_column_type_name(conn, col), snap->tds_version);
	return false;
}

/*
 * Reads batch 1: the max LSN row, the tracked tables' object ids, then the
 * capture instances. Returns false with err set on a SQL Server failure
 * (snap->results says how far it got), or with snap->problem set when a
 * value could not be decoded.
 */
static bool
read_source_snapshot(MssqlConn *conn, const SourceConfig *cfg, TrackedSource *tables, int ntables,
					 SourceSnapshot *snap, MssqlError *err)
{
	int			resultno = 0;
	int			capacity = 16;
	int			r;
	const char **names = palloc0(sizeof(char *) * (ntables + 1));
	StringInfoData sql;
	/* results: the state row, the object ids (one per chunk of names), the instances */
	int			nid_results = (ntables + TSQL_NAMES_PER_STATEMENT - 1) / TSQL_NAMES_PER_STATEMENT;
	int			help_result = 1 + nid_results;

	memset(snap, 0, sizeof(*snap));
	snap->tds_version = cfg->conn.tds_version;
	snap->instances = palloc0(sizeof(CaptureInstance) * capacity);
	for (int i = 0; i < ntables; i++)
	{
		tables[i].object_id = 0;
		names[i] = tsql_qualified_name(tables[i].source_schema, tables[i].source_name);
	}
	initStringInfo(&sql);
	tsql_source_state(&sql, names, ntables);

	/* An error already (the first statement failed) is the cycle's failure. */
	if (!mssql_execute(conn, sql.data, err) || err->set)
		return false;
	while ((r = mssql_next_result(conn, err)) == 1)
	{
		/* An error before a result ended the statement before it. */
		if (err->set)
			return false;
		if (mssql_num_columns(conn) == 0)
			continue;
		if (mssql_num_columns(conn) < (resultno == 0 ? TSQL_STATE_TZ_OFFSET : resultno < help_result
									   ? TSQL_OBJECT_ID : TSQL_HELP_START_LSN))
		{
			snap->problem = psprintf("SQL Server returned result %d of the CDC state with %d columns.",
									 resultno + 1, mssql_num_columns(conn));
			return false;
		}
		while ((r = mssql_next_row(conn, err)) == 1)
		{
			if (resultno == 0)
			{
				snap->has_max_lsn = mssql_get_lsn(conn, TSQL_STATE_MAX_LSN, &snap->max_lsn);
				snap->has_max_time = mssql_get_local_time(conn, TSQL_STATE_MAX_TIME, &snap->max_time_local);
				if (!mssql_get_local_time(conn, TSQL_STATE_UTC_NOW, &snap->utc_now))
					return snapshot_problem(snap, conn, TSQL_STATE_UTC_NOW, "clock (SYSDATETIMEOFFSET() in UTC)");
				if (!mssql_get_int64(conn, TSQL_STATE_TZ_OFFSET, &snap->tz_offset_minutes))
					return snapshot_problem(snap, conn, TSQL_STATE_TZ_OFFSET, "UTC offset (DATEPART(TZOFFSET, ...))");
				snap->has_state = true;
			}
			else if (resultno < help_result)
			{
				int64		tag;
				int64		id;

				if (mssql_get_int64(conn, TSQL_OBJECT_TAG, &tag) && tag >= 0 && tag < ntables &&
					mssql_get_int64(conn, TSQL_OBJECT_ID, &id))
					tables[tag].object_id = id;
			}
			else if (resultno == help_result)
			{
				CaptureInstance *ci;

				if (snap->ninstances == capacity)
				{
					capacity *= 2;
					snap->instances = repalloc(snap->instances, sizeof(CaptureInstance) * capacity);
				}
				ci = &snap->instances[snap->ninstances++];
				memset(ci, 0, sizeof(*ci));
				ci->source_schema = mssql_get_text(conn, TSQL_HELP_SCHEMA);
				ci->source_table = mssql_get_text(conn, TSQL_HELP_TABLE);
				ci->name = mssql_get_text(conn, TSQL_HELP_INSTANCE);
				ci->has_start = mssql_get_lsn(conn, TSQL_HELP_START_LSN, &ci->start_lsn);
				if (!mssql_get_int64(conn, TSQL_HELP_SOURCE_OBJECT_ID, &ci->source_object_id))
					ci->source_object_id = 0;
				if (ci->name == NULL || ci->source_schema == NULL || ci->source_table == NULL)
					snap->ninstances--;
			}
		}
		/* The call that ends the rows reads to the end of the statement: an
		 * error there means its rows may be cut (a partial list of instances). */
		if (r < 0 || err->set)
			return false;
		resultno++;
		snap->results = resultno;
	}
	return r == 0 && !err->set && snap->has_state;
}

/* Finds or adds the read of an instance in a list. */
static InstanceRead *
instance_read(InstanceRead *list, int *n, const char *name, bool want_ddl)
{
	for (int i = 0; i < *n; i++)
		if (strcmp(list[i].name, name) == 0)
		{
			list[i].want_ddl |= want_ddl;
			return &list[i];
		}
	memset(&list[*n], 0, sizeof(InstanceRead));
	list[*n].name = name;
	list[*n].want_ddl = want_ddl;
	return &list[(*n)++];
}

/* What one statement of a read batch is for, and what became of it. */
typedef enum StatementKind
{
	STMT_RANGE,
	STMT_MIN_LSN,
	STMT_DDL
} StatementKind;

typedef struct Statement
{
	StatementKind kind;
	SegmentRead *seg;			/* STMT_RANGE */
	InstanceRead *inst;			/* STMT_MIN_LSN, STMT_DDL */
	bool		started;		/* its marker arrived: it ran */
	bool		done;			/* its result arrived whole */
	int			error_number;	/* SQL Server's error of this statement, or 0 */
	char	   *error;			/* why it has no result */
} Statement;

/* How often a job is read again after error 601 (a NOLOCK scan lost its place). */
#define NOLOCK_RETRIES 3

/* The columns a statement's result has at least (see tsql.h). */
static int
statement_columns(StatementKind kind)
{
	switch (kind)
	{
		case STMT_RANGE:
			return TSQL_RANGE_LAST_TIME;
		case STMT_MIN_LSN:
			return TSQL_MIN_TIME;
		case STMT_DDL:
			return TSQL_DDL_TIME;
	}
	return PG_INT32_MAX;
}

/*
 * Decodes one row of a statement's result; false when a value that must be
 * there did not decode (the statement then counts as failed: counts that
 * silently stayed 0 would be wrong facts).
 */
static bool
read_statement_row(MssqlConn *conn, Statement *st, int *ddl_capacity)
{
	switch (st->kind)
	{
		case STMT_RANGE:
			{
				SegmentRead *sr = st->seg;

				if (!mssql_get_int64(conn, TSQL_RANGE_INSERTS, &sr->inserts) ||
					!mssql_get_int64(conn, TSQL_RANGE_UPDATES, &sr->updates) ||
					!mssql_get_int64(conn, TSQL_RANGE_DELETES, &sr->deletes))
					return false;
				sr->has_first = mssql_get_local_time(conn, TSQL_RANGE_FIRST_TIME, &sr->first_local);
				sr->has_last = mssql_get_local_time(conn, TSQL_RANGE_LAST_TIME, &sr->last_local);
				return true;
			}
		case STMT_MIN_LSN:
			st->inst->has_min = mssql_get_lsn(conn, TSQL_MIN_LSN, &st->inst->min_lsn);
			st->inst->has_min_time = mssql_get_local_time(conn, TSQL_MIN_TIME, &st->inst->min_time_local);
			return true;
		case STMT_DDL:
			{
				InstanceRead *ir = st->inst;
				DdlEntry   *d;

				if (ir->nddl == *ddl_capacity)
				{
					*ddl_capacity = *ddl_capacity ? *ddl_capacity * 2 : 4;
					ir->ddl = ir->ddl ? repalloc(ir->ddl, sizeof(DdlEntry) * *ddl_capacity)
						: palloc(sizeof(DdlEntry) * *ddl_capacity);
				}
				d = &ir->ddl[ir->nddl];
				d->command = mssql_get_text(conn, TSQL_DDL_COMMAND);
				d->has_time = mssql_get_local_time(conn, TSQL_DDL_TIME, &d->time_local);
				if (d->command == NULL || !mssql_get_lsn(conn, TSQL_DDL_LSN, &d->lsn))
					return false;
				ir->nddl++;
				return true;
			}
	}
	return false;
}

/*
 * Gives a statement the error that ended it (the first one only). An error
 * that follows a statement's rows (in its DONE) still fails it.
 */
static void
statement_failed(Statement *st, const MssqlError *err)
{
	if (st == NULL || !err->set)
		return;
	st->done = false;
	if (st->error != NULL)
		return;
	st->error = pstrdup(mssql_error_text(err));
	st->error_number = err->from_server ? err->number : 0;
}

/*
 * Sends one read batch and sorts its results to their statements by the
 * markers. A statement that fails on SQL Server (or that never ran because
 * an error aborted the batch) keeps the error; the others keep their
 * results. Returns false only when the connection is lost.
 */
static bool
run_statements(MssqlConn *conn, const char *sql, Statement *stmts, int nstmts, MssqlError *err)
{
	Statement  *cur = NULL;
	bool		in_result = false;
	int			r;
	int			failures_in_a_row = 0;
	MssqlError	step;

	if (!mssql_execute(conn, sql, err))
	{
		/* Nothing ran (the batch did not compile, or the connection broke). */
		statement_failed(&stmts[0], err);
		return !mssql_is_dead(conn);
	}
	/* An error while the batch started belongs to its first statement. */
	statement_failed(&stmts[0], err);
	for (;;)
	{
		r = mssql_next_result(conn, &step);
		if (step.set)
		{
			/* The error came before this result: it ended the statement in progress. */
			statement_failed(cur, &step);
			if (!err->set)
				*err = step;
		}
		if (r == 0)
			break;
		if (r < 0)
		{
			if (mssql_is_dead(conn))
				return false;
			/* DB-Library makes no progress after some failures: give up on the batch. */
			if (++failures_in_a_row > 2)
			{
				mssql_cancel(conn);
				break;
			}
			continue;
		}
		failures_in_a_row = 0;
		if (mssql_num_columns(conn) == 0)
			continue;
		if (mssql_num_columns(conn) == 1)
		{
			int64		n = -1;

			/* a marker: statement n runs next */
			if ((r = mssql_next_row(conn, &step)) == 1)
				(void) mssql_get_int64(conn, 1, &n);
			while (r == 1)
				r = mssql_next_row(conn, &step);
			cur = (n >= 0 && n < nstmts) ? &stmts[n] : NULL;
			if (cur != NULL)
				cur->started = true;
			in_result = false;
			continue;
		}
		if (cur == NULL || in_result)
		{
			/* a result no marker announced: drain it */
			while ((r = mssql_next_row(conn, &step)) == 1)
				;
			continue;
		}
		in_result = true;
		{
			int			ddl_capacity = 0;
			int			rows = 0;
			bool		decoded = mssql_num_columns(conn) >= statement_columns(cur->kind);

			while ((r = mssql_next_row(conn, &step)) == 1)
			{
				if (decoded)
					decoded = read_statement_row(conn, cur, &ddl_capacity);
				rows++;
			}
			/* An aggregate and a min LSN read are one row each. */
			if (r == 0 && cur->error == NULL && (!decoded || (cur->kind != STMT_DDL && rows != 1)))
				cur->error = psprintf("SQL Server returned %d row(s) of %d column(s) for it, or a value that could "
									  "not be decoded (first columns: %s, %s)", rows, mssql_num_columns(conn),
									  mssql_column_type_name(conn, 1), mssql_column_type_name(conn, 2));
		}
		/*
		 * The call that ends the rows also reads to the end of the statement:
		 * an error there (a deadlock victim after some rows) fails it too.
		 */
		if (step.set)
			statement_failed(cur, &step);
		if (r < 0 && mssql_is_dead(conn))
			return false;
		if (r == 0 && cur->error == NULL)
			cur->done = true;
	}
	return !mssql_is_dead(conn);
}

/*
 * Runs batch 2 for a set of tables: every segment's aggregate, then every
 * instance's min LSN, then the DDL of the instances read. Statements run in
 * order, so each min LSN is read after every range. A statement that fails
 * costs only the tables that need it; tables whose statements never ran
 * (an error that aborts the batch) or were cut by error 601 (a NOLOCK scan
 * that lost its place when rows moved) are read again on their own.
 */
static void
read_jobs(MssqlConn *conn, TableJob **jobs, int njobs, const Lsn *max_lsn, MssqlError *err, int attempts)
{
	InstanceRead *insts = palloc0(sizeof(InstanceRead) * (2 * njobs + 1));
	int			ninsts = 0;
	Statement  *stmts = palloc0(sizeof(Statement) * (4 * njobs + 1));
	int			nstmts = 0;
	StringInfoData sql;
	bool		alive;

	initStringInfo(&sql);
	for (int j = 0; j < njobs; j++)
	{
		TablePlan  *p = jobs[j]->plan;

		memset(jobs[j]->seg, 0, sizeof(jobs[j]->seg));
		jobs[j]->error = NULL;
		for (int s = 0; s < p->nsegments; s++)
		{
			tsql_append_marker(&sql, nstmts);
			tsql_append_range_aggregate(&sql, p->seg[s].instance->name, &p->seg[s].start, &p->seg[s].end);
			stmts[nstmts].kind = STMT_RANGE;
			stmts[nstmts++].seg = &jobs[j]->seg[s];
			jobs[j]->inst[s] = instance_read(insts, &ninsts, p->seg[s].instance->name, true);
		}
		if (p->action == PLAN_RESUME || p->action == PLAN_INSTANCE_GAP)
			jobs[j]->inst[0] = instance_read(insts, &ninsts, p->instance->name, false);
	}
	for (int i = 0; i < ninsts; i++)
	{
		tsql_append_marker(&sql, nstmts);
		tsql_append_min_lsn(&sql, insts[i].name);
		stmts[nstmts].kind = STMT_MIN_LSN;
		stmts[nstmts++].inst = &insts[i];
	}
	for (int i = 0; i < ninsts; i++)
		if (insts[i].want_ddl)
		{
			tsql_append_marker(&sql, nstmts);
			tsql_append_ddl_history(&sql, insts[i].name);
			stmts[nstmts].kind = STMT_DDL;
			stmts[nstmts++].inst = &insts[i];
		}

	alive = run_statements(conn, sql.data, stmts, nstmts, err);
	io_interrupts_rethrow();

	/* What each statement's outcome means for its instance and segment. */
	for (int i = 0; i < ninsts; i++)
		insts[i].ok = true;
	for (int i = 0; i < nstmts; i++)
	{
		Statement  *st = &stmts[i];

		if (st->done)
		{
			if (st->kind == STMT_RANGE)
				st->seg->ok = true;
			continue;
		}
		if (st->error == NULL)
			st->error = pstrdup(!alive ? mssql_error_text(err)
								: !st->started ? psprintf("the statement did not run: an earlier error ended the batch (%s)",
														  err->set ? mssql_error_text(err) : "no message")
								: "SQL Server returned no result for the statement");
		if (st->kind != STMT_RANGE)
			st->inst->ok = false;
	}

	/* Each table's first error; which tables to read again. */
	{
		TableJob  **again = palloc0(sizeof(TableJob *) * (njobs + 1));
		int			nagain = 0;

		for (int j = 0; j < njobs; j++)
		{
			TableJob   *job = jobs[j];
			bool		retry = false;

			for (int i = 0; i < nstmts; i++)
			{
				Statement  *st = &stmts[i];
				bool		mine = false;

				if (st->done)
					continue;
				for (int s = 0; s < job->plan->nsegments; s++)
					mine |= (st->kind == STMT_RANGE && st->seg == &job->seg[s]) ||
						(st->kind != STMT_RANGE && st->inst == job->inst[s]);
				if (job->plan->action == PLAN_RESUME || job->plan->action == PLAN_INSTANCE_GAP)
					mine |= st->kind != STMT_RANGE && st->inst == job->inst[0];
				if (!mine)
					continue;
				if (job->error == NULL)
					job->error = st->error;
				if (alive && (st->error_number == 601 || (!st->started && njobs > 1)))
					retry = true;
			}
			if (retry && attempts > 0)
				again[nagain++] = job;
		}
		for (int j = 0; j < nagain; j++)
			read_jobs(conn, &again[j], 1, max_lsn, err, attempts - 1);
	}
}

/*
 * Applies one table's write (inside subxact_try). A table untracked since
 * the cycle read it gets nothing: its name may already be tracked again, as
 * another table, maybe on another server. A condition alone takes no lock
 * on the verdict (a session holding it is what the condition may report).
 */
static void
apply_write(void *arg)
{
	TableWrite *w = (TableWrite *) arg;
	const TrackedSource *t = w->table;

	if (w->kind != WRITE_CONDITION && !ws_still_tracked(t->table_id))
	{
		ereport(DEBUG1,
				(errmsg("finalize: table \"%s\" was untracked during the cycle; nothing is recorded for it",
						t->table_name)));
		return;
	}
	switch (w->kind)
	{
		case WRITE_NONE:
			break;
		case WRITE_RANGES:
			for (int i = 0; i < w->nfacts; i++)
				ws_record_range(&w->facts[i]);
			if (w->capture_instance != NULL)
				ws_set_capture_instance(t->table_id, w->capture_instance);
			ws_set_condition(t->table_id, NULL, NULL);
			break;
		case WRITE_DATA_LOSS:
			ws_record_event(t->table_id, "data_loss", &w->event_start, &w->event_end,
							w->capture_instance, w->detail_json,
							w->resume ? NULL : "data_lost", w->state_detail);
			if (w->resume)
				ws_resume_after_loss(t->table_id, &w->resume_at, w->resume_time, w->capture_instance,
									 true, w->resume_json);
			ws_set_condition(t->table_id, NULL, NULL);
			break;
		case WRITE_SCHEMA_BLOCKED:
			ws_record_event(t->table_id, "schema_blocked", &w->event_start, &w->event_end,
							w->capture_instance, w->detail_json, "schema_blocked", w->state_detail);
			ws_set_condition(t->table_id, NULL, NULL);
			break;
		case WRITE_RESUME:
			ws_resume_after_loss(t->table_id, &w->resume_at, w->resume_time, w->capture_instance,
								 false, w->resume_json);
			ws_set_condition(t->table_id, NULL, NULL);
			break;
		case WRITE_CONDITION:
			ws_set_condition(t->table_id, w->condition, w->condition_detail);
			break;
	}
}

/* Fills a condition write. */
static void
set_condition(TableWrite *w, const char *condition, char *detail)
{
	w->kind = WRITE_CONDITION;
	w->condition = condition;
	w->condition_detail = detail;
}

/*
 * Records one table's write in its own subtransaction, so that one table's
 * failure does not lose the others'. A lock held too long by another session
 * and any other failure become the table's condition.
 */
static void
record_write(TableWrite *w)
{
	ErrorData  *e;
	TableWrite	cw;

	if (subxact_try(apply_write, w, &e))
		return;
	memset(&cw, 0, sizeof(cw));
	cw.table = w->table;
	if (e->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
		set_condition(&cw, "lock_timeout",
					  psprintf("Recording waited longer than finalize.lock_timeout (%d ms) for a lock that another "
							   "session holds on this table's rows (for example an open transaction that called "
							   "finalize.resume_table or finalize.record_range): %s. Nothing was lost; the next cycle "
							   "records it once the lock is released.", finalize_lock_timeout_ms, e->message));
	else
	{
		set_condition(&cw, "record_failed", psprintf("Recording failed: %s", e->message));
		ereport(WARNING,
				(errmsg("finalize could not record the facts of table \"%s\": %s",
						w->table->table_name, e->message)));
	}
	(void) subxact_try(apply_write, &cw, NULL);
}

/* The earliest instant of a local time, or a fallback when it is unknown. */
static TimestampTz
instant_or(bool known, Timestamp local, const SourceConfig *cfg, TimestampTz fallback)
{
	return known ? local_to_instant_earliest(local, cfg->tz) : fallback;
}

/*
 * A data loss on the range (start, lost_to] of an instance: the event, and
 * either an automatic restart at lost_to (on_data_loss = resume, no other
 * loss within finalize.data_loss_window) or a stopped table.
 */
static void
data_loss(TableWrite *w, const TrackedSource *t, const char *ci, const Lsn *start, const Lsn *lost_to,
		  const char *cause, const char *explanation, TimestampTz resume_time)
{
	StringInfoData json;
	Lsn			first;
	/* In 64 bits: the setting allows windows of centuries. */
	int64		window = (int64) finalize_data_loss_window_min * USECS_PER_MINUTE;
	int64		since;
	bool		recent = t->has_last_loss &&
		(pg_sub_s64_overflow(GetCurrentTimestamp(), t->last_loss, &since) || since < window);

	w->kind = WRITE_DATA_LOSS;
	w->capture_instance = ci;
	w->event_start = *start;
	w->event_end = *lost_to;
	(void) lsn_increment(start, &first);
	initStringInfo(&json);
	appendStringInfoChar(&json, '{');
	json_kv(&json, "capture_instance", ci, false);
	json_kv(&json, "lost_from_lsn", lsn_text(&first), false);
	json_kv(&json, "lost_to_lsn", lsn_text(lost_to), false);
	json_kv(&json, "cause", cause, false);
	appendStringInfoChar(&json, '}');
	w->detail_json = json.data;

	if (t->auto_resume && !recent)
	{
		w->resume = true;
		w->automatic = true;
		w->resume_at = *lost_to;
		w->resume_time = resume_time;
		initStringInfo(&json);
		appendStringInfoChar(&json, '{');
		json_kv(&json, "capture_instance", ci, false);
		json_kv(&json, "cause", cause, false);
		appendStringInfoChar(&json, '}');
		w->resume_json = json.data;
		return;
	}
	w->state_detail = psprintf("%s Changes from LSN %s to %s cannot be read any more, so the verdict stays "
							   "where it was.%s Once the loss is accounted for (for example by a re-snapshot), "
							   "run SELECT finalize.resume_table(%s); the table then restarts at the capture "
							   "instance's current min LSN and the lost range is kept as an event.",
							   explanation, lsn_text(&first), lsn_text(lost_to),
							   (t->auto_resume && recent)
							   ? psprintf(" It is the second loss within finalize.data_loss_window (the previous one "
										  "was recorded at %s), so it is not resumed automatically.",
										  instant_text(t->last_loss)) : "",
							   quote_literal_cstr(t->table_name));
}

/* Appends the DDL of an instance in (start, end] not yet reviewed. */
static int
collect_ddl(const TrackedSource *t, const InstanceRead *ir, const RangeSegment *seg,
			StringInfo list, const DdlEntry **first)
{
	int			n = 0;

	for (int i = 0; i < ir->nddl; i++)
	{
		const DdlEntry *d = &ir->ddl[i];
		StringInfoData item;

		if (lsn_cmp(&d->lsn, &seg->start) <= 0 || lsn_cmp(&d->lsn, &seg->end) > 0)
			continue;
		if (t->has_schema_ack && lsn_cmp(&d->lsn, &t->schema_ack) <= 0)
			continue;
		if (*first == NULL || lsn_cmp(&d->lsn, &(*first)->lsn) < 0)
			*first = d;
		initStringInfo(&item);
		appendStringInfoChar(&item, '{');
		json_kv(&item, "command", d->command, false);
		json_kv(&item, "lsn", lsn_text(&d->lsn), false);
		if (d->has_time)
			json_kv(&item, "time_local", local_text(d->time_local), false);
		appendStringInfoChar(&item, '}');
		appendStringInfo(list, "%s%s", list->len > 1 ? ", " : "", item.data);
		n++;
	}
	return n;
}

/* One line naming a DDL statement, for status and state details. */
static char *
ddl_summary(const char *ci, const DdlEntry *d, int count)
{
	return psprintf("%s (capture instance \"%s\", LSN %s%s%s)%s", d->command, ci, lsn_text(&d->lsn),
					d->has_time ? ", at " : "", d->has_time ? local_text(d->time_local) : "",
					count > 1 ? psprintf(" and %d more", count - 1) : "");
}

/*
 * Turns the reads of a table's segments into its write: the facts (with the
 * instance switch and DDL as events), a data loss, a blocked schema change,
 * or a condition saying why nothing was recorded.
 */
static void
judge_read(const SourceConfig *cfg, TableJob *job, const Lsn *max_lsn, TimestampTz max_instant,
		   TableWrite *w)
{
	const TrackedSource *t = job->table;
	const TablePlan *p = job->plan;
	StringInfoData ddl_list;
	const DdlEntry *first_ddl = NULL;
	int			nddl = 0;
	const char *ddl_instance = NULL;

	w->table = t;
	w->capture_instance = p->instance->name;
	/* A min LSN of zeros explains a failure of the statements after it too. */
	for (int s = 0; s < p->nsegments; s++)
		if (job->inst[s]->has_min && lsn_is_zero(&job->inst[s]->min_lsn))
		{
			set_condition(w, "no_access",
						  psprintf("sys.fn_cdc_get_min_lsn(N'%s') returned 0x00000000000000000000: the capture "
								   "instance no longer exists, or the login \"%s\" may not read it (it needs "
								   "SELECT on the captured columns and membership in the instance's gating role).",
								   p->seg[s].instance->name, cfg->conn.username));
			return;
		}
	/*
	 * A min LSN read after the ranges that passed a segment's start is a
	 * loss, whether or not the segment's read succeeded: the query function
	 * refuses a range that starts below the instance's low water mark
	 * (error 313), which is this very case.
	 */
	for (int s = 0; s < p->nsegments; s++)
	{
		const InstanceRead *ir = job->inst[s];
		const char *ci = p->seg[s].instance->name;
		Lsn			lost_to;

		if (!ir->ok || !ir->has_min || judge_range(&p->seg[s].start, &ir->min_lsn) != RANGE_MAY_HAVE_LOST_ROWS)
			continue;
		if (!lsn_decrement(&ir->min_lsn, &lost_to))
			lost_to = ir->min_lsn;
		data_loss(w, t, ci, &p->seg[s].start, &lost_to, "retention cleanup",
				  psprintf("CDC cleanup (retention) removed changes of capture instance \"%s\" before "
						   "finalize read them: the instance's minimum LSN is now %s.",
						   ci, lsn_text(&ir->min_lsn)),
				  instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant));
		return;
	}
	if (job->error != NULL)
	{
		set_condition(w, "read_failed", psprintf("Reading the changes of %s.%s failed: %s",
												  t->source_schema, t->source_name, job->error));
		return;
	}
	/* Every segment read, and judged complete with min LSNs read after it. */
	for (int s = 0; s < p->nsegments; s++)
	{
		const InstanceRead *ir = job->inst[s];

		if (!job->seg[s].ok || !ir->ok || !ir->has_min)
		{
			set_condition(w, "read_failed",
						  psprintf("SQL Server returned no result for capture instance \"%s\".",
								   p->seg[s].instance->name));
			return;
		}
		Assert(judge_range(&p->seg[s].start, &ir->min_lsn) == RANGE_COMPLETE);
	}

	/* DDL recorded in the ranges. */
	initStringInfo(&ddl_list);
	appendStringInfoChar(&ddl_list, '[');
	for (int s = 0; s < p->nsegments; s++)
	{
		const DdlEntry *before = first_ddl;

		nddl += collect_ddl(t, job->inst[s], &p->seg[s], &ddl_list, &first_ddl);
		if (first_ddl != before)
			ddl_instance = p->seg[s].instance->name;
	}
	appendStringInfoChar(&ddl_list, ']');
	if (nddl > 0 && t->ddl_block)
	{
		StringInfoData json;
		char	   *summary = ddl_summary(ddl_instance, first_ddl, nddl);

		w->kind = WRITE_SCHEMA_BLOCKED;
		w->capture_instance = ddl_instance;
		w->event_start = t->offset;
		w->event_end = first_ddl->lsn;
		initStringInfo(&json);
		appendStringInfoChar(&json, '{');
		json_kv(&json, "ddl_lsn", lsn_text(&first_ddl->lsn), false);
		json_kv(&json, "ddl_command", first_ddl->command, false);
		json_kv(&json, "summary", summary, false);
		json_kv(&json, "ddl", ddl_list.data, true);
		appendStringInfoChar(&json, '}');
		w->detail_json = json.data;
		w->state_detail = psprintf("A schema change blocks the verdict (ddl_policy = block): %s. Review it, "
								   "then run SELECT finalize.resume_table(%s) to go on.",
								   summary, quote_literal_cstr(t->table_name));
		return;
	}

	/*
	 * Record the segments. A table read from its capture instance's start
	 * (start_from = 'capture_start') has no facts yet: its first fact marks
	 * where they begin, without a start, like any table's; the range follows
	 * in the same transaction, so the verdict the baseline alone would give
	 * is never seen.
	 */
	w->kind = WRITE_RANGES;
	w->nfacts = 0;
	if (!t->has_offset)
	{
		RangeFacts *b = &w->facts[w->nfacts++];
		const InstanceRead *ir = job->inst[0];
		TimestampTz at = instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant);

		b->table_id = t->table_id;
		b->has_start = false;
		b->end = p->seg[0].start;
		b->end_time = Min(at, max_instant);
		b->capture_instance = p->seg[0].instance->name;
	}
	for (int s = 0; s < p->nsegments; s++)
	{
		RangeFacts *f = &w->facts[w->nfacts++];
		const SegmentRead *sr = &job->seg[s];
		bool		last = s == p->nsegments - 1;

		f->table_id = t->table_id;
		f->has_start = true;
		f->start = p->seg[s].start;
		f->end = p->seg[s].end;
		f->inserts = sr->inserts;
		f->updates = sr->updates;
		f->deletes = sr->deletes;
		f->has_rows = sr->inserts + sr->updates + sr->deletes > 0;
		f->capture_instance = p->seg[s].instance->name;
		if (f->has_rows)
		{
			if (!sr->has_first || !sr->has_last)
			{
				set_condition(w, "read_failed",
							  psprintf("The commit times of the rows read from capture instance \"%s\" could not "
									   "be mapped (sys.fn_cdc_map_lsn_to_time returned NULL).",
									   f->capture_instance));
				return;
			}
			f->first_time = local_to_instant_earliest(sr->first_local, cfg->tz);
			f->last_time = local_to_instant_earliest(sr->last_local, cfg->tz);
			if (f->first_time > f->last_time)
				f->first_time = f->last_time;
		}
		/*
		 * The last segment ends at max LSN. One that ends at an instance
		 * switch does not end on a mapped commit: its last row's commit time
		 * (or the offset's) is the latest it is known to cover.
		 */
		if (last)
			f->end_time = max_instant;
		else
			f->end_time = f->has_rows ? f->last_time : (t->offset_time != 0 ? t->offset_time : max_instant);

		if (p->switch_in_seg[s])
		{
			StringInfoData json;

			f->event = "instance_switch";
			initStringInfo(&json);
			appendStringInfoChar(&json, '{');
			json_kv(&json, "from", p->previous ? p->previous->name : (t->capture_instance ? t->capture_instance : ""), false);
			json_kv(&json, "to", p->seg[s].instance->name, false);
			json_kv(&json, "at_lsn", lsn_text(&p->seg[s].instance->start_lsn), false);
			if (nddl > 0)
			{
				json_kv(&json, "summary", ddl_summary(ddl_instance, first_ddl, nddl), false);
				json_kv(&json, "ddl", ddl_list.data, true);
			}
			appendStringInfoChar(&json, '}');
			f->detail_json = json.data;
		}
		else if (nddl > 0 && (last || p->nsegments == 1))
		{
			StringInfoData json;

			f->event = "schema_change";
			initStringInfo(&json);
			appendStringInfoChar(&json, '{');
			json_kv(&json, "summary", ddl_summary(ddl_instance, first_ddl, nddl), false);
			json_kv(&json, "ddl", ddl_list.data, true);
			appendStringInfoChar(&json, '}');
			f->detail_json = json.data;
		}
	}
}

/* The write for a table asked to resume after a loss. */
static void
judge_resume(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w)
{
	const TrackedSource *t = job->table;
	const InstanceRead *ir = job->inst[0];
	const char *ci = job->plan->instance->name;
	StringInfoData json;

	w->table = t;
	w->capture_instance = ci;
	if (job->error != NULL || !ir->ok || !ir->has_min)
	{
		set_condition(w, "read_failed", psprintf("Reading the min LSN of capture instance \"%s\" failed: %s",
												  ci, job->error ? job->error : "no result"));
		return;
	}
	if (lsn_is_zero(&ir->min_lsn))
	{
		set_condition(w, "no_access",
					  psprintf("sys.fn_cdc_get_min_lsn(N'%s') returned 0x00000000000000000000: the table cannot "
							   "resume until the login \"%s\" may read the instance.", ci, cfg->conn.username));
		return;
	}
	w->kind = WRITE_RESUME;
	if (!lsn_decrement(&ir->min_lsn, &w->resume_at))
		w->resume_at = ir->min_lsn;
	w->resume_time = instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant);
	initStringInfo(&json);
	appendStringInfoChar(&json, '{');
	json_kv(&json, "capture_instance", ci, false);
	json_kv(&json, "min_lsn", lsn_text(&ir->min_lsn), false);
	appendStringInfoChar(&json, '}');
	w->resume_json = json.data;
}

/* The write for a table whose followed instance vanished before the switch. */
static void
judge_gap(const SourceConfig *cfg, TableJob *job, TimestampTz max_instant, TableWrite *w)
{
	const TrackedSource *t = job->table;
	const InstanceRead *ir = job->inst[0];
	const TablePlan *p = job->plan;
	Lsn			lost_to = p->gap_end;

	w->table = t;
	if (job->error != NULL || !ir->ok || !ir->has_min || lsn_is_zero(&ir->min_lsn))
	{
		set_condition(w, "read_failed",
					  psprintf("Capture instance \"%s\" is gone and the min LSN of \"%s\" could not be read: %s",
							   t->capture_instance ? t->capture_instance : "?", p->instance->name,
							   job->error ? job->error : "no result"));
		return;
	}
	/* Cleanup may have moved the new instance's start on as well. */
	{
		Lsn			below_min;

		if (lsn_decrement(&ir->min_lsn, &below_min) && lsn_cmp(&below_min, &lost_to) > 0)
			lost_to = below_min;
	}
	data_loss(w, t, p->instance->name, &t->offset, &lost_to, "capture instance dropped",
			  psprintf("Capture instance \"%s\" was dropped before finalize read up to the start of the newer "
					   "instance \"%s\" (LSN %s).", t->capture_instance ? t->capture_instance : "?",
					   p->instance->name, lsn_text(&p->instance->start_lsn)),
			  instant_or(ir->has_min_time, ir->min_time_local, cfg, max_instant));
}

/* Records a failed cycle's condition and message for the caller. */
static bool
fail(const char *condition, const char *message, char **out_condition, char **out_error)
{
	*out_condition = pstrdup(condition);
	*out_error = pstrdup(message);
	return false;
}

/* The condition for a failed SQL Server call. */
static const char *
failure_condition(MssqlConn *conn, const MssqlError *err)
{
	if (err->interrupted)
		return "cancelled";
	if (err->timed_out)
		return "timeout";
	return mssql_is_dead(conn) ? "unreachable" : "sql_error";
}

/*
 * Runs one cycle for a source. Returns true when SQL Server was read and
 * everything recorded; false with a condition and a message otherwise (the
 * caller records them and backs off).
 */
bool
run_cycle(SourceRun *run, MemoryContext cxt, char **condition, char **error)
{
	SourceConfig cfg;
	TrackedSource *tables;
	int			ntables;
	char	   *problem;
	MssqlError	err;
	SourceSnapshot snap;
	TimestampTz max_instant;
	TimestampTz server_now;
	long		expected_offset;
	TablePlan  *plans;
	TableWrite *writes;
	TableJob   *jobs;
	TableJob  **to_read;
	int			nread = 0;
	const char *source_condition = "ok";
	char	   *source_message = NULL;
	bool		ok;

	/* 1. What to do, from PostgreSQL. */
	problem = ws_load_source(run->serverid, cxt, &cfg, &tables, &ntables, &run->server_gone);
	if (run->server_gone)
		return fail("server_dropped", problem, condition, error);
	if (run->server_name == NULL)
		run->server_name = MemoryContextStrdup(TopMemoryContext, cfg.server_name);
	if (problem != NULL)
		return fail("configuration", problem, condition, error);
	if (cfg.held_by != NULL)
		return fail(cfg.held_by,
					psprintf("Server \"%s\" is held by %s since %s: commit times of SQL Server's max LSN were seen "
							 "later than SQL Server's own clock, so commit times are stamped in another zone than "
							 "its clock reports and none of them can be trusted; nothing is recorded. Once SQL "
							 "Server stamps commits in its clock's zone, run SELECT finalize.release_source(%s).",
							 cfg.server_name, cfg.held_by, instant_text(cfg.held_since),
							 quote_literal_cstr(cfg.server_name)),
					condition, error);
	/* Tables in a stopped state are not read; nothing to ask SQL Server. */
	if (ntables == 0)
		return true;

	/* 2. SQL Server's state, with no transaction open. */
	if (run->conn != NULL && mssql_is_dead(run->conn))
	{
		mssql_close(run->conn);
		run->conn = NULL;
	}
	if (run->conn == NULL)
	{
		pgstat_report_activity(STATE_RUNNING, "finalize: connecting to SQL Server");
		run->conn = mssql_connect(&cfg.conn, &err);
		io_interrupts_rethrow();
		if (run->conn == NULL)
			return fail(err.timed_out ? "timeout" : "unreachable",
						psprintf("Could not log in to SQL Server %s:%d, database \"%s\", as \"%s\": %s",
								 cfg.conn.host, cfg.conn.port, cfg.database, cfg.conn.username,
								 mssql_error_text(&err)),
						condition, error);
	}
	pgstat_report_activity(STATE_RUNNING, "finalize: reading SQL Server's max LSN");
	ok = read_source_snapshot(run->conn, &cfg, tables, ntables, &snap, &err);
	io_interrupts_rethrow();
	if (!ok && snap.problem != NULL)
	{
		/* The rest of the batch is not needed; the connection is reopened. */
		mssql_close(run->conn);
		run->conn = NULL;
		return fail("sql_error", snap.problem, condition, error);
	}
	if (!ok)
	{
		/* With CDC disabled the help procedure fails (22901) after max LSN was NULL. */
		if (snap.results >= 1 && !snap.has_max_lsn)
			return fail("no_max_lsn",
						psprintf("sys.fn_cdc_get_max_lsn() returned NULL: change data capture is not enabled on "
								 "database \"%s\", or its capture job has not run yet (%s).",
								 cfg.database, mssql_error_text(&err)),
						condition, error);
		return fail(failure_condition(run->conn, &err),
					psprintf("Reading the CDC state of database \"%s\" failed: %s%s",
							 cfg.database, mssql_error_text(&err),
							 err.timed_out ? psprintf(" (no answer within finalize.query_timeout, %d s; the "
													  "connection is reopened)", cfg.conn.query_timeout) : ""),
					condition, error);
	}
	if (!snap.has_max_lsn)
		return fail("no_max_lsn",
					psprintf("sys.fn_cdc_get_max_lsn() returned NULL: change data capture is not enabled on "
							 "database \"%s\", or its capture job has not run yet.", cfg.database),
					condition, error);
	if (!snap.has_max_time)
		return fail("sql_error",
					psprintf("sys.fn_cdc_map_lsn_to_time(%s) returned NULL.", lsn_text(&snap.max_lsn)),
					condition, error);

	/*
	 * Commit times are local: if the timezone option disagrees with the
	 * offset SQL Server reports, the verdict could lead. Stop instead.
	 */
	server_now = (TimestampTz) snap.utc_now;
	expected_offset = local_offset_at(server_now, cfg.tz);
	if (expected_offset != snap.tz_offset_minutes * 60)
		return fail("timezone_mismatch",
					psprintf("SQL Server's clock is at UTC%+03d:%02d, but the timezone option \"%s\" of server "
							 "\"%s\" gives UTC%+03ld:%02ld at that instant. Commit times cannot be converted "
							 "safely; set the option to the zone of the SQL Server machine "
							 "(ALTER SERVER \"%s\" OPTIONS (SET timezone '...')).",
							 (int) (snap.tz_offset_minutes / 60), (int) Abs(snap.tz_offset_minutes % 60),
							 cfg.timezone, cfg.server_name, expected_offset / 3600,
							 Abs(expected_offset % 3600) / 60, cfg.server_name),
					condition, error);
	max_instant = local_to_instant_earliest(snap.max_time_local, cfg.tz);

	/*
	 * A commit cannot be later than the clock of the server that made it. A
	 * commit time of max LSN ahead of SQL Server's own clock means commit
	 * times are stamped in another zone than SYSDATETIMEOFFSET() reports (a
	 * server configured with another zone than its clock functions): every
	 * commit time would then lead the truth, and so would the verdict. The
	 * earliest reading of an ambiguous local time is used, so a fall-back
	 * hour never raises this falsely.
	 */
	{
		int64		ahead;

		if (pg_sub_s64_overflow(max_instant, server_now, &ahead) ||
			ahead > COMMIT_AHEAD_TOLERANCE_S * USECS_PER_SEC)
			return fail("commit_time_ahead",
						psprintf("The commit time of SQL Server's max LSN %s (%s local, %s with the timezone option "
								 "\"%s\") is later than SQL Server's own clock (%s) by more than %d s: commit times "
								 "are not stamped in the zone the server's clock reports (or the clock was stepped "
								 "back), so none of them can be trusted and nothing is recorded. Check the time zone "
								 "SQL Server's machine and instance use for commits (cdc.lsn_time_mapping."
								 "tran_end_time) against SYSDATETIMEOFFSET(), then run SELECT "
								 "finalize.release_source(%s).",
								 lsn_text(&snap.max_lsn), local_text(snap.max_time_local), instant_text(max_instant),
								 cfg.timezone, instant_text(server_now), COMMIT_AHEAD_TOLERANCE_S,
								 quote_literal_cstr(cfg.server_name)),
						condition, error);
	}

	/*
	 * Commit times cannot be later than SQL Server's clock. If that clock is
	 * far ahead of PostgreSQL's, so may be the commit times, and a verdict
	 * moved by them could never move back: record nothing until they agree.
	 */
	{
		int64		ahead;
		TimestampTz pg_now = GetCurrentTimestamp();

		if (pg_sub_s64_overflow(server_now, pg_now, &ahead) ||
			ahead > (int64) finalize_max_clock_skew_s * USECS_PER_SEC)
			return fail("clock_skew",
						psprintf("SQL Server's clock (%s) is ahead of PostgreSQL's (%s) by more than "
								 "finalize.max_clock_skew (%d s): its commit times cannot be trusted not to lie in "
								 "the future, so nothing is recorded. Synchronize the clocks (NTP) of both machines.",
								 instant_text(server_now), instant_text(pg_now), finalize_max_clock_skew_s),
						condition, error);
	}

	/*
	 * A capture that stopped and an idle database both freeze max LSN, but
	 * an idle database still gets dummy mapping rows: a commit time that
	 * lags SQL Server's own clock by more than the threshold is a stall.
	 */
	if (server_now - max_instant > cfg.stall_threshold)
	{
		source_condition = "capture_stalled";
		source_message = psprintf("The commit time of SQL Server's max LSN %s (%s) lags its clock (%s) by more "
								  "than the capture_stall_threshold of server \"%s\": the capture job may be "
								  "stopped or far behind (see sys.sp_cdc_help_jobs, sys.dm_cdc_errors; start it "
								  "with sys.sp_cdc_start_job). Verdicts cannot move until it catches up.",
								  lsn_text(&snap.max_lsn), instant_text(max_instant), instant_text(server_now),
								  cfg.server_name);
	}

	/* 3. Plan and read the ranges. */
	plans = palloc0(sizeof(TablePlan) * ntables);
	writes = palloc0(sizeof(TableWrite) * ntables);
	jobs = palloc0(sizeof(TableJob) * ntables);
	to_read = palloc0(sizeof(TableJob *) * ntables);
	for (int i = 0; i < ntables; i++)
	{
		plan_table(&tables[i], snap.instances, snap.ninstances, &snap.max_lsn, &plans[i]);
		jobs[i].table = &tables[i];
		jobs[i].plan = &plans[i];
		if (plans[i].action == PLAN_READ || plans[i].action == PLAN_RESUME ||
			plans[i].action == PLAN_INSTANCE_GAP)
			to_read[nread++] = &jobs[i];
	}
	if (nread > 0)
	{
		pgstat_report_activity(STATE_RUNNING, "finalize: reading CDC ranges");
		memset(&err, 0, sizeof(err));
		read_jobs(run->conn, to_read, nread, &snap.max_lsn, &err, NOLOCK_RETRIES);
		io_interrupts_rethrow();
		/* A lost connection or a timeout is the source's failure, not the tables'. */
		if (mssql_is_dead(run->conn))
			return fail(failure_condition(run->conn, &err),
						psprintf("Reading the CDC ranges of database \"%s\" failed: %s%s",
								 cfg.database, mssql_error_text(&err),
								 err.timed_out ? psprintf(" (no answer within finalize.query_timeout, %d s; the "
														  "connection is reopened)", cfg.conn.query_timeout) : ""),
						condition, error);
	}

	/* 4. Decide each table's write. */
	for (int i = 0; i < ntables; i++)
	{
		TableWrite *w = &writes[i];
		const TablePlan *p = &plans[i];

		w->table = &tables[i];
		switch (p->action)
		{
			case PLAN_NOTHING:
				set_condition(w, NULL, NULL);
				break;
			case PLAN_BASELINE:
				w->kind = WRITE_RANGES;
				w->nfacts = 1;
				w->capture_instance = p->instance->name;
				w->facts[0].table_id = tables[i].table_id;
				w->facts[0].has_start = false;
				w->facts[0].end = snap.max_lsn;
				w->facts[0].end_time = max_instant;
				w->facts[0].capture_instance = p->instance->name;
				break;
			case PLAN_READ:
				judge_read(&cfg, &jobs[i], &snap.max_lsn, max_instant, w);
				break;
			case PLAN_RESUME:
				judge_resume(&cfg, &jobs[i], max_instant, w);
				break;
			case PLAN_INSTANCE_GAP:
				judge_gap(&cfg, &jobs[i], max_instant, w);
				break;
			case PLAN_NO_INSTANCE:
				set_condition(w, "no_capture_instance",
							  tables[i].capture_instance != NULL
							  ? psprintf("Capture instance \"%s\" of %s.%s is not listed by "
										 "sys.sp_cdc_help_change_data_capture for login \"%s\" as capturing that "
										 "table, and no other instance of the table is (or the name no longer "
										 "resolves: OBJECT_ID is NULL).",
										 tables[i].capture_instance, tables[i].source_schema,
										 tables[i].source_name, cfg.conn.username)
							  : psprintf("No capture instance of %s.%s is visible to login \"%s\": change data "
										 "capture is not enabled on the table, or the login may not read it.",
										 tables[i].source_schema, tables[i].source_name, cfg.conn.username));
				break;
			case PLAN_SOURCE_REPLACED:
				set_condition(w, "source_replaced",
							  psprintf("%s.%s now names another table (object id %lld) than the one capture "
									   "instance \"%s\" captures (object id %lld): the table was renamed or "
									   "replaced. Nothing is recorded: the changes of either table are not this "
									   "table's history. Untrack and track the table again to follow the new one.",
									   tables[i].source_schema, tables[i].source_name,
									   (long long) tables[i].object_id, p->instance->name,
									   (long long) p->instance->source_object_id));
				break;
			case PLAN_LSN_REGRESSED:
				set_condition(w, "lsn_regressed",
							  psprintf("SQL Server's max LSN %s is below this table's offset %s: the database was "
									   "restored or replaced. Nothing is recorded until it passes the offset.",
									   lsn_text(&snap.max_lsn), lsn_text(&tables[i].offset)));
				break;
		}
	}

	/* 5. Record everything in one short transaction. */
	ws_begin_write("finalize: recording facts");
	for (int i = 0; i < ntables; i++)
		record_write(&writes[i]);
	ws_source_ok(cfg.server_name, &snap.max_lsn, max_instant, server_now, source_condition, source_message);
	ws_commit();
	return true;
}
