/*
 * consumers.c
 *     Resolving the LSNs pipelines reported (docs/design/pipelines.md,
 *     Worker). A consumer's verdict is the period of the commit time of the
 *     greatest cdc.lsn_time_mapping row at or below min(reported, max_lsn):
 *     every commit strictly before that time has a smaller LSN, so the
 *     pipeline has applied it. The commit time is converted like every
 *     other (the earliest instant a local time may denote). Whatever cannot
 *     be resolved leaves the consumer where it was: its verdict lags, it
 *     never leads.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "pgstat.h"
#include "utils/memutils.h"

#include "core/db.h"
#include "core/fmt.h"
#include "core/timeconv.h"
#include "worker/consumers.h"

/* The tracked table a consumer writes, or -1 when this cycle did not read it. */
static int
table_index(const TrackedSource *tables, int ntables, int64 table_id)
{
	int			lo = 0,
				hi = ntables;

	/* ws_load_source reads the tables in table_id order */
	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (tables[mid].table_id < table_id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < ntables && tables[lo].table_id == table_id ? lo : -1;
}

/*
 * The consumers whose reports need a resolution this cycle (in the current
 * memory context). A report of max_lsn resolves to its commit time at once;
 * one beyond max_lsn stays pending (plan_consumer) and is only noted. A
 * table whose offset lies beyond max_lsn (a restored database: its LSNs are
 * another history than the reports) is skipped.
 */
int
consumers_plan(const SourceConsumer *consumers, int nconsumers, const TrackedSource *tables,
			   const TablePlan *plans, int ntables, const Lsn *max_lsn, TimestampTz max_instant,
			   ConsumerJob **jobs)
{
	ConsumerJob *out = palloc0(sizeof(ConsumerJob) * (nconsumers + 1));
	int			n = 0;

	for (int i = 0; i < nconsumers; i++)
	{
		const SourceConsumer *sc = &consumers[i];
		int			t = table_index(tables, ntables, sc->table_id);
		ConsumerJob *job = &out[n];

		if (t < 0 || plans[t].action == PLAN_LSN_REGRESSED)
			continue;
		job->action = plan_consumer(&sc->reported, sc->has_resolved ? &sc->resolved_for : NULL, max_lsn,
									&job->target);
		if (job->action == CONSUMER_NOTHING)
			continue;
		job->consumer = sc;
		job->table_name = tables[t].table_name;
		if (job->action == CONSUMER_AT_MAX)
		{
			job->resolved = true;
			job->mapped = *max_lsn;
			job->commit_time = max_instant;
		}
		job->max_lsn = *max_lsn;
		n++;
	}
	*jobs = out;
	return n;
}

/* The read of an LSN, shared by every consumer that reported it. */
static CdcLsnMapping *
shared_mapping(CdcLsnMapping **maps, int *nmaps, const Lsn *lsn)
{
	for (int i = 0; i < *nmaps; i++)
		if (lsn_cmp(&maps[i]->lsn, lsn) == 0)
			return maps[i];
	maps[*nmaps] = palloc0(sizeof(CdcLsnMapping));
	maps[*nmaps]->lsn = *lsn;
	return maps[(*nmaps)++];
}

/*
 * What a consumer's read means. SQL Server's own message is kept whole: an
 * operator must see "The SELECT permission was denied on the object
 * 'lsn_time_mapping'" to know which GRANT is missing. A row above the
 * target (never sent by a correct server) and a commit time past max LSN's
 * are not trusted further than max LSN's.
 */
static void
settle_job(ConsumerJob *job, const SourceConfig *cfg, TimestampTz max_instant)
{
	const CdcLsnMapping *m = job->map;

	if (!m->outcome.ok)
		job->error = psprintf("reading cdc.lsn_time_mapping failed: %s%s", m->outcome.error,
							  m->outcome.error_number == 229
							  ? psprintf(" (the database user of login \"%s\" needs GRANT SELECT ON "
										 "[cdc].[lsn_time_mapping])", cfg->conn.username) : "");
	else if (!m->found)
		job->error = psprintf("cdc.lsn_time_mapping has no row at or below LSN %s: cleanup has removed "
							  "the mapping rows up to it, so its commit time is unknown until the "
							  "consumer reports a later LSN", fmt_lsn(&job->target));
	else if (lsn_cmp(&m->start_lsn, &job->target) > 0)
		job->error = psprintf("SQL Server returned mapping row %s for LSN %s, which lies above it",
							  fmt_lsn(&m->start_lsn), fmt_lsn(&job->target));
	else
	{
		job->resolved = true;
		job->mapped = m->start_lsn;
		job->commit_time = Min(local_to_instant_earliest(m->end_time_local, cfg->tz), max_instant);
	}
}

/*
 * Logs the consumers that stay unresolved: at LOG when the reason is new
 * since the last cycle, at DEBUG1 when it repeats (one line per consumer
 * every poll interval would flood the log). *logged, in TopMemoryContext,
 * holds this cycle's reasons for the next.
 */
static void
log_unresolved(const ConsumerJob *jobs, int njobs, char **logged)
{
	StringInfoData now;

	initStringInfo(&now);
	for (int j = 0; j < njobs; j++)
	{
		const ConsumerJob *job = &jobs[j];
		char	   *key;

		if (job->error == NULL)
			continue;
		key = psprintf("%lld\t%s\t%s\n", (long long) job->consumer->table_id, job->consumer->consumer,
					   job->error);
		ereport(*logged != NULL && strstr(*logged, key) != NULL ? DEBUG1 : LOG,
				(errmsg("finalize: consumer \"%s\" of table \"%s\" stays unresolved at LSN %s: %s",
						job->consumer->consumer, job->table_name, fmt_lsn(&job->target), job->error),
				 errdetail("Its verdict stays where it was, and so does the table's, until the LSN it "
						   "reported can be mapped to a commit time.")));
		appendStringInfoString(&now, key);
	}
	if (*logged != NULL)
		pfree(*logged);
	*logged = now.len > 0 ? MemoryContextStrdup(TopMemoryContext, now.data) : NULL;
}

/*
 * Reads the mapping rows the consumers need (one statement per distinct
 * LSN, in one batch after the ranges) and settles every job. Returns false
 * when the connection was lost (the consumers read nothing then).
 */
bool
consumers_read(MssqlConn *conn, const SourceConfig *cfg, TimestampTz max_instant, ConsumerJob *jobs,
			   int njobs, char **logged)
{
	CdcLsnMapping **maps = palloc0(sizeof(CdcLsnMapping *) * (njobs + 1));
	int			nmaps = 0;
	MssqlError	err;
	bool		alive = true;

	for (int j = 0; j < njobs; j++)
		if (jobs[j].action == CONSUMER_LOOKUP)
			jobs[j].map = shared_mapping(maps, &nmaps, &jobs[j].target);
	if (nmaps > 0)
	{
		pgstat_report_activity(STATE_RUNNING, "finalize: resolving consumers' LSNs");
		memset(&err, 0, sizeof(err));
		alive = cdc_map_lsns(conn, maps, nmaps, &err);
	}
	for (int j = 0; j < njobs; j++)
		if (jobs[j].map != NULL)
			settle_job(&jobs[j], cfg, max_instant);
	log_unresolved(jobs, njobs, logged);
	return alive;
}

/* Records one consumer's resolution (a subxact_try step). */
static void
record_step(void *arg)
{
	ConsumerJob *job = (ConsumerJob *) arg;

	ws_consumer_resolved(job->consumer->table_id, job->consumer->consumer, &job->target, &job->mapped,
						 job->commit_time, job->clock_tolerance);
}

/* Records why one consumer stays unresolved (a subxact_try step). */
static void
unresolved_step(void *arg)
{
	ConsumerJob *job = (ConsumerJob *) arg;

	ws_consumer_unresolved(job->consumer->table_id, job->consumer->consumer, &job->target, job->error);
}

/* Notes that one consumer's report lies beyond max LSN (a subxact_try step). */
static void
ahead_step(void *arg)
{
	ConsumerJob *job = (ConsumerJob *) arg;

	ws_consumer_ahead(job->consumer->table_id, job->consumer->consumer, &job->target, &job->max_lsn);
}

/* Checks the source's consumers for stalls (a subxact_try step). */
static void
check_step(void *arg)
{
	ws_check_consumers((const char *) arg);
}

/*
 * In the cycle's write transaction, after the tables' writes: every
 * resolution (held back by the source's clock_tolerance in SQL, as the
 * tables' verdicts are; or reason it failed, or a report beyond max LSN)
 * in its own subtransaction (one
 * consumer's failure costs only that consumer; it is resolved again next
 * cycle; a row another transaction holds is skipped in SQL, never waited
 * for), then the stall check once, also confined: a failure there must
 * not lose the facts already recorded. The derived tables over the
 * source's tables follow in this transaction (_advance_dependents) or in
 * the scheduler's next round (_refresh_derived).
 */
void
consumers_record(const char *server_name, int64 clock_tolerance, ConsumerJob *jobs, int njobs)
{
	ErrorData  *e;

	for (int j = 0; j < njobs; j++)
	{
		void		(*step) (void *) = jobs[j].resolved ? record_step :
			jobs[j].action == CONSUMER_AHEAD ? ahead_step : unresolved_step;

		if (!jobs[j].resolved && jobs[j].error == NULL && jobs[j].action != CONSUMER_AHEAD)
			continue;
		jobs[j].clock_tolerance = clock_tolerance;
		if (!subxact_try(step, &jobs[j], &e))
			ereport(WARNING,
					(errmsg("finalize could not record the progress of consumer \"%s\" of table \"%s\": %s",
							jobs[j].consumer->consumer, jobs[j].table_name, e->message)));
	}
	if (!subxact_try(check_step, unconstify(char *, server_name), &e))
		ereport(WARNING,
				(errmsg("finalize could not check the consumers of server \"%s\" for stalls: %s",
						server_name, e->message)));
}
