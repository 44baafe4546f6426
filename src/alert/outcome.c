/*
 * outcome.c
 *     What one webhook attempt's answer means for its delivery.
 *
 * Retried: no answer at all (refused, reset, timeout), 408, 425, 429 and
 * every 5xx (the service is busy or down), and 401/403 (credentials being
 * rotated are fixed without re-sending by hand). Permanent: a redirect
 * (libcurl does not follow one: the URL is wrong), and the other 4xx,
 * which say the request itself is wrong (400 invalid event, 404 unknown
 * URL, 413 too large), so sending it again cannot help.
 */
#include "postgres.h"

#include <ctype.h>

#include "alert/outcome.h"

/* Classifies one attempt: answered says whether an HTTP status came back. */
DeliveryVerdict
delivery_verdict(bool answered, long status)
{
	if (!answered)
		return DELIVERY_RETRY;
	if (status >= 200 && status < 300)
		return DELIVERY_DONE;
	if (status == 401 || status == 403 || status == 408 || status == 425 || status == 429 || status >= 500)
		return DELIVERY_RETRY;
	return DELIVERY_PERMANENT;
}

/*
 * Seconds a Retry-After header asks to wait, from now: delay-seconds or an
 * HTTP-date (RFC 9110 10.2.3, IMF-fixdate); -1 when absent or unreadable,
 * 0 for a date already past.
 */
double
delivery_retry_after(const char *value, time_t now)
{
	const char *s = value;
	struct tm	tm;
	char	   *end;
	time_t		when;

	if (value == NULL)
		return -1;
	while (isspace((unsigned char) *s))
		s++;
	if (isdigit((unsigned char) *s))
	{
		long		secs;

		errno = 0;
		secs = strtol(s, &end, 10);
		while (isspace((unsigned char) *end))
			end++;
		if (errno != 0 || *end != '\0' || secs < 0)
			return -1;
		return (double) secs;
	}
	memset(&tm, 0, sizeof(tm));
	end = strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm);
	if (end == NULL || *end != '\0')
		return -1;
	when = timegm(&tm);
	if (when == (time_t) -1)
		return -1;
	return when > now ? (double) (when - now) : 0;
}
