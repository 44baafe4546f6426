/*
 * cycle.c
 *     One cycle of a source worker: read state in PostgreSQL, ask SQL Server
 *     with no transaction open, record everything in one short transaction.
 *
 *   1. tracked tables and the source's options          (short transaction)
 *   2. max LSN, its commit time, SQL Server's clock and offset, the capture
 *      instances                                          (SQL Server, batch 1)
 *   3. per table, the range (offset, max_lsn] aggregated on the server, then,
 *      AFTER all reads, each instance's min LSN          (SQL Server, batch 2)
 *   4. per table: record_range, or a data-loss event, or why it could not be
 *      read; the source's status                          (short transaction)
 *
 * The rules that decide what is recorded are in plan.c.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "cycle.h"
#include "finalize.h"
#include "plan.h"
#include "timeconv.h"
#include "tsql.h"
#include "worker_state.h"

/* What SQL Server said about itself at the start of the cycle. */
typedef struct SourceSnapshot
{
	bool		has_max_lsn;
	Lsn			max_lsn;
	bool		has_max_time;
	Timestamp	max_time_local;
	Timestamp	utc_now;
	int64		tz_offset_minutes;
	CaptureInstance *instances;
	int			ninstances;
	int			results;		/* result sets read */
} SourceSnapshot;

/* What was read for one table's range. */
typedef struct RangeRead
{
	bool		ok;				/* the aggregate and min LSN were read */
	char	   *error;			/* else why not */
	int64		inserts;
	int64		updates;
	int64		deletes;
	bool		has_first;
	Timestamp	first_local;
	bool		has_last;
	Timestamp	last_local;
	bool		has_min;
	Lsn			min_lsn;
} RangeRead;

/* What the cycle does for one table in the write transaction. */
typedef enum WriteKind
{
	WRITE_RANGE,
	WRITE_DATA_LOSS,
	WRITE_CONDITION
} WriteKind;

