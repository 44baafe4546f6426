/*
 * store_key.c
 *     Which object of a store a location names: the forms each kind of
 *     store's locations take, and the rule that a key stays inside its
 *     store. Pure (no allocation, no I/O, no errors raised): the gate, the
 *     publisher, the markers and the lake all ask through store.c.
 *
 * One object has several names: Hadoop's "file:/path" is "file:///path",
 * "s3a://" and "s3n://" are "s3://", and an Azure blob is named by ABFS
 * (abfss://container@account.dfs.core.windows.net/key, abfs:// without
 * TLS), by WASB (wasbs://container@account.blob.core.windows.net/key) or
 * by its URL (https://account.blob.core.windows.net/container/key, and the
 * dfs endpoint's). Each form is a prefix; the key is what follows it.
 */
#include "postgres.h"

#include "store/store_key.h"

/*
 * Whether a path of len bytes stays inside its store: relative, no empty,
 * "." or ".." parts (an empty last part, "a/", is allowed), no NUL, at most
 * 1024 bytes (S3's key limit). Every manifest path is checked: memchr finds
 * the NUL and each "/" a word at a time, faster than a loop over the bytes.
 */
bool
path_is_safe(const char *path, int len)
{
	const char *part = path;
	const char *end = path + len;

	if (len == 0 || path[0] == '/' || len > 1024 || memchr(path, '\0', len) != NULL)
		return false;
	for (;;)
	{
		const char *slash = memchr(part, '/', end - part);
		const char *stop = slash ? slash : end;
		size_t		plen = stop - part;

		if ((plen == 0 && slash != NULL) || (plen == 1 && part[0] == '.') ||
			(plen == 2 && part[0] == '.' && part[1] == '.'))
			return false;
		if (slash == NULL)
			return true;
		part = slash + 1;
	}
}

/* Adds one base, formatted; one that does not fit is left out. */
static void
add_base(StoreBases *b, const char *fmt, const char *x, const char *y, const char *z)
{
	int			n;

	if (b->n >= STORE_MAX_BASES)
		return;
	n = snprintf(b->text[b->n], STORE_BASE_LEN, fmt, x, y, z);
	if (n > 0 && n < STORE_BASE_LEN)
		b->n++;
}

/* The locations of an S3 bucket: s3://, s3a:// and s3n:// (Hadoop's). */
void
store_bases_s3(StoreBases *b, const char *bucket)
{
	b->n = 0;
	b->urls = false;
	add_base(b, "s3://%s/%s%s", bucket, "", "");
	add_base(b, "s3a://%s/%s%s", bucket, "", "");
	add_base(b, "s3n://%s/%s%s", bucket, "", "");
}

/*
 * The locations of a local directory (an absolute path without a trailing
 * "/", or "/"): file:///root/ and Hadoop's file:/root/.
 */
void
store_bases_file(StoreBases *b, const char *root)
{
	const char *sep = strcmp(root, "/") == 0 ? "" : "/";

	b->n = 0;
	b->urls = false;
	add_base(b, "file://%s%s%s", root, sep, "");
	add_base(b, "file:%s%s%s", root, sep, "");
}

/*
 * The host suffix of the account's cloud into suffix: what follows
 * "<account>.blob." in the server's endpoint (core.chinacloudapi.cn,
 * core.usgovcloudapi.net, ...), else Azure's public core.windows.net (the
 * default endpoint, an emulator's or a proxy's).
 */
static void
azure_host_suffix(const char *account, const char *endpoint, char *suffix, size_t size)
{
	const char *host = strncmp(endpoint, "https://", 8) == 0 ? endpoint + 8 : NULL;
	size_t		alen = strlen(account);
	size_t		hlen;

	strlcpy(suffix, "core.windows.net", size);
	if (host == NULL || strncmp(host, account, alen) != 0 || strncmp(host + alen, ".blob.", 6) != 0)
		return;
	host += alen + 6;
	hlen = strcspn(host, "/:?#");
	if (hlen > 0 && hlen < size)
	{
		memcpy(suffix, host, hlen);
		suffix[hlen] = '\0';
	}
}

/*
 * The locations of an Azure container: ABFS (TLS or not), WASB (TLS or
 * not), the Blob and the Data Lake endpoints' URLs, on the host suffix of
 * the endpoint's cloud (a location of another cloud names another account,
 * even of the same name), and the URL of the server's endpoint when it is
 * another (the emulator's, http://127.0.0.1:10000/devstoreaccount1).
 */
void
store_bases_azure(StoreBases *b, const char *account, const char *container, const char *endpoint)
{
	char		own[STORE_BASE_LEN];
	char		suffix[128];
	char		dfs[STORE_BASE_LEN / 2];
	char		blob[STORE_BASE_LEN / 2];
	size_t		elen = strlen(endpoint);

	b->n = 0;
	b->urls = true;
	azure_host_suffix(account, endpoint, suffix, sizeof(suffix));
	snprintf(dfs, sizeof(dfs), "%s.dfs.%s", account, suffix);
	snprintf(blob, sizeof(blob), "%s.blob.%s", account, suffix);
	add_base(b, "abfss://%s@%s/%s", container, dfs, "");
	add_base(b, "abfs://%s@%s/%s", container, dfs, "");
	add_base(b, "wasbs://%s@%s/%s", container, blob, "");
	add_base(b, "wasb://%s@%s/%s", container, blob, "");
	add_base(b, "https://%s/%s/%s", blob, container, "");
	add_base(b, "https://%s/%s/%s", dfs, container, "");
	while (elen > 0 && endpoint[elen - 1] == '/')
		elen--;
	snprintf(own, sizeof(own), "https://%s", blob);
	if (elen > 0 && (elen != strlen(own) || strncmp(endpoint, own, elen) != 0) && elen < STORE_BASE_LEN / 2)
	{
		char		ep[STORE_BASE_LEN / 2];

		memcpy(ep, endpoint, elen);
		ep[elen] = '\0';
		add_base(b, "%s/%s/%s", ep, container, "");
	}
}

/*
 * Whether a location of a store whose forms are URLs has a query or a
 * fragment: no blob name (a blob's URL encodes '?' and '#'), and most
 * likely a SAS token (sig=...) pasted with the URL, which an error must
 * not echo.
 */
bool
store_bases_query(const StoreBases *b, const char *location)
{
	return b->urls && strpbrk(location, "?#") != NULL;
}

/*
 * The key a location names below one of the bases, as a pointer into
 * location (nothing allocated), or NULL when it is no object of the store:
 * another bucket, container or directory, a key with empty, "." or ".."
 * parts, or a URL with a query or a fragment.
 */
const char *
store_bases_key(const StoreBases *b, const char *location)
{
	if (store_bases_query(b, location))
		return NULL;
	for (int i = 0; i < b->n; i++)
	{
		size_t		blen = strlen(b->text[i]);
		const char *key = location + blen;

		if (strncmp(location, b->text[i], blen) == 0 && path_is_safe(key, strlen(key)))
			return key;
	}
	return NULL;
}
