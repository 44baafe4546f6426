/*
 * http.c
 *     HTTP for finalize: the one file that calls libcurl, shared by the S3
 *     requests (store/objstore.c), webhook delivery and publications.
 *
 * One file per foreign library (as mssql/mssql.c is for DB-Library): the
 * rules libcurl must be held to are kept in one place instead of in each
 * caller, and callers see PostgreSQL types only. Those rules:
 *
 * - Callbacks never raise an error, since libcurl is on the stack. The write
 *   callback fills a bounded malloc'd buffer (palloc could raise), copied
 *   into palloc'd memory once curl_easy_perform has returned and then freed,
 *   whatever happened, or (body_to_fd, for an object too large to hold)
 *   writes each chunk to the caller's file descriptor with write(2), which
 *   no temp_file_limit sees, so max_response_bytes bounds that body too;
 *   the header callback keeps Retry-After in a fixed buffer; the progress
 *   callback aborts the transfer on a cancel or a termination and serves
 *   other interrupts (see io_interrupts.c). Nothing between building a
 *   request and freeing its malloc'd memory raises.
 * - No signals (CURLOPT_NOSIGNAL: a backend owns its signal handlers), http
 *   and https only, no redirects followed, timeouts from the request.
 * - Nothing sent can be split into extra headers (a header, key or SigV4
 *   string with a control byte is refused); a CA file is a regular file.
 * - A handle belongs to a memory context and is cleaned up with it, so an
 *   error raised between requests never leaks a socket.
 *
 * A client reuses one easy handle, hence one connection, across requests
 * (the pages of a listing); what differs per request is set again on each.
 * The text of headers and URLs, which needs no libcurl, is http_text.c's.
 */
#include "postgres.h"

#include <unistd.h>

#include <curl/curl.h>

#include "core/http.h"
#include "core/io_interrupts.h"
#include "core/wait_events.h"

#if LIBCURL_VERSION_NUM < 0x074b00
#error "finalize needs libcurl 7.75 or later (CURLOPT_AWS_SIGV4)"
#endif

/* Room for a Retry-After value: seconds, or an HTTP date (29 bytes). */
#define RETRY_AFTER_MAX 128

struct HttpClient
{
	CURL	   *curl;			/* NULL once released */
	MemoryContextCallback release;	/* cleans the handle up with its context */
	char		errbuf[CURL_ERROR_SIZE];	/* CURLOPT_ERRORBUFFER */
};

/*
 * What the callbacks collect during one request: in malloc'd memory and
 * fixed buffers, because a callback must not raise (palloc would, when out
 * of memory) while libcurl is on the stack.
 */
typedef struct Collected
{
	char	   *data;			/* malloc'd */
	size_t		len;
	size_t		cap;
	size_t		limit;			/* max_response_bytes */
	bool		too_large;
	bool		no_memory;
	int			fd;				/* body_to_fd: where the body goes; else -1 */
	int			write_errno;	/* why writing to fd failed; 0 when it did not */
	char		retry_after[RETRY_AFTER_MAX];	/* "" when none */
	char		etag[RETRY_AFTER_MAX];	/* "" when none */
} Collected;

static bool curl_ready = false;

/*
 * The parts of a URL as libcurl reads it (user, password, options, host,
 * path, query, fragment), each that is there and not empty, as written
 * and percent-decoded (and a host in its punycode form, as a resolver's
 * error names it), in the caller's memory context: what a text quoting the
 * URL, or curl's words about it ("Could not resolve host: ..."), may echo
 * of a secret URL.
 * NIL when libcurl cannot parse it (its whole text is all there is then).
 */
