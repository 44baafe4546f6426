/*
 * azure_request.c
 *     What Azure Blob Storage requests are made of, apart from objstore.c
 *     (the loop every remote store's requests go through): the URLs of a
 *     List Blobs page and of a blob, and each request's authorization: a
 *     Shared Key signature (HMAC-SHA256 with the account key over
 *     azure_sign.c's string), a SAS token appended to the URL, or an Entra
 *     ID bearer token (azure_token.c). Every request names the pinned
 *     service version (x-ms-version) and its date (x-ms-date).
 */
#include "postgres.h"

#include <time.h>

#include "common/base64.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"

#include "core/pg_compat.h"
#include "store/azure_request.h"
#include "store/azure_sign.h"
#include "store/azure_token.h"
#include "store/s3_request.h"

/* Appends the SAS token, when that is the authorization, as the last query parameters. */
static void
append_sas(StringInfo url, const AzureLocation *az, bool has_query)
{
	if (az->auth == AZURE_SAS)
		appendStringInfo(url, "%c%s", has_query ? '&' : '?', az->sas_token);
}

/*
 * The URL of one List Blobs page: flat (no delimiter), with each blob's
 * metadata (a hierarchical namespace marks its directories there), from
 * marker (NULL: the first page).
 */
char *
azure_list_url(const AzureLocation *az, const char *prefix, const char *marker)
{
	StringInfoData url;

	initStringInfo(&url);
	appendStringInfo(&url, "%s/%s?restype=container&comp=list&include=metadata&maxresults=%d&prefix=%s",
					 az->endpoint, http_uri_encode(az->container), az->page_size, http_uri_encode(prefix));
	if (marker != NULL)
		appendStringInfo(&url, "&marker=%s", http_uri_encode(marker));
	append_sas(&url, az, true);
	return url.data;
}

/* The URL of one blob: its name percent-encoded part by part ("/" kept). */
char *
azure_object_url(const AzureLocation *az, const char *key)
{
	StringInfoData url;

	initStringInfo(&url);
	appendStringInfo(&url, "%s/%s/", az->endpoint, http_uri_encode(az->container));
	store_url_key(&url, key);
	append_sas(&url, az, false);
	return url.data;
}

/* The time now as HTTP writes it (RFC 1123, GMT), in English whatever the locale. */
static char *
http_date(void)
{
	static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
	static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep",
	"Oct", "Nov", "Dec"};
	time_t		now = time(NULL);
	struct tm	tm;

	gmtime_r(&now, &tm);
	return psprintf("%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon],
					tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/*
 * The Shared Key signature of a string: base64 of its HMAC-SHA256 with the
 * account key (itself base64). NULL with err set when the key is not
 * base64 or the hash fails.
 */
static char *
shared_key_signature(const AzureLocation *az, const char *to_sign, StoreError *err)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			klen = strlen(az->account_key);
	compat_b64_byte *key = palloc(pg_b64_dec_len(klen) + 1);
	uint8		mac[PG_SHA256_DIGEST_LENGTH];
	char	   *out = palloc(pg_b64_enc_len(PG_SHA256_DIGEST_LENGTH) + 1);
	int			n = pg_b64_decode(az->account_key, klen, key, pg_b64_dec_len(klen));
	bool		own;
	pg_hmac_ctx *ctx;
	bool		ok = false;

	if (n <= 0)
	{
		store_set_error(err, 0, "InvalidCredentials", "the account_key of the user mapping is not base64");
		return NULL;
	}
	own = store_crypto_begin();
	ctx = pg_hmac_create(PG_SHA256);
	if (ctx != NULL)
	{
		ok = pg_hmac_init(ctx, (const uint8 *) key, n) == 0 &&
			pg_hmac_update(ctx, (const uint8 *) to_sign, strlen(to_sign)) == 0 &&
			pg_hmac_final(ctx, mac, sizeof(mac)) == 0;
		pg_hmac_free(ctx);
	}
	store_crypto_end(own, cxt);
	n = ok ? pg_b64_encode((const compat_b64_byte *) mac, sizeof(mac), out, pg_b64_enc_len(sizeof(mac))) : -1;
	if (n < 0)
	{
		store_set_error(err, 0, "OutOfMemory", "could not compute the Shared Key signature");
		return NULL;
	}
	out[n] = '\0';
	return out;
}

/*
 * Sets a request's headers for Azure, its URL and method set: the service
 * version, the date, a PUT's blob type and content type, and the
 * authorization (a SAS token is in the URL already). False with err set
 * when no authorization could be made (an account key that is not base64,
 * a token the endpoint refused).
 */
bool
azure_authorize(const RemoteStore *rs, HttpClient *client, HttpRequest *req, const char *content_type,
				StoreError *err)
{
	const AzureLocation *az = &rs->az;
	bool		put = strcmp(req->method, "PUT") == 0;
	AzurePair	ms[3] = {{"x-ms-date", http_date()}, {"x-ms-version", AZURE_VERSION}, {"x-ms-blob-type", "BlockBlob"}};
	int			nms = put ? 3 : 2;

	req->headers = NIL;
	for (int i = 0; i < nms; i++)
		req->headers = lappend(req->headers, psprintf("%s: %s", ms[i].name, ms[i].value));
	if (put)
		req->headers = lappend(req->headers, psprintf("Content-Type: %s", content_type));
	if (az->auth == AZURE_SHARED_KEY)
	{
		AzureSignInput in = {req->method, az->account, req->url, put ? (long) req->body_len : 0,
		put ? content_type : NULL, ms, nms};
		char	   *to_sign = palloc(AZURE_SIGN_MAX);
		char	   *sig;

		if (!azure_string_to_sign(&in, to_sign, AZURE_SIGN_MAX))
		{
			store_set_error(err, 0, "RequestTooLong", "the request is too long to be signed (a prefix or marker "
							"of some kilobytes)");
			return false;
		}
		if ((sig = shared_key_signature(az, to_sign, err)) == NULL)
			return false;
		req->headers = lappend(req->headers, psprintf("Authorization: SharedKey %s:%s", az->account, sig));
	}
	else if (az->auth == AZURE_OAUTH)
	{
		const char *token = azure_bearer_token(rs, client, err);

		if (token == NULL)
			return false;
		req->headers = lappend(req->headers, psprintf("Authorization: Bearer %s", token));
	}
	return true;
}
