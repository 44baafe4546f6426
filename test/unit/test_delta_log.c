/*
 * Unit tests of what a Delta Lake table's log proves (lake/delta_commit.c,
 * lake/delta_log.c): commit files as delta-rs 1.6 and Spark write them
 * (appends with the LSN in custom metadata or userMetadata, OPTIMIZE,
 * VACUUM, RESTORE, a DELETE without the LSN), malformed lines, the names
 * of _delta_log/, _last_checkpoint; the rule over a run of commits
 * (advance, maintenance, the LSN going down, a RESTORE into and before the
 * run, a table created again, a malformed commit that stops the run), the
 * walk back of a first read, and a version seen last that is gone.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include <malloc.h>

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"

#include "lake/delta_log.h"

#include "tap.h"

/*
 * PostgreSQL 15's frontend libpgcommon has no json_errdetail (the
 * server's has): this weak stand-in links there, and the library's own
 * wins wherever it has one.
 */
__attribute__((weak)) char *
json_errdetail(JsonParseErrorType error, JsonLexContext *lex)
{
	(void) lex;
	return psprintf("JSON parse error %d", (int) error);
}

/* delta-rs 1.6.6's first commit, with CommitProperties(custom_metadata={"finalize.lsn": ...}). */
static const char *V0 =
"{\"commitInfo\":{\"timestamp\":1796590684039,\"operation\":\"WRITE\",\"operationParameters\":{\"mode\":\"ErrorIfExists\"},"
"\"engineInfo\":\"delta-rs:py-1.6.6\",\"finalize.lsn\":\"0x0000002a000000100003\",\"clientVersion\":\"delta-rs.py-1.6.6\","
"\"operationMetrics\":{\"num_added_files\":1,\"num_removed_files\":0}}}\n"
"{\"protocol\":{\"minReaderVersion\":1,\"minWriterVersion\":2}}\n"
"{\"metaData\":{\"id\":\"626eb313-5879-481f-9e0e-7dd6781cd89c\",\"name\":null,\"format\":{\"provider\":\"parquet\",\"options\":{}},"
"\"schemaString\":\"{\\\"type\\\":\\\"struct\\\",\\\"fields\\\":[]}\",\"partitionColumns\":[],\"createdTime\":1796590684030,\"configuration\":{}}}\n"
"{\"add\":{\"path\":\"part-0.parquet\",\"partitionValues\":{},\"size\":740,\"modificationTime\":1796590684039,\"dataChange\":true,"
"\"stats\":\"{\\\"numRecords\\\":2}\",\"tags\":null}}\n";

/* An OPTIMIZE: its removes and add change no data (it carries an old LSN, which must not count). */
static const char *OPTIMIZE =
"{\"commitInfo\":{\"timestamp\":1796590684063,\"operation\":\"OPTIMIZE\",\"operationParameters\":{\"predicate\":\"[]\"},"
"\"finalize.lsn\":\"0x00000001000000100003\",\"readVersion\":1}}\n"
"{\"remove\":{\"path\":\"part-1.parquet\",\"dataChange\":false,\"deletionTimestamp\":1796590684060,\"size\":724}}\n"
"{\"add\":{\"path\":\"part-2.parquet\",\"partitionValues\":{},\"size\":782,\"dataChange\":false}}\n";

/* delta-rs's RESTORE to version 1 (operationParameters.version is a string). */
static const char *RESTORE1 =
"{\"commitInfo\":{\"timestamp\":1796590684071,\"operation\":\"RESTORE\",\"operationParameters\":{\"version\":\"1\"},\"readVersion\":2}}\n"
"{\"protocol\":{\"minReaderVersion\":1,\"minWriterVersion\":2}}\n"
"{\"add\":{\"path\":\"part-1.parquet\",\"partitionValues\":{},\"size\":724,\"dataChange\":true}}\n"
"{\"remove\":{\"path\":\"part-2.parquet\",\"dataChange\":true,\"size\":782}}\n"
"{\"metaData\":{\"id\":\"626eb313-5879-481f-9e0e-7dd6781cd89c\",\"format\":{\"provider\":\"parquet\",\"options\":{}},\"configuration\":{}}}\n";

