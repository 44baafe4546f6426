/*
 * objstore.c
 *     The one interface to object stores: S3 ListObjectsV2, GET and PUT of
 *     an object over core/http.c (the one file that calls the HTTP
 *     library), answers parsed with libxml2.
 *
 * Requests are signed by http.c (SigV4, HttpRequest.aws_sigv4). Its library
 * (7.88) signs the query string exactly as written, so URLs are built in
 * SigV4's canonical form (s3_request.c), and x-amz-content-sha256 is sent
 * explicitly (a PUT's: the SHA-256 of its body). Pages are followed through
 * continuation tokens, on one connection.
 *
 * Nothing here raises for a failed listing: http.c reports a transfer's
 * failure (a cancel included) in its result, mapped here to StoreError codes,
 * and the caller raises. A listing ends: a continuation token seen before,
 * or more pages than the location allows, is an error rather than a loop.
 * The client is released even when an error is raised between requests
 * (PG_FINALLY), so no socket outlives the statement. Each page goes to the
 * listing's sink as soon as it is read, and its memory (the answer, the XML
 * tree, the keys) is freed before the next request: a listing of ten
 * million keys holds one page at a time.
 */
#include "postgres.h"

#include <unistd.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "common/hashfn.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "core/http.h"
#include "core/io_interrupts.h"
#include "store/objstore.h"
#include "store/s3_request.h"

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

/* Sets an error's fields. */
static void
set_error(StoreError *err, long status, const char *code, const char *message)
{
	err->http_status = status;
	strlcpy(err->code, code ? code : "", sizeof(err->code));
	strlcpy(err->message, message ? message : "", sizeof(err->message));
}

/* The text of an element's first child with a local name, or NULL. */
static char *
child_text(xmlNodePtr parent, const char *name)
{
	for (xmlNodePtr c = parent->children; c; c = c->next)
		if (c->type == XML_ELEMENT_NODE && strcmp((const char *) c->name, name) == 0)
		{
			xmlChar    *t = xmlNodeGetContent(c);
			char	   *s = pstrdup(t ? (const char *) t : "");

			xmlFree(t);
			return s;
		}
	return NULL;
}

/*
 * Parses an XML body; NULL when it is not XML, or declares a document type.
 * S3 never sends a DTD, and one's entities are expanded each time a text is
 * read (xmlNodeGetContent): a 95 kB page whose key refers 15,000 times to
 * an entity of 50 kB read as 750 MB, and a 64 MB page could take the
 * server's memory.
 */
static xmlDocPtr
parse_xml(const HttpResponse *r)
{
	xmlDocPtr	doc = xmlReadMemory(r->body ? r->body : "", (int) r->len, "s3.xml", NULL,
									XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOBLANKS);

	if (doc != NULL && (doc->intSubset != NULL || doc->extSubset != NULL))
	{
		xmlFreeDoc(doc);
		return NULL;
	}
	return doc;
}

/* Reads S3's <Error><Code/><Message/></Error> of a failed request. */
static void
read_error(const HttpResponse *r, long status, StoreError *err)
{
	xmlDocPtr	doc = parse_xml(r);
	xmlNodePtr	root = doc ? xmlDocGetRootElement(doc) : NULL;

	if (root != NULL && strcmp((const char *) root->name, "Error") == 0)
	{
		char	   *code = child_text(root, "Code");
		char	   *message = child_text(root, "Message");

		set_error(err, status, code ? code : "UnknownError", message ? message : "");
	}
	else
		set_error(err, status, status >= 500 ? "ServerError" : "HttpError",
				  psprintf("HTTP status %ld without an S3 error document", status));
	if (doc)
		xmlFreeDoc(doc);
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
			break;				/* an answer: read_error's, by its status */
		case HTTP_INTERRUPTED:
			set_error(err, 0, "Interrupted", psprintf("%s was interrupted", reading));
			break;
		case HTTP_TOO_LARGE:
			set_error(err, r->status, "ResponseTooLarge", psprintf("%s: %s", reading, r->error));
			break;
		case HTTP_NO_MEMORY:
			set_error(err, r->status, "OutOfMemory", psprintf("%s: %s", reading, r->error));
			break;
		case HTTP_WRITE_FAILED:
			set_error(err, 0, "WriteFailed", r->error);
			break;
		case HTTP_TIMEOUT:
			set_error(err, 0, "Timeout", r->error);
			break;
		case HTTP_CONNECT_FAILED:
			set_error(err, 0, "ConnectionFailed", r->error);
			break;
		case HTTP_BAD_HEADER:
			/* credentials_safe() and the region's validator come first. */
			set_error(err, 0, "InvalidCredentials", r->error);
			break;
		case HTTP_INIT_FAILED:
			set_error(err, 0, "CurlInitFailed", r->error);
			break;
	}
}

