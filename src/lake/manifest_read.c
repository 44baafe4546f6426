/*
 * manifest_read.c
 *     What Iceberg's manifest lists and manifests hold, read through
 *     avro_records.h (avro_manifest.c calls libavro): the fields of
 *     manifest_file (the spec's ids 500-517) and of manifest_entry with its
 *     data_file (0-4, 100-143) as tables, copied into avro_manifest.h's
 *     structs, the partition tuple with each value's text, and the data
 *     file's lower and upper bounds per column (their bytes as written)
 *     and null value counts.
 *
 * Optional in a table means "absent from some format version, or null":
 * v1 manifest lists have no content or sequence numbers, v2 entries leave
 * snapshot ids and sequence numbers null to be inherited, and v1 lists'
 * file counts were written as added_data_files_count (Java) or
 * added_files_count (pyiceberg). What the spec requires of every version
 * is required here. Nothing here calls libavro, reads a file or needs
 * PostgreSQL.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lake/avro_manifest.h"
#include "lake/avro_records.h"

#define MF(f) ((int) offsetof(IcebergManifestFile, f))
#define ME(f) ((int) offsetof(IcebergManifestEntry, f))

static const FieldDef LIST_FIELDS[] = {
	{"manifest_path", NULL, KIND_STRING, true, -1, MF(manifest_path), -1},
	{"manifest_length", NULL, KIND_LONG, true, -1, MF(manifest_length), -1},
	{"partition_spec_id", NULL, KIND_INT, true, -1, MF(partition_spec_id), -1},
	{"content", NULL, KIND_INT, false, -1, MF(content), -1},
	{"sequence_number", NULL, KIND_LONG, false, -1, MF(sequence_number), MF(has_sequence_number)},
	{"min_sequence_number", NULL, KIND_LONG, false, -1,
	MF(min_sequence_number), MF(has_min_sequence_number)},
	{"added_snapshot_id", NULL, KIND_LONG, false, -1, MF(added_snapshot_id), MF(has_added_snapshot_id)},
	{"added_files_count", "added_data_files_count", KIND_INT, false, -1,
	MF(added_files_count), MF(has_added_files_count)},
	{"existing_files_count", "existing_data_files_count", KIND_INT, false, -1,
	MF(existing_files_count), MF(has_existing_files_count)},
	{"deleted_files_count", "deleted_data_files_count", KIND_INT, false, -1,
	MF(deleted_files_count), MF(has_deleted_files_count)},
	{"added_rows_count", NULL, KIND_LONG, false, -1, MF(added_rows_count), MF(has_added_rows_count)},
	{"existing_rows_count", NULL, KIND_LONG, false, -1,
	MF(existing_rows_count), MF(has_existing_rows_count)},
	{"deleted_rows_count", NULL, KIND_LONG, false, -1, MF(deleted_rows_count), MF(has_deleted_rows_count)},
};

#define DATA_FILE 4				/* ENTRY_FIELDS' data_file record */
#define LOWER_BOUNDS 12			/* ... its lower_bounds and upper_bounds */
#define UPPER_BOUNDS 13
#define NULL_COUNTS 14			/* ... and null_value_counts */

static const FieldDef ENTRY_FIELDS[] = {
	{"status", NULL, KIND_INT, true, -1, ME(status), -1},
	{"snapshot_id", NULL, KIND_LONG, false, -1, ME(snapshot_id), ME(has_snapshot_id)},
	{"sequence_number", NULL, KIND_LONG, false, -1, ME(sequence_number), ME(has_sequence_number)},
	{"file_sequence_number", NULL, KIND_LONG, false, -1,
	ME(file_sequence_number), ME(has_file_sequence_number)},
	[DATA_FILE] = {"data_file", NULL, KIND_RECORD, true, -1, -1, -1},
	{"content", NULL, KIND_INT, false, DATA_FILE, ME(content), -1},
	{"file_path", NULL, KIND_STRING, true, DATA_FILE, ME(file_path), -1},
	{"file_format", NULL, KIND_STRING, true, DATA_FILE, ME(file_format), -1},
	{"record_count", NULL, KIND_LONG, true, DATA_FILE, ME(record_count), -1},
	{"file_size_in_bytes", NULL, KIND_LONG, true, DATA_FILE, ME(file_size_in_bytes), -1},
	{"referenced_data_file", NULL, KIND_STRING, false, DATA_FILE, ME(referenced_data_file), -1},
	{"partition", NULL, KIND_TUPLE, true, DATA_FILE, -1, -1},
	[LOWER_BOUNDS] = {"lower_bounds", NULL, KIND_PAIRS, false, DATA_FILE, -1, -1},
	[UPPER_BOUNDS] = {"upper_bounds", NULL, KIND_PAIRS, false, DATA_FILE, -1, -1},
	[NULL_COUNTS] = {"null_value_counts", NULL, KIND_PAIRS, false, DATA_FILE, -1, -1},
};