/* delta-rs 1.6.6's DeltaTable.create(mode="overwrite"): a new metaData.id, every file removed, no LSN. */
static const char *REPLACE =
"{\"commitInfo\":{\"timestamp\":1796594602131,\"operation\":\"CREATE OR REPLACE TABLE\",\"operationParameters\":"
"{\"location\":\"file:///tmp/t/\",\"mode\":\"Overwrite\"},\"engineInfo\":\"delta-rs:py-1.6.6\"}}\n"
"{\"protocol\":{\"minReaderVersion\":1,\"minWriterVersion\":2}}\n"
"{\"metaData\":{\"id\":\"44e66d04-e062-4eb7-85aa-bfd6963a2cd8\",\"format\":{\"provider\":\"parquet\",\"options\":{}},"
"\"partitionColumns\":[],\"configuration\":{}}}\n"
"{\"remove\":{\"path\":\"part-0.parquet\",\"dataChange\":true,\"deletionTimestamp\":1796594602131,\"size\":486}}\n";

static DeltaLsnFrom from_key = {DELTA_LSN_COMMIT_INFO_KEY, "finalize.lsn"};

/* Parses a commit text of a version with lsn_from. */
static DeltaCommit
parse(const char *text, int64_t version, const DeltaLsnFrom *from)
{
	DeltaCommit c;

	delta_parse_commit(text, strlen(text), from, version, NULL, &c);
	return c;
}

/* A data commit of a version carrying an LSN text (NULL: none), as delta-rs writes one. */
static DeltaCommit
append(int64_t version, const char *lsn)
{
	char	   *text = psprintf("{\"commitInfo\":{\"timestamp\":%lld,\"operation\":\"WRITE\"%s%s%s}}\n"
								"{\"add\":{\"path\":\"p%lld.parquet\",\"size\":1,\"dataChange\":true}}\n",
								(long long) (1000 + version), lsn ? ",\"finalize.lsn\":\"" : "", lsn ? lsn : "",
								lsn ? "\"" : "", (long long) version);

	return parse(text, version, &from_key);
}

/* A RESTORE of a version to an older one. */
static DeltaCommit
restore_to(int64_t version, int64_t to)
{
	char	   *text = psprintf("{\"commitInfo\":{\"timestamp\":%lld,\"operation\":\"RESTORE\","
								"\"operationParameters\":{\"version\":\"%lld\"}}}\n"
								"{\"remove\":{\"path\":\"x.parquet\",\"dataChange\":true}}\n",
								(long long) (1000 + version), (long long) to);

	return parse(text, version, &from_key);
}

/* What was recorded: a version and its LSN. */
static DeltaSeen
seen_at(int64_t version, const char *lsn)
{
	DeltaSeen	s;

	memset(&s, 0, sizeof(s));
	s.any = true;
	s.version = version;
	s.timestamp_ms = 1000 + version;
	if (!lsn_parse_any(lsn, &s.lsn))
		exit(1);
	return s;
}

/* Whether an LSN has a text. */
static bool
lsn_is(const Lsn *l, const char *text)
{
	Lsn			want;

	return lsn_parse_any(text, &want) && lsn_cmp(l, &want) == 0;
}

