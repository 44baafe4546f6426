/*
 * lake_worker.c
 *     The lake worker: one dynamic background worker per Iceberg catalog (a
 *     finalize_iceberg server with consumers), which the scheduler starts.
 *     Every poll interval it loads the metadata of each consumer's table,
 *     judges what its snapshots prove (snapshots.c) and records it in one
 *     short write transaction; a consumer whose report moved has its
 *     source's worker asked for a cycle, which resolves the LSN to a commit
 *     time at once.
 *
 * Isolation (docs/design/lake.md): a catalog has a process of its own, so a
 * slow, failing or unreachable catalog never delays a SQL Server cycle or
 * another catalog. Within a catalog each request has the server's timeout,
 * and a poll stops loading once it has used its poll interval: the
 * consumers it did not reach are loaded first next time (_lake_consumers
 * orders by when each was last looked at).
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/background.h"
#include "core/db.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "lake/catalog.h"
#include "lake/lake_state.h"
#include "lake/metadata.h"
#include "lake/snapshots.h"

/* How long the worker waits before looking again when it cannot run a poll. */
#define IDLE_RETRY_MS 10000

/* The ETag of a consumer's last load and what it proved, kept across polls. */
typedef struct EtagEntry
{
	int64		table_id;
	char		consumer[256];
	char		etag[128];
	char		ref[256];
	bool		seen_any;
	int64		seen_snapshot_id;
} EtagEntry;

static EtagEntry *etags = NULL;
static int	netags = 0;
static int	etag_cap = 0;

/* The kept entry of a consumer, or NULL. */
static EtagEntry *
etag_find(const LakeConsumer *c)
{
	for (int i = 0; i < netags; i++)
		if (etags[i].table_id == c->table_id && strcmp(etags[i].consumer, c->consumer) == 0)
			return &etags[i];
	return NULL;
}

/*
 * Keeps the ETag of a consumer's load, with what was recorded when it
 * came (a 304 proves the same only while nothing else changed it: an
 * admin's reset, a rollback recorded meanwhile).
 */
static void
etag_keep(const LakeConsumer *c, const char *etag)
{
	EtagEntry  *e = etag_find(c);

	if (etag == NULL || strlen(etag) >= sizeof(e->etag) || strlen(c->consumer) >= sizeof(e->consumer) ||
		strlen(c->ref) >= sizeof(e->ref))
	{
		if (e != NULL)
			*e = etags[--netags];
		return;
	}
	if (e == NULL)
	{
		if (netags == etag_cap)
		{
			etag_cap = Max(64, etag_cap * 2);
			etags = etags == NULL ? MemoryContextAlloc(TopMemoryContext, sizeof(EtagEntry) * etag_cap)
				: repalloc(etags, sizeof(EtagEntry) * etag_cap);
		}
		e = &etags[netags++];
	}
	memset(e, 0, sizeof(*e));
	e->table_id = c->table_id;
	strlcpy(e->consumer, c->consumer, sizeof(e->consumer));
	strlcpy(e->etag, etag, sizeof(e->etag));
	strlcpy(e->ref, c->ref, sizeof(e->ref));
	e->seen_any = c->seen.any;
	e->seen_snapshot_id = c->seen.snapshot_id;
}

/* The ETag to send for a consumer: only while what was recorded is what it was. */
static const char *
etag_for(const LakeConsumer *c)
{
	EtagEntry  *e = etag_find(c);

	if (e == NULL || strcmp(e->ref, c->ref) != 0 || e->seen_any != c->seen.any ||
		(c->seen.any && e->seen_snapshot_id != c->seen.snapshot_id))
		return NULL;
	return e->etag;
}

