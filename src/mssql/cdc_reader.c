/*
 * cdc_reader.c
 *     Reads SQL Server's CDC ranges (batch 2), the captured columns of
 *     capture instances and the mapping rows of the LSNs pipelines reported
 *     (batch 3): sends the T-SQL tsql.c builds and decodes each result by
 *     the columns tsql.h names. Every value that must be there is checked: a
 *     result that is cut, mis-shaped or followed by an error is a failure of
 *     its statement, never a success with defaults. (Batch 1, the CDC state,
 *     is cdc_state.c's.)
 *
 * Each statement of a range batch is preceded by a one-column marker
 * result, so results and errors are sorted to their statements even when
 * some fail (SQL Server ends a statement, a scope or the whole batch
 * depending on the error).
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "core/io_interrupts.h"
#include "core/sketch.h"
#include "mssql/cdc_reader.h"
#include "mssql/tsql.h"

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
 * Decodes one piece row of a split range; false when a value that must be
 * there did not decode, or there are more pieces than split points allow.
 */
static bool
read_piece_row(MssqlConn *conn, CdcRange *sr)
{
	CdcPiece   *p;

	if (sr->npieces > sr->nsplits)
		return false;
	if (sr->pieces == NULL)
		sr->pieces = palloc0(sizeof(CdcPiece) * (sr->nsplits + 1));
	p = &sr->pieces[sr->npieces];
	if (!mssql_get_int64(conn, TSQL_RANGE_PIECE, &p->index) || p->index < 0 || p->index > sr->nsplits ||
		!mssql_get_int64(conn, TSQL_RANGE_INSERTS, &p->inserts) ||
		!mssql_get_int64(conn, TSQL_RANGE_UPDATES, &p->updates) ||
		!mssql_get_int64(conn, TSQL_RANGE_DELETES, &p->deletes) ||
		!mssql_get_lsn(conn, TSQL_RANGE_FIRST_LSN, &p->first_lsn) ||
		!mssql_get_lsn(conn, TSQL_RANGE_LAST_LSN, &p->last_lsn))
		return false;
	p->has_first = mssql_get_local_time(conn, TSQL_RANGE_FIRST_TIME, &p->first_local);
	p->has_last = mssql_get_local_time(conn, TSQL_RANGE_LAST_TIME, &p->last_local);
	sr->npieces++;
	return true;
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
				int64		grouping = 1;

				if (sr->nsplits > 0 && (mssql_num_columns(conn) < TSQL_RANGE_LAST_LSN ||
										!mssql_get_int64(conn, TSQL_RANGE_GROUPING, &grouping)))
					return false;
				if (grouping == 0)
					return read_piece_row(conn, sr);
				sr->has_total = true;
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
					  : cur->kind == STMT_RANGE && cur->range->nsplits > 0 ? !cur->range->has_total
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
		tsql_append_range_aggregate(&sql, ranges[i]->instance, &ranges[i]->start, &ranges[i]->end,
									ranges[i]->splits, ranges[i]->nsplits);
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