List *
http_url_parts(const char *url)
{
	static const CURLUPart parts[] = {
		CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS, CURLUPART_HOST,
		CURLUPART_PATH, CURLUPART_QUERY, CURLUPART_FRAGMENT
	};
	/* as written, percent-decoded, and a host as DNS sees it (IDN) */
	static const unsigned int forms[] = {
		0, CURLU_URLDECODE,
#ifdef CURLU_PUNYCODE
		CURLU_PUNYCODE,
#else
		0,
#endif
	};
	CURLU	   *u = curl_url();
	List	   *out = NIL;

	if (u == NULL)
		return NIL;
	if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK)
		for (int i = 0; i < lengthof(parts); i++)
			for (int f = 0; f < lengthof(forms); f++)
			{
				char	   *value = NULL;

				if (forms[f] == 0 && f > 0)
					continue;
				if (curl_url_get(u, parts[i], &value, forms[f]) == CURLUE_OK && value != NULL)
				{
					if (value[0] != '\0' && strcmp(value, "/") != 0)
						out = lappend(out, pstrdup(value));
					curl_free(value);
				}
			}
	curl_url_cleanup(u);
	return out;
}

/*
 * Appends received bytes, in memory or to the caller's file; stops (returns
 * short) before the body would pass max_response_bytes, so neither memory
 * nor a file ever holds more.
 */
static size_t
on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	Collected  *c = (Collected *) userdata;
	size_t		n = size * nmemb;

	if (n > c->limit - c->len)
	{
		c->too_large = true;
		return 0;
	}
	if (c->fd >= 0)
	{
		/* Straight to the file: write(2) raises nothing. */
		for (size_t done = 0; done < n;)
		{
			ssize_t		w = write(c->fd, ptr + done, n - done);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
			{
				c->write_errno = w < 0 ? errno : ENOSPC;
				return 0;
			}
			done += w;
		}
		c->len += n;
		return n;
	}
	if (c->len + n > c->cap)
	{
		size_t		cap = Min(Max(Max(c->cap * 2, c->len + n), 64 * 1024), c->limit);
		char	   *grown = realloc(c->data, cap);

		if (grown == NULL)
		{
			c->no_memory = true;
			return 0;
		}
		c->data = grown;
		c->cap = cap;
	}
	memcpy(c->data + c->len, ptr, n);
	c->len += n;
	return n;
}

/*
 * Keeps the value of one header line into buf (RETRY_AFTER_MAX bytes),
 * trimmed, when the line is that header's; a value too long or with a
 * control byte is kept as "" (no value), never cut.
 */
static void
keep_header(const char *line, size_t n, const char *name, char *buf)
{
	size_t		namelen = strlen(name);
	const char *value = line + namelen;
	const char *end = line + n;

	if (n <= namelen || pg_strncasecmp(line, name, namelen) != 0)
		return;
	while (value < end && (*value == ' ' || *value == '\t'))
		value++;
	while (end > value && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
		end--;
	buf[0] = '\0';
	if (end - value < RETRY_AFTER_MAX)
	{
		memcpy(buf, value, end - value);
		buf[end - value] = '\0';
		if (!http_header_safe(buf))
			buf[0] = '\0';
	}
}

/*
 * Keeps the Retry-After (a 429 or 503 says when to come back) and ETag of
 * the last response; a value too long or with control bytes is no value.
 */
static size_t
on_header(char *line, size_t size, size_t nitems, void *userdata)
{
	Collected  *c = (Collected *) userdata;
	size_t		n = size * nitems;

	/* A new status line (a redirect, a 100 Continue) starts over. */
	if (n >= 5 && strncmp(line, "HTTP/", 5) == 0)
	{
		c->retry_after[0] = '\0';
		c->etag[0] = '\0';
	}
	else
	{
		keep_header(line, n, "Retry-After:", c->retry_after);
		keep_header(line, n, "ETag:", c->etag);
	}
	return n;
}

/* Aborts a transfer on a cancel or a termination; other interrupts are served. */
static int
on_progress(void *clientp pg_attribute_unused(), curl_off_t dltotal pg_attribute_unused(), curl_off_t dlnow pg_attribute_unused(),
			curl_off_t ultotal pg_attribute_unused(), curl_off_t ulnow pg_attribute_unused())
{
	return io_must_stop() ? 1 : 0;
}

/* Empties a response before a request: every exit leaves it in a known state. */
static void
response_clear(HttpResponse *resp)
{
	memset(resp, 0, sizeof(*resp));
	resp->failure = HTTP_OK;
}

/*
 * Ends a request that got no answer, in words the caller can show; the body
 * is "" as promised. Called once nothing malloc'd is left (palloc raises).
 */
static bool
fail(HttpResponse *resp, HttpFailure failure, const char *message)
{
	resp->failure = failure;
	strlcpy(resp->error, message, sizeof(resp->error));
	if (resp->body == NULL)
	{
		resp->body = palloc0(1);
		resp->len = 0;
	}
	return false;
}

/*
 * The reset callback of the client's memory context: the handle and its
 * connection go with the context, even when an error unwinds past the
 * caller. Never raises.
 */
static void
release_handle(void *arg)
{
	HttpClient *client = (HttpClient *) arg;

	if (client->curl != NULL)
	{
		curl_easy_cleanup(client->curl);
		client->curl = NULL;
	}
}

/*
 * Sets what every request of a client shares: no signals, http(s) only, no
 * redirects, and the callbacks that collect the answer and abort on a
 * cancel.
 */
static CURLcode
configure_handle(HttpClient *client)
{
	CURL	   *curl = client->curl;
	CURLcode	rc;

	if ((rc = curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L)) != CURLE_OK ||
#if LIBCURL_VERSION_NUM >= 0x075500
		(rc = curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https")) != CURLE_OK ||
#else
		(rc = curl_easy_setopt(curl, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS))) != CURLE_OK ||
#endif
		(rc = curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, client->errbuf)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_USERAGENT, "finalize (PostgreSQL extension)")) != CURLE_OK)
		return rc;
	return CURLE_OK;
}