/* The parser: what real commits say, and malformed ones. */
static void
test_parse(void)
{
	DeltaCommit c = parse(V0, 0, &from_key);
	DeltaLsnFrom um = {DELTA_LSN_USER_METADATA, NULL};
	DeltaLsnFrom umk = {DELTA_LSN_USER_METADATA_KEY, "lsn"};

	check(c.malformed == NULL && c.data_change && !c.restore && c.timestamp_ms == 1796590684039,
		  "delta-rs's first commit: data, its timestamp");
	check(c.lsn_text && strcmp(c.lsn_text, "0x0000002a000000100003") == 0, "the LSN of a top-level commitInfo key");
	check(c.table_id && strcmp(c.table_id, "626eb313-5879-481f-9e0e-7dd6781cd89c") == 0, "metaData.id");
	c = parse(OPTIMIZE, 2, &from_key);
	check(c.malformed == NULL && !c.data_change && c.operation && strcmp(c.operation, "OPTIMIZE") == 0,
		  "OPTIMIZE changes no data");
	c = parse(RESTORE1, 3, &from_key);
	check(c.restore && c.has_restore_version && c.restore_version == 1 && c.data_change, "RESTORE to version \"1\"");
	c = parse("{\"commitInfo\":{\"timestamp\":5,\"inCommitTimestamp\":7,\"userMetadata\":\"0x0000002a000000100003\"}}\n"
			  "{\"add\":{\"path\":\"a\",\"dataChange\":true}}", 1, &um);
	check(c.lsn_text && strcmp(c.lsn_text, "0x0000002a000000100003") == 0 && c.timestamp_ms == 7,
		  "the raw userMetadata (Spark), inCommitTimestamp first");
	c = parse("{\"commitInfo\":{\"userMetadata\":\"{\\\"lsn\\\": \\\"0000002a:00000010:0003\\\", \\\"job\\\": 1}\"}}\n"
			  "{\"add\":{\"path\":\"a\",\"dataChange\":true}}", 1, &umk);
	check(c.lsn_text && strcmp(c.lsn_text, "0000002a:00000010:0003") == 0, "a key of userMetadata's JSON");
	c = parse("{\"commitInfo\":{\"userMetadata\":\"not json\"}}", 1, &umk);
	check(c.lsn_problem != NULL && c.lsn_text == NULL, "userMetadata that is no JSON object: a problem");
	c = parse("{\"commitInfo\":{\"userMetadata\":\"{\\\"lsn\\\":1}, \\\"x\\\":{\\\"lsn\\\":\\\"0x1\\\"}\"}}", 1, &umk);
	check(c.lsn_problem != NULL && c.lsn_text == NULL, "userMetadata with trailing text is no object");
	c = parse("{\"commitInfo\":{\"finalize.lsn\":42}}", 1, &from_key);
	check(c.lsn_problem != NULL, "an LSN that is a number: a problem");
	c = parse("{\"commitInfo\":{\"timestamp\":1}}\n{\"add\":{\"path\":\"a\",\"dataChange\":tru", 1, &from_key);
	check(c.malformed != NULL && strstr(c.malformed, "line 2") != NULL, "a cut line is malformed, named by its number");
	c = parse("[1]\n", 1, &from_key);
	check(c.malformed != NULL, "an array is no action");
	c = parse("\n\n", 1, &from_key);
	check(c.malformed != NULL, "an empty commit is malformed");
	c = parse("{\"commitInfo\":{\"x\":\"\xff\"}}", 1, &from_key);
	check(c.malformed != NULL, "invalid UTF-8 is malformed");
}

/* Scalars before any key (arrays where objects are expected) must not crash the parser. */
static void
test_scalar_before_key(void)
{
	DeltaLsnFrom umk = {DELTA_LSN_USER_METADATA_KEY, "lsn"};
	int64_t		v = -1;
	DeltaCommit c;

	c = parse("{\"commitInfo\":{\"operationParameters\":[\"x\"]}}", 1, &from_key);
	check(c.malformed == NULL && !c.has_restore_version, "operationParameters that is an array: no crash");
	c = parse("{\"commitInfo\":{\"operationParameters\":{\"a\":1}}}\n{\"metaData\":[\"x\",{\"id\":\"y\"}]}", 1,
			  &from_key);
	check(c.malformed == NULL && c.table_id == NULL, "a key of a line before does not name a scalar of the next");
	check(!delta_last_checkpoint("[\"x\"]", 5, &v), "_last_checkpoint that is an array: no version, no crash");
	c = parse("{\"commitInfo\":{\"userMetadata\":\"[\\\"x\\\"]\"}}", 1, &umk);
	check(c.lsn_problem != NULL && c.lsn_text == NULL, "userMetadata that is an array: a problem, no crash");
	c = parse("{\"commitInfo\":{\"userMetadata\":\"{\\\"commitInfo\\\":{\\\"operationParameters\\\":[1]}}\"}}",
			  1, &umk);
	check(c.lsn_text == NULL, "a commitInfo nested in userMetadata: no crash");
	c = parse("[\"x\"]\n", 1, &from_key);
	check(c.malformed != NULL, "a line that is an array of strings is malformed");
}

