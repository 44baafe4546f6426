/*
 * Unit tests of which object of a store a location names
 * (store/store_key.c): the forms of S3's, local directories' and Azure's
 * locations, and the keys that stay inside their store. Built and run by
 * test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "store/store_key.h"

#include "tap.h"

/* Whether store_bases_key gives want for location (NULL: no object of the store). */
static bool
key_is(const StoreBases *b, const char *location, const char *want)
{
	const char *got = store_bases_key(b, location);

	return want == NULL ? got == NULL : got != NULL && strcmp(got, want) == 0;
}

/* The S3 and local forms. */
static void
test_s3_and_files(void)
{
	StoreBases	b;

	store_bases_s3(&b, "lake");
	check(strcmp(b.text[0], "s3://lake/") == 0, "an S3 store's canonical base is s3://bucket/");
	check(key_is(&b, "s3://lake/t/data/a.parquet", "t/data/a.parquet"), "an s3:// location");
	check(key_is(&b, "s3a://lake/t/a.parquet", "t/a.parquet"), "Hadoop's s3a:// names the same object");
	check(key_is(&b, "s3n://lake/t/a.parquet", "t/a.parquet"), "and s3n://");
	check(key_is(&b, "s3://lake/t/a?b#c", "t/a?b#c") && !store_bases_query(&b, "s3://lake/t/a?b#c"),
		  "an S3 key may hold ? and # (s3:// is no URL with a query)");
	check(key_is(&b, "s3://lakehouse/t/a", NULL), "a bucket whose name begins with the store's is another");
	check(key_is(&b, "s3://lake/t/../../other/a", NULL), "a key with .. parts is refused");
	check(key_is(&b, "s3://lake//a", NULL), "a key with an empty part is refused");

	store_bases_file(&b, "/srv/lake");
	check(strcmp(b.text[0], "file:///srv/lake/") == 0, "a local store's canonical base is file:///root/");
	check(key_is(&b, "file:///srv/lake/t/a", "t/a"), "a file:/// location");
	check(key_is(&b, "file:/srv/lake/t/a", "t/a"), "Hadoop's file:/ names the same file");
	check(key_is(&b, "file:///srv/lakehouse/a", NULL), "a sibling directory is outside");
	store_bases_file(&b, "/");
	check(key_is(&b, "file:///t/a", "t/a"), "the root directory: file:///t/a");
	check(key_is(&b, "file:/t/a", "t/a"), "the root directory: file:/t/a");
}

/* Azure's forms: ABFS, WASB, the endpoints' URLs and an emulator's. */
static void
test_azure(void)
{
	StoreBases	b;

	store_bases_azure(&b, "acct", "lake", "https://acct.blob.core.windows.net");
	check(strcmp(b.text[0], "abfss://lake@acct.dfs.core.windows.net/") == 0,
		  "an Azure store's canonical base is its abfss:// form");
	check(key_is(&b, "abfss://lake@acct.dfs.core.windows.net/t/m.avro", "t/m.avro"), "abfss://");
	check(key_is(&b, "abfs://lake@acct.dfs.core.windows.net/t/m.avro", "t/m.avro"), "abfs://");
	check(key_is(&b, "wasbs://lake@acct.blob.core.windows.net/t/m.avro", "t/m.avro"), "wasbs://");
	check(key_is(&b, "https://acct.blob.core.windows.net/lake/t/m.avro", "t/m.avro"), "the Blob endpoint's URL");
	check(key_is(&b, "https://acct.dfs.core.windows.net/lake/t/m.avro", "t/m.avro"), "the Data Lake endpoint's URL");
	check(b.n == 6, "the default endpoint adds no seventh form");
	check(key_is(&b, "abfss://other@acct.dfs.core.windows.net/t/m.avro", NULL), "another container is outside");
	check(key_is(&b, "abfss://lake@acct2.dfs.core.windows.net/t/m.avro", NULL), "another account is outside");
	check(key_is(&b, "abfss://lake@acct.dfs.core.windows.net.evil.example/t", NULL),
		  "a host that only begins with the account's is outside");
	check(key_is(&b, "https://acct.blob.core.windows.net/lake/../x/y", NULL), "a key with .. parts is refused");
	check(key_is(&b, "s3://lake/t/m.avro", NULL), "an S3 location is no Azure object");
	check(key_is(&b, "https://acct.blob.core.windows.net/lake/t/m.jsonl?sv=2022-11-02&sig=abc", NULL) &&
		  store_bases_query(&b, "https://acct.blob.core.windows.net/lake/t/m.jsonl?sv=2022-11-02&sig=abc"),
		  "a URL with a query (a SAS token) is no blob of the store");
	check(key_is(&b, "abfss://lake@acct.dfs.core.windows.net/t/m.jsonl#x", NULL), "nor one with a fragment");

	store_bases_azure(&b, "acct", "lake", "https://acct.blob.core.chinacloudapi.cn/");
	check(key_is(&b, "abfss://lake@acct.dfs.core.chinacloudapi.cn/t/a", "t/a") &&
		  key_is(&b, "https://acct.blob.core.chinacloudapi.cn/lake/t/a", "t/a") && b.n == 6,
		  "another cloud's endpoint gives its host suffix to every form");
	check(key_is(&b, "abfss://lake@acct.dfs.core.windows.net/t/a", NULL),
		  "a same-named account of the public cloud is another account");

	store_bases_azure(&b, "devstoreaccount1", "lake", "http://127.0.0.1:10000/devstoreaccount1/");
	check(key_is(&b, "http://127.0.0.1:10000/devstoreaccount1/lake/t/a", "t/a"), "an emulator's URL");
	check(key_is(&b, "abfss://lake@devstoreaccount1.dfs.core.windows.net/t/a", "t/a"),
		  "ABFS names an emulator's blob by account and container");
}

int
main(void)
{
	test_s3_and_files();
	test_azure();
	return tap_done();
}
