/*
 * Unit tests of the Iceberg manifest reader (lake/avro_manifest.c,
 * lake/manifest_read.c): real Avro object container files written here with
 * libavro's own writer, in memory, with Iceberg's manifest list and
 * manifest schemas (v1 and v2, field ids as the spec gives them), read back
 * through the reader's API: every field of v1 and v2 lists and manifests,
 * optional fields as unions with null, a partition tuple with an identity
 * string, a day-transform date (int) and a timestamp (long), other
 * partition types' text, a data file's lower and upper bounds (maps of
 * column id to bytes, null, empty or not) and null value counts (column id
 * to long), 10,000 entries over many blocks (the null,
 * deflate, snappy and lzma codecs), the header's key-value metadata Iceberg writes, a callback that
 * stops the read, and refusals with their messages: not Avro, truncated
 * anywhere, a corrupt sync marker, an unknown codec, a required field
 * missing, of a wrong type or null, a partition field of no primitive type.
 * Built and run by test/offline/test_unit_c.py; prints TAP. Run with
 * arguments (list|manifest|meta FILE) it prints what it reads of a file as
 * JSON lines instead (test_avro_manifest_pyiceberg.py uses that).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <avro.h>
#include <lzma.h>
#include <snappy-c.h>
#include <zlib.h>

#include "lake/alloc_watch.h"
#include "lake/avro_manifest.h"

#include "tap.h"

/* A JSON text written with ' for " (readable schemas); a static copy. */
static const char *
json(const char *text)
{
	static char buf[8192];
	size_t		i;

	for (i = 0; text[i] && i < sizeof(buf) - 1; i++)
		buf[i] = text[i] == '\'' ? '"' : text[i];
	buf[i] = '\0';
	return buf;
}

/* The partition summaries of a manifest list (read by no one here: skipped). */
#define PARTITIONS_FIELD \
	"{'name':'partitions','type':['null',{'type':'array','element-id':508,'items':" \
	"{'type':'record','name':'r508','fields':[{'name':'contains_null','type':'boolean','field-id':509}," \
	"{'name':'contains_nan','type':['null','boolean'],'default':null,'field-id':518}," \
	"{'name':'lower_bound','type':['null','bytes'],'default':null,'field-id':510}," \
	"{'name':'upper_bound','type':['null','bytes'],'default':null,'field-id':511}]}}]," \
	"'default':null,'field-id':507}"

/* v1, as Iceberg's Java writer named the counts. */
static const char LIST_V1[] =
"{'type':'record','name':'manifest_file','fields':["
"{'name':'manifest_path','type':'string','field-id':500},"
"{'name':'manifest_length','type':'long','field-id':501},"
"{'name':'partition_spec_id','type':'int','field-id':502},"
"{'name':'added_snapshot_id','type':['null','long'],'default':null,'field-id':503},"
"{'name':'added_data_files_count','type':['null','int'],'default':null,'field-id':504},"
"{'name':'existing_data_files_count','type':['null','int'],'default':null,'field-id':505},"
"{'name':'deleted_data_files_count','type':['null','int'],'default':null,'field-id':506},"
PARTITIONS_FIELD ","
"{'name':'added_rows_count','type':['null','long'],'default':null,'field-id':512},"
"{'name':'existing_rows_count','type':['null','long'],'default':null,'field-id':513},"
"{'name':'deleted_rows_count','type':['null','long'],'default':null,'field-id':514}]}";

static const char LIST_V2[] =
"{'type':'record','name':'manifest_file','fields':["
"{'name':'manifest_path','type':'string','field-id':500},"
"{'name':'manifest_length','type':'long','field-id':501},"
"{'name':'partition_spec_id','type':'int','field-id':502},"
"{'name':'content','type':'int','field-id':517},"
"{'name':'sequence_number','type':'long','field-id':515},"
"{'name':'min_sequence_number','type':'long','field-id':516},"
"{'name':'added_snapshot_id','type':'long','field-id':503},"
"{'name':'added_files_count','type':'int','field-id':504},"
"{'name':'existing_files_count','type':'int','field-id':505},"
"{'name':'deleted_files_count','type':'int','field-id':506},"
"{'name':'added_rows_count','type':'long','field-id':512},"
"{'name':'existing_rows_count','type':'long','field-id':513},"
"{'name':'deleted_rows_count','type':'long','field-id':514},"
PARTITIONS_FIELD ","
"{'name':'key_metadata','type':['null','bytes'],'default':null,'field-id':519}]}";

/* identity(region), day(ts) (a date: int days), identity(event_ts) (long micros) */
#define PARTITION_RECORD \
	"{'name':'partition','field-id':102,'type':{'type':'record','name':'r102','fields':[" \
	"{'name':'region','type':['null','string'],'default':null,'field-id':1000}," \
	"{'name':'ts_day','type':['null',{'type':'int','logicalType':'date'}],'default':null,'field-id':1001}," \
	"{'name':'event_ts','type':['null',{'type':'long','logicalType':'timestamp-micros'}],'default':null,'field-id':1002}]}}"

#define MAP_FIELD(name, id, k, v, vt) \
	"{'name':'" name "','type':['null',{'type':'array','logicalType':'map','items':{'type':'record'," \
	"'name':'k" #k "_v" #v "','fields':[{'name':'key','type':'int','field-id':" #k "}," \
	"{'name':'value','type':'" vt "','field-id':" #v "}]}}],'default':null,'field-id':" #id "}"

static const char ENTRY_V1[] =
"{'type':'record','name':'manifest_entry','fields':["
"{'name':'status','type':'int','field-id':0},"
"{'name':'snapshot_id','type':'long','field-id':1},"
"{'name':'data_file','field-id':2,'type':{'type':'record','name':'r2','fields':["
"{'name':'file_path','type':'string','field-id':100},"
"{'name':'file_format','type':'string','field-id':101},"
PARTITION_RECORD ","
"{'name':'record_count','type':'long','field-id':103},"
"{'name':'file_size_in_bytes','type':'long','field-id':104},"
"{'name':'block_size_in_bytes','type':'long','field-id':105},"
MAP_FIELD("value_counts", 109, 119, 120, "long") ","
"{'name':'key_metadata','type':['null','bytes'],'default':null,'field-id':131}]}}]}";

static const char ENTRY_V2[] =
"{'type':'record','name':'manifest_entry','fields':["
"{'name':'status','type':'int','field-id':0},"
"{'name':'snapshot_id','type':['null','long'],'default':null,'field-id':1},"
"{'name':'sequence_number','type':['null','long'],'default':null,'field-id':3},"
"{'name':'file_sequence_number','type':['null','long'],'default':null,'field-id':4},"
"{'name':'data_file','field-id':2,'type':{'type':'record','name':'r2','fields':["
"{'name':'content','type':'int','field-id':134},"
"{'name':'file_path','type':'string','field-id':100},"
"{'name':'file_format','type':'string','field-id':101},"
PARTITION_RECORD ","
"{'name':'record_count','type':'long','field-id':103},"
"{'name':'file_size_in_bytes','type':'long','field-id':104},"
MAP_FIELD("column_sizes", 108, 117, 118, "long") ","
MAP_FIELD("null_value_counts", 110, 121, 122, "long") ","
MAP_FIELD("lower_bounds", 125, 126, 127, "bytes") ","
MAP_FIELD("upper_bounds", 128, 129, 130, "bytes") ","
"{'name':'split_offsets','type':['null',{'type':'array','items':'long','element-id':133}],'default':null,'field-id':132},"
"{'name':'equality_ids','type':['null',{'type':'array','items':'int','element-id':136}],'default':null,'field-id':135},"
"{'name':'sort_order_id','type':['null','int'],'default':null,'field-id':140},"
"{'name':'referenced_data_file','type':['null','string'],'default':null,'field-id':143}]}}]}";

/* ---- writing, with libavro's writer ---- */

typedef void (*FillFn) (avro_value_t *rec, int i);

/* The child of a record by name (a variant schema may lack it: then false). */
static bool
lookup(avro_value_t *rec, const char *name, avro_value_t *out)
{
	return avro_value_get_by_name(rec, name, out, NULL) == 0;
}

/* The child of a record that the test's schemas all have. */
static avro_value_t
child(avro_value_t *rec, const char *name)
{
	avro_value_t c;

	if (!lookup(rec, name, &c))
	{
		printf("Bail out! no field %s in the test's schema\n", name);
		exit(1);
	}
	return c;
}

/*
 * The value to set in a field: the non-null branch when it is a union;
 * false when the record has no such field (a variant schema without it).
 */
static bool
target(avro_value_t *rec, const char *name, avro_value_t *out)
{
	avro_value_t c;

	if (!lookup(rec, name, &c))
		return false;
	if (avro_value_get_type(&c) != AVRO_UNION)
		*out = c;
	else
		avro_value_set_branch(&c, 1, out);
	return true;
}

/* Sets a union field to null. */
static void
set_null(avro_value_t *rec, const char *name)
{
	avro_value_t c,
				b;

	if (lookup(rec, name, &c) && avro_value_set_branch(&c, 0, &b) == 0)
		avro_value_set_null(&b);
}

/* Setters of a field, through a union's non-null branch when it has one. */
static void
set_long(avro_value_t *rec, const char *name, int64_t v)
{
	avro_value_t t;

	if (target(rec, name, &t) && avro_value_set_long(&t, v) != 0)
		avro_value_set_int(&t, (int32_t) v);	/* a variant with an int */
}

static void
set_int(avro_value_t *rec, const char *name, int32_t v)
{
	avro_value_t t;

	if (target(rec, name, &t))
		avro_value_set_int(&t, v);
}

