/*
 * Unit tests of the verdict as Iceberg table properties (lake/watermark.c):
 * UTC ISO instants and epoch milliseconds read and written, and the rule
 * that a commit only moves a property forward (absent: set; before the
 * period's end: set; at or past it: left; no time: refused).
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "lake/watermark.h"

#include "tap.h"

#define H10 INT64CONST(1793613600000)	/* 2026-11-02T10:00:00Z */
#define HOUR_MS INT64CONST(3600000)

/* Plans a period ending at end with the two properties' values (NULL: absent). */
static WatermarkPlan
plan(bool iso_named, const char *iso, bool ms_named, const char *ms, int64_t end, bool *ok)
{
	WatermarkSeen a = {iso_named, iso};
	WatermarkSeen b = {ms_named, ms};
	WatermarkPlan p;

	*ok = watermark_plan(&a, &b, end, &p);
	return p;
}

int
main(void)
{
	int64_t		ms = 0;
	char		buf[WATERMARK_ISO_LEN];
	bool		ok;
	WatermarkPlan p;

	check(watermark_parse_iso("2026-11-02T10:00:00Z", &ms) && ms == H10, "an ISO instant in Z");
	check(watermark_parse_iso("2026-11-02T10:00:00+00:00", &ms) && ms == H10, "an ISO instant in +00:00");
	check(watermark_parse_iso("2026-11-02T10:00:00.250Z", &ms) && ms == H10 + 250, "milliseconds");
	check(watermark_parse_iso("2026-11-02T10:00:00.2509Z", &ms) && ms == H10 + 250, "a finer fraction is cut");
	check(watermark_parse_iso("2026-11-02T10:00:00.5Z", &ms) && ms == H10 + 500, "one place of a fraction");
	check(!watermark_parse_iso("2026-11-02T10:00:00+01:00", &ms), "another offset is refused");
	check(!watermark_parse_iso("2026-11-02T10:00:00", &ms), "no zone is refused");
	check(!watermark_parse_iso("2026-11-02 10:00:00Z", &ms), "a space for T is refused");
	check(!watermark_parse_iso("2026-02-30T10:00:00Z", &ms), "February 30 is refused");
	check(!watermark_parse_iso("2026-11-02T24:00:00Z", &ms), "24:00 is refused");
	check(!watermark_parse_iso("2026-11-02T10:00:00.Z", &ms), "an empty fraction is refused");
	check(!watermark_parse_iso("2026-11-02T10:00:00Zjunk", &ms), "trailing text is refused");
	check(!watermark_parse_iso("", &ms) && !watermark_parse_iso(NULL, &ms), "empty and NULL are refused");

	check(watermark_parse_ms("1793613600000", &ms) && ms == H10, "epoch milliseconds");
	check(!watermark_parse_ms("1793613600000.0", &ms), "a fraction of a millisecond is refused");
	check(!watermark_parse_ms(" 1", &ms) && !watermark_parse_ms("", &ms) && !watermark_parse_ms("1e3", &ms),
		  "spaces, empty and exponents are refused");
	check(!watermark_parse_ms("99999999999999999999", &ms), "an overflow is refused");

	watermark_format_iso(H10, buf);
	check(strcmp(buf, "2026-11-02T10:00:00Z") == 0, "whole seconds without a fraction");
	watermark_format_iso(H10 + 7, buf);
	check(strcmp(buf, "2026-11-02T10:00:00.007Z") == 0, "milliseconds in three places");
	watermark_format_iso(INT64CONST(-1), buf);
	check(strcmp(buf, "1969-12-31T23:59:59.999Z") == 0, "before 1970");
	watermark_format_iso(H10 + 123, buf);
	check(watermark_parse_iso(buf, &ms) && ms == H10 + 123, "written and read back");

	p = plan(true, NULL, true, NULL, H10, &ok);
	check(ok && p.set_iso && p.set_ms, "absent properties are set");
	p = plan(true, "2026-11-02T09:00:00Z", true, "1793610000000", H10, &ok);
	check(ok && p.set_iso && p.set_ms, "properties an hour behind move forward");
	p = plan(true, "2026-11-02T10:00:00Z", true, "1793613600000", H10, &ok);
	check(ok && !p.set_iso && !p.set_ms, "properties at the period's end: nothing to commit");
	p = plan(true, "2026-11-02T11:00:00Z", true, "1793617200000", H10, &ok);
	check(ok && !p.set_iso && !p.set_ms, "properties past the period's end never move back");
	p = plan(true, "2026-11-02T11:00:00Z", true, "1793610000000", H10, &ok);
	check(ok && !p.set_iso && p.set_ms, "only the one behind moves");
	p = plan(true, "2026-11-02T09:00:00Z", true, "1793617200000", H10, &ok);
	check(ok && p.set_iso && !p.set_ms, "only the one behind moves (the other way)");
	p = plan(false, "2026-11-02T09:00:00Z", true, NULL, H10, &ok);
	check(ok && !p.set_iso && p.set_ms, "a property not named is never set");
	p = plan(true, "yesterday", true, NULL, H10, &ok);
	check(!ok && p.unreadable_iso && !p.set_iso && !p.set_ms, "a value that is no time refuses the commit");
	p = plan(true, NULL, true, "soon", H10, &ok);
	check(!ok && p.unreadable_ms && !p.set_iso && !p.set_ms, "a watermark that is no number refuses the commit");
	p = plan(false, "yesterday", true, NULL, H10, &ok);
	check(ok && p.set_ms, "a property not named is not read");
	p = plan(true, "2026-11-02T09:59:59.999Z", false, NULL, H10, &ok);
	check(ok && p.set_iso, "a millisecond behind moves forward");
	p = plan(true, "2026-11-02T10:00:00.0001Z", false, NULL, H10, &ok);
	check(ok && !p.set_iso, "a fraction past the end, cut to the end: left");
	p = plan(true, NULL, true, NULL, H10 - HOUR_MS * 24 * 365 * 60, &ok);
	check(ok && p.set_iso && p.set_ms, "a period before 1970");
	return tap_done();
}
