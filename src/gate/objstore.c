/*
 * objstore.c
 *     The one interface to object stores over HTTP: S3 ListObjectsV2 through
 *     libcurl, answers parsed with libxml2.
 *
 * Requests are signed by libcurl (CURLOPT_AWS_SIGV4). libcurl 7.88 signs the
 * query string exactly as written, so it is built here already in SigV4's
 * canonical form (parameters sorted, every byte outside A-Z a-z 0-9 - _ . ~
 * percent-encoded), and x-amz-content-sha256 is sent explicitly. Pages are
 * followed through continuation tokens.
 *
 * Callbacks never raise errors: the write callback fills a bounded malloc'd
 * buffer, the progress callback aborts the transfer on a cancel or a
 * termination (and serves other interrupts, see io_interrupts.c), and the
 * caller raises once curl_easy_perform has returned. A listing ends: a
 * continuation token seen before, or more pages than the location allows,
 * is an error rather than a loop. The handle is cleaned up even when an error is raised between
 * requests (PG_FINALLY), so no socket outlives the statement.
 */
#include "postgres.h"

#include <curl/curl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/hsearch.h"

#include "common/io_interrupts.h"
#include "gate/objstore.h"

#if LIBCURL_VERSION_NUM < 0x074b00
#error "finalize needs libcurl 7.75 or later (CURLOPT_AWS_SIGV4)"
#endif

/* SHA-256 of an empty body: a GET's x-amz-content-sha256. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* One page of a listing is about 250 kB for 1000 keys; refuse absurd ones. */
#define MAX_RESPONSE_BYTES (64 * 1024 * 1024)

static bool curl_ready = false;

/*
 * What the write callback collects: in malloc'd memory, because a callback
 * must not raise (palloc would, when out of memory) while libcurl is on the
 * stack.
 */
typedef struct Response
{
	char	   *data;
	size_t		len;
	size_t		cap;
	bool		too_large;
	bool		no_memory;
} Response;

/* Appends received bytes; stops (returns short) beyond the limit. */
static size_t
on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	Response   *r = (Response *) userdata;
	size_t		n = size * nmemb;

	if (r->len + n > MAX_RESPONSE_BYTES)
	{
		r->too_large = true;
		return 0;
	}
	if (r->len + n > r->cap)
	{
		size_t		cap = Max(Max(r->cap * 2, r->len + n), 64 * 1024);
		char	   *grown = realloc(r->data, cap);

		if (grown == NULL)
		{
			r->no_memory = true;
			return 0;
		}
		r->data = grown;
		r->cap = cap;
	}
	memcpy(r->data + r->len, ptr, n);
	r->len += n;
	return n;
}

/* Aborts a transfer on a cancel or a termination; other interrupts are served. */
static int
on_progress(void *clientp pg_attribute_unused(), curl_off_t dltotal pg_attribute_unused(), curl_off_t dlnow pg_attribute_unused(),
			curl_off_t ultotal pg_attribute_unused(), curl_off_t ulnow pg_attribute_unused())
{
	return io_must_stop() ? 1 : 0;
}

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

/* Whether a header value is safe to send: no CR, LF or other control bytes. */
static bool
header_safe(const char *value)
{
	for (const unsigned char *c = (const unsigned char *) value; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return false;
	return true;
}

/*
 * Percent-encodes a string as SigV4 wants it in a query: every byte outside
 * A-Z a-z 0-9 - _ . ~ becomes %XX (upper-case hex), '/' included.
 */
char *
s3_uri_encode(const char *s)
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

/* Sets an error's fields. */
static void
set_error(S3Error *err, long status, const char *code, const char *message)
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

/* Parses an XML body; NULL when it is not XML. */
static xmlDocPtr
parse_xml(const Response *r)
{
	return xmlReadMemory(r->data ? r->data : "", (int) r->len, "s3.xml", NULL,
						 XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOBLANKS);
}

/* Reads S3's <Error><Code/><Message/></Error> of a failed request. */
static void
read_error(const Response *r, long status, S3Error *err)
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
 * Reads one page of a ListObjectsV2 answer into out. Returns false with err
 * set on a malformed document; sets *truncated and *next_token.
 */
static bool
read_page(const Response *r, Inventory *out, bool *truncated, char **next_token, S3Error *err)
{
	xmlDocPtr	doc = parse_xml(r);
	xmlNodePtr	root = doc ? xmlDocGetRootElement(doc) : NULL;
	char	   *t;

	if (root == NULL || strcmp((const char *) root->name, "ListBucketResult") != 0)
	{
		set_error(err, 200, "MalformedResponse",
				  doc ? "the answer is XML but not a ListBucketResult" : "the answer is not well-formed XML");
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

/* The URL of one ListObjectsV2 request, its query in canonical order. */
static char *
list_url(const S3Location *loc, const char *prefix, const char *token)
{
	StringInfoData url;
	const char *scheme_end = strstr(loc->endpoint, "://");
	size_t		elen = strlen(loc->endpoint);

	while (elen > 0 && loc->endpoint[elen - 1] == '/')
		elen--;
	initStringInfo(&url);
	if (loc->virtual_host && scheme_end != NULL)
		appendStringInfo(&url, "%.*s%s.%.*s/?", (int) (scheme_end + 3 - loc->endpoint), loc->endpoint,
						 loc->bucket, (int) (elen - (scheme_end + 3 - loc->endpoint)), scheme_end + 3);
	else
		appendStringInfo(&url, "%.*s/%s?", (int) elen, loc->endpoint, s3_uri_encode(loc->bucket));
	/* Sorted: continuation-token < list-type < prefix. */
	if (token != NULL)
		appendStringInfo(&url, "continuation-token=%s&", s3_uri_encode(token));
	appendStringInfo(&url, "list-type=2&prefix=%s", s3_uri_encode(prefix));
	return url.data;
}

/*
 * Whether the keys can go into headers: the validator refuses control
 * characters, but a header must never be split by a value, whatever the
 * catalog holds.
 */
static bool
credentials_safe(const S3Location *loc, S3Error *err)
{
	if (!header_safe(loc->access_key) || !header_safe(loc->secret_key) ||
		(loc->session_token != NULL && !header_safe(loc->session_token)))
	{
		set_error(err, 0, "InvalidCredentials",
				  "a key or the session token of the user mapping contains a control character (CR, LF, ...)");
		return false;
	}
	return true;
}

/*
 * A new easy handle (libcurl initialised once per backend), or NULL with
 * err set: a failure to start is reported like any other listing failure.
 */
static CURL *
new_handle(S3Error *err)
{
	CURL	   *curl;

	if (!curl_ready)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		{
			set_error(err, 0, "CurlInitFailed", "curl_global_init failed");
			return NULL;
		}
		curl_ready = true;
	}
	curl = curl_easy_init();
	if (curl == NULL)
		set_error(err, 0, "CurlInitFailed", "curl_easy_init failed");
	return curl;
}

/*
 * Sets what every request of a listing shares: signing with the caller's
 * keys, timeouts, http(s) only, and the callbacks that collect the answer
 * and abort on a cancel.
 */
static void
configure_handle(CURL *curl, const S3Location *loc, struct curl_slist *headers, char *errbuf)
{
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, psprintf("aws:amz:%s:s3", loc->region));
	curl_easy_setopt(curl, CURLOPT_USERNAME, loc->access_key);
	curl_easy_setopt(curl, CURLOPT_PASSWORD, loc->secret_key);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, loc->connect_timeout_ms);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, loc->timeout_ms);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "finalize (PostgreSQL extension)");
}

