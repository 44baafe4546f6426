/*
 * objstore.c
 *     The remote stores' requests, one loop for S3 and Azure Blob Storage:
 *     a listing's pages followed through their continuation (S3's
 *     continuation tokens, Azure's markers), GET of an object (to a file,
 *     or whole when small) and PUT, over core/http.c (the one file that
 *     calls the HTTP library). What differs per store is its URLs and its
 *     authorization (s3_request.c, azure_request.c) and its answers' XML
 *     (store_xml.c).
 *
 * S3 requests are signed by http.c (SigV4, HttpRequest.aws_sigv4). Its
 * library (7.88) signs the query string exactly as written, so URLs are
 * built in SigV4's canonical form (s3_request.c), and x-amz-content-sha256
 * is sent explicitly (a PUT's: the SHA-256 of its body). Azure requests
 * are authorized here, each one anew (azure_authorize: its date is signed).
 *
 * Nothing here raises for a failed listing: http.c reports a transfer's
 * failure (a cancel included) in its result, mapped here to StoreError
 * codes, and the caller raises. A listing ends: a continuation seen
 * before, or more pages than the location allows, is an error rather than
 * a loop. The client is released even when an error is raised between
 * requests (PG_FINALLY), so no socket outlives the statement. Each page
 * goes to the listing's sink as soon as it is read, and its memory (the
 * answer, the XML tree, the keys) is freed before the next request: a
 * listing of ten million keys holds one page at a time.
 */
#include "postgres.h"

#include <unistd.h>

#include "common/hashfn.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "core/http.h"
#include "core/io_interrupts.h"
#include "store/azure_request.h"
#include "store/azure_token.h"
#include "store/objstore.h"
#include "store/s3_request.h"
#include "store/store_xml.h"

/* SHA-256 of an empty body: a GET's x-amz-content-sha256. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* One page of a listing is about 250 kB for 1000 keys; refuse absurd ones. */
#define MAX_RESPONSE_BYTES (64 * 1024 * 1024)

/* A continuation token seen in this listing, by its hash. */
typedef struct SeenToken
{
	uint64		hash;			/* hash key */
	char	   *token;
} SeenToken;

/*
 * Remembers a continuation token; false when the listing already gave it
 * (a store that repeats a token would list the same pages for ever).
 */
static bool
remember_token(HTAB *seen, const char *token)
{
	uint64		hash = hash_bytes_extended((const unsigned char *) token, strlen(token), 0);
	bool		found;
	SeenToken  *entry = hash_search(seen, &hash, HASH_ENTER, &found);

	if (found && strcmp(entry->token, token) == 0)
		return false;
	entry->token = pstrdup(token);
	return true;
}

/*
 * Sets err for a request that got no HTTP answer (r->failure), in the codes
 * the gate's hints and tests know: the one mapping of a listing's pages and
 * an object's GET. reading says what was read ("reading the object").
 */
static void
transfer_error(const HttpResponse *r, const char *reading, StoreError *err)
{
	switch (r->failure)
	{
		case HTTP_OK:
			break;				/* an answer: store_xml_error's, by its status */
		case HTTP_INTERRUPTED:
			store_set_error(err, 0, "Interrupted", psprintf("%s was interrupted", reading));
			break;
		case HTTP_TOO_LARGE:
			store_set_error(err, r->status, "ResponseTooLarge", psprintf("%s: %s", reading, r->error));
			break;
		case HTTP_NO_MEMORY:
			store_set_error(err, r->status, "OutOfMemory", psprintf("%s: %s", reading, r->error));
			break;
		case HTTP_WRITE_FAILED:
			store_set_error(err, 0, "WriteFailed", r->error);
			break;
		case HTTP_TIMEOUT:
			store_set_error(err, 0, "Timeout", r->error);
			break;
		case HTTP_CONNECT_FAILED:
			store_set_error(err, 0, "ConnectionFailed", r->error);
			break;
		case HTTP_BAD_HEADER:
			/* credentials_safe() and the validators come first. */
			store_set_error(err, 0, "InvalidCredentials", r->error);
			break;
		case HTTP_BAD_CA_FILE:
			store_set_error(err, 0, "InvalidCaFile", r->error);
			break;
		case HTTP_INIT_FAILED:
			store_set_error(err, 0, "CurlInitFailed", r->error);
			break;
	}
}

