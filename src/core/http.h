/*
 * http.h
 *     HTTP requests for finalize (the S3 listing, webhook delivery), over
 *     the one file that calls libcurl (http.c; the text of headers and URLs
 *     is http_text.c's).
 */
#ifndef FINALIZE_HTTP_H
#define FINALIZE_HTTP_H

#include "nodes/pg_list.h"
#include "utils/palloc.h"

#include "core/wait_events.h"

/* One reused connection (a curl easy handle): the pages of a listing share it. */
typedef struct HttpClient HttpClient;

/* Why a request got no HTTP answer (any status is an answer). */
typedef enum HttpFailure
{
	HTTP_OK = 0,				/* an HTTP answer arrived (any status) */
	HTTP_INIT_FAILED,			/* libcurl or the handle could not be set up */
	HTTP_BAD_HEADER,			/* a header, a key or the SigV4 string has a
								 * control byte: refused before sending */
	HTTP_INTERRUPTED,			/* a cancel or a termination (io_must_stop) */
	HTTP_TIMEOUT,				/* connect_timeout_ms or timeout_ms passed */
	HTTP_CONNECT_FAILED,		/* any other transfer error (refused, reset,
								 * DNS, TLS, ...) */
	HTTP_TOO_LARGE,				/* the body exceeded max_response_bytes */
	HTTP_NO_MEMORY,
	HTTP_WRITE_FAILED,			/* body_to_fd: the body could not be written */
	HTTP_BAD_CA_FILE			/* ca_file is not a regular file of at most
								 * 1 MB (fdw_ca_file_problem): not sent */
} HttpFailure;

/* One request; the caller keeps everything it points to valid during it. */
typedef struct HttpRequest
{
	const char *method;			/* "GET", "POST" or "PUT" (with body) */
	const char *url;
	List	   *headers;		/* of char * "Name: value"; NIL for none */
	const char *body;			/* POST or PUT body, NULL for none */
	size_t		body_len;
	long		connect_timeout_ms;
	long		timeout_ms;
	const char *aws_sigv4;		/* NULL, or CURLOPT_AWS_SIGV4's string, such
								 * as "aws:amz:us-east-1:s3" */
	const char *username;		/* with aws_sigv4: the access key; without:
								 * HTTP basic authentication; NULL for none */
	const char *password;		/* with aws_sigv4: the secret key */
	size_t		max_response_bytes; /* a longer body is HTTP_TOO_LARGE (with
									 * body_to_fd too: nothing past it is
									 * written) */
	bool		body_to_fd;		/* write the body to body_fd as it arrives
								 * (a large object), not into memory */
	int			body_fd;
	const char *ca_file;		/* PEM file of the CAs to trust, NULL: the
								 * system's; set once, it stays for the client */
	FinalizeWait wait;			/* what pg_stat_activity says it waits for */
} HttpRequest;

/* What came back, palloc'd in the caller's memory context. */
typedef struct HttpResponse
{
	HttpFailure failure;
	long		status;			/* 0 when no HTTP answer */
	char	   *body;			/* NUL-terminated; "" when none, when
								 * failure != HTTP_OK or with body_to_fd */
	size_t		len;
	char	   *retry_after;	/* the last response's Retry-After, trimmed,
								 * or NULL */
	char	   *etag;			/* its ETag, trimmed, or NULL */
	char		error[512];		/* in curl's words when failure != HTTP_OK */
} HttpResponse;

extern HttpClient *http_client_create(MemoryContext cxt, HttpResponse *failure_out);
extern bool http_perform(HttpClient *client, const HttpRequest *req, HttpResponse *resp);
extern void http_client_destroy(HttpClient *client);
extern bool http_header_safe(const char *value);
extern bool http_ca_file_refused(const char *ca_file, char *message, size_t len);
extern char *http_uri_encode(const char *s);
extern List *http_url_parts(const char *url);

#endif							/* FINALIZE_HTTP_H */
