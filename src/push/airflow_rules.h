/*
 * airflow_rules.h
 *     What an Airflow API server's answer means for a publication's event,
 *     and what an asset event found while searching for one says (pure,
 *     unit-tested without a network: test/unit/test_airflow_rules.c).
 */
#ifndef FINALIZE_PUSH_AIRFLOW_RULES_H
#define FINALIZE_PUSH_AIRFLOW_RULES_H

/* What to do after an answer of the REST API (with a bearer token). */
typedef enum AirflowStep
{
	AIRFLOW_STEP_DONE,			/* 2xx: the request did what it asked */
	AIRFLOW_STEP_RELOGIN,		/* 401 with a token finalize got from
								 * /auth/token: get a new one, ask once more */
	AIRFLOW_STEP_AUTH_FAILED,	/* 401 otherwise, 403: the credentials are
								 * refused or lack the permission */
	AIRFLOW_STEP_ASSET_GONE,	/* 404: the asset id kept is no longer
								 * Airflow's; look it up again next time */
	AIRFLOW_STEP_RETRY			/* anything else: the event waits */
} AirflowStep;

extern AirflowStep airflow_answer_step(long status, bool may_relogin, bool names_asset);

/* Who sent an asset event, as finalize's extra says (NULL: absent). */
typedef struct AirflowEventMark
{
	const char *event_id;
	const char *database;
	const char *table;
	const char *publication;
} AirflowEventMark;

/* What one asset event, read newest first, tells the search for ours. */
typedef enum AirflowSeen
{
	AIRFLOW_SEEN_OTHER,			/* someone else's: read on */
	AIRFLOW_SEEN_OURS,			/* the very event: it was posted */
	AIRFLOW_SEEN_EARLIER		/* an earlier event of the same publication:
								 * ours, posted only after it, is not there */
} AirflowSeen;

extern AirflowSeen airflow_event_seen(const AirflowEventMark *ours, const AirflowEventMark *seen);

#endif							/* FINALIZE_PUSH_AIRFLOW_RULES_H */
