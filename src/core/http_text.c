/*
 * http_text.c
 *     The text of HTTP requests that needs no libcurl (http.c is the one
 *     file that calls it): what a header may hold, and percent-encoding for
 *     URLs and SigV4.
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "core/fdw_options.h"
#include "core/http.h"

/*
 * Whether a value is safe in a header: no CR, LF or other control bytes,
 * which could end the header and start another.
 */
bool
http_header_safe(const char *value)
{
	for (const unsigned char *c = (const unsigned char *) value; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return false;
	return true;
}

/*
 * Percent-encodes a string for a URL's path segment or query value: every
 * byte outside RFC 3986's unreserved A-Z a-z 0-9 - _ . ~ becomes %XX
 * (upper-case hex), '/' included, which is also SigV4's canonical form.
 */
char *
http_uri_encode(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	StringInfoData buf;

	initStringInfo(&buf);
	for (const unsigned char *c = (const unsigned char *) s; *c; c++)
	{
		if ((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
			*c == '-' || *c == '_' || *c == '.' || *c == '~')
			appendStringInfoChar(&buf, (char) *c);
		else
		{
			appendStringInfoChar(&buf, '%');
			appendStringInfoChar(&buf, hex[*c >> 4]);
			appendStringInfoChar(&buf, hex[*c & 15]);
		}
	}
	return buf.data;
}

/*
 * Whether the CA file of a request must not go to libcurl, which reads it
 * uncancellably (a FIFO blocks, /dev/zero exhausts memory); if so, why in
 * message. Allocates nothing and raises nothing (http_perform's rule).
 */
bool
http_ca_file_refused(const char *ca_file, char *message, size_t len)
{
	const char *why = fdw_ca_file_problem(ca_file);

	if (why == NULL)
		return false;
	if (strcmp(why, FDW_CA_FILE_UNREADABLE) == 0)
		snprintf(message, len, "the ca_file \"%s\" %s: %s", ca_file, why, strerror(errno));
	else
		snprintf(message, len, "the ca_file \"%s\" %s", ca_file, why);
	return true;
}
