/*
 * azure_sign.h
 *     Azure Storage's Shared Key string-to-sign (pure: unit-tested in
 *     test/unit/test_azure_sign.c against Microsoft's documented examples).
 */
#ifndef FINALIZE_AZURE_SIGN_H
#define FINALIZE_AZURE_SIGN_H

/* The service version every request names (x-ms-version): pinned. */
#define AZURE_VERSION "2021-12-02"

/* A header or a query parameter: its name and (decoded) value. */
typedef struct AzurePair
{
	const char *name;
	const char *value;
} AzurePair;

/* What a request's signature covers. */
typedef struct AzureSignInput
{
	const char *method;			/* GET, PUT, ... */
	const char *account;		/* the storage account's name */
	const char *url;			/* the whole request URL, its path encoded as sent */
	long		content_length; /* 0: none (an empty field) */
	const char *content_type;	/* NULL: none */
	const AzurePair *headers;	/* the x-ms- headers, any order and case */
	int			nheaders;
} AzureSignInput;

/* The longest string-to-sign built (a listing's prefix and marker included). */
#define AZURE_SIGN_MAX 8192

extern bool azure_string_to_sign(const AzureSignInput *in, char *out, size_t outlen);
extern bool azure_url_decode(const char *s, size_t len, char *out, size_t outlen);

#endif							/* FINALIZE_AZURE_SIGN_H */
