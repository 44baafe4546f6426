/*
 * Unit tests of the Airflow target's rules (push/airflow_rules.c): what
 * an answer of the REST API means, and when the search for an event after
 * an unknown outcome may stop. Built and run by test/offline/test_unit_c.py;
 * prints TAP.
 */
#include "postgres.h"

#include "push/airflow_rules.h"

#include "tap.h"

int
main(void)
{
	AirflowEventMark ours = {"e-2", "warehouse", "sales.orders", "to_airflow"};
	AirflowEventMark same = {"e-2", "warehouse", "sales.orders", "to_airflow"};
	AirflowEventMark earlier = {"e-1", "warehouse", "sales.orders", "to_airflow"};
	AirflowEventMark other_db = {"e-9", "staging", "sales.orders", "to_airflow"};
	AirflowEventMark other_table = {"e-8", "warehouse", "sales.returns", "to_airflow"};
	AirflowEventMark other_pub = {"e-7", "warehouse", "sales.orders", "to_dagster"};
	AirflowEventMark foreign = {NULL, NULL, NULL, NULL};

	check(airflow_answer_step(200, true, true) == AIRFLOW_STEP_DONE, "200 is done");
	check(airflow_answer_step(201, false, false) == AIRFLOW_STEP_DONE, "201 is done");
	check(airflow_answer_step(401, true, false) == AIRFLOW_STEP_RELOGIN, "401 to a token from /auth/token: a new token");
	check(airflow_answer_step(401, false, false) == AIRFLOW_STEP_AUTH_FAILED,
		  "401 to a static token, or a new one refused again: authentication failed");
	check(airflow_answer_step(403, true, true) == AIRFLOW_STEP_AUTH_FAILED, "403 (no permission) is no retry with a new token");
	check(airflow_answer_step(404, true, true) == AIRFLOW_STEP_ASSET_GONE, "404 to the post: the asset's id is stale");
	check(airflow_answer_step(404, true, false) == AIRFLOW_STEP_RETRY, "404 elsewhere: the event waits");
	check(airflow_answer_step(422, true, true) == AIRFLOW_STEP_RETRY, "422 (a body Airflow refuses): the event waits");
	check(airflow_answer_step(500, true, true) == AIRFLOW_STEP_RETRY, "500: the event waits");
	check(airflow_answer_step(503, true, true) == AIRFLOW_STEP_RETRY, "503: the event waits");
	check(airflow_answer_step(302, true, true) == AIRFLOW_STEP_RETRY, "a redirect (not followed): the event waits");

	check(airflow_event_seen(&ours, &same) == AIRFLOW_SEEN_OURS, "the same event_id: it was posted");
	check(airflow_event_seen(&ours, &earlier) == AIRFLOW_SEEN_EARLIER,
		  "an earlier event of the same publication first: ours was not posted");
	check(airflow_event_seen(&ours, &other_db) == AIRFLOW_SEEN_OTHER, "the same publication name in another database");
	check(airflow_event_seen(&ours, &other_table) == AIRFLOW_SEEN_OTHER, "the same publication name on another table");
	check(airflow_event_seen(&ours, &other_pub) == AIRFLOW_SEEN_OTHER, "another publication of the same table");
	check(airflow_event_seen(&ours, &foreign) == AIRFLOW_SEEN_OTHER, "an event without finalize's extra");
	return tap_done();
}