/*
 * A client whose handle lives as long as cxt (libcurl initialised once per
 * backend), or NULL with *failure_out (when given) saying why: a failure to
 * start is reported like a failed request, not raised.
 */
HttpClient *
http_client_create(MemoryContext cxt, HttpResponse *failure_out)
{
	HttpResponse ignored;
	HttpResponse *resp = failure_out ? failure_out : &ignored;
	HttpClient *client;
	CURLcode	rc;

	response_clear(resp);
	if (!curl_ready)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		{
			fail(resp, HTTP_INIT_FAILED, "curl_global_init failed");
			return NULL;
		}
		curl_ready = true;
	}
	/* Allocated first: palloc may raise, and nothing is to be cleaned up yet. */
	client = MemoryContextAllocZero(cxt, sizeof(HttpClient));
	client->curl = curl_easy_init();
	if (client->curl == NULL)
	{
		pfree(client);
		fail(resp, HTTP_INIT_FAILED, "curl_easy_init failed");
		return NULL;
	}
	rc = configure_handle(client);
	if (rc != CURLE_OK)
	{
		curl_easy_cleanup(client->curl);
		pfree(client);
		fail(resp, HTTP_INIT_FAILED, psprintf("could not set up the handle: %s", curl_easy_strerror(rc)));
		return NULL;
	}
	client->release.func = release_handle;
	client->release.arg = client;
	MemoryContextRegisterResetCallback(cxt, &client->release);
	return client;
}

/*
 * Releases the handle and its connection now rather than with the memory
 * context. The client's memory stays until the context goes (its reset
 * callback cannot be unregistered), and it makes no more requests.
 */
void
http_client_destroy(HttpClient *client)
{
	if (client != NULL)
		release_handle(client);
}

/*
 * Whether nothing of the request can add a header: the headers themselves,
 * and the keys and SigV4 string that libcurl writes into Authorization.
 */
static bool
request_safe(const HttpRequest *req)
{
	ListCell   *lc;

	foreach(lc, req->headers)
		if (!http_header_safe((const char *) lfirst(lc)))
			return false;
	return (req->aws_sigv4 == NULL || http_header_safe(req->aws_sigv4)) &&
		(req->username == NULL || http_header_safe(req->username)) &&
		(req->password == NULL || http_header_safe(req->password));
}

/*
 * The request's headers as libcurl wants them (malloc'd), or NULL when
 * there are none or memory ran out (*no_memory).
 */
static struct curl_slist *
header_list(const HttpRequest *req, bool *no_memory)
{
	struct curl_slist *list = NULL;
	ListCell   *lc;

	*no_memory = false;
	foreach(lc, req->headers)
	{
		struct curl_slist *longer = curl_slist_append(list, (const char *) lfirst(lc));

		if (longer == NULL)
		{
			curl_slist_free_all(list);
			*no_memory = true;
			return NULL;
		}
		list = longer;
	}
	return list;
}

