/*
 * cdc_reader.c
 *     Reads SQL Server's CDC state (batch 1), ranges (batch 2) and the
 *     mapping rows of the LSNs pipelines reported (batch 3): sends the
 *     T-SQL tsql.c builds and decodes each result by the columns tsql.h
 *     names. Every value that must be there is checked: a result that is
 *     cut, mis-shaped or followed by an error is a failure of its statement,
 *     never a success with defaults.
 *
 * Each statement of a range batch is preceded by a one-column marker
 * result, so results and errors are sorted to their statements even when
 * some fail (SQL Server ends a statement, a scope or the whole batch
 * depending on the error).
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "common/io_interrupts.h"
#include "common/sketch.h"
#include "mssql/cdc_reader.h"
#include "mssql/tsql.h"

/*
 * Fails batch 1 for a value that did not decode: it must fail the cycle,
 * never leave a default behind.
 */
static bool
snapshot_problem(CdcState *snap, MssqlConn *conn, int col, const char *what, const char *tds_version)
{
	snap->problem = psprintf("SQL Server's %s arrived as %s and could not be decoded (tds_version %s).",
							 what, mssql_column_type_name(conn, col), tds_version);
	return false;
}

/* The state row: max LSN, its commit time, the clock and its UTC offset. */
static bool
decode_state_row(MssqlConn *conn, const char *tds_version, CdcState *snap)
{
	snap->has_max_lsn = mssql_get_lsn(conn, TSQL_STATE_MAX_LSN, &snap->max_lsn);
	snap->has_max_time = mssql_get_local_time(conn, TSQL_STATE_MAX_TIME, &snap->max_time_local);
	if (!mssql_get_local_time(conn, TSQL_STATE_UTC_NOW, &snap->utc_now))
		return snapshot_problem(snap, conn, TSQL_STATE_UTC_NOW, "clock (SYSDATETIMEOFFSET() in UTC)",
								tds_version);
	if (!mssql_get_int64(conn, TSQL_STATE_TZ_OFFSET, &snap->tz_offset_minutes))
		return snapshot_problem(snap, conn, TSQL_STATE_TZ_OFFSET, "UTC offset (DATEPART(TZOFFSET, ...))",
								tds_version);
	snap->has_state = true;
	return true;
}

/* A row of object ids: the tag is the name's index in the request. */
static void
decode_object_id_row(MssqlConn *conn, int64 *object_ids, int nnames)
{
	int64		tag;
	int64		id;

	if (mssql_get_int64(conn, TSQL_OBJECT_TAG, &tag) && tag >= 0 && tag < nnames &&
		mssql_get_int64(conn, TSQL_OBJECT_ID, &id))
		object_ids[tag] = id;
}