static void
set_str(avro_value_t *rec, const char *name, const char *v)
{
	avro_value_t t;

	if (target(rec, name, &t))
		avro_value_set_string(&t, v);
}

/*
 * An object container file of n records of a schema, each filled by fill,
 * written by libavro into memory (open_memstream); blocks of libavro's
 * default 16 KiB.
 */
static char *
write_file(const char *schema_text, const char *codec, int n, FillFn fill, size_t *len)
{
	const char *js = json(schema_text);
	avro_schema_t schema;
	avro_value_iface_t *cls;
	avro_value_t rec;
	avro_file_writer_t w;
	char	   *buf = NULL;
	FILE	   *fp = open_memstream(&buf, len);

	if (avro_schema_from_json_length(js, strlen(js), &schema) != 0 ||
		avro_file_writer_create_with_codec_fp(fp, "memory", 1, schema, &w, codec, 0) != 0)
	{
		printf("Bail out! libavro: %s\n", avro_strerror());
		exit(1);
	}
	cls = avro_generic_class_from_schema(schema);
	avro_generic_value_new(cls, &rec);
	for (int i = 0; i < n; i++)
	{
		fill(&rec, i);
		if (avro_file_writer_append_value(w, &rec) != 0)
		{
			printf("Bail out! append %d: %s\n", i, avro_strerror());
			exit(1);
		}
	}
	avro_file_writer_close(w);	/* closes fp: buf and len are final */
	avro_value_decref(&rec);
	avro_value_iface_decref(cls);
	avro_schema_decref(schema);
	return buf;
}

static const char HEADER[] =
"{'type':'record','name':'org.apache.avro.file.Header','fields':["
"{'name':'magic','type':{'type':'fixed','name':'Magic','size':4}},"
"{'name':'meta','type':{'type':'map','values':'bytes'}},"
"{'name':'sync','type':{'type':'fixed','name':'Sync','size':16}}]}";

/*
 * The same file with key-value pairs added to (or replaced in) its header,
 * as Iceberg's writers put them there: libavro's writer has no way to, so
 * the header is decoded and written again with libavro, the blocks after
 * it kept as they are.
 */
static char *
with_meta(const char *buf, size_t len, const char *const *kv, int npairs, size_t *outlen)
{
	const char *js = json(HEADER);
	avro_schema_t schema;
	avro_value_iface_t *cls;
	avro_value_t h,
				meta,
				v;
	avro_reader_t r;
	avro_writer_t w;
	size_t		hsize,
				room = len + 65536;
	char	   *out = malloc(room);

	avro_schema_from_json_length(js, strlen(js), &schema);
	cls = avro_generic_class_from_schema(schema);
	avro_generic_value_new(cls, &h);
	r = avro_reader_memory(buf, len);
	avro_value_read(r, &h);
	avro_reader_free(r);
	avro_value_sizeof(&h, &hsize);
	meta = child(&h, "meta");
	for (int i = 0; i < npairs; i++)
	{
		avro_value_add(&meta, kv[2 * i], &v, NULL, NULL);
		avro_value_set_bytes(&v, (void *) kv[2 * i + 1], strlen(kv[2 * i + 1]));
	}
	w = avro_writer_memory(out, room);
	avro_value_write(w, &h);
	*outlen = avro_writer_tell(w);
	avro_writer_free(w);
	memcpy(out + *outlen, buf + hsize, len - hsize);
	*outlen += len - hsize;
	avro_value_decref(&h);
	avro_value_iface_decref(cls);
	avro_schema_decref(schema);
	return out;
}

/* A schema text with one part replaced (a variant of Iceberg's); malloc'd. */
static char *
replace(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	char	   *out;

	if (at == NULL)
	{
		printf("Bail out! the test's schema has no %s\n", from);
		exit(1);
	}
	out = malloc(strlen(text) - strlen(from) + strlen(to) + 1);
	memcpy(out, text, at - text);
	strcpy(out + (at - text), to);
	strcat(out, at + strlen(from));
	return out;
}

/* ---- manifest lists ---- */

#define MAXLIST 8

static IcebergManifestFile got[MAXLIST];
static char *got_paths[MAXLIST];
static int	ngot;

/* Keeps a copy of each manifest read. */
static int
keep_manifest(const IcebergManifestFile *mf, void *arg)
{
	(void) arg;
	if (ngot < MAXLIST)
	{
		got[ngot] = *mf;
		got_paths[ngot] = strdup(mf->manifest_path);
		got[ngot].manifest_path = got_paths[ngot];
	}
	ngot++;
	return 0;
}

/* Forgets the manifests read. */
static void
reset_manifests(void)
{
	for (int i = 0; i < ngot && i < MAXLIST; i++)
		free(got_paths[i]);
	ngot = 0;
}

static void
fill_list_v2(avro_value_t *rec, int i)
{
	char		path[128];

	snprintf(path, sizeof(path), "s3://warehouse/db/t/metadata/%d-m%d.avro", 42, i);
	set_str(rec, "manifest_path", path);
	set_long(rec, "manifest_length", 6000 + i);
	set_int(rec, "partition_spec_id", i == 2 ? 1 : 0);
	set_int(rec, "content", i == 1 ? 1 : 0);
	set_long(rec, "sequence_number", 10 + i);
	set_long(rec, "min_sequence_number", 5 + i);
	set_long(rec, "added_snapshot_id", INT64_C(8000000000000000000) + i);
	set_int(rec, "added_files_count", i + 1);
	set_int(rec, "existing_files_count", 2 * i);
	set_int(rec, "deleted_files_count", i == 2 ? 3 : 0);
	set_long(rec, "added_rows_count", INT64_C(5000000000) * (i + 1));
	set_long(rec, "existing_rows_count", 500 * i);
	set_long(rec, "deleted_rows_count", i == 2 ? 77 : 0);
	set_null(rec, "partitions");
	set_null(rec, "key_metadata");
}

static void
fill_list_v1(avro_value_t *rec, int i)
{
	set_str(rec, "manifest_path", i == 0 ? "file:///w/t/metadata/a.avro" : "file:///w/t/metadata/b.avro");
	set_long(rec, "manifest_length", 100 + i);
	set_int(rec, "partition_spec_id", 0);
	set_long(rec, "added_snapshot_id", 77);
	set_null(rec, "partitions");
	if (i == 0)
	{
		set_int(rec, "added_data_files_count", 4);
		set_int(rec, "existing_data_files_count", 5);
		set_int(rec, "deleted_data_files_count", 6);
		set_long(rec, "added_rows_count", 40);
		set_long(rec, "existing_rows_count", 50);
		set_long(rec, "deleted_rows_count", 60);
		return;
	}
	set_null(rec, "added_data_files_count");
	set_null(rec, "existing_data_files_count");
	set_null(rec, "deleted_data_files_count");
	set_null(rec, "added_rows_count");
	set_null(rec, "existing_rows_count");
	set_null(rec, "deleted_rows_count");
}

static void
test_lists(void)
{
	char		err[512] = "";
	size_t		len;
	char	   *buf = write_file(LIST_V2, "null", 3, fill_list_v2, &len);
	int			rc = avro_manifest_list_read(buf, len, keep_manifest, NULL, err, sizeof(err));
	bool		ok = true;

	check(rc == 0 && ngot == 3, "a v2 manifest list: every manifest is read");
	for (int i = 0; i < 3 && ngot == 3; i++)
	{
		IcebergManifestFile *m = &got[i];
		char		path[128];

		snprintf(path, sizeof(path), "s3://warehouse/db/t/metadata/%d-m%d.avro", 42, i);
		ok = ok && strcmp(m->manifest_path, path) == 0 && m->manifest_length == 6000 + i &&
			m->partition_spec_id == (i == 2 ? 1 : 0) && m->content == (i == 1 ? 1 : 0) &&
			m->has_sequence_number && m->sequence_number == 10 + i &&
			m->has_min_sequence_number && m->min_sequence_number == 5 + i &&
			m->has_added_snapshot_id && m->added_snapshot_id == INT64_C(8000000000000000000) + i &&
			m->has_added_files_count && m->added_files_count == i + 1 &&
			m->has_existing_files_count && m->existing_files_count == 2 * i &&
			m->has_deleted_files_count && m->deleted_files_count == (i == 2 ? 3 : 0) &&
			m->has_added_rows_count && m->added_rows_count == INT64_C(5000000000) * (i + 1) &&
			m->has_existing_rows_count && m->existing_rows_count == 500 * i &&
			m->has_deleted_rows_count && m->deleted_rows_count == (i == 2 ? 77 : 0);
	}
	check(ok, "a v2 list: path, length, spec id, content (data, deletes), sequence numbers, snapshot id (above 2^53), counts");
	reset_manifests();
	free(buf);

	buf = write_file(LIST_V1, "null", 2, fill_list_v1, &len);
	rc = avro_manifest_list_read(buf, len, keep_manifest, NULL, err, sizeof(err));
	check(rc == 0 && ngot == 2, "a v1 manifest list: every manifest is read");
	check(ngot == 2 && got[0].content == 0 && !got[0].has_sequence_number && !got[0].has_min_sequence_number &&
		  got[0].has_added_snapshot_id && got[0].added_snapshot_id == 77,
		  "v1: content 0 and no sequence numbers (the schema has none)");
	check(ngot == 2 && got[0].has_added_files_count && got[0].added_files_count == 4 &&
		  got[0].existing_files_count == 5 && got[0].deleted_files_count == 6 &&
		  got[0].added_rows_count == 40 && got[0].existing_rows_count == 50 && got[0].deleted_rows_count == 60,
		  "v1: the counts under the names Java's v1 writer gave them (added_data_files_count, ...)");
	check(ngot == 2 && !got[1].has_added_files_count && !got[1].has_existing_files_count &&
		  !got[1].has_deleted_files_count && !got[1].has_added_rows_count &&
		  !got[1].has_existing_rows_count && !got[1].has_deleted_rows_count &&
		  strcmp(got[1].manifest_path, "file:///w/t/metadata/b.avro") == 0,
		  "v1: null counts (unions with null) are absent, not zero");
	reset_manifests();
	free(buf);

	buf = write_file(LIST_V2, "null", 0, fill_list_v2, &len);
	rc = avro_manifest_list_read(buf, len, keep_manifest, NULL, err, sizeof(err));
	check(rc == 0 && ngot == 0, "a manifest list of no manifest (no block at all) reads as empty");
	reset_manifests();
	free(buf);
}

