/*
 * release_properties.c
 *     The verdict's Iceberg table properties in a release's publish commit:
 *     when the released table has an iceberg_property publication of the
 *     same Iceberg table through the same catalog, the one commit that
 *     publishes the partition also moves the properties to the newest
 *     pending final event of that publication that ends by the partition's
 *     end (lake/verdict_properties.c decides what moves, never back).
 *
 * Never ahead: only an event of the outbox is written (its period was
 * final when its transaction recorded it) whose period is final now, and
 * only while the publication's head event is locked by this transaction
 * and was never attempted (finalize_internal.iceberg_property_for_release),
 * so no commit of the delivery worker with other values can be in flight
 * or start before the release's transaction ends. The worker then finds
 * the properties there (outcome already).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/settings.h"
#include "lake/verdict_properties.h"
#include "publish/release_run.h"

/* A text column of SPI's first row copied to cxt, or NULL. */
static char *
column(int col, MemoryContext cxt)
{
	char	   *v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col);

	return v != NULL ? MemoryContextStrdup(cxt, v) : NULL;
}

/*
 * Plans the properties the publish commit carries (in SPI, as the
 * extension's owner, after every check passed and before the publish):
 * sets run->it.property_update (in cxt) when the table's publication of
 * this Iceberg table may and must move them now, and what the report says
 * of them. Nothing is set when the partition's end is unknown, the target
 * is already at the audited snapshot (no commit), or the table's
 * properties are at or past the event (or cannot be read: the outbox
 * reports why).
 */
void
release_properties_plan(IcebergRun *run, MemoryContext cxt)
{
	Oid			types[4] = {INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[4];
	VerdictPropertyNames names;
	VerdictPropertyValues v;
	MemoryContext old;
	bool		isnull;
	Jsonb	   *options;
	char	   *uuid;
	char	   *error;
	Jsonb	   *update;

	if (!run->m.has_period_end || run->target_at_audited)
		return;
	values[0] = Int64GetDatum(run->table.table_id);
	values[1] = CStringGetTextDatum(run->r.catalog);
	values[2] = CStringGetTextDatum(run->r.iceberg_table);
	values[3] = TimestampTzGetDatum(run->m.period_end);
	if (SPI_execute_with_args("SELECT p.publication, p.options, p.event_id, p.event_end, p.period_zone FROM "
							  FINALIZE_INTERNAL_SCHEMA ".iceberg_property_for_release($1, $2, $3, $4) p", 4, types,
							  values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the publications of \"%s\"", run->r.table);
	if (SPI_processed == 0)
		return;
	old = MemoryContextSwitchTo(cxt);
	options = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	verdict_property_names(options, &names);
	v.event_id = column(3, cxt);
	v.period_end = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	v.zone = column(5, cxt);
	if (verdict_properties_plan(run->it.body, run->r.iceberg_table, &names, &v, &uuid, &update, &error) ==
		VERDICT_PROPS_SET)
	{
		run->it.property_update = JsonbToCString(NULL, &update->root, VARSIZE(update));
		run->property_publication = column(1, cxt);
		run->property_event_id = v.event_id;
		run->property_until = v.period_end;
	}
	MemoryContextSwitchTo(old);
}
