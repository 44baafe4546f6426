/*
 * cycle.c
 *     One cycle of a source worker: read state in PostgreSQL, ask SQL Server
 *     with no transaction open, record everything in one short transaction.
 *
 *   1. tracked tables and the source's options          (short transaction)
 *   2. max LSN, its commit time, SQL Server's clock and offset, the tables'
 *      object ids, the capture instances               (SQL Server, batch 1;
 *      a settled source first asks only for max LSN, see cycle_may_be_idle)
 *   3. the times checked: zone, commits ahead of the clock (also of a clock
 *      stepped back since an earlier cycle), clock skew, stall
 *   4. per table, its range(s) aggregated on the server; then, AFTER all of
 *      them, each instance's min LSN and the DDL it recorded (SQL Server, batch 2);
 *      then the mapping rows of the LSNs consumers reported (batch 3)
 *   5. per table: record_range, a data-loss or schema event, a resume, or
 *      why it could not be read; per consumer its resolution, then the stall
 *      check; the source's status     (short transaction; the writes that go
 *      one table at a time commit every few dozen tables, record_batch.c)
 *
 * Whether the times can be trusted is decided in clock_check.c, what is read
 * and what a read proves in plan.c (pure, unit-tested), how the reads become
 * a table's write in judge.c, how a write is recorded in record.c, how
 * consumers are resolved in consumers.c, how the tables' ranges are read in
 * range_reads.c; the T-SQL and its results are mssql/cdc_reader.c's.
 */
#include "postgres.h"

#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/fmt.h"
#include "core/io_interrupts.h"
#include "core/settings.h"
#include "core/timeconv.h"
#include "mssql/cdc_reader.h"
#include "mssql/login.h"
#include "mssql/tsql.h"
#include "worker/clock_check.h"
#include "worker/clock_steps.h"
#include "worker/consumers.h"
#include "worker/cycle.h"
#include "worker/event_facts.h"
#include "worker/instances.h"
#include "worker/judge.h"
#include "worker/period_splits.h"
#include "worker/plan.h"
#include "worker/record.h"
#include "worker/source_config.h"
#include "worker/table_reads.h"
#include "worker/unlisted.h"
#include "worker/worker_state.h"

/* One cycle's state, step to step. */
typedef struct Cycle
{
	SourceRun  *run;
	SourceConfig cfg;
	TrackedSource *tables;
	int			ntables;
	SourceConsumer *consumers;	/* of the tables, those that reported */
	int			nconsumers;
	ConsumerJob *consumer_jobs;	/* the ones resolved this cycle */
	int			nconsumer_jobs;
	CdcState	snap;
	TimestampTz max_instant;	/* commit time of max LSN */
	TimestampTz server_now;		/* SQL Server's clock, read after max LSN */
	Condition	source_condition;	/* COND_OK, or COND_CAPTURE_STALLED */
	char	   *source_message;
	CycleOutcome *out;			/* why the cycle failed, for the caller */
	bool		was_settled;	/* the source was settled when the cycle began */
	bool		reconnected;	/* this cycle opened a new connection */
	TimestampTz started;		/* for source_status.cycle_time */
} Cycle;

/* Records a failed cycle's condition and message for the caller. */
static bool
fail(Cycle *c, Condition condition, char *message)
{
	c->out->condition = condition;
	c->out->message = message;
	return false;
}

/* The condition for a failed SQL Server call. */
static Condition
failure_condition(MssqlConn *conn, const MssqlError *err)
{
	if (err->interrupted)
		return COND_CANCELLED;
	if (err->timed_out)
		return COND_TIMEOUT;
	return mssql_is_dead(conn) ? COND_UNREACHABLE : COND_SQL_ERROR;
}

/* Step 1: the source's options, login and active tables; false to stop here. */
static bool
load_source(Cycle *c, MemoryContext cxt)
{
	SourceRun  *run = c->run;
	char	   *problem = ws_load_source(run->serverid, cxt, &c->cfg, &c->tables, &c->ntables, &c->consumers,
											 &c->nconsumers, &run->server_gone);

	if (run->server_gone)
		return fail(c, COND_SERVER_DROPPED, problem);
	if (run->server_name == NULL)
		run->server_name = MemoryContextStrdup(TopMemoryContext, c->cfg.server_name);
	if (problem != NULL)
		return fail(c, COND_CONFIGURATION, problem);
	if (hold_refuses(run, &c->cfg, c->out))
		return false;
	return true;
}

