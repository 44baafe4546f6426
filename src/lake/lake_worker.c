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
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/background.h"
#include "core/db.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "core/source_table.h"
#include "core/wait_events.h"
#include "lake/catalog.h"
#include "lake/delta_worker.h"
#include "lake/lake_state.h"
#include "lake/metadata.h"
#include "lake/snapshots.h"

/* How long the worker waits before looking again when it cannot run a poll. */
#define IDLE_RETRY_MS 10000

/*
 * The ETag of a consumer's last load that proved nothing new, kept across
 * polls by declaration (lake_id: a consumer added again, or pointed at
 * another table, is another) with the head it was judged against.
 */
typedef struct EtagEntry
{
	int64		lake_id;
	char		etag[128];
	bool		seen_any;
	int64		seen_head_id;
} EtagEntry;

static HTAB *etags = NULL;

/* The table of kept ETags (created on first use). */
static HTAB *
etag_table(void)
{
	HASHCTL		ctl;

	if (etags == NULL)
	{
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(int64);
		ctl.entrysize = sizeof(EtagEntry);
		ctl.hcxt = TopMemoryContext;
		etags = hash_create("finalize lake ETags", 256, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	return etags;
}

/* Keeps (or with NULL forgets) the ETag of a consumer's load. */
static void
etag_keep(const LakeConsumer *c, const char *etag)
{
	EtagEntry  *e;

	if (etag == NULL || strlen(etag) >= sizeof(e->etag))
	{
		(void) hash_search(etag_table(), &c->lake_id, HASH_REMOVE, NULL);
		return;
	}
	e = hash_search(etag_table(), &c->lake_id, HASH_ENTER, NULL);
	strlcpy(e->etag, etag, sizeof(e->etag));
	e->seen_any = c->seen.any;
	e->seen_head_id = c->seen.head_id;
}

/* The ETag to send for a consumer: only while what was recorded is what it was. */
static const char *
etag_for(const LakeConsumer *c)
{
	EtagEntry  *e = hash_search(etag_table(), &c->lake_id, HASH_FIND, NULL);

	if (e == NULL || e->seen_any != c->seen.any || (c->seen.any && e->seen_head_id != c->seen.head_id))
		return NULL;
	return e->etag;
}

/* At most n printable characters of a catalog's text, for a message. */
static char *
printable(const char *s, size_t n)
{
	size_t		len = Min(strlen(s), n);
	char	   *out = palloc(len + 4);

	for (size_t i = 0; i < len; i++)
		out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	strcpy(out + len, strlen(s) > n ? "..." : "");
	return out;
}

/* Turns a judged metadata into an observation. */
static void
observe_metadata(const LakeConsumer *c, const LakeMetadata *md, LakeObservation *obs)
{
	LakeVerdict v = lake_judge(md, &c->seen);

	obs->table_uuid = md->table_uuid;	/* a UUID: metadata.c refuses anything else */
	if (v.outcome == LAKE_MALFORMED)
	{
		/* Shown to descend from the head seen last: that head moves on. */
		obs->has_head = v.descends && v.head != NULL;
		if (obs->has_head)
		{
			obs->head_id = v.head->id;
			obs->head_sequence = v.head->sequence;
		}
		obs->condition = v.carrier != NULL ? LAKE_PROPERTY_MALFORMED : LAKE_METADATA_MALFORMED;
		obs->detail = v.carrier != NULL
			? psprintf("Snapshot %lld of Iceberg table %s has property %s = \"%s\": %s.",
					   (long long) v.carrier->id, c->iceberg_table, c->lsn_property,
					   printable(v.carrier->lsn_text, 64), v.reason)
			: psprintf("The metadata of Iceberg table %s is malformed: %s (ref %s).", c->iceberg_table, v.reason,
					   c->ref);
		return;
	}
	if (v.outcome == LAKE_NOTHING)
		return;
	obs->rolled_back = v.outcome == LAKE_ROLLBACK;
	obs->held_known = v.held_known;
	obs->held_lsn = v.held_lsn;
	obs->reason = v.reason;
	obs->has_head = v.head != NULL;
	if (v.head != NULL)
	{
		obs->head_id = v.head->id;
		obs->head_sequence = v.head->sequence;
	}
	obs->has_carrier = v.carrier != NULL && v.has_lsn;
	if (obs->has_carrier)
		obs->carrier_id = v.carrier->id;
	/* SAME without a new carrier: what was proven still stands, at a new head. */
	obs->has_lsn = v.has_lsn || v.outcome == LAKE_SAME;
	obs->lsn = v.has_lsn ? v.lsn : c->seen.lsn;
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
	if (!c->allowed)
	{
		obs->condition = LAKE_AUTH_FAILED;
		obs->detail = psprintf("The role that declared consumer \"%s\" may no longer read through catalog %s "
							   "(USAGE on the server, or the use of its owner's user mapping); it is not read.",
							   c->consumer, cat->name);
		return;
	}
	if (strchr(c->iceberg_table, '.') == NULL)
	{
		/* add_consumer refuses such a name; a row written by hand is not trusted either. */
		obs->condition = LAKE_TABLE_NOT_FOUND;
		obs->detail = psprintf("\"%s\" is not namespace.table.", printable(c->iceberg_table, 255));
		return;
	}
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
	etag_keep(c, !lake_observation_new(obs) ? answer.etag : NULL);
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
	/*
	 * A poll cut short by a slow catalog writes when it looked at each
	 * consumer it reached, so that the next poll (longest ago first) starts
	 * with the ones it did not reach.
	 */
	for (int i = 0; done < n && i < done; i++)
		consumers[i].quiet = false;
	pgstat_report_activity(STATE_IDLE, NULL);
	lake_record_all(obs, done);
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
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, left,
						 finalize_wait_event(FINALIZE_WAIT_LAKE_MAIN));
		ResetLatch(MyLatch);
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Whether the worker's server is an Iceberg catalog (a finalize_iceberg
 * server); else it serves a store's Delta consumers (server invalid: those
 * on file://). A server never changes its wrapper.
 */
static bool
serves_catalog(Oid serverid)
{
	ForeignServer *server;
	bool		catalog = false;

	if (!OidIsValid(serverid))
		return false;
	db_begin("finalize: looking at a lake server");
	server = GetForeignServerExtended(serverid, FSV_MISSING_OK);
	if (server != NULL)
		catalog = strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_iceberg") == 0;
	db_commit();
	return catalog;
}

/* The lake worker's entry point, which the scheduler starts by name. */
PGDLLEXPORT void finalize_lake_main(Datum arg);

/*
 * Entry point of a lake worker: bgw_main_arg is the finalize_iceberg
 * server (or the store server of Delta consumers, invalid for file://),
 * the database OID is in bgw_extra. An error in a poll is logged and the
 * next poll tries again; the worker exits when its catalog or store has
 * no consumer left (the scheduler starts it again when one comes).
 */
void
finalize_lake_main(Datum arg)
{
	Oid			serverid = DatumGetObjectId(arg);
	Oid			dboid;
	MemoryContext cxt;
	static HttpClient *client = NULL;
	static bool catalog;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	connect_worker_to_database(dboid);
	if (!slot_claim(SLOT_LAKE, dboid, serverid))
		proc_exit(0);
	cxt = AllocSetContextCreate(TopMemoryContext, "finalize lake poll", ALLOCSET_DEFAULT_SIZES);
	catalog = serves_catalog(serverid);

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
			keep = catalog ? poll_catalog(serverid, &client, cxt, &delay) : delta_poll_store(serverid, cxt, &delay);
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
