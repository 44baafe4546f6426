/*
 * s3_url.c
 *     The URLs of S3 requests: a bucket's address in path or virtual-hosted
 *     style, a ListObjectsV2 page, an object. Apart from objstore.c (the
 *     one file that reads S3's XML answers), since they need no libxml2.
 *
 * libcurl (7.88) signs the query string exactly as written, so it is built
 * here already in SigV4's canonical form (parameters sorted, every byte
 * outside A-Z a-z 0-9 - _ . ~ percent-encoded).
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "core/http.h"
#include "gate/s3_url.h"

/*
 * Starts a request URL with the bucket's address, without a trailing "/":
 * "https://bucket.host" (virtual-hosted style) or "https://host/bucket"
 * (path style). Returns whether it is virtual-hosted.
 */
static bool
bucket_url(StringInfo url, const S3Location *loc)
{
	const char *scheme_end = strstr(loc->endpoint, "://");
	size_t		elen = strlen(loc->endpoint);

	while (elen > 0 && loc->endpoint[elen - 1] == '/')
		elen--;
	if (loc->virtual_host && scheme_end != NULL)
	{
		appendStringInfo(url, "%.*s%s.%.*s", (int) (scheme_end + 3 - loc->endpoint), loc->endpoint,
						 loc->bucket, (int) (elen - (scheme_end + 3 - loc->endpoint)), scheme_end + 3);
		return true;
	}
	appendStringInfo(url, "%.*s/%s", (int) elen, loc->endpoint, http_uri_encode(loc->bucket));
	return false;
}

/* The URL of one ListObjectsV2 request, its query in canonical order. */
char *
s3_list_url(const S3Location *loc, const char *prefix, const char *token)
{
	StringInfoData url;

	initStringInfo(&url);
	/* the bucket's root: "/" after a host, nothing after a path's bucket */
	appendStringInfoString(&url, bucket_url(&url, loc) ? "/?" : "?");
	/* Sorted: continuation-token < list-type < prefix. */
	if (token != NULL)
		appendStringInfo(&url, "continuation-token=%s&", http_uri_encode(token));
	appendStringInfo(&url, "list-type=2&prefix=%s", http_uri_encode(prefix));
	return url.data;
}

/* The URL of one object: its key percent-encoded part by part ("/" kept). */
char *
s3_object_url(const S3Location *loc, const char *key)
{
	StringInfoData url;
	const char *part = key;

	initStringInfo(&url);
	(void) bucket_url(&url, loc);
	appendStringInfoChar(&url, '/');
	for (;;)
	{
		const char *slash = strchr(part, '/');
		char	   *seg = slash ? pnstrdup(part, slash - part) : pstrdup(part);

		appendStringInfoString(&url, http_uri_encode(seg));
		if (slash == NULL)
			break;
		appendStringInfoChar(&url, '/');
		part = slash + 1;
	}
	return url.data;
}