/*
 * Reads one page of a ListObjectsV2 answer into out. Returns false with err
 * set on a malformed document; sets *truncated and *next_token.
 */
static bool
read_page(const HttpResponse *r, Inventory *out, bool *truncated, char **next_token, StoreError *err)
{
	xmlDocPtr	doc = parse_xml(r);
	xmlNodePtr	root = doc ? xmlDocGetRootElement(doc) : NULL;
	char	   *t;

	if (root == NULL || strcmp((const char *) root->name, "ListBucketResult") != 0)
	{
		set_error(err, 200, "MalformedResponse",
				  doc ? "the answer is XML but not a ListBucketResult" :
				  "the answer is not well-formed XML, or declares a document type (S3 sends none)");
		if (doc)
			xmlFreeDoc(doc);
		return false;
	}
	for (xmlNodePtr c = root->children; c; c = c->next)
	{
		char	   *key;
		char	   *size;
		char	   *end;
		long long	n;

		if (c->type != XML_ELEMENT_NODE || strcmp((const char *) c->name, "Contents") != 0)
			continue;
		key = child_text(c, "Key");
		size = child_text(c, "Size");
		if (key == NULL || size == NULL)
		{
			set_error(err, 200, "MalformedResponse", "a <Contents> element lacks its <Key> or <Size>");
			xmlFreeDoc(doc);
			return false;
		}
		errno = 0;
		n = strtoll(size, &end, 10);
		if (errno != 0 || *end != '\0' || n < 0)
		{
			set_error(err, 200, "MalformedResponse", psprintf("object \"%s\" has the size \"%s\"", key, size));
			xmlFreeDoc(doc);
			return false;
		}
		inventory_add(out, key, (int64) n, child_text(c, "ETag"));
	}
	t = child_text(root, "IsTruncated");
	*truncated = t != NULL && strcmp(t, "true") == 0;
	*next_token = child_text(root, "NextContinuationToken");
	xmlFreeDoc(doc);
	if (*truncated && (*next_token == NULL || (*next_token)[0] == '\0'))
	{
		set_error(err, 200, "MalformedResponse", "a truncated listing without a NextContinuationToken");
		return false;
	}
	return true;
}

/*
 * Whether the keys can go into headers: the validator refuses control
 * characters, but a header must never be split by a value, whatever the
 * catalog holds.
 */
static bool
credentials_safe(const S3Location *loc, StoreError *err)
{
	if (!http_header_safe(loc->access_key) || !http_header_safe(loc->secret_key) ||
		(loc->session_token != NULL && !http_header_safe(loc->session_token)))
	{
		set_error(err, 0, "InvalidCredentials",
				  "a key or the session token of the user mapping contains a control character (CR, LF, ...)");
		return false;
	}
	return true;
}

/*
 * What every request of a listing shares: a signed GET with the caller's
 * keys, its headers, the timeouts and the page limit; the URL is set per
 * page.
 */