/* ---- manifests ---- */

#define N 10000

static int	null_path_at = -1;	/* a variant's entry whose file_path is null */

/* What entry i of the big manifest holds (the fill and the check agree on it). */
static int	e_status(int i) { return i % 3; }
static int	e_content(int i) { return i % 10 == 0 ? 1 : i % 10 == 5 ? 2 : 0; }
static bool e_region_null(int i) { return i % 7 == 0; }
static bool e_ts_null(int i) { return i % 11 == 0; }
static int64_t e_ts(int i) { return INT64_C(1700000000000000) + (int64_t) i * 1000; }

/* Entry i's bounds: none (null maps), an empty upper map, or column 1's and a string column 7's. */
static bool e_no_bounds(int i) { return i % 13 == 0; }
static bool e_no_upper(int i) { return i % 13 == 1; }

/* Column 1's bound of entry i, as Iceberg serializes a long or timestamp: 8 bytes little-endian. */
static void
e_bound(unsigned char *out, int i, bool upper)
{
	uint64_t	v = (uint64_t) (e_ts(i) + (upper ? 999 : 0));

	for (int b = 0; b < 8; b++)
		out[b] = (unsigned char) (v >> (8 * b));
}

/* Sets a bound map (an array of key-value records) of a data file: n pairs. */
static void
set_bounds(avro_value_t *df, const char *name, int n, const int32_t *keys, const unsigned char *const *vals,
		   const size_t *lens)
{
	avro_value_t arr,
				elem,
				f;

	if (!target(df, name, &arr))
		return;
	avro_value_reset(&arr);		/* the record is reused: its last entry's pairs */
	for (int k = 0; k < n; k++)
	{
		avro_value_append(&arr, &elem, NULL);
		avro_value_get_by_name(&elem, "key", &f, NULL);
		avro_value_set_int(&f, keys[k]);
		avro_value_get_by_name(&elem, "value", &f, NULL);
		avro_value_set_bytes(&f, (void *) vals[k], lens[k]);
	}
}

/* Sets a count map (column id to long) of a data file: n pairs. */
static void
set_counts(avro_value_t *df, const char *name, int n, const int32_t *keys, const int64_t *counts)
{
	avro_value_t arr,
				elem,
				f;

	if (!target(df, name, &arr))
		return;
	avro_value_reset(&arr);
	for (int k = 0; k < n; k++)
	{
		avro_value_append(&arr, &elem, NULL);
		avro_value_get_by_name(&elem, "key", &f, NULL);
		avro_value_set_int(&f, keys[k]);
		avro_value_get_by_name(&elem, "value", &f, NULL);
		avro_value_set_long(&f, counts[k]);
	}
}

/* A data file's path: under its partition's directory. */
static void
e_path(char *out, size_t n, int i)
{
	snprintf(out, n, "s3://warehouse/db/t/data/region=eu-%d/ts_day=%d/%05d-%s.parquet",
			 i % 4, 19700 + i % 30, i, e_content(i) == 0 ? "data" : "deletes");
}

static void
fill_entry_v2(avro_value_t *rec, int i)
{
	avro_value_t df = child(rec, "data_file"),
				part = child(&df, "partition");
	char		path[160],
				region[16];

	set_int(rec, "status", e_status(i));
	if (i % 2 == 0)
		set_long(rec, "snapshot_id", 5000 + i);
	else
		set_null(rec, "snapshot_id");	/* v2: inherited from the manifest list */
	if (e_status(i) == 1)
	{
		set_null(rec, "sequence_number");
		set_null(rec, "file_sequence_number");
	}
	else
	{
		set_long(rec, "sequence_number", 40 + i % 5);
		set_long(rec, "file_sequence_number", 41 + i % 5);
	}
	set_int(&df, "content", e_content(i));
	e_path(path, sizeof(path), i);
	if (i == null_path_at)
		set_null(&df, "file_path");
	else
		set_str(&df, "file_path", path);
	set_str(&df, "file_format", "PARQUET");
	snprintf(region, sizeof(region), "eu-%d", i % 4);
	if (e_region_null(i))
		set_null(&part, "region");
	else
		set_str(&part, "region", region);
	set_int(&part, "ts_day", 19700 + i % 30);
	if (e_ts_null(i))
		set_null(&part, "event_ts");
	else
		set_long(&part, "event_ts", e_ts(i));
	set_long(&df, "record_count", (int64_t) i * 3 + 1);
	set_long(&df, "file_size_in_bytes", INT64_C(3000000000) + i * 17);
	set_null(&df, "column_sizes");
	if (e_no_bounds(i))
	{
		set_null(&df, "lower_bounds");
		set_null(&df, "upper_bounds");
		set_null(&df, "null_value_counts");
	}
	else
	{
		unsigned char lo[8],
					hi[8];
		const int32_t keys[2] = {1, 7};
		const int64_t counts[2] = {i % 3, INT64_C(5000000000)};
		const unsigned char *lows[2] = {lo, (const unsigned char *) "ab"};
		const unsigned char *highs[1] = {hi};
		const size_t lens[2] = {8, 2};

		e_bound(lo, i, false);
		e_bound(hi, i, true);
		set_bounds(&df, "lower_bounds", 2, keys, lows, lens);
		set_bounds(&df, "upper_bounds", e_no_upper(i) ? 0 : 1, keys, highs, lens);	/* 0: an empty map */
		set_counts(&df, "null_value_counts", 2, keys, counts);
	}
	set_null(&df, "split_offsets");
	set_null(&df, "equality_ids");
	set_null(&df, "sort_order_id");
	e_path(path, sizeof(path), i + 1);
	if (e_content(i) == 1)
		set_str(&df, "referenced_data_file", path);
	else
		set_null(&df, "referenced_data_file");
}

/* What a read of the big manifest saw. */
typedef struct Seen
{
	int			n;
	int			bad;			/* entries that differ from the fill */
	char		first_bad[256];
	int			stop_at;		/* return 7 at this entry (0: never) */
} Seen;

/* Whether entry e's bounds and null counts are the fill's of entry i, else why not. */
static const char *
bounds_differ(const IcebergManifestEntry *e, int i)
{
	unsigned char lo[8],
				hi[8];

	e_bound(lo, i, false);
	e_bound(hi, i, true);
	if (e_no_bounds(i))
		return e->nlower_bounds == 0 && e->nupper_bounds == 0 && e->nnull_value_counts == 0 ? NULL
			: "null bounds or counts read as some";
	if (e->nnull_value_counts != 2 || e->null_value_counts[0].field_id != 1 ||
		e->null_value_counts[0].count != i % 3 || e->null_value_counts[1].field_id != 7 ||
		e->null_value_counts[1].count != INT64_C(5000000000))
		return "null_value_counts";
	if (e->nlower_bounds != 2 || e->lower_bounds[0].field_id != 1 || e->lower_bounds[0].len != 8 ||
		memcmp(e->lower_bounds[0].value, lo, 8) != 0 || e->lower_bounds[1].field_id != 7 ||
		e->lower_bounds[1].len != 2 || memcmp(e->lower_bounds[1].value, "ab", 2) != 0)
		return "lower_bounds";
	if (e_no_upper(i))
		return e->nupper_bounds == 0 ? NULL : "an empty upper_bounds read as some";
	if (e->nupper_bounds != 1 || e->upper_bounds[0].field_id != 1 || e->upper_bounds[0].len != 8 ||
		memcmp(e->upper_bounds[0].value, hi, 8) != 0)
		return "upper_bounds";
	return NULL;
}

/* Whether entry e is the fill's entry i, else why not. */
static const char *
entry_differs(const IcebergManifestEntry *e, int i)
{
	char		path[160],
				ref[160],
				region[16],
				day[16],
				ts[32];

	e_path(path, sizeof(path), i);
	e_path(ref, sizeof(ref), i + 1);
	snprintf(region, sizeof(region), "eu-%d", i % 4);
	snprintf(day, sizeof(day), "%d", 19700 + i % 30);
	snprintf(ts, sizeof(ts), "%" PRId64, e_ts(i));
	if (e->status != e_status(i) || e->has_snapshot_id != (i % 2 == 0) ||
		(e->has_snapshot_id && e->snapshot_id != 5000 + i))
		return "status or snapshot_id";
	if (e->has_sequence_number != (e_status(i) != 1) || e->has_file_sequence_number != (e_status(i) != 1) ||
		(e->has_sequence_number && (e->sequence_number != 40 + i % 5 || e->file_sequence_number != 41 + i % 5)))
		return "sequence numbers";
	if (e->content != e_content(i) || strcmp(e->file_path, path) != 0 || strcmp(e->file_format, "PARQUET") != 0)
		return "content, file_path or file_format";
	if (e->record_count != (int64_t) i * 3 + 1 || e->file_size_in_bytes != INT64_C(3000000000) + i * 17)
		return "record_count or file_size_in_bytes";
	if ((e_content(i) == 1) != (e->referenced_data_file != NULL) ||
		(e->referenced_data_file && strcmp(e->referenced_data_file, ref) != 0))
		return "referenced_data_file";
	if (e->npartition != 3 || strcmp(e->partition[0].name, "region") != 0 ||
		strcmp(e->partition[1].name, "ts_day") != 0 || strcmp(e->partition[2].name, "event_ts") != 0)
		return "the partition's fields";
	if (e->partition[0].type != ICEBERG_VALUE_STRING || e->partition[0].is_null != e_region_null(i) ||
		(e_region_null(i) ? e->partition[0].text != NULL : strcmp(e->partition[0].text, region) != 0))
		return "partition region (identity, string)";
	if (e->partition[1].type != ICEBERG_VALUE_INT || e->partition[1].is_null ||
		strcmp(e->partition[1].text, day) != 0 || e->partition[1].int_value != 19700 + i % 30)
		return "partition ts_day (day, int)";
	if (e->partition[2].type != ICEBERG_VALUE_LONG || e->partition[2].is_null != e_ts_null(i) ||
		(!e_ts_null(i) && (strcmp(e->partition[2].text, ts) != 0 || e->partition[2].int_value != e_ts(i))))
		return "partition event_ts (identity, long)";
	return bounds_differ(e, i);
}

