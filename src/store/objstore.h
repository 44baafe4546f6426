/*
 * objstore.h
 *     The remote stores (S3, Azure Blob Storage) over core/http.c:
 *     listings, objects read (to a file, or whole when small) and written,
 *     one loop for both (objstore.c), each store's requests its own
 *     (s3_request.c, azure_request.c).
 */
#ifndef FINALIZE_OBJSTORE_H
#define FINALIZE_OBJSTORE_H

#include "store/listing.h"

/* Where and how to list: a finalize_s3 server and the caller's keys. */
typedef struct S3Location
{
	const char *endpoint;		/* http(s)://host[:port] */
	const char *region;
	const char *bucket;
	bool		virtual_host;	/* bucket in the host name, not the path */
	const char *access_key;
	const char *secret_key;
	const char *session_token;	/* NULL when not given */
} S3Location;

/* How requests to an Azure container are authorized. */
typedef enum AzureAuth
{
	AZURE_SHARED_KEY,			/* account_key: HMAC-SHA256 (azure_sign.c) */
	AZURE_SAS,					/* sas_token: appended to each URL */
	AZURE_OAUTH					/* Entra ID client credentials: a bearer token */
} AzureAuth;

/* Where and how to reach an Azure container: a finalize_azure server and a user mapping. */
typedef struct AzureLocation
{
	const char *endpoint;		/* the account's Blob URL, without a trailing "/" */
	const char *account;
	const char *container;
	AzureAuth	auth;
	const char *account_key;	/* AZURE_SHARED_KEY: base64 */
	const char *sas_token;		/* AZURE_SAS: without its "?" */
	const char *token_endpoint; /* AZURE_OAUTH: where tokens are asked for */
	const char *client_id;
	const char *client_secret;
	const char *scope;
	int			page_size;		/* maxresults of a listing's page */
} AzureLocation;

/* A remote store: which, where, and the limits of its requests. */
typedef struct RemoteStore
{
	bool		azure;
	S3Location	s3;
	AzureLocation az;
	const char *ca_file;		/* NULL: the system's trusted CAs */
	long		connect_timeout_ms;
	long		timeout_ms;
	int			max_pages;		/* a longer listing is an error */
} RemoteStore;


extern bool objstore_get(const RemoteStore *rs, const char *key, int fd, size_t max_bytes, StoreError *err);
extern bool objstore_read(const RemoteStore *rs, const char *key, size_t max_bytes, char **body, size_t *len,
						  bool *found, StoreError *err);
extern bool objstore_put(const RemoteStore *rs, const char *key, const char *body, size_t len,
						 const char *content_type, StoreError *err);
extern bool objstore_list(const RemoteStore *rs, const char *prefix, ListingSink *sink, StoreError *err);

#endif							/* FINALIZE_OBJSTORE_H */