/*
 * Whether the credentials can go into headers or URLs: the validators
 * refuse control characters, but a header must never be split by a value,
 * whatever the catalog holds.
 */
static bool
credentials_safe(const RemoteStore *rs, StoreError *err)
{
	const char *values[] = {rs->s3.access_key, rs->s3.secret_key, rs->s3.session_token, rs->az.account_key,
	rs->az.sas_token, rs->az.client_id, rs->az.client_secret};

	for (int i = 0; i < lengthof(values); i++)
		if (values[i] != NULL && !http_header_safe(values[i]))
		{
			store_set_error(err, 0, "InvalidCredentials",
							"a key, token or secret of the user mapping contains a control character (CR, LF, ...)");
			return false;
		}
	return true;
}

/*
 * What every request to the store shares: a GET with the caller's keys
 * (for S3: signed by http.c; Azure's are authorized per request), the
 * timeouts, the trusted CAs and the page limit; the URL is set per request.
 */
static void
base_request(const RemoteStore *rs, HttpRequest *req)
{
	memset(req, 0, sizeof(*req));
	req->wait = FINALIZE_WAIT_STORE_REQUEST;
	req->method = "GET";
	req->connect_timeout_ms = rs->connect_timeout_ms;
	req->timeout_ms = rs->timeout_ms;
	req->max_response_bytes = MAX_RESPONSE_BYTES;
	req->ca_file = rs->ca_file;
	if (rs->azure)
		return;
	req->headers = list_make1("x-amz-content-sha256: " EMPTY_SHA256);
	if (rs->s3.session_token != NULL)
		req->headers = lappend(req->headers, psprintf("x-amz-security-token: %s", rs->s3.session_token));
	req->aws_sigv4 = psprintf("aws:amz:%s:s3", rs->s3.region);
	req->username = rs->s3.access_key;
	req->password = rs->s3.secret_key;
}

/*
 * Sends one request (its URL, method and body set), authorized for the
 * store; false with err set when no authorization could be made, r then
 * untouched.
 */
static bool
perform(const RemoteStore *rs, HttpClient *client, HttpRequest *req, const char *content_type,
		HttpResponse *r, StoreError *err)
{
	if (rs->azure && !azure_authorize(rs, client, req, content_type, err))
		return false;
	http_perform(client, req, r);
	/* A bearer token Azure refuses is not sent again: the next request asks for a new one. */
	if (rs->azure && rs->az.auth == AZURE_OAUTH && r->failure == HTTP_OK && (r->status == 401 || r->status == 403))
		azure_forget_token(rs);
	return true;
}

/* Reads a page of the store's listing; see store_xml.c. */
static bool
read_page(const RemoteStore *rs, const HttpResponse *r, Inventory *out, bool *more, char **token,
		  StoreError *err)
{
	if (!rs->azure)
		return store_xml_s3_page(r->body, r->len, out, more, token, err);
	if (!store_xml_azure_page(r->body, r->len, out, token, err))
		return false;
	*more = *token != NULL && (*token)[0] != '\0';
	return true;
}

/*
 * Requests one page and reads it into out; false with err set when the
 * transfer failed or the store refused, in the codes the gate's hints and
 * tests know.
 */
static bool
fetch_page(const RemoteStore *rs, HttpClient *client, HttpRequest *req, Inventory *out, bool *more,
		   char **token, StoreError *err)
{
	HttpResponse r = {0};
	bool		ok = false;

	if (!perform(rs, client, req, NULL, &r, err))
		return false;
	if (r.failure != HTTP_OK)
		transfer_error(&r, "reading one page of the listing", err);
	else if (r.status != 200)
		store_xml_error(r.body, r.len, r.status, err);
	else
		ok = read_page(rs, &r, out, more, token, err);
	/* A listing of many pages must not keep them all. */
	pfree(r.body);
	if (r.retry_after != NULL)
		pfree(r.retry_after);
	return ok;
}

/*
 * Whether the listing may ask for the page after this one: a store that
 * repeats a continuation token, or a listing longer than the location
 * allows, would otherwise be followed for ever.
 */