/* Checks each entry against the fill as it streams by. */
static int
check_entry(const IcebergManifestEntry *e, void *arg)
{
	Seen	   *s = arg;
	const char *why = entry_differs(e, s->n);

	if (why != NULL && s->bad++ == 0)
		snprintf(s->first_bad, sizeof(s->first_bad), "entry %d: %s", s->n, why);
	s->n++;
	return s->stop_at > 0 && s->n == s->stop_at ? 7 : 0;
}

/* Reads a manifest, checking it against the fill; the Seen. */
static Seen
read_manifest(const char *buf, size_t len, int *rc, char *err, size_t errlen)
{
	Seen		s;

	memset(&s, 0, sizeof(s));
	*rc = avro_manifest_read(buf, len, check_entry, &s, err, errlen);
	return s;
}

static void
test_big_manifest(const char *codec, char **keep, size_t *keep_len)
{
	char		err[512] = "",
				what[200];
	size_t		len;
	char	   *buf = write_file(ENTRY_V2, codec, N, fill_entry_v2, &len);
	int			rc;
	Seen		s = read_manifest(buf, len, &rc, err, sizeof(err));

	snprintf(what, sizeof(what), "%s codec: %d entries (%zu bytes, many 16 KiB blocks) are all read", codec, N, len);
	check(rc == 0 && s.n == N && len > 64 * 1024, what);
	if (s.bad)
		printf("# %s\n", s.first_bad);
	snprintf(what, sizeof(what), "%s codec: every field of every entry is the one written (status, snapshot id, "
			 "sequence numbers, content, path, format, counts, size, referenced file, partition, bounds)", codec);
	check(rc == 0 && s.bad == 0, what);
	if (rc != 0)
		printf("# %s\n", err);
	*keep = buf;
	*keep_len = len;
}

static void
fill_entry_v1(avro_value_t *rec, int i)
{
	avro_value_t df = child(rec, "data_file"),
				part = child(&df, "partition");

	set_int(rec, "status", 1);
	set_long(rec, "snapshot_id", 42);
	set_str(&df, "file_path", i == 0 ? "file:///w/t/data/a.avro" : "file:///w/t/data/b.avro");
	set_str(&df, "file_format", "AVRO");
	set_str(&part, "region", "us");
	set_null(&part, "ts_day");
	set_null(&part, "event_ts");
	set_long(&df, "record_count", 10 + i);
	set_long(&df, "file_size_in_bytes", 1000 + i);
	set_long(&df, "block_size_in_bytes", 67108864);
	set_null(&df, "value_counts");
	set_null(&df, "key_metadata");
}

#define MAXE 4

static IcebergManifestEntry entries[MAXE];
static IcebergPartitionValue parts[MAXE][8];
static char *strs[MAXE][4 + 8];
static int	nentries;

/* Keeps a copy of the first few entries read (strings and partition copied). */
static int
keep_entry(const IcebergManifestEntry *e, void *arg)
{
	int			k = nentries++;

	(void) arg;
	if (k >= MAXE)
		return 0;
	entries[k] = *e;
	entries[k].file_path = strs[k][0] = strdup(e->file_path);
	entries[k].file_format = strs[k][1] = strdup(e->file_format);
	for (int j = 0; j < e->npartition && j < 8; j++)
	{
		parts[k][j] = e->partition[j];
		parts[k][j].text = strs[k][4 + j] = e->partition[j].text ? strdup(e->partition[j].text) : NULL;
		parts[k][j].name = "";	/* the schema's: not kept */
	}
	entries[k].partition = parts[k];
	return 0;
}

/* Forgets the entries read. */
static void
reset_entries(void)
{
	for (int k = 0; k < nentries && k < MAXE; k++)
		for (int j = 0; j < 12; j++)
		{
			free(strs[k][j]);
			strs[k][j] = NULL;
		}
	nentries = 0;
}

static void
test_v1_manifest(void)
{
	char		err[512] = "";
	size_t		len;
	char	   *buf = write_file(ENTRY_V1, "null", 2, fill_entry_v1, &len);
	int			rc = avro_manifest_read(buf, len, keep_entry, NULL, err, sizeof(err));

	check(rc == 0 && nentries == 2, "a v1 manifest: every entry is read");
	check(nentries == 2 && entries[0].content == 0 && entries[0].status == 1 &&
		  entries[0].has_snapshot_id && entries[0].snapshot_id == 42 &&
		  !entries[0].has_sequence_number && !entries[0].has_file_sequence_number,
		  "v1: content 0 (no content field), the snapshot id, no sequence numbers");
	check(nentries == 2 && strcmp(entries[1].file_path, "file:///w/t/data/b.avro") == 0 &&
		  strcmp(entries[1].file_format, "AVRO") == 0 && entries[1].record_count == 11 &&
		  entries[1].file_size_in_bytes == 1001 && entries[1].referenced_data_file == NULL,
		  "v1: path, format, record count and size (block_size_in_bytes and metrics skipped)");
	check(nentries == 2 && entries[0].npartition == 3 && strcmp(parts[0][0].text, "us") == 0 &&
		  parts[0][1].is_null && parts[0][1].text == NULL && parts[0][1].type == ICEBERG_VALUE_INT &&
		  parts[0][2].is_null && parts[0][2].type == ICEBERG_VALUE_LONG,
		  "v1: a null partition value is null, with the type it was written as");
	reset_entries();
	free(buf);
}

#define EMPTY_PARTITION "{'name':'partition','field-id':102,'type':{'type':'record','name':'r102','fields':[]}}"

#define TYPED_PARTITION \
	"{'name':'partition','field-id':102,'type':{'type':'record','name':'r102','fields':[" \
	"{'name':'id_bucket','type':['null','int'],'default':null,'field-id':1000}," \
	"{'name':'flag','type':['null','boolean'],'default':null,'field-id':1001}," \
	"{'name':'ratio','type':['null','float'],'default':null,'field-id':1002}," \
	"{'name':'score','type':['null','double'],'default':null,'field-id':1003}," \
	"{'name':'raw','type':['null','bytes'],'default':null,'field-id':1004}," \
	"{'name':'amount','type':['null',{'type':'fixed','name':'decimal_9_2','size':4," \
	"'logicalType':'decimal','precision':9,'scale':2}],'default':null,'field-id':1005}," \
	"{'name':'id','type':{'type':'fixed','name':'uuid_fixed','size':16,'logicalType':'uuid'},'field-id':1006}]}}"

static void
fill_typed(avro_value_t *rec, int i)
{
	avro_value_t df,
				part,
				t;
	static const char uuid[16] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, (char) 0xff};

	fill_entry_v2(rec, i);
	df = child(rec, "data_file");
	part = child(&df, "partition");
	set_int(&part, "id_bucket", 13);
	target(&part, "flag", &t);
	avro_value_set_boolean(&t, 1);
	target(&part, "ratio", &t);
	avro_value_set_float(&t, 0.5f);
	target(&part, "score", &t);
	avro_value_set_double(&t, -2.25);
	target(&part, "raw", &t);
	avro_value_set_bytes(&t, "\x00\x01\xfe", 3);
	set_null(&part, "amount");
	target(&part, "id", &t);
	avro_value_set_fixed(&t, (void *) uuid, 16);
}

static void
test_partition_shapes(void)
{
	char		err[512] = "";
	size_t		len;
	char	   *schema = replace(ENTRY_V2, PARTITION_RECORD, EMPTY_PARTITION);
	char	   *buf = write_file(schema, "null", 2, fill_entry_v2, &len);
	int			rc = avro_manifest_read(buf, len, keep_entry, NULL, err, sizeof(err));

	check(rc == 0 && nentries == 2 && entries[0].npartition == 0,
		  "an unpartitioned manifest (a partition record of no field): an empty tuple");
	reset_entries();
	free(buf);
	free(schema);

	schema = replace(ENTRY_V2, PARTITION_RECORD, TYPED_PARTITION);
	buf = write_file(schema, "null", 1, fill_typed, &len);
	rc = avro_manifest_read(buf, len, keep_entry, NULL, err, sizeof(err));
	check(rc == 0 && nentries == 1 && entries[0].npartition == 7, "a tuple of every primitive type is read");
	if (nentries == 1)
	{
		IcebergPartitionValue *p = parts[0];

		check(p[0].type == ICEBERG_VALUE_INT && strcmp(p[0].text, "13") == 0 && p[0].int_value == 13,
			  "bucket (int): 13");
		check(p[1].type == ICEBERG_VALUE_BOOLEAN && strcmp(p[1].text, "true") == 0 && p[1].int_value == 1,
			  "boolean: true");
		check(p[2].type == ICEBERG_VALUE_FLOAT && strcmp(p[2].text, "0.5") == 0, "float: 0.5");
		check(p[3].type == ICEBERG_VALUE_DOUBLE && strcmp(p[3].text, "-2.25") == 0, "double: -2.25");
		check(p[4].type == ICEBERG_VALUE_BYTES && strcmp(p[4].text, "0001fe") == 0, "bytes: lower-case hex");
		check(p[5].type == ICEBERG_VALUE_FIXED && p[5].is_null && p[5].text == NULL,
			  "a null decimal (fixed) is null");
		check(p[6].type == ICEBERG_VALUE_FIXED && strcmp(p[6].text, "123456789abcdef00102030405060" "7ff") == 0,
			  "a required uuid (fixed, not a union): hex");
	}
	reset_entries();
	free(buf);
	free(schema);
}

