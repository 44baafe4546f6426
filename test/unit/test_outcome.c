/*
 * Unit tests of what a webhook attempt's answer means (outcome.c): which
 * answers are retried, which fail for good, and Retry-After in both forms.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "alert/outcome.h"

#include "tap.h"

int
main(void)
{
	time_t		now = 1764547200;	/* 2025-12-01 00:00:00 UTC */

	check(delivery_verdict(true, 200) == DELIVERY_DONE, "200 is delivered");
	check(delivery_verdict(true, 202) == DELIVERY_DONE, "202 (PagerDuty, Opsgenie) is delivered");
	check(delivery_verdict(true, 204) == DELIVERY_DONE, "204 is delivered");
	check(delivery_verdict(false, 0) == DELIVERY_RETRY, "no answer (refused, reset, timeout) is retried");
	check(delivery_verdict(true, 500) == DELIVERY_RETRY, "500 is retried");
	check(delivery_verdict(true, 503) == DELIVERY_RETRY, "503 is retried");
	check(delivery_verdict(true, 429) == DELIVERY_RETRY, "429 is retried");
	check(delivery_verdict(true, 408) == DELIVERY_RETRY, "408 is retried");
	check(delivery_verdict(true, 401) == DELIVERY_RETRY, "401 is retried (credentials being rotated)");
	check(delivery_verdict(true, 403) == DELIVERY_RETRY, "403 is retried");
	check(delivery_verdict(true, 400) == DELIVERY_PERMANENT, "400 (invalid event) fails for good");
	check(delivery_verdict(true, 404) == DELIVERY_PERMANENT, "404 (wrong URL) fails for good");
	check(delivery_verdict(true, 413) == DELIVERY_PERMANENT, "413 fails for good");
	check(delivery_verdict(true, 301) == DELIVERY_PERMANENT, "a redirect fails for good (not followed)");
	check(delivery_verdict(true, 199) == DELIVERY_PERMANENT, "an informational status is not a delivery");

	check(delivery_retry_after(NULL, now) == -1, "no Retry-After: -1");
	check(delivery_retry_after("2", now) == 2, "delay-seconds");
	check(delivery_retry_after(" 120 ", now) == 120, "delay-seconds with spaces");
	check(delivery_retry_after("0", now) == 0, "zero seconds");
	check(delivery_retry_after("-5", now) == -1, "a negative delay is unreadable");
	check(delivery_retry_after("5s", now) == -1, "trailing garbage is unreadable");
	check(delivery_retry_after("99999999999999999999", now) == -1, "an overflowing delay is unreadable");
	check(delivery_retry_after("Mon, 01 Dec 2025 00:01:00 GMT", now) == 60, "an HTTP-date a minute ahead");
	check(delivery_retry_after("Sun, 30 Nov 2025 23:00:00 GMT", now) == 0, "an HTTP-date in the past: now");
	check(delivery_retry_after("Monday, 01-Dec-25 00:01:00 GMT", now) == -1, "the obsolete RFC 850 form is unreadable");
	check(delivery_retry_after("soon", now) == -1, "words are unreadable");
	return tap_done();
}