#define NFIELDS(t) ((int) (sizeof(t) / sizeof((t)[0])))

/* Copies a record's cells where its table says, into a zeroed struct. */
static void
cells_to_struct(const FieldDef *defs, int n, const AvroCell *cells, void *out)
{
	for (int i = 0; i < n; i++)
	{
		char	   *dst = (char *) out + defs[i].value_at;

		if (!cells[i].present || defs[i].value_at < 0)
			continue;
		if (defs[i].kind == KIND_INT)
			*(int32_t *) dst = (int32_t) cells[i].i;
		else if (defs[i].kind == KIND_LONG)
			*(int64_t *) dst = cells[i].i;
		else
			*(const char **) dst = cells[i].s;
		if (defs[i].has_at >= 0)
			*(bool *) ((char *) out + defs[i].has_at) = true;
	}
}

/* The callback of a manifest list read. */
typedef struct ListRead
{
	ManifestListCallback cb;
	void	   *arg;
} ListRead;

/* Hands one manifest_file record to the caller. */
static int
list_record(const AvroCell *cells, const AvroCell *tuple, int ntuple, void *arg,
			char *err, size_t errlen)
{
	ListRead   *s = arg;
	IcebergManifestFile mf;

	(void) tuple, (void) ntuple, (void) err, (void) errlen;
	memset(&mf, 0, sizeof(mf));
	cells_to_struct(LIST_FIELDS, NFIELDS(LIST_FIELDS), cells, &mf);
	return s->cb(&mf, s->arg);
}

/*
 * Streams each manifest of a manifest list to cb; 0 when all were read,
 * -1 with err written, or what cb returned when it stopped the read.
 */
int
avro_manifest_list_read(const char *buf, size_t len, ManifestListCallback cb,
						void *arg, char *err, size_t errlen)
{
	ListRead	s = {cb, arg};

	return avro_records_read(buf, len, "manifest list", LIST_FIELDS, NFIELDS(LIST_FIELDS),
							 list_record, &s, err, errlen);
}

/* Room for the text of one partition field's value, kept across records. */
typedef struct ValueText
{
	char		num[40];
	char	   *hex;
	size_t		cap;
} ValueText;

/* Room for one map of column id to a bound or a count of an entry, kept across records. */
typedef struct ColumnMap
{
	void	   *items;			/* IcebergBound or IcebergCount */
	size_t		cap;
} ColumnMap;

/* The callback of a manifest read, and the partition tuple, bounds and null counts it hands on. */
typedef struct EntryRead
{
	ManifestEntryCallback cb;
	void	   *arg;
	int			n;				/* the tuple's fields: fixed for a file */
	IcebergPartitionValue *values;
	ValueText  *texts;
	ColumnMap	lower;
	ColumnMap	upper;
	ColumnMap	nulls;
} EntryRead;

/*
 * Bytes as lower-case hex in a buffer that grows as needed (one allocation
 * per field, not per value); NULL when out of memory.
 */
static const char *
hex_text(ValueText *t, const char *bytes, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	if (t->cap < 2 * n + 1)
	{
		char	   *grown = realloc(t->hex, 2 * n + 1);

		if (grown == NULL)
			return NULL;
		t->hex = grown;
		t->cap = 2 * n + 1;
	}
	for (size_t i = 0; i < n; i++)
	{
		t->hex[2 * i] = digits[(unsigned char) bytes[i] >> 4];
		t->hex[2 * i + 1] = digits[(unsigned char) bytes[i] & 15];
	}
	t->hex[2 * n] = '\0';
	return t->hex;
}

/* A partition value's text (not null); NULL when out of memory. */
static const char *
value_text(ValueText *t, const AvroCell *cell)
{
	switch (cell->type)
	{
		case ICEBERG_VALUE_STRING:
			return cell->s;
		case ICEBERG_VALUE_BOOLEAN:
			return cell->i ? "true" : "false";
		case ICEBERG_VALUE_FLOAT:
			snprintf(t->num, sizeof(t->num), "%.9g", cell->d);
			return t->num;
		case ICEBERG_VALUE_DOUBLE:
			snprintf(t->num, sizeof(t->num), "%.17g", cell->d);
			return t->num;
		case ICEBERG_VALUE_BYTES:
		case ICEBERG_VALUE_FIXED:
			return hex_text(t, cell->s, cell->n);
		case ICEBERG_VALUE_INT:
		case ICEBERG_VALUE_LONG:
			break;
	}
	snprintf(t->num, sizeof(t->num), "%" PRId64, cell->i);
	return t->num;
}