/*
 * A Kerberos source whose connection stays open: its ticket is renewed
 * all the same when due (kerberos.c), so that the next login finds one and
 * source_status shows when it ends. A failure that leaves no valid ticket
 * changes nothing now (SQL Server keeps the session); it is logged, and the
 * next login reports it as the source's condition.
 */
static void
renew_ticket(Cycle *c)
{
	MssqlError	err;
	MssqlConnInfo with;
	TimestampTz expires;

	if (c->cfg.conn.auth != MSSQL_AUTH_KERBEROS)
		return;
	if (login_tickets(&c->cfg.conn, &with, &expires, &err))
		c->run->ticket_expires = expires;
	else if (c->run->ticket_expires != 0)	/* once, until a ticket is had again */
	{
		c->run->ticket_expires = 0;
		ereport(WARNING,
				(errmsg("finalize: source \"%s\": %s", c->cfg.server_name, err.message),
				 errdetail("The open connection goes on; a new login needs a ticket.")));
	}
}

/* Step 2a: a live connection, kept across cycles; a dead one is reopened. */
static bool
connect_source(Cycle *c)
{
	SourceRun  *run = c->run;
	MssqlError	err;

	if (run->conn != NULL && mssql_is_dead(run->conn))
	{
		mssql_close(run->conn);
		run->conn = NULL;
	}
	if (run->conn != NULL)
	{
		renew_ticket(c);
		return true;
	}
	pgstat_report_activity(STATE_RUNNING, "finalize: connecting to SQL Server");
	c->reconnected = true;
	run->conn = mssql_connect(&c->cfg.conn, &run->ticket_expires, &err);
	io_interrupts_rethrow();
	if (run->conn == NULL)
		return fail(c, err.kerberos_failed ? COND_KERBEROS_FAILED : err.local_failed ? COND_CONFIGURATION :
					err.tls_failed ? COND_TLS_FAILED : err.timed_out ? COND_TIMEOUT : COND_UNREACHABLE,
					psprintf("Could not log in to SQL Server %s:%d, database \"%s\", as \"%s\": %s",
							 c->cfg.conn.host, c->cfg.conn.port, c->cfg.database, c->cfg.conn.username,
							 mssql_error_text(&err)));
	return true;
}

/*
 * Step 2b: SQL Server's CDC state (batch 1), every value decoded; without
 * the tables' object ids and the capture instances when with_instances is
 * false.
 */
static bool
read_state(Cycle *c, bool with_instances)
{
	SourceRun  *run = c->run;
	MssqlError	err;
	const char **names = palloc0(sizeof(char *) * (c->ntables + 1));
	int64	   *ids = palloc0(sizeof(int64) * (c->ntables + 1));
	bool		ok;

	for (int i = 0; i < c->ntables; i++)
		names[i] = tsql_qualified_name(c->tables[i].source_schema, c->tables[i].source_name);
	pgstat_report_activity(STATE_RUNNING, "finalize: reading SQL Server's max LSN");
	ok = cdc_read_state(run->conn, c->cfg.conn.tds_version, names, ids, with_instances ? c->ntables : 0,
						with_instances, &c->snap, &err);
	io_interrupts_rethrow();
	for (int i = 0; i < c->ntables; i++)
		c->tables[i].object_id = ids[i];
	if (!ok && c->snap.problem != NULL)
	{
		/* The rest of the batch is not needed; the connection is reopened. */
		mssql_close(run->conn);
		run->conn = NULL;
		return fail(c, COND_SQL_ERROR, c->snap.problem);
	}
	if (!ok)
	{
		/* With CDC disabled the help procedure fails (22901) after max LSN was NULL. */
		if (c->snap.results >= 1 && !c->snap.has_max_lsn)
			return fail(c, COND_NO_MAX_LSN,
						psprintf("sys.fn_cdc_get_max_lsn() returned NULL: change data capture is not enabled on "
								 "database \"%s\", or its capture job has not run yet (%s).",
								 c->cfg.database, mssql_error_text(&err)));
		return fail(c, failure_condition(run->conn, &err),
					psprintf("Reading the CDC state of database \"%s\" failed: %s%s",
							 c->cfg.database, mssql_error_text(&err),
							 err.timed_out ? psprintf(" (no answer within finalize.query_timeout, %d s; the "
													  "connection is reopened)", c->cfg.conn.query_timeout) : ""));
	}
	if (!c->snap.has_max_lsn)
		return fail(c, COND_NO_MAX_LSN,
					psprintf("sys.fn_cdc_get_max_lsn() returned NULL: change data capture is not enabled on "
							 "database \"%s\", or its capture job has not run yet.", c->cfg.database));
	if (!c->snap.has_max_time)
		return fail(c, COND_SQL_ERROR,
					psprintf("sys.fn_cdc_map_lsn_to_time(%s) returned NULL.", fmt_lsn(&c->snap.max_lsn)));
	return true;
}