/* A row of sys.sp_cdc_help_change_data_capture; incomplete rows are skipped. */
static void
decode_instance_row(MssqlConn *conn, CdcState *snap, int *capacity)
{
	CaptureInstance *ci;

	if (snap->ninstances == *capacity)
	{
		*capacity *= 2;
		snap->instances = repalloc(snap->instances, sizeof(CaptureInstance) * *capacity);
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

/*
 * Reads batch 1: the max LSN row, the object ids of the given (quoted,
 * schema-qualified) names into object_ids (0: not visible), then the
 * capture instances unless with_instances is false (a settled source's
 * idle cycle asks only for the state row). Returns false with err set on a SQL Server failure
 * (snap->results says how far it got), or with snap->problem set when a
 * value could not be decoded.
 */
bool
cdc_read_state(MssqlConn *conn, const char *tds_version, const char *const *names, int64 *object_ids,
			   int nnames, bool with_instances, CdcState *snap, MssqlError *err)
{
	int			resultno = 0;
	int			r;
	StringInfoData sql;
	/* results: the state row, the object ids (one per chunk of names), the instances */
	int			nid_results = (nnames + TSQL_NAMES_PER_STATEMENT - 1) / TSQL_NAMES_PER_STATEMENT;
	int			help_result = 1 + nid_results;
	int			capacity = 16;

	memset(snap, 0, sizeof(*snap));
	snap->instances = palloc0(sizeof(CaptureInstance) * capacity);
	for (int i = 0; i < nnames; i++)
		object_ids[i] = 0;
	initStringInfo(&sql);
	tsql_source_state(&sql, names, nnames, with_instances);

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
			if (resultno == 0 && !decode_state_row(conn, tds_version, snap))
				return false;
			else if (resultno > 0 && resultno < help_result)
				decode_object_id_row(conn, object_ids, nnames);
			else if (resultno == help_result)
				decode_instance_row(conn, snap, &capacity);
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

/* What one statement of a read batch is for, and what became of it. */
typedef enum StatementKind
{
	STMT_RANGE,
	STMT_MIN_LSN,
	STMT_DDL,
	STMT_LSN_MAPPING,
	STMT_EVENTS,
	STMT_COLUMNS
} StatementKind;

typedef struct Statement
{
	StatementKind kind;
	CdcRange   *range;			/* STMT_RANGE */
	CdcInstance *inst;			/* STMT_MIN_LSN, STMT_DDL */
	CdcLsnMapping *map;			/* STMT_LSN_MAPPING */
	CdcEvents  *events;			/* STMT_EVENTS */
	CdcColumns *columns;		/* STMT_COLUMNS */
	bool		started;		/* its marker arrived: it ran */
	bool		done;			/* its result arrived whole */
	int			error_number;	/* SQL Server's error of this statement, or 0 */
	char	   *error;			/* why it has no result */
} Statement;

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
		case STMT_LSN_MAPPING:
			return TSQL_MAP_END_TIME;
		case STMT_EVENTS:
			return TSQL_EV_MAX_MS;
		case STMT_COLUMNS:
			return TSQL_CAPTURED_TYPE;
	}
	return PG_INT32_MAX;
}

/*
 * Decodes one row of the event-time facts of a range: a slot row, a bucket
 * row or the grand total, told apart by GROUPING(). A count that does not
 * decode fails the statement.
 */
static bool
read_events_row(MssqlConn *conn, CdcEvents *ev)
{
	int64		gk;
	int64		gb;
	int64		rows;

	if (!mssql_get_int64(conn, TSQL_EV_GROUPING_K, &gk) || !mssql_get_int64(conn, TSQL_EV_GROUPING_B, &gb) ||
		!mssql_get_int64(conn, TSQL_EV_ROWS, &rows) || rows < 0)
		return false;
	if (ev->capacity == 0)
	{
		ev->capacity = 64;
		ev->slots = palloc(sizeof(CdcEventSlot) * ev->capacity);
		ev->buckets = palloc(sizeof(CdcLateBucket) * ev->capacity);
	}
	if (ev->nslots == ev->capacity || ev->nbuckets == ev->capacity)
	{
		ev->capacity *= 2;
		ev->slots = repalloc(ev->slots, sizeof(CdcEventSlot) * ev->capacity);
		ev->buckets = repalloc(ev->buckets, sizeof(CdcLateBucket) * ev->capacity);
	}
	if (gk == 0 && gb == 1)
	{
		CdcEventSlot *s = &ev->slots[ev->nslots];
		int64		op;

		if (ev->nslots >= CDC_MAX_EVENT_SLOTS)
		{
			ev->too_many = true;
			return false;
		}
		if (!mssql_get_int64(conn, TSQL_EV_OP, &op) || (op != 1 && op != 2 && op != 4))
			return false;
		s->op = (int) op;
		s->rows = rows;
		s->null_event = !mssql_get_int64(conn, TSQL_EV_SLOT, &s->slot);
		/* slots of 9999-12-31 are below 4e11 seconds since 1900: anything else is not one */
		if (!s->null_event && (s->slot < -1 || s->slot > INT64CONST(400000000000) / ev->slot_seconds))
			return false;
		ev->nslots++;
		return true;
	}
	if (gk == 1 && gb == 0)
	{
		CdcLateBucket *b = &ev->buckets[ev->nbuckets];

		/* rows whose event time is NULL have no lateness: their bucket is NULL */
		if (!mssql_get_int64(conn, TSQL_EV_BUCKET, &b->bucket))
			return true;
		b->rows = rows;
		ev->nbuckets++;
		return true;
	}
	if (gk == 1 && gb == 1)
	{
		ev->has_total = true;
		ev->rows = rows;
		ev->has_span = mssql_get_int64(conn, TSQL_EV_MIN_MS, &ev->min_ms) &&
			mssql_get_int64(conn, TSQL_EV_MAX_MS, &ev->max_ms);
		/* 0001-01-01 .. 9999-12-31 in ms around 1900-01-01 */
		return !ev->has_span || (ev->min_ms >= -INT64CONST(60000000000000) &&
								 ev->max_ms <= INT64CONST(400000000000000) && ev->min_ms <= ev->max_ms);
	}
	return false;
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
				CdcRange   *sr = st->range;

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
				CdcInstance *ir = st->inst;
				CdcDdl   *d;

				if (ir->nddl == *ddl_capacity)
				{
					*ddl_capacity = *ddl_capacity ? *ddl_capacity * 2 : 4;
					ir->ddl = ir->ddl ? repalloc(ir->ddl, sizeof(CdcDdl) * *ddl_capacity)
						: palloc(sizeof(CdcDdl) * *ddl_capacity);
				}
				d = &ir->ddl[ir->nddl];
				d->command = mssql_get_text(conn, TSQL_DDL_COMMAND);
				d->has_time = mssql_get_local_time(conn, TSQL_DDL_TIME, &d->time_local);
				if (d->command == NULL || !mssql_get_lsn(conn, TSQL_DDL_LSN, &d->lsn))
					return false;
				ir->nddl++;
				return true;
			}
		case STMT_EVENTS:
			return read_events_row(conn, st->events);
		case STMT_COLUMNS:
			{
				CdcColumns *c = st->columns;

				if (c->ncolumns == c->capacity)
				{
					c->capacity = c->capacity ? c->capacity * 2 : 16;
					c->names = c->names ? repalloc(c->names, sizeof(char *) * c->capacity)
						: palloc(sizeof(char *) * c->capacity);
					c->types = c->types ? repalloc(c->types, sizeof(char *) * c->capacity)
						: palloc(sizeof(char *) * c->capacity);
				}
				c->names[c->ncolumns] = mssql_get_text(conn, TSQL_CAPTURED_NAME);
				c->types[c->ncolumns] = mssql_get_text(conn, TSQL_CAPTURED_TYPE);
				if (c->names[c->ncolumns] == NULL || c->types[c->ncolumns] == NULL)
					return false;
				c->ncolumns++;
				return true;
			}
		case STMT_LSN_MAPPING:
			/* a row without a time could not say what was applied */
			st->map->found = mssql_get_lsn(conn, TSQL_MAP_START_LSN, &st->map->start_lsn) &&
				mssql_get_local_time(conn, TSQL_MAP_END_TIME, &st->map->end_time_local);
			return st->map->found;
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

/* A marker result (SELECT n AS finalize_statement): the statement next, or NULL. */
static Statement *
read_marker(MssqlConn *conn, Statement *stmts, int nstmts)
{
	MssqlError	step;
	int64		n = -1;
	int			r;
	Statement  *cur;

	if ((r = mssql_next_row(conn, &step)) == 1)
		(void) mssql_get_int64(conn, 1, &n);
	while (r == 1)
		r = mssql_next_row(conn, &step);
	cur = (n >= 0 && n < nstmts) ? &stmts[n] : NULL;
	if (cur != NULL)
		cur->started = true;
	return cur;
}

/*
 * Decodes the result of a statement; returns the last mssql_next_row
 * status (step holds an error that came with the rows).
 */
static int
read_statement_result(MssqlConn *conn, Statement *cur, MssqlError *step)
{
	int			ddl_capacity = 0;
	int			rows = 0;
	int			r;
	bool		decoded = mssql_num_columns(conn) >= statement_columns(cur->kind);

	while ((r = mssql_next_row(conn, step)) == 1)
	{
		if (decoded)
			decoded = read_statement_row(conn, cur, &ddl_capacity);
		rows++;
	}
	/*
	 * An aggregate and a min LSN read are one row each, a mapping row at
	 * most one; the event-time facts always end with their grand total.
	 */
	if (r == 0 && cur->error == NULL && cur->kind == STMT_EVENTS && cur->events->too_many)
		cur->error = psprintf("the range's rows have event times in more than %d slots of %lld s (a backfill, or "
							  "event times spread over years): finalize stores at most that many event periods "
							  "per range; check the values of the event column \"%s\"", CDC_MAX_EVENT_SLOTS,
							  (long long) cur->events->slot_seconds, cur->events->column);
	if (r == 0 && cur->error == NULL &&
		(!decoded || (cur->kind == STMT_LSN_MAPPING ? rows > 1
					  : cur->kind == STMT_EVENTS ? !cur->events->has_total
					  : cur->kind != STMT_DDL && cur->kind != STMT_COLUMNS && rows != 1)))
		cur->error = psprintf("SQL Server returned %d row(s) of %d column(s) for it, or a value that could "
							  "not be decoded (first columns: %s, %s)", rows, mssql_num_columns(conn),
							  mssql_column_type_name(conn, 1), mssql_column_type_name(conn, 2));
	return r;
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
			cur = read_marker(conn, stmts, nstmts);
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
		r = read_statement_result(conn, cur, &step);
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

/* Adds a statement to a range batch, behind its marker. */
static Statement *
add_statement(StringInfo sql, Statement *stmts, int *nstmts, StatementKind kind)
{
	Statement  *st = &stmts[*nstmts];

	tsql_append_marker(sql, *nstmts);
	st->kind = kind;
	(*nstmts)++;
	return st;
}

/* The outcome of what a statement reads. */
static CdcOutcome *
statement_outcome(Statement *st)
{
	switch (st->kind)
	{
		case STMT_RANGE:
			return &st->range->outcome;
		case STMT_LSN_MAPPING:
			return &st->map->outcome;
		case STMT_EVENTS:
			return &st->events->outcome;
		case STMT_COLUMNS:
			return &st->columns->outcome;
		case STMT_MIN_LSN:
		case STMT_DDL:
			break;
	}
	return &st->inst->outcome;
}

/*
 * Records how statement i ended in the outcome of what it read: the first
 * failure gives the error; every failure counts for a retry.
 */
static void
settle(CdcOutcome *o, const Statement *st, int i, bool alive, const MssqlError *err)
{
	if (st->done)
		return;
	o->never_ran |= !st->started;
	o->nolock_lost |= st->error_number == 601;
	if (!o->ok)
		return;
	o->ok = false;
	o->position = i;
	o->error_number = st->error_number;
	o->error = st->error != NULL ? st->error
		: pstrdup(!alive ? mssql_error_text(err)
				  : !st->started ? psprintf("the statement did not run: an earlier error ended the batch (%s)",
											err->set ? mssql_error_text(err) : "no message")
				  : "SQL Server returned no result for the statement");
}

/*
 * Reads batch 2: every range's aggregate, then every instance's min LSN,
 * then the DDL of the instances that want it. Statements run in order, so
 * each min LSN is read after every range. Each range and instance gets its
 * outcome; returns false only when the connection was lost.
 */
bool
cdc_read_ranges(MssqlConn *conn, CdcRange **ranges, int nranges, CdcInstance *insts, int ninsts,
				MssqlError *err)
{
	Statement  *stmts = palloc0(sizeof(Statement) * (2 * nranges + 2 * ninsts + 1));
	int			nstmts = 0;
	StringInfoData sql;
	bool		alive;

	initStringInfo(&sql);
	for (int i = 0; i < nranges; i++)
	{
		CdcEvents  *ev = ranges[i]->events;

		add_statement(&sql, stmts, &nstmts, STMT_RANGE)->range = ranges[i];
		tsql_append_range_aggregate(&sql, ranges[i]->instance, &ranges[i]->start, &ranges[i]->end);
		if (ev == NULL)
			continue;
		add_statement(&sql, stmts, &nstmts, STMT_EVENTS)->events = ev;
		tsql_append_range_events(&sql, ranges[i]->instance, ev->column, ev->utc, ev->server_offset_minutes,
								 &ranges[i]->start,
								 &ranges[i]->end, ev->slot_seconds, SKETCH_GAMMA);
	}
	for (int i = 0; i < ninsts; i++)
	{
		add_statement(&sql, stmts, &nstmts, STMT_MIN_LSN)->inst = &insts[i];
		tsql_append_min_lsn(&sql, insts[i].name);
	}
	for (int i = 0; i < ninsts; i++)
		if (insts[i].want_ddl)
		{
			add_statement(&sql, stmts, &nstmts, STMT_DDL)->inst = &insts[i];
			tsql_append_ddl_history(&sql, insts[i].name);
		}

	alive = run_statements(conn, sql.data, stmts, nstmts, err);
	io_interrupts_rethrow();

	for (int i = 0; i < nranges; i++)
	{
		ranges[i]->outcome.ok = true;
		if (ranges[i]->events != NULL)
			ranges[i]->events->outcome.ok = true;
	}
	for (int i = 0; i < ninsts; i++)
		insts[i].outcome.ok = true;
	for (int i = 0; i < nstmts; i++)
		settle(statement_outcome(&stmts[i]), &stmts[i], i, alive, err);
	return alive;
}

/*
 * Reads, in one batch, the captured columns of capture instances (what an
 * event column is checked against). A statement that fails (22981: the
 * login may not read the instance) fails only its own instance. Returns
 * false only when the connection was lost.
 */
bool
cdc_read_captured_columns(MssqlConn *conn, CdcColumns *cols, int ncols, MssqlError *err)
{
	Statement  *stmts = palloc0(sizeof(Statement) * (ncols + 1));
	int			nstmts = 0;
	StringInfoData sql;
	bool		alive;

	initStringInfo(&sql);
	for (int i = 0; i < ncols; i++)
	{
		memset(&cols[i].outcome, 0, sizeof(CdcOutcome));
		cols[i].outcome.ok = true;
		cols[i].ncolumns = 0;
		add_statement(&sql, stmts, &nstmts, STMT_COLUMNS)->columns = &cols[i];
		tsql_append_captured_columns(&sql, cols[i].instance);
	}
	alive = run_statements(conn, sql.data, stmts, nstmts, err);
	io_interrupts_rethrow();
	for (int i = 0; i < nstmts; i++)
		settle(statement_outcome(&stmts[i]), &stmts[i], i, alive, err);
	return alive;
}

/*
 * Reads, in one batch, the greatest cdc.lsn_time_mapping row at or below
 * each LSN (sent after the ranges, on the same connection). A statement
 * that fails (229: the login may not read the table) fails only its own
 * mapping. Returns false only when the connection was lost.
 */
bool
cdc_map_lsns(MssqlConn *conn, CdcLsnMapping **maps, int nmaps, MssqlError *err)
{
	Statement  *stmts = palloc0(sizeof(Statement) * (nmaps + 1));
	int			nstmts = 0;
	StringInfoData sql;
	bool		alive;

	initStringInfo(&sql);
	for (int i = 0; i < nmaps; i++)
	{
		maps[i]->found = false;
		memset(&maps[i]->outcome, 0, sizeof(CdcOutcome));
		maps[i]->outcome.ok = true;
		add_statement(&sql, stmts, &nstmts, STMT_LSN_MAPPING)->map = maps[i];
		tsql_append_lsn_mapping(&sql, &maps[i]->lsn);
	}
	alive = run_statements(conn, sql.data, stmts, nstmts, err);
	io_interrupts_rethrow();
	for (int i = 0; i < nstmts; i++)
		settle(statement_outcome(&stmts[i]), &stmts[i], i, alive, err);
	return alive;
}