/* Turns a judged metadata into an observation. */
static void
observe_metadata(const LakeConsumer *c, const LakeMetadata *md, LakeObservation *obs)
{
	LakeVerdict v = lake_judge(md, &c->seen);

	obs->table_uuid = md->table_uuid;
	switch (v.outcome)
	{
		case LAKE_NOTHING:
		case LAKE_SAME:
			break;
		case LAKE_MALFORMED:
			obs->condition = v.carrier != NULL ? LAKE_PROPERTY_MALFORMED : LAKE_METADATA_MALFORMED;
			obs->detail = v.carrier != NULL
				? psprintf("Snapshot %lld of Iceberg table %s has property %s = \"%s\": %s.",
						   (long long) v.carrier->id, c->iceberg_table, c->lsn_property, v.carrier->lsn_text, v.reason)
				: psprintf("The metadata of Iceberg table %s is malformed: %s (ref %s).", c->iceberg_table, v.reason,
						   c->ref);
			return;
		case LAKE_ADVANCE:
		case LAKE_ROLLBACK:
			obs->rolled_back = v.outcome == LAKE_ROLLBACK;
			obs->held_known = v.held_known;
			obs->held_lsn = v.held_lsn;
			obs->reason = v.reason;
			break;
	}
	if (v.carrier != NULL && (v.outcome == LAKE_ADVANCE || v.outcome == LAKE_ROLLBACK))
	{
		obs->has_carrier = true;
		obs->snapshot_id = v.carrier->id;
		obs->sequence = v.carrier->sequence;
		obs->lsn = v.lsn;
	}
}

/* Loads and judges one consumer's table (no transaction is open). */
static void
poll_consumer(LakeCatalog *cat, HttpClient *client, const LakeConsumer *c, LakeObservation *obs)
{
	LakeAnswer	answer;
	LakeMetadata md;
	char	   *error;

	memset(obs, 0, sizeof(*obs));
	obs->consumer = c;
	pgstat_report_activity(STATE_RUNNING, psprintf("finalize: loading Iceberg table %s", c->iceberg_table));
	lake_catalog_load_table(cat, client, c->iceberg_table, etag_for(c), &answer);
	if (answer.condition != LAKE_OK)
	{
		obs->condition = answer.condition;
		obs->detail = answer.error;
		etag_keep(c, NULL);
		return;
	}
	if (answer.not_modified)
		return;
	if (!lake_parse_metadata(answer.body, c->ref, c->lsn_property, &md, &error))
	{
		obs->condition = LAKE_METADATA_MALFORMED;
		obs->detail = psprintf("The catalog's answer for Iceberg table %s is not table metadata: %s.",
							   c->iceberg_table, error);
		etag_keep(c, NULL);
		return;
	}
	observe_metadata(c, &md, obs);
	/* Only a load that proved something cleanly may be skipped next time. */
	etag_keep(c, obs->condition == LAKE_OK && !obs->rolled_back && !obs->has_carrier ? answer.etag : NULL);
}

/* Records the observations that need it in one write transaction; returns the sources to wake. */
static List *
record_all(LakeObservation *obs, int n)
{
	List	   *wake = NIL;
	int			todo = 0;

	for (int i = 0; i < n; i++)
		todo += lake_needs_record(&obs[i]) ? 1 : 0;
	if (todo == 0)
		return NIL;
	db_begin_write("finalize: recording what Iceberg tables hold");
	for (int i = 0; i < n; i++)
		if (lake_needs_record(&obs[i]) && lake_record(&obs[i]) && OidIsValid(obs[i].consumer->source_serverid))
			wake = list_append_unique_oid(wake, obs[i].consumer->source_serverid);
	db_commit();
	return wake;
}

/*
 * One poll of the catalog: returns false when the worker should exit (no
 * consumer left, the server gone), with *delay_ms until the next one.
 */
