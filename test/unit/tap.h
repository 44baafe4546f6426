/*
 * tap.h
 *     The TAP printing shared by the C unit tests (test_unit_c.py turns
 *     each line into a pytest case).
 */
#ifndef FINALIZE_TAP_H
#define FINALIZE_TAP_H

#include <stdio.h>

static int	tests = 0;
static int	failures = 0;

/* Records one check as a TAP line. */
static void
check(bool ok, const char *what)
{
	tests++;
	if (!ok)
		failures++;
	printf("%s %d - %s\n", ok ? "ok" : "not ok", tests, what);
}

/* Prints the plan; the exit status of the test program. */
static int
tap_done(void)
{
	printf("1..%d\n", tests);
	return failures == 0 ? 0 : 1;
}

#endif							/* FINALIZE_TAP_H */
