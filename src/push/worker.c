/*
 * worker.c
 *     The delivery worker ("finalize alerts"): one dynamic background worker
 *     per database, started by the scheduler while webhook targets, pending
 *     alert deliveries or publications exist. It drains both queues, the
 *     alert webhooks' (alert/delivery.c) and the publications' outbox
 *     (push/queue.c), in turns of a bounded number each: one machine for
 *     everything finalize sends over HTTP, one libcurl handle. No
 *     transaction is open while a request is out, so a receiver that stalls
 *     costs this worker its timeout, never a source worker or a verdict.
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "alert/delivery.h"
#include "core/background.h"
#include "core/db.h"
#include "core/http.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "core/wait_events.h"
#include "push/queue.h"

/* Without a wake-up, the queues are looked at this often. */
#define IDLE_NAP_MS 10000

/* The delivery worker's entry point, which the scheduler starts by name. */
PGDLLEXPORT void finalize_alerts_main(Datum arg);

/* Whether the worker should stop serving now (switched off or paused). */
static bool
must_stop(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	return !finalize_alerts_enabled || paused_database() == MyDatabaseId;
}

/* Milliseconds until the next delivery or event of either queue falls due. */
static long
nap_ms(MemoryContext cxt)
{
	long		nap;

	MemoryContextReset(cxt);
	MemoryContextSwitchTo(cxt);
	db_begin("finalize: waiting for deliveries");
	nap = publication_nap_ms(alert_nap_ms(IDLE_NAP_MS));
	db_commit();
	MemoryContextSwitchTo(TopMemoryContext);
	return nap;
}

/* Entry point of the delivery worker; bgw_extra holds the database OID. */
void
finalize_alerts_main(Datum arg pg_attribute_unused())
{
	Oid			dboid;
	MemoryContext cxt;
	HttpClient *client;
	HttpResponse failure;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	connect_worker_to_database(dboid);
	if (!slot_claim(SLOT_ALERTS, dboid, InvalidOid))
		proc_exit(0);
	/*
	 * Its own commits (a claim, an outcome) need not wait for the WAL flush:
	 * a crash that loses one re-sends an event or a delivery under the same
	 * id, which at-least-once delivery allows. A publication's claim is the
	 * exception: it commits durably (_claim_publication_event), since its
	 * count of attempts makes a target look for its effect before sending
	 * again. What must be durable, the event itself, is written by the
	 * transaction that made its period final, with the server's own setting.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	cxt = AllocSetContextCreate(TopMemoryContext, "finalize deliveries", ALLOCSET_DEFAULT_SIZES);
	/* A client that cannot start fails each attempt, which says so. */
	client = http_client_create(TopMemoryContext, &failure);
	if (client == NULL)
		ereport(WARNING,
				(errmsg("finalize could not start an HTTP client for its deliveries: %s", failure.error),
				 errhint("Every webhook and publication waits; restart the server once libcurl can start.")));

	/* What a previous run claimed and never recorded is due again. */
	db_begin("finalize: releasing claimed deliveries");
	alert_release_claims();
	publication_release_claims();
	db_commit();

	for (;;)
	{
		int			alerts;
		int			publications;

		CHECK_FOR_INTERRUPTS();
		ResetLatch(MyLatch);
		if (must_stop())
			proc_exit(0);
		alerts = alert_deliver_round(cxt, client, must_stop);
		/* Switched off or paused meanwhile: stop before the next queue. */
		if (must_stop())
			proc_exit(0);
		publications = publication_deliver_round(cxt, client, must_stop);
		if (alerts < 0 && publications < 0)
			proc_exit(0);
		/* A full round: more may be due now, so no nap (the latch is checked above). */
		if (alert_round_full(alerts) || publication_round_full(publications))
			continue;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, nap_ms(cxt),
						 finalize_wait_event(FINALIZE_WAIT_ALERTS_MAIN));
	}
}
