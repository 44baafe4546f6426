/*
 * Unit tests of Azure Storage's Shared Key string-to-sign
 * (store/azure_sign.c) against the examples of Microsoft's "Authorize with
 * Shared Key": the canonicalized resource of a container's metadata, of a
 * listing with a repeated parameter, of a blob; the whole string of the
 * documented GET; and a PUT's Content-Length and Content-Type. Built and run
 * by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "store/azure_sign.h"

#include "tap.h"

/* The part of a string-to-sign after the twelve standard fields and the x-ms- headers. */
static const char *
resource_of(const char *to_sign)
{
	const char *p = to_sign;

	/* The resource begins at the first line that starts with "/". */
	while (p != NULL && *p != '/')
	{
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	return p ? p : "";
}

/* Whether a GET of url by account without x-ms- headers has the canonicalized resource want. */
static bool
resource_is(const char *account, const char *url, const char *want)
{
	char		out[AZURE_SIGN_MAX];
	AzureSignInput in = {"GET", account, url, 0, NULL, NULL, 0};

	return azure_string_to_sign(&in, out, sizeof(out)) && strcmp(resource_of(out), want) == 0;
}

int
main(void)
{
	char		out[AZURE_SIGN_MAX];
	AzurePair	doc_headers[] = {{"x-ms-version", "2009-09-19"}, {"x-ms-date", "Sun, 11 Oct 2009 21:49:13 GMT"}};
	AzureSignInput doc = {"GET", "myaccount",
		"https://myaccount.blob.core.windows.net/myaccount/mycontainer?restype=container&comp=metadata&timeout=20",
	0, NULL, doc_headers, 2};
	AzurePair	put_headers[] = {{"X-MS-Blob-Type", "BlockBlob"}, {"x-ms-date", "  Fri, 26 Jun 2015  23:39:12 GMT "},
	{"x-ms-version", "2015-02-21"}};
	AzureSignInput put = {"PUT", "myaccount", "https://myaccount.blob.core.windows.net/mycontainer/a%20b/c.txt",
	11, "text/plain; charset=UTF-8", put_headers, 3};
	char		small[64];

	check(resource_is("myaccount", "http://myaccount.blob.core.windows.net/mycontainer?restype=container&comp=metadata",
					  "/myaccount/mycontainer\ncomp:metadata\nrestype:container"),
		  "Get Container Metadata: parameters in order of their names");
	check(resource_is("myaccount", "http://myaccount.blob.core.windows.net/mycontainer?restype=container&comp=list"
					  "&include=snapshots&include=metadata&include=uncommittedblobs",
					  "/myaccount/mycontainer\ncomp:list\ninclude:metadata,snapshots,uncommittedblobs\nrestype:container"),
		  "List Blobs: a repeated parameter's values sorted and joined by commas");
	check(resource_is("myaccount", "https://myaccount-secondary.blob.core.windows.net/mycontainer/myblob",
					  "/myaccount/mycontainer/myblob"),
		  "a blob on the secondary endpoint: the account's name, not the host's");
	check(resource_is("devstoreaccount1", "http://127.0.0.1:10000/devstoreaccount1/lake?restype=container&comp=list"
					  "&prefix=day%3D27%2Fh%2B1%20x%2F&marker=2%21%3D",
					  "/devstoreaccount1/devstoreaccount1/lake\ncomp:list\nmarker:2!=\nprefix:day=27/h+1 x/\nrestype:container"),
		  "the emulator's path names the account; parameter values are decoded");
	check(resource_is("acct", "https://acct.blob.core.windows.net/lake?Restype=container&COMP=list",
					  "/acct/lake\ncomp:list\nrestype:container"),
		  "parameter names are lower-cased");

	check(azure_string_to_sign(&doc, out, sizeof(out)) &&
		  strcmp(out, "GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:Sun, 11 Oct 2009 21:49:13 GMT\nx-ms-version:2009-09-19\n"
				 "/myaccount/myaccount/mycontainer\ncomp:metadata\nrestype:container\ntimeout:20") == 0,
		  "the documented GET: twelve empty fields, the x-ms- headers sorted, the resource");
	check(azure_string_to_sign(&put, out, sizeof(out)) &&
		  strcmp(out, "PUT\n\n\n11\n\ntext/plain; charset=UTF-8\n\n\n\n\n\n\nx-ms-blob-type:BlockBlob\n"
				 "x-ms-date:Fri, 26 Jun 2015 23:39:12 GMT\nx-ms-version:2015-02-21\n/myaccount/mycontainer/a%20b/c.txt") == 0,
		  "a PUT: its length and type; header names lower-cased, values trimmed and their spaces folded; the path as sent");
	doc.content_length = 0;
	check(azure_string_to_sign(&doc, out, sizeof(out)) && strncmp(out, "GET\n\n\n\n", 7) == 0,
		  "a Content-Length of zero is an empty field (version 2015-02-21 and later)");
	check(!azure_string_to_sign(&doc, small, sizeof(small)), "a string that does not fit is refused, not cut");
	doc.url = "https://myaccount.blob.core.windows.net";
	check(!azure_string_to_sign(&doc, out, sizeof(out)), "a URL without a path is refused");
	doc.url = "https://a.blob.core.windows.net/c?prefix=%zz";
	check(!azure_string_to_sign(&doc, out, sizeof(out)), "a malformed percent-encoding is refused");
	check(azure_url_decode("a%2Fb+c", 7, small, sizeof(small)) && strcmp(small, "a/b c") == 0,
		  "a query value decodes, + as a space");
	return tap_done();
}
