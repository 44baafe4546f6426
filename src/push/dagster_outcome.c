/*
 * dagster_outcome.c
 *     What the answers of a Dagster webserver mean for one attempt of a
 *     dagster publication. Pure: no I/O, no allocation (test/unit).
 *
 * Dagster records every report it accepts as one more materialization, so
 * a report repeated after an attempt whose outcome finalize never learnt
 * (a crash, a timeout after Dagster had written) would record the
 * partition twice. Before any attempt but the first, the target looks for
 * a materialization of the partition that carries the event's id and
 * reports nothing when one does: an exactly-once effect whenever Dagster's
 * GraphQL API answers. When it cannot tell, the report goes out (at least
 * once): an event never waits on the look alone.
 */
#include "c.h"

#include "push/dagster_outcome.h"

/*
 * Whether an attempt looks before reporting: the first attempt of an
 * event has nothing to find (no earlier attempt can have written it).
 */
bool
dagster_should_look(int attempts)
{
	return attempts > 1;
}

/*
 * What the look found: its answer (any HTTP status) or none; for a 200,
 * whether its JSON could be read (data.assetOrError with materializations,
 * or AssetNotFoundError: no materialization of that key at all) and
 * whether a materialization of the partition carries the event id.
 */
DagsterLook
dagster_look_verdict(bool answered, long status, bool readable, bool found)
{
	if (!answered)
		return DAGSTER_LOOK_UNREACHABLE;
	if (status == 200 && readable && found)
		return DAGSTER_LOOK_FOUND;
	return DAGSTER_LOOK_REPORT;
}

/*
 * What a report's answer means: Dagster's webserver answers 200 {} once the
 * event is stored, 400 {"error": ...} to a request it cannot read, 401 when
 * the token may not report runless events. A redirect is not followed.
 */
DagsterReport
dagster_report_verdict(bool answered, long status)
{
	if (answered && status >= 200 && status < 300)
		return DAGSTER_REPORT_DONE;
	if (answered && (status == 401 || status == 403))
		return DAGSTER_REPORT_AUTH;
	return DAGSTER_REPORT_RETRY;
}