static void
list_request(const S3Location *loc, HttpRequest *req)
{
	memset(req, 0, sizeof(*req));
	req->wait = FINALIZE_WAIT_STORE_REQUEST;
	req->method = "GET";
	req->headers = list_make1("x-amz-content-sha256: " EMPTY_SHA256);
	if (loc->session_token != NULL)
		req->headers = lappend(req->headers, psprintf("x-amz-security-token: %s", loc->session_token));
	req->connect_timeout_ms = loc->connect_timeout_ms;
	req->timeout_ms = loc->timeout_ms;
	req->aws_sigv4 = psprintf("aws:amz:%s:s3", loc->region);
	req->username = loc->access_key;
	req->password = loc->secret_key;
	req->max_response_bytes = MAX_RESPONSE_BYTES;
}

/*
 * Requests one page and reads it into out; false with err set when the
 * transfer failed or the store refused, in the codes the gate's hints and
 * tests know.
 */
static bool
fetch_page(HttpClient *client, const HttpRequest *req, Inventory *out, bool *truncated, char **token,
		   StoreError *err)
{
	HttpResponse r;
	bool		ok = false;

	http_perform(client, req, &r);
	if (r.failure != HTTP_OK)
		transfer_error(&r, "reading one page of the listing", err);
	else if (r.status != 200)
		read_error(&r, r.status, err);
	else
		ok = read_page(&r, out, truncated, token, err);
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
		set_error(err, 0, "RepeatedContinuationToken",
				  psprintf("page %d of the listing repeats an earlier continuation token, so the listing "
						   "would never end", *pages + 1));
		return false;
	}
	if (++*pages >= max_pages)
	{
		set_error(err, 0, "TooManyPages",
				  psprintf("the listing takes more than finalize.s3_max_pages (%d) pages", max_pages));
		return false;
	}
	return true;
}

/*
 * Follows the listing's pages through their continuation tokens, into out;
 * false with err set at the first failure.
 */