/* Metadata pairs read back. */
typedef struct Meta
{
	int			n;
	char		keys[16][32];
	char		values[16][256];
} Meta;

/* Keeps a copy of each key-value pair. */
static int
keep_meta(const char *key, const void *value, size_t len, void *arg)
{
	Meta	   *m = arg;

	if (m->n < 16)
	{
		snprintf(m->keys[m->n], sizeof(m->keys[0]), "%s", key);
		snprintf(m->values[m->n], sizeof(m->values[0]), "%.*s", (int) len, (const char *) value);
	}
	m->n++;
	return 0;
}

/* A key's value in what was read, or NULL. */
static const char *
meta_value(const Meta *m, const char *key)
{
	for (int i = 0; i < m->n && i < 16; i++)
		if (strcmp(m->keys[i], key) == 0)
			return m->values[i];
	return NULL;
}

static const char ICEBERG_SCHEMA[] =
"{'type':'struct','schema-id':0,'fields':[{'id':1,'name':'id','required':true,'type':'long'},"
"{'id':2,'name':'region','required':false,'type':'string'},{'id':3,'name':'ts','required':false,'type':'timestamp'}]}";
static const char PARTITION_SPEC[] =
"[{'source-id':2,'field-id':1000,'transform':'identity','name':'region'},"
"{'source-id':3,'field-id':1001,'transform':'day','name':'ts_day'}]";

static void
test_metadata(void)
{
	char		err[512] = "",
				schema[512],
				spec[512];
	const char *kv[10];
	size_t		len,
				len2;
	char	   *buf = write_file(ENTRY_V2, "deflate", 50, fill_entry_v2, &len);
	char	   *buf2;
	Meta		m;
	int			rc;
	Seen		s;

	snprintf(schema, sizeof(schema), "%s", json(ICEBERG_SCHEMA));
	snprintf(spec, sizeof(spec), "%s", json(PARTITION_SPEC));
	kv[0] = "schema", kv[1] = schema;
	kv[2] = "partition-spec", kv[3] = spec;
	kv[4] = "partition-spec-id", kv[5] = "0";
	kv[6] = "format-version", kv[7] = "2";
	kv[8] = "content", kv[9] = "data";
	buf2 = with_meta(buf, len, kv, 5, &len2);
	memset(&m, 0, sizeof(m));
	rc = avro_manifest_metadata(buf2, len2, keep_meta, &m, err, sizeof(err));
	check(rc == 0 && m.n == 7, "the header's metadata: Avro's two pairs and Iceberg's five");
	check(meta_value(&m, "schema") && strcmp(meta_value(&m, "schema"), schema) == 0 &&
		  meta_value(&m, "partition-spec") && strcmp(meta_value(&m, "partition-spec"), spec) == 0,
		  "the table schema and the partition spec, as written");
	check(meta_value(&m, "partition-spec-id") && strcmp(meta_value(&m, "partition-spec-id"), "0") == 0 &&
		  meta_value(&m, "format-version") && strcmp(meta_value(&m, "format-version"), "2") == 0 &&
		  meta_value(&m, "content") && strcmp(meta_value(&m, "content"), "data") == 0,
		  "partition-spec-id, format-version and content");
	check(meta_value(&m, "avro.codec") && strcmp(meta_value(&m, "avro.codec"), "deflate") == 0 &&
		  meta_value(&m, "avro.schema") && strstr(meta_value(&m, "avro.schema"), "manifest_entry") != NULL,
		  "avro.codec and avro.schema");
	s = read_manifest(buf2, len2, &rc, err, sizeof(err));
	check(rc == 0 && s.n == 50 && s.bad == 0, "the entries of a manifest with Iceberg's metadata (a longer header)");

	free(buf2);
	kv[0] = "avro.codec", kv[1] = "zstandard";
	buf2 = with_meta(buf, len, kv, 1, &len2);
	s = read_manifest(buf2, len2, &rc, err, sizeof(err));
	check(rc == -1 && s.n == 0 && strstr(err, "its Avro codec \"zstandard\" is not one finalize reads") != NULL,
		  "a codec finalize does not read (zstandard) is refused by name");
	printf("# %s\n", err);
	free(buf2);
	free(buf);
}

/* Whether a read failed with a message holding want, and handed on no entry. */
static bool
refused(const char *buf, size_t len, const char *want, const char *what)
{
	char		err[512] = "";
	int			rc;
	Seen		s = read_manifest(buf, len, &rc, err, sizeof(err));
	bool		ok = rc == -1 && s.n == 0 && strstr(err, want) != NULL;

	check(ok, what);
	printf("# %s\n", err);
	return ok;
}

/* Whether a read failed with a message holding want after handing on the n entries before. */
static void
refused_after(const char *buf, size_t len, int n, const char *want, const char *what)
{
	char		err[512] = "";
	int			rc;
	Seen		s = read_manifest(buf, len, &rc, err, sizeof(err));

	check(rc == -1 && s.n == n && s.bad == 0 && strstr(err, want) != NULL, what);
	printf("# %s\n", err);
}

/* The offset just past the k-th sync marker after the header (a block boundary). */
static size_t
block_boundary(const char *buf, size_t len, int k)
{
	const char *sync = buf + len - 16;	/* a file ends with its sync marker */
	const char *p = buf;

	for (int found = -1; found < k; found++)	/* the header's own comes first */
	{
		p = memmem(p, buf + len - p, sync, 16);
		if (p == NULL)
			return 0;
		p += 16;
	}
	return p - buf;
}

static void
test_refusals(const char *big, size_t len)
{
	char		err[512] = "untouched";
	char	   *copy = malloc(len),
			   *schema,
			   *buf;
	size_t		n,
				cut;
	int			rc;
	Seen		s;

	refused("this is not an Avro file at all", 31, "manifest is not an Avro object container file", "not Avro is refused");
	refused("", 0, "is not an Avro object container file", "an empty buffer is refused");
	refused(big, 30, "is cut short or corrupt: its Avro header does not decode", "a buffer cut inside the header is refused");
	refused(big, len / 2, "is cut short: block", "a buffer cut in the middle (inside a later block) is refused before any entry");
	refused(big, len - 1, "is cut short: block", "a buffer one byte short (the last sync marker) is refused");
	memcpy(copy, big, len);
	copy[len - 1] ^= 1;
	refused(copy, len, "does not end with the file's sync marker", "a corrupt sync marker is refused");
	free(copy);

	cut = block_boundary(big, len, 3);
	s = read_manifest(big, cut, &rc, err, sizeof(err));
	check(cut > 0 && rc == 0 && s.n > 0 && s.n < N && s.bad == 0,
		  "a buffer cut exactly after a block is a valid, shorter file (only manifest_length can tell)");

	memset(&s, 0, sizeof(s));
	s.stop_at = 5;
	snprintf(err, sizeof(err), "untouched");
	rc = avro_manifest_read(big, len, check_entry, &s, err, sizeof(err));
	check(rc == 7 && s.n == 5 && strcmp(err, "untouched") == 0,
		  "a callback that returns 7 stops the read, which returns 7 and leaves err alone");

	schema = replace(ENTRY_V2, "{'name':'record_count','type':'long','field-id':103},", "");
	buf = write_file(schema, "null", 3, fill_entry_v2, &n);
	refused(buf, n, "manifest: its schema has no field \"data_file.record_count\" (required)", "a required field missing is refused by name");
	free(buf);
	free(schema);

	schema = replace(ENTRY_V2, "{'name':'file_path','type':'string'", "{'name':'file_path','type':['null','string']");
	null_path_at = 2;
	buf = write_file(schema, "null", 3, fill_entry_v2, &n);
	null_path_at = -1;
	s = read_manifest(buf, n, &rc, err, sizeof(err));
	check(rc == -1 && s.n == 2 && strstr(err, "manifest: record 3: field \"data_file.file_path\" is null") != NULL,
		  "a required field that is null is refused by name and record, after the records before it");
	printf("# %s\n", err);
	free(buf);
	free(schema);

	schema = replace(ENTRY_V2, "{'name':'region','type':['null','string']",
					 "{'name':'tags','type':{'type':'array','items':'string'}},{'name':'region','type':['null','string']");
	buf = write_file(schema, "null", 1, fill_entry_v2, &n);
	refused(buf, n, "field \"tags\" of \"partition\" is an array, not a primitive type",
			"a partition field of no primitive type is refused by name");
	free(buf);
	free(schema);

	schema = replace(ENTRY_V2, "{'name':'status','type':'int'", "{'name':'status','type':['null','int','string']");
	buf = write_file(schema, "null", 1, fill_entry_v2, &n);
	refused(buf, n, "field \"status\" is a union of more than null and one type, not an int",
			"a union of more than null and one type is refused by name");
	free(buf);
	free(schema);
}

