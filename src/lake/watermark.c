/*
 * watermark.c
 *     The verdict as an Iceberg table's properties, pure: the end of the
 *     final periods as finalize's own property (UTC ISO 8601, as Java's
 *     Instant prints it: "2026-11-02T10:00:00Z") and as Gobblin's
 *     completionWatermark (epoch milliseconds, "1793613600000"), and the
 *     rule that a property only ever moves forward: a commit sets a
 *     property only when the table holds it before the period's end (or
 *     not at all). A value that is no time is refused rather than
 *     overwritten: it may be later than the period, and a property is
 *     never moved back.
 *
 * Times are converted with the C library (timegm, gmtime_r): whole
 * seconds of the proleptic Gregorian calendar in UTC, years 1 to 9999.
 */
#include "postgres.h"

#include <time.h>

#include "lake/watermark.h"

#define MS_PER_SEC INT64CONST(1000)

/* Whether s is n decimal digits (and nothing else in those n bytes). */
static bool
digits(const char *s, int n)
{
	for (int i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* The decimal value of n digits at s (digits() checked them). */
static int
number(const char *s, int n)
{
	int			v = 0;

	for (int i = 0; i < n; i++)
		v = v * 10 + (s[i] - '0');
	return v;
}

/*
 * Reads a UTC instant "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00)" into
 * epoch milliseconds (a fraction beyond milliseconds is cut: the
 * instant is not earlier than the result). False for anything else,
 * another offset included, and for a date that does not exist.
 */
bool
watermark_parse_iso(const char *text, int64_t *ms)
{
	struct tm	tm = {0};
	struct tm	back;
	const char *p = text;
	time_t		secs;
	int64_t		frac = 0;
	int			places = 0;

	if (text == NULL || strlen(text) < 20 || !digits(p, 4) || p[4] != '-' || !digits(p + 5, 2) || p[7] != '-' ||
		!digits(p + 8, 2) || p[10] != 'T' || !digits(p + 11, 2) || p[13] != ':' || !digits(p + 14, 2) ||
		p[16] != ':' || !digits(p + 17, 2))
		return false;
	tm.tm_year = number(p, 4) - 1900;
	tm.tm_mon = number(p + 5, 2) - 1;
	tm.tm_mday = number(p + 8, 2);
	tm.tm_hour = number(p + 11, 2);
	tm.tm_min = number(p + 14, 2);
	tm.tm_sec = number(p + 17, 2);
	p += 19;
	if (*p == '.')
	{
		for (p++; *p >= '0' && *p <= '9'; p++, places++)
			if (places < 3)
				frac = frac * 10 + (*p - '0');
		if (places == 0 || places > 9)
			return false;
		for (int i = places; i < 3; i++)
			frac *= 10;
	}
	if (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0)
		return false;
	if (tm.tm_year + 1900 < 1)
		return false;
	back = tm;
	secs = timegm(&back);
	/* timegm normalizes: a field out of range (Feb 30, 24:00, :60) changes the others. */
	if (back.tm_year != tm.tm_year || back.tm_mon != tm.tm_mon || back.tm_mday != tm.tm_mday ||
		back.tm_hour != tm.tm_hour || back.tm_min != tm.tm_min || back.tm_sec != tm.tm_sec)
		return false;
	*ms = (int64_t) secs * MS_PER_SEC + frac;
	return true;
}

/* Reads epoch milliseconds written as a decimal integer (Gobblin's completionWatermark). */
bool
watermark_parse_ms(const char *text, int64_t *ms)
{
	char	   *end;
	long long	v;

	if (text == NULL || text[0] == '\0' || (text[0] != '-' && (text[0] < '0' || text[0] > '9')))
		return false;
	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno != 0 || *end != '\0')
		return false;
	*ms = v;
	return true;
}

/*
 * Writes epoch milliseconds as Java's Instant.toString() does: whole
 * seconds without a fraction, else three places ("...T10:00:00.250Z").
 */
void
watermark_format_iso(int64_t ms, char *buf)
{
	int64_t		rem = ms % MS_PER_SEC;
	time_t		secs = (time_t) ((ms - (rem < 0 ? rem + MS_PER_SEC : rem)) / MS_PER_SEC);
	struct tm	tm;

	if (rem < 0)
		rem += MS_PER_SEC;
	gmtime_r(&secs, &tm);
	if (rem == 0)
		snprintf(buf, WATERMARK_ISO_LEN, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
				 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	else
		snprintf(buf, WATERMARK_ISO_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
				 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) rem);
}

/*
 * Decides one watermark property: set when named and absent or before
 * end_ms; *unreadable when its value is no time.
 */
static bool
decide(const WatermarkSeen *seen, bool iso, int64_t end_ms, bool *unreadable)
{
	int64_t		at;

	*unreadable = false;
	if (!seen->named)
		return false;
	if (seen->value == NULL)
		return true;
	if (!(iso ? watermark_parse_iso(seen->value, &at) : watermark_parse_ms(seen->value, &at)))
	{
		*unreadable = true;
		return false;
	}
	return at < end_ms;
}

/*
 * What a commit for a period ending at end_ms sets of the two watermark
 * properties: each one named that the table holds before end_ms (or not
 * at all); one at or past it is left as it is. False when a named one
 * holds no time (then nothing may be committed). Nothing to set means
 * the table is already at or past the period.
 */
bool
watermark_plan(const WatermarkSeen *iso, const WatermarkSeen *ms, int64_t end_ms, WatermarkPlan *plan)
{
	memset(plan, 0, sizeof(*plan));
	plan->set_iso = decide(iso, true, end_ms, &plan->unreadable_iso);
	plan->set_ms = decide(ms, false, end_ms, &plan->unreadable_ms);
	if (plan->unreadable_iso || plan->unreadable_ms)
	{
		plan->set_iso = plan->set_ms = false;
		return false;
	}
	return true;
}