/*
 * Whether a cycle's times passed their checks; if not, the cycle fails
 * with the condition and a message that says what to do (clock_steps.c).
 */
static bool
times_trusted(Cycle *c, TimeProblem problem, const SourceTimes *t)
{
	char	   *message;
	Condition	condition = time_problem(problem, t, &c->cfg, &c->snap, &message);

	return condition == COND_NONE || fail(c, condition, message);
}

/*
 * Step 3: SQL Server's times, checked before any of them is used (the
 * rules are clock_check.c's). A stalled capture only sets the source's
 * condition.
 */
static bool
check_times(Cycle *c)
{
	SourceTimes t;
	TimeProblem problem;

	/* A second reading in the same cycle (after an idle check) starts afresh. */
	c->source_condition = COND_OK;
	c->source_message = NULL;
	t.server_now = (TimestampTz) c->snap.utc_now;
	t.reported_offset_s = c->snap.tz_offset_minutes * 60;
	t.expected_offset_s = local_offset_at(t.server_now, c->cfg.tz);
	t.max_instant = local_to_instant_earliest(c->snap.max_time_local, c->cfg.tz);
	t.pg_now = GetCurrentTimestamp();
	t.max_skew_usecs = (int64) finalize_max_clock_skew_s * USECS_PER_SEC;
	t.stall_usecs = c->cfg.stall_threshold;
	t.tolerance_usecs = c->cfg.clock_tolerance;
	t.has_previous = c->run->has_previous_max && c->run->previous_tz == (const void *) c->cfg.tz;
	t.previous_max = c->run->previous_max;
	problem = check_source_times(&t);
	/* A hold starts afresh: what was read before it is not compared with the clock after it. */
	if (problem == TIMES_COMMIT_AHEAD || problem == TIMES_CLOCK_BACK)
	{
		c->run->has_previous_max = false;
		c->out->clock_went_back = true;
		c->out->clock_at = t.server_now;
		/* Until the failure that records the hold commits (record_failure). */
		c->run->hold_pending = true;
		c->run->hold_clock_at = t.server_now;
	}
	if (!times_trusted(c, problem, &t))
		return false;
	c->server_now = t.server_now;
	c->max_instant = t.max_instant;
	c->run->previous_max = t.has_previous ? Max(t.previous_max, t.max_instant) : t.max_instant;
	c->run->previous_tz = c->cfg.tz;
	c->run->has_previous_max = true;
	if (capture_stalled(&t))
	{
		c->source_condition = COND_CAPTURE_STALLED;
		c->source_message = psprintf("The commit time of SQL Server's max LSN %s (%s) lags its clock (%s) by more "
									 "than the capture_stall_threshold of server \"%s\": the capture job may be "
									 "stopped or far behind (see sys.sp_cdc_help_jobs, sys.dm_cdc_errors; start it "
									 "with sys.sp_cdc_start_job). Verdicts cannot move until it catches up.",
									 fmt_lsn(&c->snap.max_lsn), fmt_instant(c->max_instant),
									 fmt_instant(c->server_now), c->cfg.server_name);
	}
	return true;
}