typedef struct TableWrite
{
	WriteKind	kind;
	const TrackedSource *table;
	const char *capture_instance;
	RangeFacts	facts;			/* WRITE_RANGE */
	Lsn			lost_from;		/* WRITE_DATA_LOSS: exclusive start */
	Lsn			lost_to;		/* WRITE_DATA_LOSS: inclusive end */
	char	   *detail_json;
	char	   *state_detail;
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

/* Appends "key": "string value" to a JSON object under construction. */
static void
json_kv(StringInfo buf, const char *key, const char *value)
{
	if (buf->len > 1)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	escape_json(buf, value);
}

/*
 * Reads batch 1: the max LSN row, then the capture instances. Returns false
 * with err set on a SQL Server failure.
 */
static bool
read_source_snapshot(MssqlConn *conn, SourceSnapshot *snap, MssqlError *err)
{
	int			resultno = 0;
	int			capacity = 16;
	int			r;

	/* snap->results counts the result sets read, even when a later one fails. */
	memset(snap, 0, sizeof(*snap));
	snap->instances = palloc0(sizeof(CaptureInstance) * capacity);

	if (!mssql_execute(conn, tsql_source_state(), err))
		return false;
	while ((r = mssql_next_result(conn, err)) == 1)
	{
		if (mssql_num_columns(conn) == 0)
			continue;
		while ((r = mssql_next_row(conn, err)) == 1)
		{
			if (resultno == 0)
			{
				snap->has_max_lsn = mssql_get_lsn(conn, 1, &snap->max_lsn);
				snap->has_max_time = mssql_get_local_time(conn, 2, &snap->max_time_local);
				(void) mssql_get_local_time(conn, 3, &snap->utc_now);
				(void) mssql_get_int64(conn, 4, &snap->tz_offset_minutes);
			}
			else if (resultno == 1)
			{
				CaptureInstance *ci;

				if (snap->ninstances == capacity)
				{
					capacity *= 2;
					snap->instances = repalloc(snap->instances, sizeof(CaptureInstance) * capacity);
				}
				ci = &snap->instances[snap->ninstances++];
				memset(ci, 0, sizeof(*ci));
				ci->source_schema = mssql_get_text(conn, 1);
				ci->source_table = mssql_get_text(conn, 2);
				ci->name = mssql_get_text(conn, 3);
				ci->has_start = mssql_get_lsn(conn, 6, &ci->start_lsn);
				if (ci->name == NULL || ci->source_schema == NULL || ci->source_table == NULL)
					snap->ninstances--;
			}
		}
		if (r < 0)
			return false;
		resultno++;
		snap->results = resultno;
	}
	return r == 0;
}

/*
 * Reads the aggregate of each planned range, then each range's min LSN, in
 * one batch (statements run in order, so every min LSN is read after every
 * range). With one table, failures belong to it; with several, a failed
 * batch is retried table by table so one broken table does not block the
 * others.
 */
static void
read_ranges(MssqlConn *conn, TablePlan **plans, RangeRead **reads, int n, const Lsn *max_lsn,
			MssqlError *err)
{
	StringInfoData sql;
	int			r = 0;
	int			resultno = 0;
	bool		failed = false;

	initStringInfo(&sql);
	for (int i = 0; i < n; i++)
		tsql_append_range_aggregate(&sql, plans[i]->instance->name, &plans[i]->start, max_lsn);
	for (int i = 0; i < n; i++)
		tsql_append_min_lsn(&sql, plans[i]->instance->name);

	if (!mssql_execute(conn, sql.data, err))
		failed = true;
	while (!failed && (r = mssql_next_result(conn, err)) == 1)
	{
		if (mssql_num_columns(conn) == 0)
			continue;
		while ((r = mssql_next_row(conn, err)) == 1)
		{
			if (resultno < n)
			{
				RangeRead  *rr = reads[resultno];

				(void) mssql_get_int64(conn, 1, &rr->inserts);
				(void) mssql_get_int64(conn, 2, &rr->updates);
				(void) mssql_get_int64(conn, 3, &rr->deletes);
				rr->has_first = mssql_get_local_time(conn, 4, &rr->first_local);
				rr->has_last = mssql_get_local_time(conn, 5, &rr->last_local);
			}
			else if (resultno < 2 * n)
			{
				RangeRead  *rr = reads[resultno - n];

				rr->has_min = mssql_get_lsn(conn, 1, &rr->min_lsn);
				rr->ok = true;
			}
		}
		if (r < 0)
			failed = true;
		resultno++;
	}
	if (!failed && r == 0 && resultno == 2 * n)
		return;

	CHECK_FOR_INTERRUPTS();
	if (n == 1 || mssql_is_dead(conn))
	{
		const char *msg = err->set ? mssql_error_text(err)
			: "SQL Server returned fewer results than statements sent";

		for (int i = 0; i < n; i++)
		{
			reads[i]->ok = false;
			reads[i]->error = pstrdup(msg);
		}
		return;
	}
	for (int i = 0; i < n; i++)
	{
		memset(reads[i], 0, sizeof(RangeRead));
		read_ranges(conn, &plans[i], &reads[i], 1, max_lsn, err);
	}
}

/* Applies one table's write (inside ws_try). */
static void
apply_write(void *arg)
{
	TableWrite *w = (TableWrite *) arg;

	switch (w->kind)
	{
		case WRITE_RANGE:
			ws_record_range(&w->facts);
			if (w->capture_instance != NULL)
				ws_set_capture_instance(w->table->table_id, w->capture_instance);
			ws_set_condition(w->table->table_id, NULL, NULL);
			break;
		case WRITE_DATA_LOSS:
			ws_record_event(w->table->table_id, "data_loss", &w->lost_from, &w->lost_to,
							w->capture_instance, w->detail_json, "data_lost", w->state_detail);
			ws_set_condition(w->table->table_id, NULL, NULL);
			break;
		case WRITE_CONDITION:
			ws_set_condition(w->table->table_id, w->condition, w->condition_detail);
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
 * Turns what was read for a range into the write for its table: the facts,
 * a data-loss event, or a condition saying why nothing was recorded.
 */
static void
judge_read(const SourceRun *run, const SourceConfig *cfg, const TrackedSource *t,
		   const TablePlan *plan, const RangeRead *rr, const Lsn *max_lsn,
		   TimestampTz max_instant, TableWrite *w)
{
	const char *ci = plan->instance->name;

	w->table = t;
	w->capture_instance = ci;
	if (!rr->ok)
	{
		set_condition(w, "read_failed",
					  psprintf("Reading capture instance \"%s\" failed: %s", ci, rr->error));
		return;
	}
	if (!rr->has_min)
	{
		set_condition(w, "read_failed",
					  psprintf("sys.fn_cdc_get_min_lsn(N'%s') returned NULL.", ci));
		return;
	}
	switch (judge_range(&plan->start, &rr->min_lsn))
	{
		case RANGE_UNREADABLE:
			set_condition(w, "no_access",
						  psprintf("sys.fn_cdc_get_min_lsn(N'%s') returned 0x00000000000000000000: the capture "
								   "instance no longer exists, or the login \"%s\" may not read it (it needs "
								   "SELECT on the captured columns and membership in the instance's gating role).",
								   ci, cfg->conn.username));
			return;
		case RANGE_MAY_HAVE_LOST_ROWS:
			{
				StringInfoData json;
				Lsn			first;

				w->kind = WRITE_DATA_LOSS;
				w->lost_from = plan->start;
				if (!lsn_decrement(&rr->min_lsn, &w->lost_to))
					w->lost_to = rr->min_lsn;
				(void) lsn_increment(&plan->start, &first);
				initStringInfo(&json);
				appendStringInfoChar(&json, '{');
				json_kv(&json, "capture_instance", ci);
				json_kv(&json, "offset_lsn", lsn_text(&plan->start));
				json_kv(&json, "min_lsn", lsn_text(&rr->min_lsn));
				json_kv(&json, "max_lsn", lsn_text(max_lsn));
				json_kv(&json, "cause", "CDC cleanup (retention) removed changes before finalize read them");
				appendStringInfoChar(&json, '}');
				w->detail_json = json.data;
				w->state_detail = psprintf(
										   "Changes of capture instance \"%s\" from LSN %s to %s may have been removed by CDC "
										   "cleanup (retention) before finalize read them: the instance's minimum LSN is now %s. "
										   "The verdict stays where it was. Resume with finalize.resume_table() once the loss "
										   "is accounted for (for example after a re-snapshot).",
										   ci, lsn_text(&first), lsn_text(&w->lost_to), lsn_text(&rr->min_lsn));
				return;
			}
		case RANGE_COMPLETE:
			break;
	}

	w->kind = WRITE_RANGE;
	w->facts.table_name = t->table_name;
	w->facts.has_start = true;
	w->facts.start = plan->start;
	w->facts.end = *max_lsn;
	w->facts.end_time = max_instant;
	w->facts.inserts = rr->inserts;
	w->facts.updates = rr->updates;
	w->facts.deletes = rr->deletes;
	w->facts.has_rows = rr->inserts + rr->updates + rr->deletes > 0;
	w->facts.capture_instance = ci;
	if (w->facts.has_rows)
	{
		if (!rr->has_first || !rr->has_last)
		{
			set_condition(w, "read_failed",
						  psprintf("The commit times of the rows read from capture instance \"%s\" could not "
								   "be mapped (sys.fn_cdc_map_lsn_to_time returned NULL).", ci));
			return;
		}
		w->facts.first_time = local_to_instant_earliest(rr->first_local, cfg->tz);
		w->facts.last_time = local_to_instant_earliest(rr->last_local, cfg->tz);
		if (w->facts.first_time > w->facts.last_time)
			w->facts.first_time = w->facts.last_time;
	}
}

/* Records a failed cycle, in its own transaction. */
static bool
fail(const char *condition, const char *message, char **out_condition, char **out_error)
{
	*out_condition = pstrdup(condition);
	*out_error = pstrdup(message);
	return false;
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
	RangeRead  *reads;
	TablePlan **to_read_plans;
	RangeRead **to_read;
	int			nread = 0;

	/* 1. What to do, from PostgreSQL. */
	problem = ws_load_source(run->serverid, cxt, &cfg, &tables, &ntables, &run->server_gone);
	if (run->server_gone)
		return fail("server_dropped", problem, condition, error);
	if (run->server_name == NULL)
		run->server_name = MemoryContextStrdup(TopMemoryContext, cfg.server_name);
	if (problem != NULL)
		return fail("configuration", problem, condition, error);
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
		CHECK_FOR_INTERRUPTS();
		if (run->conn == NULL)
			return fail("unreachable",
						psprintf("Could not log in to SQL Server %s:%d, database \"%s\", as \"%s\": %s",
								 cfg.conn.host, cfg.conn.port, cfg.database, cfg.conn.username,
								 mssql_error_text(&err)),
						condition, error);
	}
	pgstat_report_activity(STATE_RUNNING, "finalize: reading SQL Server's max LSN");
	if (!read_source_snapshot(run->conn, &snap, &err))
	{
		CHECK_FOR_INTERRUPTS();
		/* With CDC disabled the help procedure fails (22901) after max LSN was NULL. */
		if (snap.results >= 1 && !snap.has_max_lsn)
			return fail("no_max_lsn",
						psprintf("sys.fn_cdc_get_max_lsn() returned NULL: change data capture is not enabled on "
								 "database \"%s\", or its capture job has not run yet (%s).",
								 cfg.database, mssql_error_text(&err)),
						condition, error);
		return fail(mssql_is_dead(run->conn) ? "unreachable" : "sql_error",
					psprintf("Reading the CDC state of database \"%s\" failed: %s",
							 cfg.database, mssql_error_text(&err)),
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

	/* 3. Plan and read the ranges. */
	plans = palloc0(sizeof(TablePlan) * ntables);
	writes = palloc0(sizeof(TableWrite) * ntables);
	reads = palloc0(sizeof(RangeRead) * ntables);
	to_read_plans = palloc0(sizeof(TablePlan *) * ntables);
	to_read = palloc0(sizeof(RangeRead *) * ntables);
	for (int i = 0; i < ntables; i++)
	{
		plan_table(&tables[i], snap.instances, snap.ninstances, &snap.max_lsn, &plans[i]);
		if (plans[i].action == PLAN_READ)
		{
			to_read_plans[nread] = &plans[i];
			to_read[nread] = &reads[i];
			nread++;
		}
	}
	if (nread > 0)
	{
		pgstat_report_activity(STATE_RUNNING, "finalize: reading CDC ranges");
		read_ranges(run->conn, to_read_plans, to_read, nread, &snap.max_lsn, &err);
		CHECK_FOR_INTERRUPTS();
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
				w->kind = WRITE_RANGE;
				w->capture_instance = p->instance->name;
				w->facts.table_name = tables[i].table_name;
				w->facts.has_start = false;
				w->facts.end = snap.max_lsn;
				w->facts.end_time = max_instant;
				w->facts.capture_instance = p->instance->name;
				break;
			case PLAN_READ:
				judge_read(run, &cfg, &tables[i], p, &reads[i], &snap.max_lsn, max_instant, w);
				break;
			case PLAN_NO_INSTANCE:
				set_condition(w, "no_capture_instance",
							  tables[i].capture_instance != NULL
							  ? psprintf("Capture instance \"%s\" of %s.%s is no longer listed by "
										 "sys.sp_cdc_help_change_data_capture for login \"%s\".",
										 tables[i].capture_instance, tables[i].source_schema,
										 tables[i].source_name, cfg.conn.username)
							  : psprintf("No capture instance of %s.%s is visible to login \"%s\": change data "
										 "capture is not enabled on the table, or the login may not read it.",
										 tables[i].source_schema, tables[i].source_name, cfg.conn.username));
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
	ws_begin("finalize: recording facts");
	for (int i = 0; i < ntables; i++)
	{
		char	   *msg = NULL;

		if (!ws_try(apply_write, &writes[i], &msg))
		{
			TableWrite	cw;

			memset(&cw, 0, sizeof(cw));
			cw.table = &tables[i];
			set_condition(&cw, "record_failed", psprintf("Recording failed: %s", msg));
			(void) ws_try(apply_write, &cw, &msg);
			ereport(WARNING,
					(errmsg("finalize could not record the facts of table \"%s\": %s",
							tables[i].table_name, msg)));
		}
	}
	ws_source_ok(cfg.server_name, &snap.max_lsn, max_instant, server_now);
	ws_commit();
	return true;
}
