/*
 * airflow_rules.c
 *     What an Airflow API server's answer means for a publication's event,
 *     and what an asset event found while searching for one says. Pure:
 *     no I/O, no memory allocated (test/unit/test_airflow_rules.c).
 */
#include "postgres.h"

#include "push/airflow_rules.h"

/*
 * The step after an answer. A 401 means the token was refused: one that
 * finalize got from /auth/token may have expired, so it is replaced once
 * (may_relogin); a static token, or a new one refused again, is an
 * authentication failure, as 403 (a user without the permission) is. A
 * 404 to a request that names the asset's id means Airflow no longer has
 * that id (the asset was removed and declared again).
 */
AirflowStep
airflow_answer_step(long status, bool may_relogin, bool names_asset)
{
	if (status >= 200 && status < 300)
		return AIRFLOW_STEP_DONE;
	if (status == 401)
		return may_relogin ? AIRFLOW_STEP_RELOGIN : AIRFLOW_STEP_AUTH_FAILED;
	if (status == 403)
		return AIRFLOW_STEP_AUTH_FAILED;
	if (status == 404 && names_asset)
		return AIRFLOW_STEP_ASSET_GONE;
	return AIRFLOW_STEP_RETRY;
}

/* Whether two optional texts are present and equal. */
static bool
same(const char *a, const char *b)
{
	return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/*
 * What one asset event (newest first) says about ours. A publication's
 * events are posted one at a time, each only once the one before it is
 * delivered, so Airflow stamps ours after every earlier one of the same
 * publication: reading newest first, ours comes before any of them, and
 * reaching one of them first means ours was never posted.
 */
AirflowSeen
airflow_event_seen(const AirflowEventMark *ours, const AirflowEventMark *seen)
{
	if (same(ours->event_id, seen->event_id))
		return AIRFLOW_SEEN_OURS;
	if (same(ours->publication, seen->publication) && same(ours->table, seen->table) &&
		same(ours->database, seen->database))
		return AIRFLOW_SEEN_EARLIER;
	return AIRFLOW_SEEN_OTHER;
}