/* Step 4: plans every table, reads what the plans need (batch 2). */
static bool
plan_and_read(Cycle *c, TablePlan *plans, TableJob *jobs)
{
	TableJob  **to_read = palloc0(sizeof(TableJob *) * (c->ntables + 1));
	int			nread = 0;
	MssqlError	err;

	TableJob  **to_check = palloc0(sizeof(TableJob *) * (c->ntables + 1));
	int			ncheck = 0;
	InstanceIndex index;

	instance_index_build(&index, c->snap.instances, c->snap.ninstances);
	for (int i = 0; i < c->ntables; i++)
	{
		CaptureInstance *mine;
		int			nmine = instances_of(&index, &c->tables[i], &mine);

		plan_table(&c->tables[i], mine, nmine, &c->snap.max_lsn, &plans[i]);
		jobs[i].table = &c->tables[i];
		jobs[i].plan = &plans[i];
		if (plans[i].action == PLAN_READ)
			job_splits(&c->cfg, c->max_instant, &jobs[i]);
		if (plans[i].action == PLAN_READ || plans[i].action == PLAN_RESUME ||
			plans[i].action == PLAN_INSTANCE_GAP)
			to_read[nread++] = &jobs[i];
		if (c->tables[i].event_column != NULL &&
			(plans[i].action == PLAN_READ || plans[i].action == PLAN_BASELINE))
			to_check[ncheck++] = &jobs[i];
	}
	/* A table without a readable capture instance: SQL Server says why. */
	pgstat_report_activity(STATE_RUNNING, "finalize: asking why tables have no capture instance");
	unlisted_details(c->run->conn, &c->cfg, jobs, c->ntables);
	io_interrupts_rethrow();
	memset(&err, 0, sizeof(err));
	/*
	 * Event columns are checked first (a baseline's too, so that a wrong
	 * column shows at once): a table whose column cannot be read is not
	 * read, and nothing is recorded for it.
	 */
	pgstat_report_activity(STATE_RUNNING, "finalize: checking event columns");
	if (ncheck > 0 && !event_columns_check(c->run->conn, c->cfg.conn.username, to_check, ncheck, &err))
		return fail(c, failure_condition(c->run->conn, &err),
					psprintf("Listing the captured columns in database \"%s\" failed: %s", c->cfg.database,
							 mssql_error_text(&err)));
	{
		int			kept = 0;

		for (int j = 0; j < nread; j++)
			if (to_read[j]->event_problem == NULL || to_read[j]->plan->action != PLAN_READ)
				to_read[kept++] = to_read[j];
		nread = kept;
	}
	if (nread == 0)
		return true;
	pgstat_report_activity(STATE_RUNNING, "finalize: reading CDC ranges");
	read_table_jobs(c->run->conn, to_read, nread, &err, NOLOCK_RETRIES, (int) c->snap.tz_offset_minutes);
	io_interrupts_rethrow();
	/* A lost connection or a timeout is the source's failure, not the tables'. */
	if (mssql_is_dead(c->run->conn))
		return fail(c, failure_condition(c->run->conn, &err),
					psprintf("Reading the CDC ranges of database \"%s\" failed: %s%s",
							 c->cfg.database, mssql_error_text(&err),
							 err.timed_out ? psprintf(" (no answer within finalize.query_timeout, %d s; the "
													  "connection is reopened)", c->cfg.conn.query_timeout) : ""));
	return true;
}

/*
 * Step 4b: the LSNs consumers reported, resolved on SQL Server after the
 * ranges (consumers.c). A failure here costs only the consumers, whose
 * verdicts lag: the ranges already read are still recorded, and a lost
 * connection is reopened next cycle.
 */
static void
resolve_consumers(Cycle *c, const TablePlan *plans)
{
	c->nconsumer_jobs = consumers_plan(c->consumers, c->nconsumers, c->tables, plans, c->ntables,
									   &c->snap.max_lsn, c->max_instant, &c->consumer_jobs);
	(void) consumers_read(c->run->conn, &c->cfg, c->max_instant, c->consumer_jobs, c->nconsumer_jobs,
						  &c->run->consumer_log);
	io_interrupts_rethrow();
}

/*
 * Why a table tracked from an LSN (start_from) cannot start: SQL Server no
 * longer holds every change after it, or has not reached it. Nothing is
 * recorded: a lake copy continued from anywhere else would be wrong.
 */