static bool
poll_catalog(Oid serverid, HttpClient **client, MemoryContext cxt, long *delay_ms)
{
	LakeCatalog *cat;
	LakeConsumer *consumers;
	LakeObservation *obs;
	LakeAnswer	failure;
	int			n;
	int			done = 0;
	char	   *problem;
	TimestampTz start = GetCurrentTimestamp();
	ListCell   *lc;
	HttpResponse resp;
	MemoryContext scratch;

	*delay_ms = IDLE_RETRY_MS;
	if (!lake_load_consumers(serverid, cxt, &cat, &consumers, &n, &problem))
	{
		if (problem == NULL)
			return false;
		ereport(LOG, (errmsg("finalize: lake worker: %s", problem)));
		return true;
	}
	*delay_ms = cat->poll_interval_ms;
	if (*client == NULL && (*client = http_client_create(TopMemoryContext, &resp)) == NULL)
	{
		ereport(LOG, (errmsg("finalize: catalog \"%s\": could not start an HTTP client: %s", cat->name, resp.error)));
		return true;
	}
	obs = palloc0(sizeof(LakeObservation) * n);
	scratch = AllocSetContextCreate(cxt, "finalize lake table", ALLOCSET_DEFAULT_SIZES);
	if (!lake_catalog_prepare(cat, *client, &failure))
	{
		/* Nothing can be loaded: every consumer has the catalog's condition. */
		for (int i = 0; i < n; i++)
		{
			obs[i].consumer = &consumers[i];
			obs[i].condition = failure.condition;
			obs[i].detail = failure.error;
		}
		done = n;
	}
	for (; done < n; done++)
	{
		if (done > 0 && TimestampDifferenceExceeds(start, GetCurrentTimestamp(), cat->poll_interval_ms))
			break;
		CHECK_FOR_INTERRUPTS();
		/* A table's metadata (megabytes for some) lives only while it is judged. */
		MemoryContextReset(scratch);
		MemoryContextSwitchTo(scratch);
		poll_consumer(cat, *client, &consumers[done], &obs[done]);
		MemoryContextSwitchTo(cxt);
		if (obs[done].detail != NULL)
			obs[done].detail = pstrdup(obs[done].detail);
		if (obs[done].table_uuid != NULL)
			obs[done].table_uuid = pstrdup(obs[done].table_uuid);
	}
	MemoryContextDelete(scratch);
	pgstat_report_activity(STATE_IDLE, NULL);
	foreach(lc, record_all(obs, done))
		(void) slot_request_cycle(SLOT_WORKER, MyDatabaseId, lfirst_oid(lc));
	*delay_ms = Max(cat->poll_interval_ms - TimestampDifferenceMilliseconds(start, GetCurrentTimestamp()), 0);
	return true;
}

/* Sleeps until the next poll; a reload or a termination ends the sleep. */
static void
sleep_ms(long ms)
{
	TimestampTz due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);

	for (;;)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), due);

		if (left <= 0 || ConfigReloadPending)
			return;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
	}
}

/* The lake worker's entry point, which the scheduler starts by name. */
PGDLLEXPORT void finalize_lake_main(Datum arg);

/*
 * Entry point of a lake worker: bgw_main_arg is the finalize_iceberg
 * server, the database OID is in bgw_extra. An error in a poll is logged
 * and the next poll tries again; the worker exits when its catalog has no
 * consumer left (the scheduler starts it again when one comes).
 */
void
finalize_lake_main(Datum arg)
{
	Oid			serverid = DatumGetObjectId(arg);
	Oid			dboid;
	MemoryContext cxt;
	static HttpClient *client = NULL;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	connect_worker_to_database(dboid);
	if (!slot_claim(SLOT_LAKE, dboid, serverid))
		proc_exit(0);
	cxt = AllocSetContextCreate(TopMemoryContext, "finalize lake poll", ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		static long delay;
		volatile bool keep = true;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (!finalize_enabled || paused_database() == MyDatabaseId)
			proc_exit(0);
		MemoryContextReset(cxt);
		MemoryContextSwitchTo(cxt);
		delay = IDLE_RETRY_MS;
		PG_TRY();
		{
			keep = poll_catalog(serverid, &client, cxt, &delay);
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(cxt);
			EmitErrorReport();
			FlushErrorState();
			AbortOutOfAnyTransaction();
			delay = IDLE_RETRY_MS;
		}
		PG_END_TRY();
		MemoryContextSwitchTo(TopMemoryContext);
		if (!keep)
			proc_exit(0);
		pgstat_report_activity(STATE_IDLE, NULL);
		sleep_ms(delay);
	}
}
