/*
 * store_key.h
 *     Which object of a store a location names (pure: unit-tested in
 *     test/unit/test_store_key.c): the forms of a store's locations (its
 *     "bases") and the safe keys below them.
 */
#ifndef FINALIZE_STORE_KEY_H
#define FINALIZE_STORE_KEY_H

/* The most location forms of one store, and the longest one. */
#define STORE_MAX_BASES 8
#define STORE_BASE_LEN 600

/*
 * The prefixes a store's locations begin with, the canonical one first
 * ("s3://bucket/", "file:///root/", "abfss://c@acct.dfs.core.windows.net/"):
 * a location is one of its objects when it begins with one of them and the
 * rest is a safe key.
 */
typedef struct StoreBases
{
	char		text[STORE_MAX_BASES][STORE_BASE_LEN];
	int			n;
	bool		urls;			/* the forms are URLs (Azure's): a '?' or '#'
								 * starts a query or a fragment, not a key */
} StoreBases;

extern bool path_is_safe(const char *path, int len);
extern void store_bases_s3(StoreBases *b, const char *bucket);
extern void store_bases_file(StoreBases *b, const char *root);
extern void store_bases_azure(StoreBases *b, const char *account, const char *container, const char *endpoint);
extern const char *store_bases_key(const StoreBases *b, const char *location);
extern bool store_bases_query(const StoreBases *b, const char *location);

#endif							/* FINALIZE_STORE_KEY_H */