/* Names of _delta_log/, _last_checkpoint, lsn_from. */
static void
test_names(void)
{
	int64_t		v = -1;
	char		name[32];
	DeltaLsnFrom f;

	check(delta_log_name("00000000000000000012.json", &v) == DELTA_FILE_COMMIT && v == 12, "a commit's name");
	check(delta_log_name("00000000000000000010.checkpoint.parquet", &v) == DELTA_FILE_CHECKPOINT && v == 10,
		  "a checkpoint's name");
	check(delta_log_name("00000000000000000010.checkpoint.0000000001.0000000002.parquet", &v) == DELTA_FILE_CHECKPOINT,
		  "a multi-part checkpoint");
	check(delta_log_name("00000000000000000010.crc", &v) == DELTA_FILE_OTHER, "a .crc file is neither");
	check(delta_log_name("_last_checkpoint", &v) == DELTA_FILE_OTHER, "_last_checkpoint is neither");
	check(delta_log_name("0000000000000000001.json", &v) == DELTA_FILE_OTHER, "19 digits are no version");
	delta_commit_name(7, name);
	check(strcmp(name, "00000000000000000007.json") == 0, "a version's commit name");
	check(delta_last_checkpoint("{\"version\":6,\"size\":6}", 22, &v) && v == 6, "_last_checkpoint's version");
	check(!delta_last_checkpoint("{\"version\":\"6\"}", 15, &v), "a version that is no number");
	check(delta_lsn_from_parse("userMetadata", &f) && f.place == DELTA_LSN_USER_METADATA, "lsn_from userMetadata");
	check(delta_lsn_from_parse("userMetadata.lsn", &f) && f.place == DELTA_LSN_USER_METADATA_KEY &&
		  strcmp(f.key, "lsn") == 0, "lsn_from userMetadata.<key>");
	check(delta_lsn_from_parse("finalize.lsn", &f) && f.place == DELTA_LSN_COMMIT_INFO_KEY, "lsn_from a commitInfo key");
	check(!delta_lsn_from_parse("userMetadata.", &f), "lsn_from userMetadata. names nothing");
}

/* The rule over a run: advance, maintenance, the LSN going down. */
static void
test_judge(void)
{
	DeltaSeen	s = seen_at(1, "0x0000002a000000100003");
	DeltaCommit run[4];
	DeltaVerdict v;

	run[0] = append(2, "0x0000002b000000100003");
	run[1] = parse(OPTIMIZE, 3, &from_key);
	run[2] = append(4, NULL);
	v = delta_judge(&s, run, 3);
	check(v.outcome == DELTA_ADVANCE && lsn_is(&v.lsn, "0x0000002b000000100003") && v.head_version == 4 &&
		  v.carrier_version == 2 && v.head_timestamp_ms == 1004,
		  "an append advances; OPTIMIZE (with an old LSN) and a commit without one neither advance nor hold");
	run[0] = parse(OPTIMIZE, 2, &from_key);
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_SAME && lsn_is(&v.lsn, "0x0000002a000000100003") && v.head_version == 2,
		  "maintenance alone: the same LSN at a new head");
	/* delta-rs 1.6.6's empty append (a pipeline's heartbeat): a write without files. */
	run[0] = parse("{\"commitInfo\":{\"timestamp\":1796592652927,\"operation\":\"WRITE\",\"operationParameters\":"
				   "{\"mode\":\"Append\"},\"operationMetrics\":{\"num_added_files\":0},"
				   "\"finalize.lsn\":\"0x0000002b000000100003\"}}\n", 2, &from_key);
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_ADVANCE && lsn_is(&v.lsn, "0x0000002b000000100003"),
		  "an empty append (no file) with the LSN advances");
	run[0] = parse("{\"commitInfo\":{\"timestamp\":1,\"operation\":\"VACUUM END\",\"operationParameters\":"
				   "{\"status\":\"COMPLETED\"},\"finalize.lsn\":\"0x0000002b000000100003\"}}\n", 2, &from_key);
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_SAME && lsn_is(&v.lsn, "0x0000002a000000100003"),
		  "VACUUM (no file, no data written) with an LSN neither advances nor holds");
	run[0] = append(2, "0x00000029000000100003");
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, "0x00000029000000100003"),
		  "the LSN going down is a rollback to it");
	run[0] = append(2, "0x0000002a000000100003");
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_SAME, "the same LSN again is no advance");
	v = delta_judge(&s, run, 0);
	check(v.outcome == DELTA_SAME && v.head_version == 1, "no commit: the same");
}