/*
 * Requests one page into *r and reads it into out; false with err set
 * when the transfer failed or the store refused. The caller frees r->data
 * (also when an error is raised meanwhile).
 */
static bool
fetch_page(CURL *curl, const char *url, char *errbuf, Response *r, Inventory *out, bool *truncated,
		   char **token, S3Error *err)
{
	CURLcode	rc;
	long		status = 0;

	memset(r, 0, sizeof(*r));
	errbuf[0] = '\0';
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, r);
	rc = curl_easy_perform(curl);
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	if (rc == CURLE_ABORTED_BY_CALLBACK)
		set_error(err, 0, "Interrupted", "the listing was interrupted");
	else if (r->too_large)
		set_error(err, status, "ResponseTooLarge", "one page of the listing exceeded 64 MB");
	else if (r->no_memory)
		set_error(err, status, "OutOfMemory", "no memory for one page of the listing");
	else if (rc != CURLE_OK)
		set_error(err, 0, rc == CURLE_OPERATION_TIMEDOUT ? "Timeout" : "ConnectionFailed",
				  psprintf("%s%s%s", curl_easy_strerror(rc), errbuf[0] ? ": " : "", errbuf));
	else if (status != 200)
		read_error(r, status, err);
	else
		return read_page(r, out, truncated, token, err);
	return false;
}

/*
 * Whether the listing may ask for the page after this one: a store that
 * repeats a continuation token, or a listing longer than the location
 * allows, would otherwise be followed for ever.
 */
static bool
may_continue(HTAB *seen, const char *token, int *pages, int max_pages, S3Error *err)
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
list_pages(CURL *curl, const S3Location *loc, const char *prefix, char *errbuf, Response *r, Inventory *out,
		   S3Error *err)
{
	char	   *token = NULL;
	bool		truncated = true;
	bool		ok = true;
	int			pages = 0;
	HASHCTL		ctl;
	HTAB	   *seen;

	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(SeenToken);
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("finalize listing tokens", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	while (ok && truncated)
	{
		char	   *url = list_url(loc, prefix, token);

		ok = fetch_page(curl, url, errbuf, r, out, &truncated, &token, err);
		free(r->data);
		r->data = NULL;
		pfree(url);
		if (ok && truncated)
			ok = may_continue(seen, token, &pages, loc->max_pages, err);
	}
	return ok;
}

/*
 * Lists every object whose key starts with prefix. Returns false with err
 * set when the store answers with an error, cannot be reached, times out,
 * or sends something that is not a listing; the caller raises (after
 * checking for interrupts, which also abort a transfer).
 */
bool
objstore_list(const S3Location *loc, const char *prefix, Inventory *out, S3Error *err)
{
	CURL	   *curl;
	struct curl_slist *volatile headers = NULL;
	char		errbuf[CURL_ERROR_SIZE];
	volatile bool ok = true;
	Response	r = {0};

	memset(err, 0, sizeof(*err));
	io_interrupts_begin();
	if (!credentials_safe(loc, err))
		return false;
	curl = new_handle(err);
	if (curl == NULL)
		return false;

	headers = curl_slist_append(headers, "x-amz-content-sha256: " EMPTY_SHA256);
	if (loc->session_token != NULL)
		headers = curl_slist_append(headers, psprintf("x-amz-security-token: %s", loc->session_token));
	/* The handle and its socket are released even when an error is raised. */
	PG_TRY();
	{
		configure_handle(curl, loc, headers, errbuf);
		ok = list_pages(curl, loc, prefix, errbuf, &r, out, err);
	}
	PG_FINALLY();
	{
		free(r.data);
		curl_slist_free_all(headers);
		curl_easy_cleanup(curl);
	}
	PG_END_TRY();
	return ok;
}