/* The last occurrence of a string in a buffer, or NULL. */
static char *
last_of(char *buf, size_t len, const char *s)
{
	char	   *found = NULL;

	for (char *p = buf; (p = memmem(p, buf + len - p, s, strlen(s))) != NULL; p++)
		found = p;
	return found;
}

static void
test_corrupt_records(void)
{
	size_t		n;
	char	   *buf = write_file(ENTRY_V2, "null", 14, fill_entry_v2, &n);	/* the last without bounds */
	char	   *fmt = last_of(buf, n, "PARQUET");
	const char *kv[2] = {"avro.schema", "{not json"};
	char	   *bad;
	size_t		badlen;

	/* the last entry's file_format claims 63 bytes: more than its block holds */
	fmt[-1] = 0x7e;
	refused_after(buf, n, 13, "manifest: record 14 of 14 does not decode (",
				  "a string that claims more bytes than its block holds is refused after the entries before it "
				  "(before libavro decodes the record)");
	/* and then 2^31 - 1 bytes: more than the block holds */
	memcpy(fmt - 1, "\xfe\xff\xff\xff\x0f", 5);
	refused_after(buf, n, 13, "manifest: record 14 of 14 does not decode (it runs past the end of its block)",
				  "a corrupt length of 2 GiB is refused, not allocated");
	free(buf);

	buf = write_file(ENTRY_V2, "null", 2, fill_entry_v2, &n);
	bad = with_meta(buf, n, kv, 1, &badlen);
	refused(bad, badlen, "manifest: the schema in its Avro header does not parse",
			"a header whose schema is not JSON is refused");
	free(bad);
	free(buf);
}

static void
test_list_refusals(void)
{
	char		err[512] = "";
	size_t		n;
	char	   *schema = replace(LIST_V2, "'manifest_length','type':'long'", "'manifest_length','type':'string'");
	char	   *buf = write_file(schema, "null", 2, fill_list_v2, &n);
	int			rc = avro_manifest_list_read(buf, n, keep_manifest, NULL, err, sizeof(err));

	check(rc == -1 && ngot == 0 && strstr(err, "manifest list: field \"manifest_length\" is a string, not a long"),
		  "a field of a wrong type is refused by name and type");
	printf("# %s\n", err);
	free(buf);
	free(schema);

	schema = replace(LIST_V2, "'manifest_length','type':'long'", "'manifest_length','type':'int'");
	buf = write_file(schema, "null", 2, fill_list_v2, &n);
	rc = avro_manifest_list_read(buf, n, keep_manifest, NULL, err, sizeof(err));
	check(rc == 0 && ngot == 2 && got[1].manifest_length == 6001,
		  "an int where a long is expected is read (Avro's promotion)");
	reset_manifests();
	free(buf);
	free(schema);

	schema = replace(LIST_V2, "{'name':'manifest_path','type':'string','field-id':500},", "");
	buf = write_file(schema, "null", 2, fill_list_v2, &n);
	rc = avro_manifest_list_read(buf, n, keep_manifest, NULL, err, sizeof(err));
	check(rc == -1 && ngot == 0 && strstr(err, "manifest list: its schema has no field \"manifest_path\" (required)"),
		  "a manifest list without manifest_path is refused by name");
	printf("# %s\n", err);
	free(buf);
	free(schema);
}

/* Writes longs: a file whose records are not records. */
static void
fill_long(avro_value_t *rec, int i)
{
	avro_value_set_long(rec, i);
}

static void
test_not_records(void)
{
	char		err[512] = "";
	size_t		n;
	char	   *buf = write_file("'long'", "null", 3, fill_long, &n);
	int			rc = avro_manifest_list_read(buf, n, keep_manifest, NULL, err, sizeof(err));

	check(rc == -1 && strstr(err, "manifest list: its records are a long, not records") != NULL,
		  "an Avro file of longs is no manifest list");
	free(buf);
}

/* ---- limits: decompression bombs, broken compressed blocks, schemas without bounds ---- */

#define MIB ((size_t) 1 << 20)

static const char SYNC[16] = "0123456789abcdef";

/* Writes an Avro long (zig-zag varint) at out; its length. */
static size_t
put_long(char *out, int64_t v)
{
	uint64_t	u = ((uint64_t) v << 1) ^ (uint64_t) (v >> 63);
	size_t		n = 0;

	do
	{
		unsigned char b = u & 0x7f;

		u >>= 7;
		out[n++] = (char) (b | (u ? 0x80 : 0));
	} while (u);
	return n;
}

/* Reads an Avro long at *p (the test's own files: no checks). */
static int64_t
get_long(const char **p)
{
	uint64_t	u = 0;
	int			shift = 0;
	unsigned char b;

	do
	{
		b = (unsigned char) *(*p)++;
		u |= (uint64_t) (b & 0x7f) << shift;
		shift += 7;
	} while (b & 0x80);
	return (int64_t) (u >> 1) ^ -(int64_t) (u & 1);
}

/* One block of a hand-made container: its count and its (compressed) bytes. */
typedef struct Block
{
	int64_t		count;
	const char *data;
	size_t		len;
} Block;

/* Appends an Avro string (its length, then its bytes). */
static char *
put_string(char *p, const char *s, size_t n)
{
	p += put_long(p, (int64_t) n);
	memcpy(p, s, n);
	return p + n;
}

/*
 * A container written by hand, as a hostile writer could: a header naming
 * the schema and the codec, and the blocks with whatever bytes they are
 * given.
 */
static char *
container(const char *schema_text, const char *codec, const Block *blocks, int nblocks, size_t *len)
{
	const char *js = json(schema_text);
	size_t		room = strlen(js) + strlen(codec) + 128;
	char	   *out,
			   *p;

	for (int i = 0; i < nblocks; i++)
		room += blocks[i].len + 48;
	p = out = malloc(room);
	memcpy(p, "Obj\001", 4);
	p += 4;
	p += put_long(p, 2);
	p = put_string(p, "avro.schema", 11);
	p = put_string(p, js, strlen(js));
	p = put_string(p, "avro.codec", 10);
	p = put_string(p, codec, strlen(codec));
	p += put_long(p, 0);
	memcpy(p, SYNC, 16);
	p += 16;
	for (int i = 0; i < nblocks; i++)
	{
		p += put_long(p, blocks[i].count);
		p = put_string(p, blocks[i].data, blocks[i].len);
		memcpy(p, SYNC, 16);
		p += 16;
	}
	*len = p - out;
	return out;
}

/* Bytes compressed as libavro's codec writes a block (deflate raw, snappy and its CRC32, raw LZMA2). */
static char *
squeeze(const char *codec, const char *data, size_t n, size_t *outlen)
{
	size_t		room = n + n / 2 + 65536;
	char	   *out = malloc(room);

	if (strcmp(codec, "deflate") == 0)
	{
		z_stream	zs;

		memset(&zs, 0, sizeof(zs));
		deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
		zs.next_in = (Bytef *) data;
		zs.avail_in = (uInt) n;
		zs.next_out = (Bytef *) out;
		zs.avail_out = (uInt) room;
		deflate(&zs, Z_FINISH);
		*outlen = zs.total_out;
		deflateEnd(&zs);
	}
	else if (strcmp(codec, "snappy") == 0)
	{
		uLong		crc = crc32_z(0L, (const Bytef *) data, n);

		*outlen = room - 4;
		snappy_compress(data, n, out, outlen);
		for (int i = 0; i < 4; i++)
			out[(*outlen)++] = (char) ((crc >> (24 - 8 * i)) & 0xff);
	}
	else if (strcmp(codec, "lzma") == 0)
	{
		lzma_options_lzma opt;
		lzma_filter filters[2] = {{LZMA_FILTER_LZMA2, &opt}, {LZMA_VLI_UNKNOWN, NULL}};

		lzma_lzma_preset(&opt, LZMA_PRESET_DEFAULT);
		*outlen = 0;
		lzma_raw_buffer_encode(filters, NULL, (const uint8_t *) data, n, (uint8_t *) out, outlen, room);
	}
	else
	{
		memcpy(out, data, n);
		*outlen = n;
	}
	return out;
}

/* The records of the first block of a file libavro wrote with the null codec. */
static const char *
first_block(const char *buf, size_t len, int64_t *count, size_t *n)
{
	const char *p = buf + block_boundary(buf, len, 0);

	*count = get_long(&p);
	*n = (size_t) get_long(&p);
	return p;
}

/* Reads a manifest list: the result, and err. */
static int
read_list(const char *buf, size_t len, char *err, size_t errlen)
{
	reset_manifests();
	snprintf(err, errlen, "untouched");
	return avro_manifest_list_read(buf, len, keep_manifest, NULL, err, errlen);
}

/* Checks a read of a hand-made manifest list against what it must come to. */
static void
expect(const Block *blocks, int nblocks, const char *codec, int want_rc, int want_n, const char *want,
	   const char *what)
{
	char		err[512];
	size_t		len;
	char	   *buf = container(LIST_V2, codec, blocks, nblocks, &len);
	int			rc = read_list(buf, len, err, sizeof(err));
	char		label[256];

	snprintf(label, sizeof(label), "%s: %s", codec, what);
	check(rc == want_rc && ngot == want_n && (want == NULL || strstr(err, want) != NULL), label);
	printf("# rc %d, %d read, %s\n", rc, ngot, err);
	free(buf);
}

/*
 * Bombs: blocks of zeros (which decode as records of zeros) that inflate
 * past the limit, in the first block (decompressed, with libavro's reader,
 * while the file was opened) and after valid records; blocks under the
 * limit that pass it together; the null codec too.
 */