/*
 * Sets what is this request's own on a handle that may have served another:
 * URL, headers, method, body, signing, timeouts, connection, collectors.
 */
static CURLcode
configure_request(CURL *curl, const HttpRequest *req, bool post, struct curl_slist *headers, Collected *c)
{
	CURLcode	rc;

	if ((rc = curl_easy_setopt(curl, CURLOPT_URL, req->url)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, req->timeout_ms)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_WRITEDATA, c)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_HEADERDATA, c)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_USERNAME, req->username)) != CURLE_OK ||
		(rc = curl_easy_setopt(curl, CURLOPT_PASSWORD, req->password)) != CURLE_OK ||
		(req->ca_file != NULL && (rc = curl_easy_setopt(curl, CURLOPT_CAINFO, req->ca_file)) != CURLE_OK))
		return rc;
	/* Setting a SigV4 string switches signing on; clearing it does not: a request without one goes back to basic. */
	if (req->aws_sigv4 != NULL)
		rc = curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, req->aws_sigv4);
	else if ((rc = curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, (char *) NULL)) == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
	if (rc != CURLE_OK)
		return rc;

	/*
	 * A POST (or PUT, named so below) sends the caller's body as it is (not
	 * copied: it stays valid during the call); a GET forgets one. A POST
	 * takes a new connection: on a reused one that closes before answering,
	 * libcurl sends it again by itself, though the server may have acted on
	 * it and lost only the answer (an Airflow asset event twice); whether
	 * to send it again is the caller's decision.
	 */
	if (post)
	{
		if ((rc = curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len)) != CURLE_OK ||
			(rc = curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req->body ? req->body : "")) != CURLE_OK ||
			(rc = curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L)) != CURLE_OK)
			return rc;
	}
	else if ((rc = curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) -1)) != CURLE_OK ||
			 (rc = curl_easy_setopt(curl, CURLOPT_POSTFIELDS, (char *) NULL)) != CURLE_OK ||
			 (rc = curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L)) != CURLE_OK ||
			 (rc = curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 0L)) != CURLE_OK)
		return rc;
	return curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, strcmp(req->method, "PUT") == 0 ? "PUT" : (char *) NULL);
}

/*
 * Why a transfer got no answer, if it did not: its setup failed, a cancel
 * or a termination ended it, the body was too large or could not be kept,
 * or libcurl failed (a timeout, any other error). Raises nothing.
 */
static HttpFailure
transfer_failure(CURLcode setup_rc, CURLcode rc, const Collected *c)
{
	if (setup_rc != CURLE_OK)
		return setup_rc == CURLE_OUT_OF_MEMORY ? HTTP_NO_MEMORY : HTTP_INIT_FAILED;
	if (rc == CURLE_ABORTED_BY_CALLBACK)
		return HTTP_INTERRUPTED;
	if (c->too_large)
		return HTTP_TOO_LARGE;
	if (c->no_memory)
		return HTTP_NO_MEMORY;
	if (c->write_errno != 0)
		return HTTP_WRITE_FAILED;
	if (rc != CURLE_OK)
		return rc == CURLE_OPERATION_TIMEDOUT ? HTTP_TIMEOUT : HTTP_CONNECT_FAILED;
	return HTTP_OK;
}

/*
 * Copies the collected body into resp (palloc'd; "" with body_to_fd, whose
 * len is the bytes written). Not allowed to raise: the malloc'd buffer is
 * still to be freed, so HTTP_NO_MEMORY when there is no room.
 */