static char *
start_unreadable_detail(const TrackedSource *t, const TablePlan *p, const Lsn *max_lsn)
{
	const CaptureInstance *inst = p->instance;

	if (lsn_cmp(&t->start_lsn, max_lsn) > 0)
		return psprintf("The LSN this table was tracked from (start_from %s) is beyond SQL Server's max LSN %s: "
						"it is not an LSN of this database yet. Nothing is recorded until max LSN passes it; "
						"if it was mistyped, untrack the table and track it again from the LSN the lake's copy "
						"ends at.", fmt_lsn(&t->start_lsn), fmt_lsn(max_lsn));
	return psprintf("The LSN this table was tracked from (start_from %s) is below the start LSN %s of capture "
					"instance \"%s\", the newest of the table: its changes right after that LSN may have been "
					"cleaned up, so the lake's copy cannot be continued from it. Nothing is recorded. Take a new "
					"copy (a snapshot) of the table, then untrack it (cascade => true if derived tables use it) "
					"and track it again from the new copy's LSN.",
					fmt_lsn(&t->start_lsn), fmt_lsn(&inst->start_lsn), inst->name);
}

/* Step 5a: what one table's plan and reads mean for it. */
static void
decide_write(Cycle *c, int i, const TablePlan *p, TableJob *jobs, TableWrite *w)
{
	w->table = &c->tables[i];
	w->facts = palloc0(sizeof(RangeFacts) * 3);
	w->clock_tolerance = c->cfg.clock_tolerance;
	switch (p->action)
	{
		case PLAN_NOTHING:
			write_condition(w, COND_NONE, NULL);
			break;
		case PLAN_BASELINE:
			if (jobs[i].event_problem != NULL)
			{
				write_condition(w, jobs[i].event_condition, jobs[i].event_problem);
				break;
			}
			w->kind = WRITE_RANGES;
			w->nfacts = 1;
			w->capture_instance = p->instance->name;
			w->facts[0].table_id = c->tables[i].table_id;
			w->facts[0].has_start = false;
			w->facts[0].end = c->snap.max_lsn;
			w->facts[0].end_time = c->max_instant;
			w->facts[0].capture_instance = p->instance->name;
			break;
		case PLAN_READ:
			if (jobs[i].event_problem != NULL)
				write_condition(w, jobs[i].event_condition, jobs[i].event_problem);
			else
			{
				judge_read(&c->cfg, &jobs[i], c->max_instant, w);
				judge_clock_step(&c->cfg, &jobs[i], w);
			}
			break;
		case PLAN_RESUME:
			judge_resume(&c->cfg, &jobs[i], c->max_instant, w);
			break;
		case PLAN_INSTANCE_GAP:
			judge_gap(&c->cfg, &jobs[i], c->max_instant, w);
			break;
		case PLAN_NO_INSTANCE:
			write_condition(w, COND_NO_CAPTURE_INSTANCE, jobs[i].unlisted_detail);
			break;
		case PLAN_SOURCE_REPLACED:
			write_condition(w, COND_SOURCE_REPLACED,
						  psprintf("%s.%s now names another table (object id %lld) than the one capture "
								   "instance \"%s\" captures (object id %lld): the table was renamed or "
								   "replaced. Nothing is recorded: the changes of either table are not this "
								   "table's history. Untrack and track the table again to follow the new one.",
								   c->tables[i].source_schema, c->tables[i].source_name,
								   (long long) c->tables[i].object_id, p->instance->name,
								   (long long) p->instance->source_object_id));
			break;
		case PLAN_START_UNREADABLE:
			write_condition(w, COND_START_UNREADABLE, start_unreadable_detail(&c->tables[i], p, &c->snap.max_lsn));
			break;
		case PLAN_LSN_REGRESSED:
			write_condition(w, COND_LSN_REGRESSED,
						  psprintf("SQL Server's max LSN %s is below this table's offset %s: the database was "
								   "restored or replaced. Nothing is recorded until it passes the offset.",
								   fmt_lsn(&c->snap.max_lsn), fmt_lsn(&c->tables[i].offset)));
			break;
	}
}

/*
 * Whether this cycle may first ask SQL Server only for max LSN: the last
 * full check, less than finalize.full_check_interval ago, found every table at
 * max LSN with nothing to do, and every table is still there (tracked,
 * resumed or re-pointed tables have no offset there, or are resuming).
 * Most cycles of a source are idle; asking for 10,000 object ids and the
 * instance list each poll costs SQL Server far more than the state row.
 * Nothing is recorded for a table in between (its offset already is max
 * LSN, and any move of max LSN brings the full check back before anything
 * is read), so a renamed table or a dropped instance only shows its
 * condition up to the interval later. A new connection (a failover, a
 * changed user mapping) and a clock stepped back get a full check at once.
 */