static bool
may_continue(HTAB *seen, const char *token, int *pages, int max_pages, StoreError *err)
{
	if (!remember_token(seen, token))
	{
		store_set_error(err, 0, "RepeatedContinuationToken",
						psprintf("page %d of the listing repeats an earlier continuation token, so the listing "
								 "would never end", *pages + 1));
		return false;
	}
	if (++*pages >= max_pages)
	{
		store_set_error(err, 0, "TooManyPages",
						psprintf("the listing takes more than finalize.s3_max_pages (%d) pages", max_pages));
		return false;
	}
	return true;
}

/*
 * Follows the listing's pages through their continuation tokens, into the
 * sink; false with err set at the first failure.
 */
static bool
list_pages(HttpClient *client, const RemoteStore *rs, const char *prefix, ListingSink *sink, StoreError *err)
{
	HttpRequest req;
	char	   *token = NULL;
	bool		more = true;
	bool		ok = true;
	int			pages = 0;
	HASHCTL		ctl;
	HTAB	   *seen;
	MemoryContext page_cxt = AllocSetContextCreate(CurrentMemoryContext, "finalize listing page",
												   ALLOCSET_DEFAULT_SIZES);

	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(SeenToken);
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("finalize listing tokens", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	base_request(rs, &req);
	while (ok && more)
	{
		Inventory	page = {0};
		MemoryContext old;
		char	   *prev = token;

		old = MemoryContextSwitchTo(page_cxt);
		req.url = rs->azure ? azure_list_url(&rs->az, prefix, token) : s3_list_url(&rs->s3, prefix, token);
		ok = fetch_page(rs, client, &req, &page, &more, &token, err);
		MemoryContextSwitchTo(old);
		/* The token outlives the page's memory: it names the next page. */
		token = token ? pstrdup(token) : NULL;
		if (prev != NULL)
			pfree(prev);
		if (ok)
			sink->consume(sink, &page);
		MemoryContextReset(page_cxt);
		if (ok && more)
			ok = may_continue(seen, token, &pages, rs->max_pages, err);
	}
	MemoryContextDelete(page_cxt);
	return ok;
}

/*
 * What every request to the store starts with: err cleared, interrupts
 * watched, the keys checked, a client made. NULL with err set when one of
 * them fails.
 */
static HttpClient *
open_client(const RemoteStore *rs, StoreError *err)
{
	HttpClient *client;
	HttpResponse init;

	memset(err, 0, sizeof(*err));
	io_interrupts_begin();
	if (!credentials_safe(rs, err))
		return NULL;
	client = http_client_create(CurrentMemoryContext, &init);
	if (client == NULL)
		store_set_error(err, 0, "CurlInitFailed", init.error);
	return client;
}

/*
 * Lists every object whose key starts with prefix into sink, a page at a
 * time. Returns false with err set when the store answers with an error,
 * cannot be reached, times out, or sends something that is not a listing;
 * the caller raises (after checking for interrupts, which also abort a
 * transfer).
 */
bool
objstore_list(const RemoteStore *rs, const char *prefix, ListingSink *sink, StoreError *err)
{
	HttpClient *client;
	volatile bool ok = true;

	client = open_client(rs, err);
	if (client == NULL)
		return false;
	/* The connection is released at once, even when an error is raised. */
	PG_TRY();
	{
		ok = list_pages(client, rs, prefix, sink, err);
	}
	PG_FINALLY();
	{
		http_client_destroy(client);
	}
	PG_END_TRY();
	return ok;
}

/*
 * Sends one request about an object (req set up by base_request, its URL
 * and what differs set by the caller) on a client of its own, released at
 * once even when an error is raised; *r is the answer. False with err set
 * when the client could not be made or the request authorized.
 */
static bool
object_request(const RemoteStore *rs, HttpRequest *req, const char *content_type, HttpResponse *r,
			   StoreError *err)
{
	HttpClient *client = open_client(rs, err);
	volatile bool ok = false;

	if (client == NULL)
		return false;
	PG_TRY();
	{
		ok = perform(rs, client, req, content_type, r, err);
	}
	PG_FINALLY();
	{
		http_client_destroy(client);
	}
	PG_END_TRY();
	return ok;
}

/* The URL of the object at key. */
static char *
object_url(const RemoteStore *rs, const char *key)
{
	return rs->azure ? azure_object_url(&rs->az, key) : s3_object_url(&rs->s3, key);
}

/*
 * Reads the store's error document of a failed GET back from the start of
 * the file its body went to (at most 64 kB: an error document is small).
 */
static void
read_error_from_fd(int fd, long status, StoreError *err)
{
	char	   *buf = palloc(65537);
	ssize_t		n = pread(fd, buf, 65536, 0);

	store_xml_error(buf, n > 0 ? n : 0, status, err);
	pfree(buf);
}

/*
 * Gets one object (a manifest's files_location) with the caller's keys,
 * its body written to fd as it arrives, so an object of any size is never
 * held in memory; a body longer than max_bytes stops the transfer
 * (ResponseTooLarge), since writes to fd escape temp_file_limit. Returns
 * false with err set as objstore_list does; the caller raises, and reads
 * fd back.
 */
bool
objstore_get(const RemoteStore *rs, const char *key, int fd, size_t max_bytes, StoreError *err)
{
	HttpRequest req;
	HttpResponse r;

	base_request(rs, &req);
	req.url = object_url(rs, key);
	req.max_response_bytes = max_bytes;
	req.body_to_fd = true;
	req.body_fd = fd;
	if (!object_request(rs, &req, NULL, &r, err))
		return false;
	if (r.failure != HTTP_OK)
		transfer_error(&r, "reading the object", err);
	else if (r.status != 200)
		read_error_from_fd(fd, r.status, err);
	return r.failure == HTTP_OK && r.status == 200;
}

/*
 * Reads one small object whole into *body (palloc'd, NUL-terminated, *len
 * bytes), with the caller's keys: a publication's marker. *found is false,
 * and the result true, when the store has no object at key (404 NoSuchKey,
 * BlobNotFound). A body longer than max_bytes is ResponseTooLarge. False
 * with err set, in the store's words, on any other answer or failure.
 */
bool
objstore_read(const RemoteStore *rs, const char *key, size_t max_bytes, char **body, size_t *len,
			  bool *found, StoreError *err)
{
	HttpRequest req;
	HttpResponse r;

	*found = false;
	*body = NULL;
	*len = 0;
	base_request(rs, &req);
	req.url = object_url(rs, key);
	req.max_response_bytes = max_bytes;
	if (!object_request(rs, &req, NULL, &r, err))
		return false;
	if (r.failure != HTTP_OK)
	{
		transfer_error(&r, "reading the object", err);
		return false;
	}
	if (r.status == 200)
	{
		*found = true;
		*body = r.body;
		*len = r.len;
		return true;
	}
	store_xml_error(r.body, r.len, r.status, err);
	/* Only a missing key is an answer; a missing bucket or container is the server's error. */
	return r.status == 404 && (strcmp(err->code, "NoSuchKey") == 0 || strcmp(err->code, "BlobNotFound") == 0);
}

/*
 * Writes one object whole (creates it, or replaces it: an S3 PUT and an
 * Azure Put Blob are atomic, a reader sees the old object or the new one)
 * with the caller's keys, S3's payload signed. False with err set as
 * objstore_read does.
 */
bool
objstore_put(const RemoteStore *rs, const char *key, const char *body, size_t len, const char *content_type,
			 StoreError *err)
{
	HttpRequest req;
	HttpResponse r;
	char		sha[2 * PG_SHA256_DIGEST_LENGTH + 1];

	memset(err, 0, sizeof(*err));
	base_request(rs, &req);
	req.method = "PUT";
	req.url = object_url(rs, key);
	req.body = body;
	req.body_len = len;
	if (!rs->azure)
	{
		if (!s3_payload_sha256(body, len, sha))
		{
			store_set_error(err, 0, "OutOfMemory", "could not compute the SHA-256 of the object's body");
			return false;
		}
		/* The payload's hash replaces the empty body's, first in the list. */
		linitial(req.headers) = psprintf("x-amz-content-sha256: %s", sha);
		req.headers = lappend(req.headers, psprintf("Content-Type: %s", content_type));
	}
	/* An answer to a PUT is an error document at most. */
	req.max_response_bytes = 65536;
	if (!object_request(rs, &req, content_type, &r, err))
		return false;
	if (r.failure != HTTP_OK)
		transfer_error(&r, "writing the object", err);
	else if (r.status != 200 && r.status != 201)
		store_xml_error(r.body, r.len, r.status, err);
	return r.failure == HTTP_OK && (r.status == 200 || r.status == 201);
}
