/*
 * scheduler_steps.c
 *     The scheduler's SQL steps of a round, each run in a transaction of its
 *     own by scheduler.c's guarded_step: the freshness and dropped-source
 *     checks, bringing the derived tables up to date, and whether the
 *     catalog is being restored.
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/timestamp.h"

#include "core/internal_schema.h"
#include "core/db.h"
#include "core/settings.h"
#include "worker/scheduler_steps.h"

/*
 * Checks the freshness SLAs (incidents of tables whose verdict lags) and
 * the sources dropped under tracked tables, records the publications'
 * lagging events, and says whether the delivery worker is needed: webhook
 * targets, pending deliveries or publications exist. A catalog older than
 * the library has none of them.
 */
bool
scheduler_check_alerts(void)
{
	bool		isnull;

	if (!internal_function_exists("check_freshness()"))
		return false;
	/* no row while a restore is under way, checked in the statement itself */
	/*
	 * Publications: the events a cursor still lags by are recorded (a
	 * backfill, a rise whose row was held), and they need the worker too.
	 */
	if (SPI_execute(psprintf("SELECT " FINALIZE_INTERNAL_SCHEMA ".check_freshness() >= 0 AND "
							 FINALIZE_INTERNAL_SCHEMA ".check_dropped_sources() >= 0 AND "
							 "(%sEXISTS (SELECT FROM " FINALIZE_INTERNAL_SCHEMA ".alert_targets()) OR "
							 "EXISTS (SELECT FROM " FINALIZE_SCHEMA ".alert_delivery d WHERE d.state = 'pending'))%s",
							 /* first in the OR: always run */
							 internal_function_exists("enqueue_publications()")
							 ? FINALIZE_INTERNAL_SCHEMA ".enqueue_publications() > 0 OR " : "",
							 db_when_whole()),
					false, 1) != SPI_OK_SELECT || SPI_processed > 1)
		elog(ERROR, "could not check finalize's freshness SLAs");
	if (SPI_processed == 0)
		return false;
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Brings the derived tables up to date with their inputs. A session's
 * report moves only the table it writes (_advance_dependents): this is how
 * the derived tables that use it follow, within a round of its commit. A
 * catalog older than the library has no _refresh_derived() (its reports
 * still move the derived tables themselves); nothing moves while a restore
 * is under way (db_when_whole, in the statement). Returns true.
 */
bool
scheduler_refresh_derived(void)
{
	if (!internal_function_exists("refresh_derived()"))
		return true;
	if (SPI_execute(psprintf("SELECT " FINALIZE_INTERNAL_SCHEMA ".refresh_derived()%s", db_when_whole()), false, 1)
		!= SPI_OK_SELECT)
		elog(ERROR, "could not bring finalize's derived tables up to date");
	return true;
}

/* How often the scheduler says again that it waits for a restore. */
#define RESTORE_LOG_MS (5 * 60 * 1000)

/*
 * Whether the catalog is being restored (src/sql/11d_catalog_seal.sql):
 * then the scheduler's round starts no worker, stops those that run, and
 * runs none of its steps. Says why in the server log when it begins to wait
 * and every five minutes while it does.
 */
bool
scheduler_catalog_restoring(void)
{
	static TimestampTz logged = 0;
	char	   *why = db_catalog_restoring();

	if (why == NULL)
	{
		logged = 0;
		return false;
	}
	if (logged == 0 || TimestampDifferenceExceeds(logged, GetCurrentTimestamp(), RESTORE_LOG_MS))
	{
		logged = GetCurrentTimestamp();
		ereport(LOG,
				(errmsg("finalize waits for the restore of database \"%s\" to finish",
						get_database_name(MyDatabaseId)),
				 errdetail("%s; nothing is recorded or sent meanwhile.", why),
				 errhint("If no restore is running, see \"When finalize keeps waiting\" in finalize's upgrading "
						 "guide (docs/upgrading.md).")));
	}
	return true;
}