/* RESTORE and a table created again. */
static void
test_rollbacks(void)
{
	DeltaSeen	s = seen_at(3, "0x0000002c000000100003");
	DeltaCommit run[4];
	DeltaVerdict v;

	run[0] = append(4, "0x0000002d000000100003");
	run[1] = restore_to(5, 3);
	v = delta_judge(&s, run, 2);
	check(v.outcome == DELTA_SAME && lsn_is(&v.lsn, "0x0000002c000000100003") && v.head_version == 5,
		  "a RESTORE to the version recorded: it still holds what was recorded (the claim between, never "
		  "recorded, is gone)");
	run[0] = append(4, "0x0000002d000000100003");
	run[1] = append(5, "0x0000002e000000100003");
	run[2] = restore_to(6, 4);
	v = delta_judge(&s, run, 3);
	check(v.outcome == DELTA_ADVANCE && lsn_is(&v.lsn, "0x0000002d000000100003") && v.head_version == 6,
		  "a RESTORE to a version of the run above the one recorded takes back no recorded claim");
	run[0] = append(4, "0x0000002e000000100003");
	run[1] = append(5, "0x0000002d000000100003");
	v = delta_judge(&s, run, 2);
	check(v.outcome == DELTA_ADVANCE && lsn_is(&v.lsn, "0x0000002d000000100003"),
		  "an LSN of the run going down, still above the one recorded: no rollback");
	run[0] = restore_to(4, 1);
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_ROLLBACK && !v.held_known && !v.has_lsn,
		  "a RESTORE before the run, not resolved: nothing provable");
	run[0].restored_known = true;
	lsn_parse_any("0x00000010000000100003", &run[0].restored_lsn);
	run[1] = append(5, "0x0000002e000000100003");
	v = delta_judge(&s, run, 2);
	check(v.outcome == DELTA_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, "0x00000010000000100003") &&
		  lsn_is(&v.lsn, "0x0000002e000000100003") && strstr(v.reason, "RESTORE") != NULL,
		  "a RESTORE resolved by the reader, then an append: held is the restored LSN, the claim the append's");
	s.table_id = "626eb313-5879-481f-9e0e-7dd6781cd89c";
	run[0] = parse(V0, 4, &from_key);
	run[0].table_id = "another";
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_ROLLBACK && !v.held_known && lsn_is(&v.lsn, "0x0000002a000000100003") &&
		  strcmp(v.table_id, "another") == 0, "another metaData.id: a rollback to nothing, then its own claim");
	run[0] = parse(RESTORE1, 4, &from_key);
	run[1] = append(5, "0x00000001000000100003");
	v = delta_judge(&s, run, 2);
	check(v.outcome == DELTA_ROLLBACK && !v.held_known, "two rollbacks: the lowest held counts (nothing)");
	s.table_id = NULL;
	run[0] = parse(REPLACE, 4, &from_key);
	check(run[0].removes_data, "CREATE OR REPLACE TABLE removes data");
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_ROLLBACK && !v.held_known && !v.has_lsn,
		  "CREATE OR REPLACE TABLE while the id is unknown: a rollback to nothing provable");
	s.table_id = "44e66d04-e062-4eb7-85aa-bfd6963a2cd8";
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_ROLLBACK && !v.has_lsn, "a replace that keeps the id: a rollback all the same");
}

/* Malformed commits stop the run; a bad LSN followed by a valid one does not. */
static void
test_malformed(void)
{
	DeltaSeen	s = seen_at(1, "0x0000002a000000100003");
	DeltaCommit run[3];
	DeltaVerdict v;

	run[0] = parse("{\"commitInfo\":{}\n", 2, &from_key);
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_MALFORMED && v.malformed_version == 2 && v.reason != NULL, "a first malformed commit");
	run[0] = append(2, "0x0000002b000000100003");
	run[1] = parse("garbage", 3, &from_key);
	run[2] = restore_to(4, 0);
	v = delta_judge(&s, run, 3);
	check(v.outcome == DELTA_ADVANCE && v.head_version == 2 && v.judged == 1 && v.malformed_version == 3,
		  "a malformed commit stops the run after what came before (a RESTORE past it waits)");
	run[0] = append(2, "not an lsn");
	run[1] = append(3, "0x0000002c000000100003");
	v = delta_judge(&s, run, 2);
	check(v.outcome == DELTA_ADVANCE && lsn_is(&v.lsn, "0x0000002c000000100003"),
		  "a bad LSN followed by a valid carrier is passed");
	v = delta_judge(&s, run, 1);
	check(v.outcome == DELTA_MALFORMED && v.malformed_version == 2, "a bad newest LSN is malformed");
}