static bool
cycle_may_be_idle(const Cycle *c)
{
	const SourceRun *run = c->run;

	if (!c->was_settled || c->reconnected || finalize_full_check_interval_ms == 0 ||
		c->started < run->settled_at ||
		TimestampDifferenceExceeds(run->settled_at, c->started, finalize_full_check_interval_ms))
		return false;
	for (int i = 0; i < c->ntables; i++)
	{
		const TrackedSource *t = &c->tables[i];

		if (!t->has_offset || t->resuming || t->capture_instance == NULL ||
			lsn_cmp(&t->offset, &run->settled_lsn) != 0)
			return false;
	}
	return true;
}

/* Whether a full check found every table at max LSN with nothing to do. */
static bool
all_settled(const Cycle *c, const TablePlan *plans)
{
	for (int i = 0; i < c->ntables; i++)
		if (plans[i].action != PLAN_NOTHING || c->tables[i].resuming)
			return false;
	return true;
}

/*
 * Runs one cycle for a source. Returns true when SQL Server was read and
 * everything recorded; false with a condition and a message otherwise (the
 * caller records them and backs off).
 */
bool
run_cycle(SourceRun *run, MemoryContext cxt, CycleOutcome *out)
{
	Cycle		c = {.run = run, .source_condition = COND_OK, .out = out, .started = GetCurrentTimestamp(),
	.was_settled = run->settled};
	TablePlan  *plans;
	TableJob   *jobs;
	TableWrite *writes;
	bool		idle;
	bool		recorded = true;

	/* Only a cycle that ends well keeps the source settled. */
	run->settled = false;
	if (!load_source(&c, cxt))
		return false;
	/* Tables in a stopped state are not read; nothing to ask SQL Server. */
	if (c.ntables == 0)
		return true;
	if (!connect_source(&c))
		return false;
	idle = cycle_may_be_idle(&c);
	if (idle)
	{
		if (!read_state(&c, false) || !check_times(&c))
			return false;
		idle = lsn_cmp(&c.snap.max_lsn, &run->settled_lsn) == 0;
	}
	if (!idle && (!read_state(&c, true) || !check_times(&c)))
		return false;

	plans = palloc0(sizeof(TablePlan) * c.ntables);
	jobs = palloc0(sizeof(TableJob) * c.ntables);
	writes = palloc0(sizeof(TableWrite) * c.ntables);
	if (idle)
	{
		/* Every table is at max LSN: nothing to read or write for any. */
		for (int i = 0; i < c.ntables; i++)
		{
			plans[i].action = PLAN_NOTHING;
			jobs[i].table = &c.tables[i];
			jobs[i].plan = &plans[i];
		}
	}
	else if (!plan_and_read(&c, plans, jobs))
		return false;
	resolve_consumers(&c, plans);
	if (!idle)
		for (int i = 0; i < c.ntables; i++)
			decide_write(&c, i, &plans[i], jobs, &writes[i]);

	/* Record everything in one short transaction. */
	db_begin_write("finalize: recording facts");
	if (!ws_lock_source(run->serverid, c.cfg.server_name))
	{
		db_commit();
		run->server_gone = true;
		return fail(&c, COND_SERVER_DROPPED, pstrdup("the foreign server was dropped during the cycle"));
	}
	if (!idle)
		recorded = record_writes(writes, c.ntables);
	consumers_record(c.cfg.server_name, c.cfg.clock_tolerance, c.consumer_jobs, c.nconsumer_jobs);
	ws_source_ok(c.cfg.server_name, &c.snap.max_lsn, c.max_instant, c.server_now, c.source_condition,
				 c.source_message, c.started);
	ws_source_ticket(c.cfg.server_name, run->ticket_expires);
	db_commit();
	/* A table whose write failed keeps a condition: the next cycle looks again. */
	if (!idle && recorded && all_settled(&c, plans))
	{
		run->settled_lsn = c.snap.max_lsn;
		run->settled_at = c.started;
	}
	run->settled = idle || (recorded && all_settled(&c, plans));
	return true;
}