static void
test_bombs(void)
{
	static const char *const codecs[] = {"deflate", "snappy", "lzma"};
	size_t		n,
				vlen;
	int64_t		count;
	char	   *valid = write_file(LIST_V2, "null", 3, fill_list_v2, &n);
	const char *records = first_block(valid, n, &count, &vlen);
	char	   *zeros = calloc(2 * MIB, 1);

	avro_read_limits(MIB, NULL);
	for (int i = 0; i < 3; i++)
	{
		const char *codec = codecs[i];
		size_t		zlen,
					hlen,
					rlen;
		char	   *bomb = squeeze(codec, zeros, 2 * MIB, &zlen);
		char	   *half = squeeze(codec, zeros, MIB / 2, &hlen);
		char	   *r = squeeze(codec, records, vlen, &rlen);
		Block		first[] = {{1, bomb, zlen}};
		Block		later[] = {{count, r, rlen}, {1, bomb, zlen}};
		Block		halves[] = {{1, half, hlen}, {1, half, hlen}, {1, half, hlen}};

		printf("# %s: 2 MiB of zeros in %zu bytes\n", codec, zlen);
		expect(first, 1, codec, AVRO_READ_TOO_LARGE, 0,
			   "manifest list holds more than 1048576 bytes once decompressed (block 1 of 1 passes that)",
			   "a bomb in the first block (2 MiB, the limit 1 MiB) is refused before any record");
		expect(later, 2, codec, AVRO_READ_TOO_LARGE, 3, "(block 2 of 2 passes that)",
			   "a bomb in a later block is refused there, after the records before it");
		expect(halves, 3, codec, AVRO_READ_TOO_LARGE, 2, "(block 3 of 3 passes that)",
			   "blocks under the limit that pass it together are refused at the block that does");
		expect(halves, 2, codec, 0, 2, NULL, "blocks that reach the limit exactly are read");
		free(bomb);
		free(half);
		free(r);
	}
	{
		Block		plain[] = {{count, records, vlen}, {1, zeros, MIB}};

		expect(plain, 2, "null", AVRO_READ_TOO_LARGE, 3, "(block 2 of 2 passes that)",
			   "blocks of the null codec count against the limit too");
	}
	avro_read_limits(AVRO_DEFAULT_MAX_BYTES, NULL);
	free(zeros);
	free(valid);
}

/* Compressed blocks that are not their codec's: cut short, garbage, a wrong CRC32. */
static void
test_broken_blocks(void)
{
	static const char *const codecs[] = {"deflate", "snappy", "lzma"};
	size_t		n,
				vlen;
	int64_t		count;
	char	   *valid = write_file(LIST_V2, "null", 3, fill_list_v2, &n);
	const char *records = first_block(valid, n, &count, &vlen);
	char		garbage[300];

	for (int i = 0; i < (int) sizeof(garbage); i++)
		garbage[i] = (char) ((i * 7919 + 13) % 251);
	for (int i = 0; i < 3; i++)
	{
		const char *codec = codecs[i];
		size_t		rlen;
		char	   *r = squeeze(codec, records, vlen, &rlen);
		Block		whole[] = {{count, r, rlen}};
		Block		cut[] = {{count, r, rlen / 2}};
		Block		junk[] = {{count, garbage, sizeof(garbage)}};

		expect(whole, 1, codec, 0, 3, NULL, "a block written as libavro writes it is read");
		expect(cut, 1, codec, AVRO_READ_FAILED, 0, "manifest list is corrupt: block 1 does not decompress (",
			   "compressed data cut short is refused");
		expect(junk, 1, codec, AVRO_READ_FAILED, 0, "manifest list is corrupt: block 1 does not decompress (",
			   "garbage is refused");
		if (strcmp(codec, "snappy") == 0)
		{
			r[rlen - 1] ^= 1;
			expect(whole, 1, codec, AVRO_READ_FAILED, 0, "the CRC32 after the data does not match it",
				   "a wrong CRC32 is refused");
		}
		free(r);
	}
	free(valid);
}

static int	stops_left;

/* A stop function that says stop once it was asked stops_left times. */
static bool
stop_after(void)
{
	return --stops_left < 0;
}

/* The stop function ends a read while a block decompresses, and between records. */
static void
test_stop(void)
{
	char		err[512];
	size_t		n,
				zlen,
				len;
	char	   *zeros = calloc(8 * MIB, 1);
	char	   *z = squeeze("deflate", zeros, 8 * MIB, &zlen);
	Block		big[] = {{1, z, zlen}};
	char	   *buf = container(LIST_V2, "deflate", big, 1, &len);
	char	   *valid = write_file(LIST_V2, "null", 3, fill_list_v2, &n);
	int			rc;

	avro_read_limits(64 * MIB, stop_after);
	stops_left = 2;
	rc = read_list(buf, len, err, sizeof(err));
	check(rc == AVRO_READ_STOPPED && ngot == 0 && stops_left == -1 &&
		  strcmp(err, "manifest list: the read was interrupted") == 0,
		  "a stop asked for while a block decompresses (8 MiB: asked every MiB) ends the read");
	printf("# %s\n", err);
	stops_left = 1;
	rc = read_list(valid, n, err, sizeof(err));
	check(rc == AVRO_READ_STOPPED && ngot == 1, "a stop asked for between records ends the read there");
	avro_read_limits(AVRO_DEFAULT_MAX_BYTES, NULL);
	free(buf);
	free(valid);
	free(z);
	free(zeros);
}

/* The fields a hand-made schema begins with (a manifest list's required ones). */
#define REQUIRED "{'name':'manifest_path','type':'string'},{'name':'manifest_length','type':'long'}," \
	"{'name':'partition_spec_id','type':'int'}"

/* Reads a hand-made file of one record (data) with a schema: the result, and err. */
static int
read_data(const char *schema, const char *data, size_t n, char *err, size_t errlen)
{
	Block		b[] = {{1, data, n}};
	size_t		len;
	char	   *buf = container(schema, "null", b, 1, &len);
	int			rc = read_list(buf, len, err, errlen);

	printf("# rc %d, %d read, %s\n", rc, ngot, err);
	free(buf);
	return rc;
}

/* Reads a hand-made file of one record of zero_bytes zeros with a schema. */
static int
read_schema(const char *schema, size_t zero_bytes, char *err, size_t errlen)
{
	char	   *zeros = calloc(zero_bytes + 1, 1);
	int			rc = read_data(schema, zeros, zero_bytes, err, errlen);

	free(zeros);
	return rc;
}

/*
 * Schemas libavro would decode without bound, refused before any record:
 * a type that contains itself (its data nest as deep as they say: the
 * stack overflowed), an array of items written in no bytes (its count
 * alone made libavro loop), records written in no bytes, a schema nested
 * deeper than any manifest's; a named type used twice is fine.
 */
static void
test_unbounded_schemas(void)
{
	char		err[512];
	char		deep[8192];
	size_t		at = 0;

	check(read_schema("{'type':'record','name':'R','fields':[" REQUIRED
					  ",{'name':'next','type':['null','R']}]}", 4, err, sizeof(err)) == AVRO_READ_FAILED &&
		  ngot == 0 && strstr(err, "manifest list: its schema's type \"R\" contains itself"),
		  "a record that contains itself is refused");
	check(read_schema("{'type':'record','name':'R','fields':[" REQUIRED
					  ",{'name':'junk','type':{'type':'array','items':'null'}}]}", 4, err, sizeof(err)) == -1 &&
		  ngot == 0 && strstr(err, "its schema has an array of null, whose items are written in no bytes"),
		  "an array of nulls is refused");
	check(read_schema("{'type':'record','name':'R','fields':[" REQUIRED
					  ",{'name':'junk','type':{'type':'array','items':{'type':'record','name':'E','fields':"
					  "[{'name':'f','type':{'type':'fixed','name':'F','size':0}}]}}}]}", 4, err, sizeof(err)) == -1 &&
		  ngot == 0 && strstr(err, "its schema has an array of a record, whose items are written in no bytes"),
		  "an array of records of no bytes is refused");
	check(read_schema("{'type':'record','name':'R','fields':[{'name':'a','type':'null'}]}", 0, err,
					  sizeof(err)) == -1 && strstr(err, "manifest list: its records are written in no bytes"),
		  "records written in no bytes are refused");
	at += snprintf(deep, sizeof(deep), "{'type':'record','name':'R','fields':[" REQUIRED);
	for (int i = 0; i < 70; i++)
		at += snprintf(deep + at, sizeof(deep) - at, ",{'name':'n','type':{'type':'record','name':'N%d','fields':[{'name':'v','type':'int'}", i);
	for (int i = 0; i < 70; i++)
		at += snprintf(deep + at, sizeof(deep) - at, "]}}");
	snprintf(deep + at, sizeof(deep) - at, "]}");
	check(read_schema(deep, 80, err, sizeof(err)) == -1 && strstr(err, "its schema nests deeper than 64 levels"),
		  "a schema nested deeper than 64 levels is refused");
	check(read_schema("{'type':'record','name':'R','fields':[" REQUIRED
					  ",{'name':'a','type':{'type':'record','name':'P','fields':[{'name':'v','type':'int'}]}},"
					  "{'name':'b','type':'P'}]}", 5, err, sizeof(err)) == 0 && ngot == 1,
		  "a named type used a second time (not inside itself) is read");
	check(read_schema("{'type':'record','name':'R','fields':[" REQUIRED
					  ",{'name':'m','type':{'type':'map','values':'long'}}]}", 4, err, sizeof(err)) == -1 &&
		  strstr(err, "its schema has a map, which no Iceberg manifest has"),
		  "a map is refused (libavro's maps never check an allocation; Iceberg writes none)");
	reset_manifests();
}