/* The walk back of a first read, and a version seen last that is gone. */
static void
test_back_and_gone(void)
{
	DeltaBack	w = {0};
	DeltaCommit c;
	int64_t		next = -1;
	Lsn			lsn;
	DeltaSeen	s = seen_at(1, "0x0000002a000000100003");

	c = parse(OPTIMIZE, 5, &from_key);
	check(delta_back_step(&w, &c, &next, &lsn) == DELTA_BACK_MORE && next == 4, "maintenance: the one before");
	c = restore_to(4, 1);
	check(delta_back_step(&w, &c, &next, &lsn) == DELTA_BACK_MORE && next == 1, "a RESTORE: its version");
	c = append(1, "0x0000002b000000100003");
	check(delta_back_step(&w, &c, &next, &lsn) == DELTA_BACK_FOUND && lsn_is(&lsn, "0x0000002b000000100003"),
		  "the newest carrier");
	c = append(0, NULL);
	check(delta_back_step(&w, &c, &next, &lsn) == DELTA_BACK_NONE, "version 0 without a carrier: nothing");
	c = append(3, "bad");
	check(delta_back_step(&w, &c, &next, &lsn) == DELTA_BACK_MALFORMED, "a bad newest carrier");
	memset(&w, 0, sizeof(w));
	w.table_id = "new";
	c = parse(V0, 0, &from_key);
	check(delta_back_step(&w, &c, &next, &lsn) == DELTA_BACK_NONE, "another table's commit ends the walk");
	memset(&w, 0, sizeof(w));
	c = parse(REPLACE, 41, &from_key);
	check(delta_back_step(&w, &c, &next, &lsn) == DELTA_BACK_NONE && w.at == 41,
		  "a first read from a CREATE OR REPLACE TABLE proves nothing before it");
	c = parse("{\"commitInfo\":{\"timestamp\":1,\"operation\":\"CREATE BLOOMFILTER INDEX\"}}\n", 40, &from_key);
	check(delta_back_step(&w, &c, &next, &lsn) == DELTA_BACK_MORE && next == 39,
		  "an index created is no table created: the walk goes on");
	c = append(1, NULL);
	check(delta_seen_gone(&s, true, &c) == NULL, "the version seen, the same commit time: still there");
	c.timestamp_ms = 99;
	check(delta_seen_gone(&s, true, &c) != NULL, "written again with another time: gone");
	check(delta_seen_gone(&s, false, NULL) != NULL, "no longer listed: gone");
}

/* What a consumer records to know its store and the version read last again. */
static void
test_identity(void)
{
	char	   *seen = delta_identity("16384 s3 http://h lake", "740 \"abc\"");

	check(delta_identity_gone(NULL, "16384 s3 http://h lake", "1 x") == NULL, "nothing recorded: nothing compared");
	check(delta_identity_gone(seen, "16384 s3 http://h lake", "740 \"abc\"") == NULL, "the same store and commit");
	check(delta_identity_gone(seen, "16384 s3 http://h lake", NULL) == NULL, "the commit not listed yet: the store alone");
	check(delta_identity_gone(seen, "16390 s3 http://h lake", NULL) != NULL, "the server created again: gone");
	check(delta_identity_gone(seen, "16384 s3 http://h other", "740 \"abc\"") != NULL, "another bucket: gone");
	check(delta_identity_gone(seen, "16384 s3 http://h lake2", "740 \"abc\"") != NULL, "a longer bucket name: gone");
	check(delta_identity_gone(seen, "16384 s3 http://h lake", "740 \"abd\"") != NULL,
		  "the commit read last written again (another checksum): gone");
	check(delta_identity_gone(seen, "16384 s3 http://h lake", "741 \"abc\"") != NULL, "another size: gone");
	check(delta_identity_gone(delta_identity("file /d", NULL), "file /d", "1 x") == NULL,
		  "a commit identity never recorded is not compared");
}

