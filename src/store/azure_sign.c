/*
 * azure_sign.c
 *     The string an Azure Storage request's Shared Key signature covers
 *     (Microsoft's "Authorize with Shared Key", version 2009-09-19 and
 *     later): the verb, twelve standard headers (Content-Length empty when
 *     zero, since 2015-02-21), the canonicalized x-ms- headers and the
 *     canonicalized resource. Pure: no allocation, no I/O, no errors raised;
 *     azure_request.c signs it (HMAC-SHA256 with the account key).
 *
 * The canonicalized resource is "/" + account + the URL's encoded path
 * (the emulator's path already begins with its account: /devstoreaccount1/
 * devstoreaccount1/container), then one line per query parameter, in
 * order of its lower-cased name: "\nname:value", the value decoded, the
 * values of a repeated name sorted and joined by commas.
 */
#include "postgres.h"

#include "store/azure_sign.h"

/* The most query parameters or x-ms- headers one request signs. */
#define MAX_PARTS 16

/* Where the string grows, and whether it still fits. */
typedef struct SignBuf
{
	char	   *out;
	size_t		cap;
	size_t		len;
	bool		ok;
} SignBuf;

/* Appends len bytes of s (the buffer stays NUL-terminated). */
static void
put(SignBuf *b, const char *s, size_t len)
{
	if (!b->ok || b->len + len + 1 > b->cap)
	{
		b->ok = false;
		return;
	}
	memcpy(b->out + b->len, s, len);
	b->len += len;
	b->out[b->len] = '\0';
}

/* Appends a string. */
static void
puts_(SignBuf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* Appends a string lower-cased. */
static void
put_lower(SignBuf *b, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
	{
		char		c = pg_ascii_tolower((unsigned char) s[i]);

		put(b, &c, 1);
	}
}

/* Compares two names case-insensitively, then their values. */
static int
pair_cmp(const AzurePair *a, const AzurePair *b)
{
	int			c = pg_strcasecmp(a->name, b->name);

	return c != 0 ? c : strcmp(a->value, b->value);
}

/* Sorts a few pairs in place (insertion sort: at most MAX_PARTS). */
static void
sort_pairs(AzurePair *p, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && pair_cmp(&p[j - 1], &p[j]) > 0; j--)
		{
			AzurePair	t = p[j];

			p[j] = p[j - 1];
			p[j - 1] = t;
		}
}

/*
 * Appends a header's value as Shared Key canonicalizes it: trimmed, each
 * run of white space one space.
 */
static void
put_header_value(SignBuf *b, const char *v)
{
	bool		space = false;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++)
	{
		if (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n')
		{
			space = true;
			continue;
		}
		if (space)
			put(b, " ", 1);
		space = false;
		put(b, v, 1);
	}
}

/* The value of a hex digit, or -1. */
static int
hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * Decodes len bytes of a query's percent-encoding ("+" is a space) into
 * out, NUL-terminated; false when it does not fit or is malformed.
 */
bool
azure_url_decode(const char *s, size_t len, char *out, size_t outlen)
{
	size_t		o = 0;

	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (c == '%')
		{
			if (len - i < 3 || hex_digit(s[i + 1]) < 0 || hex_digit(s[i + 2]) < 0)
				return false;
			c = (char) (hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
			i += 2;
		}
		else if (c == '+')
			c = ' ';
		if (o + 1 >= outlen)
			return false;
		out[o++] = c;
	}
	out[o] = '\0';
	return true;
}

/*
 * Splits a URL's query (after "?") into decoded pairs, their strings in
 * scratch; the number of pairs, or -1 when there are too many, one does
 * not decode or scratch is too small.
 */
static int
query_pairs(const char *query, AzurePair *pairs, char *scratch, size_t cap)
{
	int			n = 0;
	size_t		used = 0;

	while (query != NULL && *query != '\0')
	{
		const char *amp = strchr(query, '&');
		size_t		plen = amp ? (size_t) (amp - query) : strlen(query);
		const char *eq = memchr(query, '=', plen);
		size_t		nlen = eq ? (size_t) (eq - query) : plen;

		if (plen > 0)
		{
			if (n >= MAX_PARTS || !azure_url_decode(query, nlen, scratch + used, cap - used))
				return -1;
			pairs[n].name = scratch + used;
			used += strlen(scratch + used) + 1;
			if (used >= cap || !azure_url_decode(eq ? eq + 1 : "", eq ? plen - nlen - 1 : 0, scratch + used, cap - used))
				return -1;
			pairs[n].value = scratch + used;
			used += strlen(scratch + used) + 1;
			n++;
		}
		query = amp ? amp + 1 : NULL;
	}
	return n;
}

/*
 * Appends the canonicalized resource of url: "/" + account + its encoded
 * path, then its query parameters (see the file's comment).
 */
static void
put_resource(SignBuf *b, const char *account, const char *url)
{
	const char *host = strstr(url, "://");
	const char *path = host ? strchr(host + 3, '/') : NULL;
	const char *query = path ? strchr(path, '?') : NULL;
	AzurePair	pairs[MAX_PARTS];
	char		scratch[AZURE_SIGN_MAX];
	int			n;

	if (path == NULL)
	{
		b->ok = false;
		return;
	}
	puts_(b, "/");
	puts_(b, account);
	put(b, path, query ? (size_t) (query - path) : strlen(path));
	n = query_pairs(query ? query + 1 : NULL, pairs, scratch, sizeof(scratch));
	if (n < 0)
	{
		b->ok = false;
		return;
	}
	sort_pairs(pairs, n);
	for (int i = 0; i < n; i++)
	{
		bool		same = i > 0 && pg_strcasecmp(pairs[i - 1].name, pairs[i].name) == 0;

		if (same)
			puts_(b, ",");
		else
		{
			puts_(b, "\n");
			put_lower(b, pairs[i].name, strlen(pairs[i].name));
			puts_(b, ":");
		}
		puts_(b, pairs[i].value);
	}
}

/*
 * Builds the string-to-sign of a request into out (outlen bytes); false
 * when it does not fit, the URL has no path, or it has more than 16 query
 * parameters or x-ms- headers.
 */
bool
azure_string_to_sign(const AzureSignInput *in, char *out, size_t outlen)
{
	SignBuf		b = {out, outlen, 0, outlen > 0};
	AzurePair	headers[MAX_PARTS];
	char		length[32] = "";

	if (outlen > 0)
		out[0] = '\0';
	if (in->nheaders > MAX_PARTS)
		return false;
	if (in->content_length > 0)
		snprintf(length, sizeof(length), "%ld", in->content_length);
	puts_(&b, in->method);
	puts_(&b, "\n\n\n");		/* Content-Encoding, Content-Language */
	puts_(&b, length);
	puts_(&b, "\n\n");			/* Content-MD5 */
	puts_(&b, in->content_type ? in->content_type : "");
	/* Date, If-Modified-Since, If-Match, If-None-Match, If-Unmodified-Since, Range */
	puts_(&b, "\n\n\n\n\n\n\n");
	memcpy(headers, in->headers, sizeof(AzurePair) * in->nheaders);
	sort_pairs(headers, in->nheaders);
	for (int i = 0; i < in->nheaders; i++)
	{
		put_lower(&b, headers[i].name, strlen(headers[i].name));
		puts_(&b, ":");
		put_header_value(&b, headers[i].value);
		puts_(&b, "\n");
	}
	put_resource(&b, in->account, in->url);
	return b.ok;
}