static bool
list_pages(HttpClient *client, const S3Location *loc, const char *prefix, ListingSink *sink, StoreError *err)
{
	HttpRequest req;
	char	   *token = NULL;
	bool		truncated = true;
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
	list_request(loc, &req);
	while (ok && truncated)
	{
		char	   *url = s3_list_url(loc, prefix, token);
		Inventory	page = {0};
		MemoryContext old;
		char	   *prev = token;

		req.url = url;
		old = MemoryContextSwitchTo(page_cxt);
		ok = fetch_page(client, &req, &page, &truncated, &token, err);
		MemoryContextSwitchTo(old);
		pfree(url);
		/* The token outlives the page's memory: it names the next page. */
		token = token ? pstrdup(token) : NULL;
		if (prev != NULL)
			pfree(prev);
		if (ok)
			sink->consume(sink, &page);
		MemoryContextReset(page_cxt);
		if (ok && truncated)
			ok = may_continue(seen, token, &pages, loc->max_pages, err);
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
open_client(const S3Location *loc, StoreError *err)
{
	HttpClient *client;
	HttpResponse init;

	memset(err, 0, sizeof(*err));
	io_interrupts_begin();
	if (!credentials_safe(loc, err))
		return NULL;
	client = http_client_create(CurrentMemoryContext, &init);
	if (client == NULL)
		set_error(err, 0, "CurlInitFailed", init.error);
	return client;
}

/*
 * Lists every object whose key starts with prefix into sink, a page at a
 * time. Returns false with err
 * set when the store answers with an error, cannot be reached, times out,
 * or sends something that is not a listing; the caller raises (after
 * checking for interrupts, which also abort a transfer).
 */
bool
objstore_list(const S3Location *loc, const char *prefix, ListingSink *sink, StoreError *err)
{
	HttpClient *client;
	volatile bool ok = true;

	client = open_client(loc, err);
	if (client == NULL)
		return false;
	/* The connection is released at once, even when an error is raised. */
	PG_TRY();
	{
		ok = list_pages(client, loc, prefix, sink, err);
	}
	PG_FINALLY();
	{
		http_client_destroy(client);
	}
	PG_END_TRY();
	return ok;
}

/*
 * Sends one request about an object (req set up by list_request, its URL
 * and what differs set by the caller) on a client of its own, released at
 * once even when an error is raised; *r is the answer. False with err set
 * when the client could not be made.
 */
static bool
object_request(const S3Location *loc, HttpRequest *req, HttpResponse *r, StoreError *err)
{
	HttpClient *client = open_client(loc, err);

	if (client == NULL)
		return false;
	PG_TRY();
	{
		http_perform(client, req, r);
	}
	PG_FINALLY();
	{
		http_client_destroy(client);
	}
	PG_END_TRY();
	return true;
}

/*
 * Reads S3's error document of a failed GET back from the start of the
 * file its body went to (at most 64 kB: an error document is small).
 */
static void
read_error_from_fd(int fd, long status, StoreError *err)
{
	HttpResponse r = {0};
	char	   *buf = palloc(65537);
	ssize_t		n = pread(fd, buf, 65536, 0);

	r.body = buf;
	r.len = n > 0 ? n : 0;
	buf[r.len] = '\0';
	read_error(&r, status, err);
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
objstore_get(const S3Location *loc, const char *key, int fd, size_t max_bytes, StoreError *err)
{
	HttpRequest req;
	HttpResponse r;

	list_request(loc, &req);
	req.url = s3_object_url(loc, key);
	req.max_response_bytes = max_bytes;
	req.body_to_fd = true;
	req.body_fd = fd;
	if (!object_request(loc, &req, &r, err))
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
 * and the result true, when the store has no object at key (404
 * NoSuchKey). A body longer than max_bytes is ResponseTooLarge. False with
 * err set, in S3's words, on any other answer or failure.
 */
bool
objstore_read(const S3Location *loc, const char *key, size_t max_bytes, char **body, size_t *len,
			  bool *found, StoreError *err)
{
	HttpRequest req;
	HttpResponse r;

	*found = false;
	*body = NULL;
	*len = 0;
	list_request(loc, &req);
	req.url = s3_object_url(loc, key);
	req.max_response_bytes = max_bytes;
	if (!object_request(loc, &req, &r, err))
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
	read_error(&r, r.status, err);
	/* Only a missing key is an answer; a missing bucket is the server's error. */
	return r.status == 404 && strcmp(err->code, "NoSuchKey") == 0;
}

/*
 * Writes one object whole (creates it, or replaces it: an S3 PUT is
 * atomic, a reader sees the old object or the new one) with the caller's
 * keys, its payload signed. False with err set as objstore_read does.
 */
bool
objstore_put(const S3Location *loc, const char *key, const char *body, size_t len, const char *content_type,
			 StoreError *err)
{
	HttpRequest req;
	HttpResponse r;
	char		sha[2 * PG_SHA256_DIGEST_LENGTH + 1];

	memset(err, 0, sizeof(*err));
	if (!s3_payload_sha256(body, len, sha))
	{
		set_error(err, 0, "OutOfMemory", "could not compute the SHA-256 of the object's body");
		return false;
	}
	list_request(loc, &req);
	req.method = "PUT";
	req.url = s3_object_url(loc, key);
	req.body = body;
	req.body_len = len;
	/* The payload's hash replaces the empty body's, first in the list. */
	linitial(req.headers) = psprintf("x-amz-content-sha256: %s", sha);
	req.headers = lappend(req.headers, psprintf("Content-Type: %s", content_type));
	/* An answer to a PUT is an error document at most. */
	req.max_response_bytes = 65536;
	if (!object_request(loc, &req, &r, err))
		return false;
	if (r.failure != HTTP_OK)
		transfer_error(&r, "writing the object", err);
	else if (r.status != 200)
		read_error(&r, r.status, err);
	return r.failure == HTTP_OK && r.status == 200;
}
