/*
 * dagster_outcome.h
 *     What the answers of a Dagster webserver mean for one attempt of a
 *     dagster publication (pure, unit-tested without a network): whether to
 *     look for the event before reporting it again, what the look found,
 *     and what the report's answer means.
 */
#ifndef FINALIZE_PUSH_DAGSTER_OUTCOME_H
#define FINALIZE_PUSH_DAGSTER_OUTCOME_H

/* What looking for the event's materialization (GraphQL) tells. */
typedef enum DagsterLook
{
	DAGSTER_LOOK_FOUND,			/* a materialization carries the event id:
								 * nothing to report */
	DAGSTER_LOOK_REPORT,		/* not there, or Dagster cannot tell: report
								 * (at least once) */
	DAGSTER_LOOK_UNREACHABLE	/* no answer at all: the report would get
								 * none either; the attempt fails */
} DagsterLook;

/* What the answer to POST /report_asset_materialization/... means. */
typedef enum DagsterReport
{
	DAGSTER_REPORT_DONE,		/* a 2xx: Dagster recorded it */
	DAGSTER_REPORT_AUTH,		/* 401, 403: the token is refused */
	DAGSTER_REPORT_RETRY		/* anything else: the event waits */
} DagsterReport;

extern bool dagster_should_look(int attempts);
extern DagsterLook dagster_look_verdict(bool answered, long status, bool readable, bool found);
extern DagsterReport dagster_report_verdict(bool answered, long status);

#endif							/* FINALIZE_PUSH_DAGSTER_OUTCOME_H */
