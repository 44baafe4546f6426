/*
 * Unit tests of what a Dagster webserver's answers mean for an attempt of a
 * dagster publication (push/dagster_outcome.c): when it looks for the event
 * before reporting, what the look tells, what the report's answer means.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "push/dagster_outcome.h"

#include "tap.h"

int
main(void)
{
	check(!dagster_should_look(1), "the first attempt reports without looking");
	check(dagster_should_look(2), "a second attempt looks first (the first may have been recorded)");
	check(dagster_should_look(40), "every later attempt looks first");

	check(dagster_look_verdict(true, 200, true, true) == DAGSTER_LOOK_FOUND,
		  "a materialization with the event id: nothing is reported again");
	check(dagster_look_verdict(true, 200, true, false) == DAGSTER_LOOK_REPORT,
		  "none with the event id: reported");
	check(dagster_look_verdict(true, 200, false, true) == DAGSTER_LOOK_REPORT,
		  "an answer that cannot be read tells nothing: reported (at least once)");
	check(dagster_look_verdict(true, 400, true, true) == DAGSTER_LOOK_REPORT,
		  "GraphQL refused (400): reported");
	check(dagster_look_verdict(true, 404, false, false) == DAGSTER_LOOK_REPORT,
		  "no GraphQL endpoint (404): reported");
	check(dagster_look_verdict(true, 401, false, false) == DAGSTER_LOOK_REPORT,
		  "a look the token may not make: reported (the report's own answer decides)");
	check(dagster_look_verdict(true, 500, false, false) == DAGSTER_LOOK_REPORT,
		  "a server error on the look: reported");
	check(dagster_look_verdict(false, 0, false, false) == DAGSTER_LOOK_UNREACHABLE,
		  "no answer at all: the attempt fails without a report");

	check(dagster_report_verdict(true, 200) == DAGSTER_REPORT_DONE, "200 {} is recorded");
	check(dagster_report_verdict(true, 204) == DAGSTER_REPORT_DONE, "any 2xx is recorded");
	check(dagster_report_verdict(true, 401) == DAGSTER_REPORT_AUTH, "401 is a refused token");
	check(dagster_report_verdict(true, 403) == DAGSTER_REPORT_AUTH, "403 is a refused token");
	check(dagster_report_verdict(true, 400) == DAGSTER_REPORT_RETRY, "400 waits (the event is kept)");
	check(dagster_report_verdict(true, 500) == DAGSTER_REPORT_RETRY, "500 waits");
	check(dagster_report_verdict(true, 302) == DAGSTER_REPORT_RETRY, "a redirect is not followed: waits");
	check(dagster_report_verdict(true, 199) == DAGSTER_REPORT_RETRY, "an informational status is no record");
	check(dagster_report_verdict(false, 0) == DAGSTER_REPORT_RETRY, "no answer waits");
	check(dagster_report_verdict(false, 200) == DAGSTER_REPORT_RETRY,
		  "a status without an answer (cut off) is no record");
	return tap_done();
}