/* Says the reader ran out of memory; -1. */
static int
out_of_memory(char *err, size_t errlen)
{
	snprintf(err, errlen, "manifest: out of memory");
	return -1;
}

/* Fills the partition tuple handed to the caller from a record's cells. */
static int
partition_values(EntryRead *s, const AvroCell *tuple, int n, char *err, size_t errlen)
{
	if (s->values == NULL && n > 0)
	{
		s->values = calloc(n, sizeof(IcebergPartitionValue));
		s->texts = calloc(n, sizeof(ValueText));
		s->n = n;
	}
	if (n > 0 && (s->values == NULL || s->texts == NULL))
		return out_of_memory(err, errlen);
	for (int i = 0; i < n; i++)
	{
		IcebergPartitionValue *pv = &s->values[i];

		pv->name = tuple[i].name;
		pv->type = tuple[i].type;
		pv->is_null = !tuple[i].present;
		pv->int_value = pv->is_null ? 0 : tuple[i].i;
		pv->text = pv->is_null ? NULL : value_text(&s->texts[i], &tuple[i]);
		if (!pv->is_null && pv->text == NULL)
			return out_of_memory(err, errlen);
	}
	return 0;
}

/*
 * A map's elements (column id to a bound's bytes, or with counts to a
 * long) into map; *n of them. An element whose key is no int or whose
 * value is of another type is left out (the column has no bound or count
 * then: what needs one refuses the file). -1 when out of memory.
 */
static int
column_map(ColumnMap *map, const AvroCell *cell, bool counts, int *n)
{
	size_t		size = counts ? sizeof(IcebergCount) : sizeof(IcebergBound);
	AvroCell	key;
	AvroCell	value;

	*n = 0;
	if (!cell->present || cell->pairs == NULL || cell->n == 0)
		return 0;
	if (cell->n > map->cap)
	{
		void	   *grown = cell->n > INT32_MAX ? NULL : realloc(map->items, cell->n * size);

		if (grown == NULL)
			return -1;			/* the old map is freed with the read */
		map->items = grown;
		map->cap = cell->n;
	}
	for (size_t k = 0; k < cell->n; k++)
	{
		if (!avro_records_pair(cell, k, &key, &value) || key.type != ICEBERG_VALUE_INT)
			continue;
		if (counts && value.type == ICEBERG_VALUE_LONG)
			((IcebergCount *) map->items)[(*n)++] = (IcebergCount) {(int32_t) key.i, value.i};
		else if (!counts && value.type == ICEBERG_VALUE_BYTES)
			((IcebergBound *) map->items)[(*n)++] = (IcebergBound) {(int32_t) key.i, value.s, value.n};
	}
	return 0;
}

/*
 * Hands one manifest_entry record, with its data_file, partition tuple,
 * bounds and null counts, to the caller.
 */
static int
entry_record(const AvroCell *cells, const AvroCell *tuple, int ntuple, void *arg,
			 char *err, size_t errlen)
{
	EntryRead  *s = arg;
	IcebergManifestEntry e;

	memset(&e, 0, sizeof(e));
	cells_to_struct(ENTRY_FIELDS, NFIELDS(ENTRY_FIELDS), cells, &e);
	if (partition_values(s, tuple, ntuple, err, errlen) != 0)
		return -1;
	if (column_map(&s->lower, &cells[LOWER_BOUNDS], false, &e.nlower_bounds) != 0 ||
		column_map(&s->upper, &cells[UPPER_BOUNDS], false, &e.nupper_bounds) != 0 ||
		column_map(&s->nulls, &cells[NULL_COUNTS], true, &e.nnull_value_counts) != 0)
		return out_of_memory(err, errlen);
	e.lower_bounds = s->lower.items;
	e.upper_bounds = s->upper.items;
	e.null_value_counts = s->nulls.items;
	e.npartition = ntuple;
	e.partition = s->values;
	return s->cb(&e, s->arg);
}

/*
 * Streams each entry of a manifest (a data or delete file with its
 * partition tuple) to cb; 0 when all were read, -1 with err written, or
 * what cb returned when it stopped the read.
 */
int
avro_manifest_read(const char *buf, size_t len, ManifestEntryCallback cb,
				   void *arg, char *err, size_t errlen)
{
	EntryRead	s = {cb, arg, 0, NULL, NULL, {NULL, 0}, {NULL, 0}, {NULL, 0}};
	int			rc;

	rc = avro_records_read(buf, len, "manifest", ENTRY_FIELDS, NFIELDS(ENTRY_FIELDS),
						   entry_record, &s, err, errlen);
	for (int i = 0; s.texts != NULL && i < s.n; i++)
		free(s.texts[i].hex);
	free(s.texts);
	free(s.values);
	free(s.lower.items);
	free(s.upper.items);
	free(s.nulls.items);
	return rc;
}