/* What is kept of a parsed commit once its parse's memory is freed: copies, each capped. */
static void
test_keep(void)
{
	char	   *big = palloc(20001);
	char	   *id_a = palloc(1001);
	DeltaCommit parsed;
	DeltaCommit kept;
	DeltaCommit other;
	char	   *text;

	memset(big, '0', 20000);
	big[20000] = '\0';
	memset(id_a, 'a', 1000);
	id_a[1000] = '\0';
	text = psprintf("{\"commitInfo\":{\"operation\":\"WRITE\",\"finalize.lsn\":\"0x%s\"}}\n"
					"{\"metaData\":{\"id\":\"%s\"}}\n{\"add\":{\"path\":\"a\",\"dataChange\":true}}\n", big, id_a);
	parsed = parse(text, 3, &from_key);
	delta_commit_keep(&parsed, &kept);
	check(kept.lsn_text == NULL && kept.lsn_problem != NULL, "an LSN of 20,000 characters is kept as no LSN");
	check(kept.table_id != NULL && strlen(kept.table_id) < 2 * DELTA_KEEP_MAX, "a long metaData.id is kept capped");
	id_a[999] = 'b';
	text = psprintf("{\"metaData\":{\"id\":\"%s\"}}\n", id_a);
	other = parse(text, 4, &from_key);
	delta_commit_keep(&other, &other);
	check(strcmp(kept.table_id, other.table_id) != 0, "two long ids that differ at their end stay apart");
	parsed = parse(V0, 0, &from_key);
	delta_commit_keep(&parsed, &kept);
	check(kept.lsn_text != parsed.lsn_text && strcmp(kept.lsn_text, "0x0000002a000000100003") == 0 &&
		  kept.operation != parsed.operation && strcmp(kept.operation, "WRITE") == 0 &&
		  strcmp(kept.table_id, "626eb313-5879-481f-9e0e-7dd6781cd89c") == 0 && kept.data_change,
		  "a commit's strings are copied out, the rest as parsed");
	/* A metaData.id whose 128th byte is inside a character: cut before it, still UTF-8. */
	memset(id_a, 'a', 1000);
	id_a[127] = '\xc3';
	id_a[128] = '\xa9';
	text = psprintf("{\"metaData\":{\"id\":\"%s\"}}\n", id_a);
	parsed = parse(text, 5, &from_key);
	delta_commit_keep(&parsed, &kept);
	check(parsed.malformed == NULL &&
		  pg_encoding_verifymbstr(PG_UTF8, kept.table_id, strlen(kept.table_id)) == (int) strlen(kept.table_id) &&
		  strncmp(kept.table_id, id_a, 127) == 0 && strncmp(kept.table_id + 127, "...", 3) == 0,
		  "a long metaData.id is cut at a character's end");
}

/* Runs every test. */
/*
 * What parsing a hostile commit leaves allocated: the parser hands over a
 * string for every element and key, and each one not kept must be freed
 * (a 64 MB line of [1,1,...] made half a gigabyte of them). Here a line of
 * 200,000 elements and keys, the operation and metaData.id kept: what
 * stays is far below one allocation per element (malloc's own count; the
 * unit tests' palloc is malloc).
 */
static void
test_tokens_freed(void)
{
	StringInfoData text;
	DeltaCommit c;
	size_t		before;
	size_t		after;

	initStringInfo(&text);
	appendStringInfoString(&text, "{\"commitInfo\":{\"operation\":\"WRITE\",\"operation\":\"MERGE\","
						   "\"finalize.lsn\":\"0x0000002a000000100003\",\"n\":[1");
	for (int i = 0; i < 100000; i++)
		appendStringInfoString(&text, ",1");
	appendStringInfoString(&text, "],\"deep\":{\"a\":{");
	for (int i = 0; i < 100000; i++)
		appendStringInfo(&text, "%s\"k%d\":1", i > 0 ? "," : "", i);
	appendStringInfoString(&text, "}}}}\n{\"metaData\":{\"id\":\"x\",\"id\":\"y\"}}\n");
	before = mallinfo2().uordblks;
	delta_parse_commit(text.data, text.len, &from_key, 1, NULL, &c);
	after = mallinfo2().uordblks;
	check(c.malformed == NULL && strcmp(c.operation, "MERGE") == 0 && strcmp(c.table_id, "y") == 0 &&
		  strcmp(c.lsn_text, "0x0000002a000000100003") == 0, "a commit of 200,000 elements and keys is read");
	check(after < before + 64 * 1024, "the strings of its elements and keys are freed once read");
}

int
main(void)
{
	test_parse();
	test_scalar_before_key();
	test_names();
	test_judge();
	test_rollbacks();
	test_malformed();
	test_back_and_gone();
	test_identity();
	test_keep();
	test_tokens_freed();
	return tap_done();
}