static HttpFailure
keep_body(const Collected *c, HttpResponse *resp)
{
	resp->body = palloc_extended(c->fd >= 0 ? 1 : c->len + 1, MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
	if (resp->body == NULL)
		return HTTP_NO_MEMORY;
	if (c->fd < 0 && c->len > 0)
		memcpy(resp->body, c->data, c->len);
	resp->body[c->fd >= 0 ? 0 : c->len] = '\0';
	resp->len = c->len;			/* with body_to_fd: the bytes written */
	return HTTP_OK;
}

/* What a failed request says, in libcurl's words where it has some. */
static const char *
failure_text(HttpClient *client, const HttpRequest *req, HttpFailure failure, CURLcode setup_rc,
			 CURLcode rc, const Collected *c)
{
	switch (failure)
	{
		case HTTP_OK:
			break;
		case HTTP_INIT_FAILED:
		case HTTP_NO_MEMORY:
			if (setup_rc != CURLE_OK)
				return psprintf("could not set up the request: %s", curl_easy_strerror(setup_rc));
			return "out of memory for the response";
		case HTTP_TOO_LARGE:
			return psprintf("the response exceeded %zu bytes", req->max_response_bytes);
		case HTTP_WRITE_FAILED:
			return psprintf("could not write the response to a temporary file: %s", strerror(c->write_errno));
		case HTTP_BAD_HEADER:
		case HTTP_BAD_CA_FILE:
		case HTTP_INTERRUPTED:
		case HTTP_TIMEOUT:
		case HTTP_CONNECT_FAILED:
			break;
	}
	return psprintf("%s%s%s", curl_easy_strerror(rc), client->errbuf[0] ? ": " : "", client->errbuf);
}

/*
 * Sends one request on the client's connection and fills *resp (palloc'd
 * in the current memory context). True when an HTTP answer arrived,
 * whatever its status; false with resp->failure and resp->error saying why
 * not. Raises nothing but out of memory once the transfer is over, so the
 * caller raises, after io_interrupts_rethrow(), for a cancel.
 */
bool
http_perform(HttpClient *client, const HttpRequest *req, HttpResponse *resp)
{
	Collected	c;
	struct curl_slist *headers;
	bool		post;
	bool		no_memory;
	CURLcode	setup_rc;
	CURLcode	rc = CURLE_OK;
	long		status = 0;
	HttpFailure failure = HTTP_OK;
	/* Looked up before anything is allocated (the first lookup takes a lock). */
	uint32		wait_event = finalize_wait_event(req->wait);
	char		message[sizeof(resp->error)];

	if (client == NULL || client->curl == NULL)
		elog(ERROR, "HTTP request on a released client");
	if (strcmp(req->method, "GET") == 0)
		post = false;
	else if (strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0)
		post = true;			/* PUT: a body, as a POST's, under another name */
	else
		elog(ERROR, "unsupported HTTP method \"%s\"", req->method);

	response_clear(resp);
	io_interrupts_begin();
	if (!request_safe(req))
		return fail(resp, HTTP_BAD_HEADER,
					"a header, a key or the signing string contains a control character (CR, LF, ...)");
	if (req->ca_file != NULL && http_ca_file_refused(req->ca_file, message, sizeof(message)))
		return fail(resp, HTTP_BAD_CA_FILE, message);

	/* From here until free(c.data), nothing raises. */
	memset(&c, 0, sizeof(c));
	c.limit = req->max_response_bytes;
	c.fd = req->body_to_fd ? req->body_fd : -1;
	headers = header_list(req, &no_memory);
	if (no_memory)
		return fail(resp, HTTP_NO_MEMORY, "out of memory for the request's headers");
	setup_rc = configure_request(client->curl, req, post, headers, &c);
	if (setup_rc == CURLE_OK)
	{
		client->errbuf[0] = '\0';
		finalize_wait_begin(wait_event);
		rc = curl_easy_perform(client->curl);
		finalize_wait_end();
		curl_easy_getinfo(client->curl, CURLINFO_RESPONSE_CODE, &status);
	}
	/* The handle must not keep the list, which is freed now. */
	curl_easy_setopt(client->curl, CURLOPT_HTTPHEADER, (struct curl_slist *) NULL);
	curl_slist_free_all(headers);

	failure = transfer_failure(setup_rc, rc, &c);
	if (failure == HTTP_OK)
		failure = keep_body(&c, resp);
	free(c.data);

	resp->status = status;
	if (c.retry_after[0] != '\0')
		resp->retry_after = pstrdup(c.retry_after);
	if (c.etag[0] != '\0')
		resp->etag = pstrdup(c.etag);
	if (failure == HTTP_OK)
		return true;
	return fail(resp, failure, failure_text(client, req, failure, setup_rc, rc, &c));
}
