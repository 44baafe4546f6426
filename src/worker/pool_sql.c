/*
 * pool_sql.c
 *     finalize_internal.source_workers(), behind the view finalize.source_workers:
 *     what each source worker does now, read from the shared source table.
 */
#include "postgres.h"

#include "fmgr.h"
#include "foreign/foreign.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/source_table.h"

PG_FUNCTION_INFO_V1(finalize_source_workers);

/*
 * One row per source worker of this database: its pid, its pool index (NULL
 * for a dedicated worker), the source whose cycle it runs and since when,
 * whether that source is being retried after failures (the retry lane),
 * the connections it keeps open and the cycles it ran.
 */
Datum
finalize_source_workers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SourceWorkerInfo *workers = palloc(sizeof(SourceWorkerInfo) * FINALIZE_MAX_SOURCE_WORKERS);
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	n = source_table_workers(MyDatabaseId, workers);
	for (int i = 0; i < n; i++)
	{
		Datum		values[7];
		bool		nulls[7] = {false};
		ForeignServer *server = OidIsValid(workers[i].serving)
			? GetForeignServerExtended(workers[i].serving, FSV_MISSING_OK) : NULL;

		values[0] = Int32GetDatum(workers[i].pid);
		values[1] = Int32GetDatum(workers[i].index + 1);
		nulls[1] = workers[i].index >= FINALIZE_MAX_POOL;
		values[2] = server ? CStringGetTextDatum(server->servername) : (Datum) 0;
		nulls[2] = server == NULL;
		values[3] = TimestampTzGetDatum(workers[i].since);
		nulls[3] = server == NULL;
		values[4] = BoolGetDatum(workers[i].retrying);
		values[5] = Int32GetDatum(workers[i].kept);
		values[6] = Int64GetDatum(workers[i].cycles);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(workers);
	return (Datum) 0;
}
