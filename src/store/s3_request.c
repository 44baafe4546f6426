/*
 * s3_request.c
 *     What S3 requests are made of, apart from objstore.c (the one file
 *     that reads S3's XML answers) since it needs no libxml2: the URLs (a
 *     bucket's address in path or virtual-hosted style, a ListObjectsV2
 *     page, an object) and the SHA-256 of a payload that SigV4 signs.
 *
 * libcurl (7.88) signs the query string exactly as written, so it is built
 * here already in SigV4's canonical form (parameters sorted, every byte
 * outside A-Z a-z 0-9 - _ . ~ percent-encoded).
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"

#include "core/http.h"
#include "store/s3_request.h"

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

	initStringInfo(&url);
	(void) bucket_url(&url, loc);
	appendStringInfoChar(&url, '/');
	store_url_key(&url, key);
	return url.data;
}

/* Appends a key to a URL, percent-encoded part by part ("/" kept): S3's and Azure's. */
void
store_url_key(StringInfo url, const char *key)
{
	const char *part = key;

	for (;;)
	{
		const char *slash = strchr(part, '/');
		char	   *seg = slash ? pnstrdup(part, slash - part) : pstrdup(part);

		appendStringInfoString(url, http_uri_encode(seg));
		if (slash == NULL)
			break;
		appendStringInfoChar(url, '/');
		part = slash + 1;
	}
}

/*
 * Opens a short transaction when none is open, for PostgreSQL's hashes
 * (SHA-256, HMAC), which keep their OpenSSL context in the transaction's
 * resource owner: a caller with no transaction open (the delivery of a
 * publication) gets one. Whether it did, for store_crypto_end.
 */
bool
store_crypto_begin(void)
{
	MemoryContext cxt = CurrentMemoryContext;

	if (IsTransactionState())
		return false;
	StartTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return true;
}

/* Ends store_crypto_begin's transaction, if it opened one, back in cxt. */
void
store_crypto_end(bool own, MemoryContext cxt)
{
	if (own)
	{
		CommitTransactionCommand();
		MemoryContextSwitchTo(cxt);
	}
}

/*
 * The lower-case hex SHA-256 of a body (x-amz-content-sha256) into hex
 * (65 bytes); false when it cannot be computed. PostgreSQL's hash keeps
 * its OpenSSL context in the transaction's resource owner, so a caller
 * with no transaction open (the delivery of a publication) gets a short
 * one for it.
 */
bool
s3_payload_sha256(const char *body, size_t len, char *hex)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		own = store_crypto_begin();
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	bool		ok = false;

	ctx = pg_cryptohash_create(PG_SHA256);
	if (ctx != NULL)
	{
		ok = pg_cryptohash_init(ctx) == 0 && pg_cryptohash_update(ctx, (const uint8 *) body, len) == 0 &&
			pg_cryptohash_final(ctx, digest, sizeof(digest)) == 0;
		pg_cryptohash_free(ctx);
	}
	store_crypto_end(own, cxt);
	for (int i = 0; ok && i < PG_SHA256_DIGEST_LENGTH; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	return ok;
}