/*
 * Records libavro would decode at any cost, refused before it sees them:
 * an array of 100,000 empty strings (100 kB, 16 MB and more in libavro:
 * 40 million of them, 40 MB, crashed it once the allocator refused), a
 * union's branch or an int out of range.
 */
static void
test_unbounded_records(void)
{
	enum
	{
		NSTR = 100000
	};
	char		err[512];
	char	   *data = calloc(NSTR + 16, 1);
	size_t		at = 3;

	at += put_long(data + at, NSTR);
	at += NSTR + 1;				/* the empty strings, the array's end */
	avro_read_limits(MIB, NULL);
	check(read_data("{'type':'record','name':'R','fields':[" REQUIRED
					",{'name':'s','type':{'type':'array','items':'string'}}]}", data, at, err, sizeof(err)) ==
		  AVRO_READ_TOO_LARGE && ngot == 0 &&
		  strstr(err, "manifest list: record 1 of 1 would take more than 1048576 bytes of memory to decode"),
		  "a record whose values would take more memory than the limit is refused before libavro decodes it");
	avro_read_limits(AVRO_DEFAULT_MAX_BYTES, NULL);
	check(read_data("{'type':'record','name':'R','fields':[" REQUIRED
					",{'name':'s','type':{'type':'array','items':'string'}}]}", data, at, err, sizeof(err)) == 0 &&
		  ngot == 1, "the same record within the limit is read");
	memcpy(data, "\0\0\0\004", 4);
	check(read_data("{'type':'record','name':'R','fields':[" REQUIRED ",{'name':'u','type':['null','int']}]}",
					data, 4, err, sizeof(err)) == -1 && strstr(err, "does not decode (a union's branch is out of range)"),
		  "a union's branch out of range is refused");
	at = 2 + put_long(data + 2, INT64_C(1) << 40);
	check(read_data("{'type':'record','name':'R','fields':[" REQUIRED "]}", data, at, err, sizeof(err)) == -1 &&
		  strstr(err, "does not decode (an int is out of range)"), "an int out of range is refused");
	reset_manifests();
	free(data);
}

/*
 * The allocation watch finds a block in a few probes however many are
 * live: 100,000 blocks freed oldest first, as libavro frees an array's
 * strings (a list searched from its end looked at 5 billion).
 */
static void
test_watch_cost(void)
{
	enum
	{
		NBLOCKS = 100000
	};
	AllocWatch	w = {0};
	void	  **blocks = malloc(NBLOCKS * sizeof(void *));
	uint64_t	probes;

	for (int i = 0; i < NBLOCKS; i++)
		blocks[i] = alloc_watch(&w, NULL, 0, 16);
	for (int i = 0; i < NBLOCKS; i++)
		alloc_watch(&w, blocks[i], 16, 0);
	probes = w.probes;
	check(w.n == 0 && probes < 20 * (uint64_t) NBLOCKS,
		  "the allocation watch finds each of 100,000 live blocks in a few probes");
	printf("# %" PRIu64 " probes\n", probes);
	alloc_watch_end(&w, true);
	free(blocks);
}

/* ---- printing a file as JSON lines (for the pyiceberg test) ---- */

/* A string as JSON (NULL: null). */
static void
print_str(const char *s)
{
	if (s == NULL)
	{
		fputs("null", stdout);
		return;
	}
	putchar('"');
	for (; *s; s++)
	{
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char) *s < 0x20)
			printf("\\u%04x", (unsigned char) *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/* An optional number as JSON. */
static void
print_opt(const char *key, bool has, int64_t v)
{
	if (has)
		printf(",\"%s\":%" PRId64, key, v);
	else
		printf(",\"%s\":null", key);
}

/* One manifest of a list as a JSON line. */
static int
print_manifest(const IcebergManifestFile *m, void *arg)
{
	(void) arg;
	fputs("{\"manifest_path\":", stdout);
	print_str(m->manifest_path);
	printf(",\"manifest_length\":%" PRId64 ",\"partition_spec_id\":%d,\"content\":%d",
		   m->manifest_length, m->partition_spec_id, m->content);
	print_opt("sequence_number", m->has_sequence_number, m->sequence_number);
	print_opt("min_sequence_number", m->has_min_sequence_number, m->min_sequence_number);
	print_opt("added_snapshot_id", m->has_added_snapshot_id, m->added_snapshot_id);
	print_opt("added_files_count", m->has_added_files_count, m->added_files_count);
	print_opt("existing_files_count", m->has_existing_files_count, m->existing_files_count);
	print_opt("deleted_files_count", m->has_deleted_files_count, m->deleted_files_count);
	print_opt("added_rows_count", m->has_added_rows_count, m->added_rows_count);
	print_opt("existing_rows_count", m->has_existing_rows_count, m->existing_rows_count);
	print_opt("deleted_rows_count", m->has_deleted_rows_count, m->deleted_rows_count);
	puts("}");
	return 0;
}

/* A bound map as JSON: [[column id, "hex"], ...]. */
static void
print_bounds(const char *key, const IcebergBound *b, int n)
{
	printf(",\"%s\":[", key);
	for (int i = 0; i < n; i++)
	{
		printf("%s[%d,\"", i ? "," : "", b[i].field_id);
		for (size_t k = 0; k < b[i].len; k++)
			printf("%02x", (unsigned char) b[i].value[k]);
		fputs("\"]", stdout);
	}
	putchar(']');
}

/* A count map as JSON: [[column id, count], ...]. */
static void
print_counts(const char *key, const IcebergCount *c, int n)
{
	printf(",\"%s\":[", key);
	for (int i = 0; i < n; i++)
		printf("%s[%d,%" PRId64 "]", i ? "," : "", c[i].field_id, c[i].count);
	putchar(']');
}

/*
 * One entry of a manifest as a JSON line; the partition as [name, type,
 * text], bounds by print_bounds, null counts by print_counts.
 */
static int
print_entry(const IcebergManifestEntry *e, void *arg)
{
	static const char *const types[] = {"int", "long", "string", "boolean", "float", "double", "bytes", "fixed"};

	(void) arg;
	printf("{\"status\":%d", e->status);
	print_opt("snapshot_id", e->has_snapshot_id, e->snapshot_id);
	print_opt("sequence_number", e->has_sequence_number, e->sequence_number);
	print_opt("file_sequence_number", e->has_file_sequence_number, e->file_sequence_number);
	printf(",\"content\":%d,\"file_path\":", e->content);
	print_str(e->file_path);
	fputs(",\"file_format\":", stdout);
	print_str(e->file_format);
	printf(",\"record_count\":%" PRId64 ",\"file_size_in_bytes\":%" PRId64 ",\"referenced_data_file\":",
		   e->record_count, e->file_size_in_bytes);
	print_str(e->referenced_data_file);
	fputs(",\"partition\":[", stdout);
	for (int i = 0; i < e->npartition; i++)
	{
		printf("%s[", i ? "," : "");
		print_str(e->partition[i].name);
		printf(",\"%s\",", types[e->partition[i].type]);
		print_str(e->partition[i].text);
		putchar(']');
	}
	putchar(']');
	print_bounds("lower_bounds", e->lower_bounds, e->nlower_bounds);
	print_bounds("upper_bounds", e->upper_bounds, e->nupper_bounds);
	print_counts("null_value_counts", e->null_value_counts, e->nnull_value_counts);
	puts("}");
	return 0;
}

/* One metadata pair as a JSON line (the value must be text without NUL). */
static int
print_meta(const char *key, const void *value, size_t len, void *arg)
{
	char	   *v = strndup(value, len);

	(void) arg;
	fputs("{\"key\":", stdout);
	print_str(key);
	fputs(",\"value\":", stdout);
	print_str(v);
	puts("}");
	free(v);
	return 0;
}

/* test_avro_manifest list|manifest|meta FILE: what the reader makes of a file. */
static int
dump(const char *mode, const char *path)
{
	FILE	   *f = fopen(path, "rb");
	char	   *buf,
				err[512] = "";
	long		len;
	int			rc;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0)
	{
		fprintf(stderr, "cannot read %s\n", path);
		return 2;
	}
	rewind(f);
	buf = malloc(len + 1);
	if (fread(buf, 1, len, f) != (size_t) len)
		return 2;
	fclose(f);
	if (strcmp(mode, "list") == 0)
		rc = avro_manifest_list_read(buf, len, print_manifest, NULL, err, sizeof(err));
	else if (strcmp(mode, "manifest") == 0)
		rc = avro_manifest_read(buf, len, print_entry, NULL, err, sizeof(err));
	else
		rc = avro_manifest_metadata(buf, len, print_meta, NULL, err, sizeof(err));
	free(buf);
	if (rc != 0)
		fprintf(stderr, "%s\n", err);
	return rc == 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
	char	   *big,
			   *big_deflate;
	size_t		len,
				len_deflate;

	if (argc == 3)
		return dump(argv[1], argv[2]);
	test_lists();
	test_list_refusals();
	test_not_records();
	test_big_manifest("null", &big, &len);
	test_big_manifest("deflate", &big_deflate, &len_deflate);
	check(len_deflate < len / 2, "deflate: the same entries in less than half the bytes");
	free(big_deflate);
	test_big_manifest("snappy", &big_deflate, &len_deflate);	/* the other codecs Debian's libavro has */
	free(big_deflate);
	test_big_manifest("lzma", &big_deflate, &len_deflate);
	test_v1_manifest();
	test_partition_shapes();
	test_metadata();
	test_refusals(big, len);
	test_corrupt_records();
	test_bombs();
	test_broken_blocks();
	test_stop();
	test_unbounded_schemas();
	test_unbounded_records();
	test_watch_cost();
	free(big);
	free(big_deflate);
	return tap_done();
}
