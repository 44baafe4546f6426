/*
 * avro_manifest.c
 *     The one file that talks to libavro (Apache Avro C): the records of an
 *     Avro object container file in memory (an Iceberg manifest list or
 *     manifest) streamed one at a time as the fields a table names
 *     (avro_records.h; manifest_read.c says what they mean), and the
 *     key-value metadata of its header.
 *
 * libavro's file reader takes any failure to read the next block for the
 * end of the file (datafile.c: "For now, ignore errors (e.g. EOF)"): a
 * manifest cut inside a later block would read as a shorter valid one, and
 * the gate would miss files instead of failing. So the blocks are walked
 * first (libavro decodes each count and size), each checked to lie in the
 * buffer and end with the sync marker, and the reader then decodes exactly
 * the records they count. A file cut exactly at a block boundary is a
 * valid, shorter container: only its recorded length shows that (the
 * caller's check). Fields are found by name, once per file (libavro keeps
 * no field-id). All is malloc'd (never palloc) and freed before a read
 * returns, what libavro loses on its error paths too (alloc_watch.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <avro.h>

#include "lake/alloc_watch.h"
#include "lake/avro_records.h"

#define SYNC_SIZE 16

/* The codecs Debian's libavro is built with (zlib, snappy, liblzma). */
static const char *const CODECS[] = {"null", "deflate", "snappy", "lzma"};
#define NCODECS (sizeof(CODECS) / sizeof(CODECS[0]))

/* One container file being read, and where its errors are written. */
typedef struct Container
{
	const char *buf;
	size_t		len;
	const char *what;			/* "manifest list" or "manifest" */
	char	   *err;
	size_t		errlen;
	avro_value_iface_t *meta_class;
	bool		has_meta;
	avro_value_t meta;			/* the header's metadata map */
	struct avro_allocator_state saved;	/* libavro's allocator outside a watch */
	AllocWatch	watch;
	avro_schema_t schema;		/* the writer's schema, or NULL */
	int64_t		records;		/* the sum of the blocks' counts */
	int64_t		current;		/* the record being read, from 1 */
} Container;

/* Writes an error message (a sentence naming what was wrong); returns -1. */
static __attribute__((format(printf, 2, 3))) int
fail(Container *c, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* A type as a message names it, by avro_type_t. */
static const char *const TYPE_NAMES[] = {
	"a string", "bytes", "an int", "a long", "a float", "a double", "a boolean", "null",
	"a record", "an enum", "a fixed", "a map", "an array", "a union", "a named type"
};

/*
 * A field's type without its optionality: the other branch of a union with
 * null (Iceberg's optional fields), a named type referenced by name
 * resolved (only named types are). NULL when it is a union of anything else.
 */
static avro_schema_t
unwrap(avro_schema_t s, bool *nullable)
{
	*nullable = is_avro_union(s);
	if (*nullable)
	{
		if (avro_schema_union_size(s) != 2)
			return NULL;
		if (is_avro_null(avro_schema_union_branch(s, 0)))
			s = avro_schema_union_branch(s, 1);
		else if (is_avro_null(avro_schema_union_branch(s, 1)))
			s = avro_schema_union_branch(s, 0);
		else
			return NULL;
	}
	return is_avro_link(s) ? avro_schema_link_target(s) : s;
}

/*
 * The value of a record's field and whether it is null (the branch of a
 * union with null is taken).
 */
static bool
field_value(avro_value_t *rec, int index, bool nullable, avro_value_t *out)
{
	avro_value_t child;

	avro_value_get_by_index(rec, index, nullable ? &child : out, NULL);
	return !nullable ||
		(avro_value_get_current_branch(&child, out) == 0 && avro_value_get_type(out) != AVRO_NULL);
}

/* The bytes of a header metadata key; false when the header has none. */
static bool
header_meta(Container *c, const char *key, const void **p, size_t *n)
{
	avro_value_t v;

	return avro_value_get_by_name(&c->meta, key, &v, NULL) == 0 && avro_value_get_bytes(&v, p, n) == 0;
}

/*
 * Checks every block from off on: its count and size (longs, decoded by
 * libavro), its bytes inside the buffer, the sync marker after them; adds
 * the counts up into c->records.
 */
static int
walk_blocks(Container *c, size_t off, const char *sync)
{
	avro_reader_t r = avro_reader_memory(c->buf, (int64_t) c->len);
	avro_value_t count,
				size;
	int64_t		block = 0;
	int			rc = 0;

	if (r == NULL || avro_generic_long_new(&count, 0) != 0)
		return fail(c, "%s: out of memory", c->what);
	avro_generic_long_new(&size, 0);
	while (rc == 0 && off < c->len)
	{
		int64_t		n,
					bytes;
		size_t		k1,
					k2,
					left;

		block++;
		avro_reader_memory_set_source(r, c->buf + off, (int64_t) (c->len - off));
		if (avro_value_read(r, &count) != 0 || avro_value_read(r, &size) != 0)
		{
			rc = fail(c, "%s is cut short: block %" PRId64 " ends inside its header (%s)",
					  c->what, block, avro_strerror());
			break;
		}
		avro_value_get_long(&count, &n);
		avro_value_get_long(&size, &bytes);
		avro_value_sizeof(&count, &k1);
		avro_value_sizeof(&size, &k2);
		left = c->len - off - k1 - k2;
		if (n < 0 || bytes < 0 || n > INT64_MAX - c->records)
			rc = fail(c, "%s is corrupt: block %" PRId64 " has a negative count or size",
					  c->what, block);
		else if ((uint64_t) bytes > left || left - (size_t) bytes < SYNC_SIZE)
			rc = fail(c, "%s is cut short: block %" PRId64 " needs %" PRId64
					  " more bytes (its sync marker's included), %zu remain",
					  c->what, block, bytes + SYNC_SIZE, left);
		else if (memcmp(c->buf + off + k1 + k2 + bytes, sync, SYNC_SIZE) != 0)
			rc = fail(c, "%s is corrupt: block %" PRId64 " does not end with the file's sync marker",
					  c->what, block);
		else
		{
			c->records += n;
			off += k1 + k2 + (size_t) bytes + SYNC_SIZE;
		}
	}
	avro_value_decref(&count);
	avro_value_decref(&size);
	avro_reader_free(r);
	return rc;
}

/*
 * Checks the header's codec and parses its schema: what libavro's file
 * reader would refuse only after allocating (and, on some paths, leaking).
 */
static int
header_schema(Container *c)
{
	const void *p;
	size_t		n,
				i = 0;

	if (!header_meta(c, "avro.codec", &p, &n))
		return fail(c, "%s: its Avro header names no codec (avro.codec)", c->what);
	while (i < NCODECS && !(strlen(CODECS[i]) == n && memcmp(CODECS[i], p, n) == 0))
		i++;
	if (i == NCODECS)
		return fail(c, "%s: its Avro codec \"%.*s\" is not one libavro reads (null, deflate, snappy, lzma)",
					c->what, (int) (n > 32 ? 32 : n), (const char *) p);
	if (!header_meta(c, "avro.schema", &p, &n))
		return fail(c, "%s: its Avro header has no schema (avro.schema)", c->what);
	if (avro_schema_from_json_length((const char *) p, n, &c->schema) != 0)
	{
		c->schema = NULL;
		return fail(c, "%s: the schema in its Avro header does not parse (%s)",
					c->what, avro_strerror());
	}
	if (!is_avro_record(c->schema))
		return fail(c, "%s: its records are %s, not records", c->what, TYPE_NAMES[avro_typeof(c->schema)]);
	return 0;
}

/*
 * Routes libavro's allocations through the container's watch (on), or back
 * to the allocator it had (off). A watched step is one that may fail and
 * that runs no callback: a callback's longjmp must not leave libavro on it.
 */
static void
watch(Container *c, bool on)
{
	if (on)
		c->saved = AVRO_CURRENT_ALLOCATOR;
	avro_set_allocator(on ? alloc_watch : c->saved.alloc, on ? &c->watch : c->saved.user_data);
}

/*
 * Opens a container: its magic, its header (the metadata map decoded by
 * libavro, then the sync marker), its codec and schema, every block.
 */
static int
container_open(Container *c, const char *buf, size_t len, const char *what,
			   char *err, size_t errlen)
{
	avro_schema_t ms = avro_schema_map(avro_schema_bytes());
	avro_reader_t r;
	char		sync[SYNC_SIZE];
	size_t		msize;
	int			rc;

	memset(c, 0, sizeof(*c));
	avro_set_error("%s", "");	/* libavro prefixes some errors to the last one */
	c->buf = buf;
	c->len = len;
	c->what = what;
	c->err = err;
	c->errlen = errlen;
	c->meta_class = ms == NULL ? NULL : avro_generic_class_from_schema(ms);
	if (ms != NULL)
		avro_schema_decref(ms); /* the class holds its own reference */
	if (c->meta_class == NULL || avro_generic_value_new(c->meta_class, &c->meta) != 0)
		return fail(c, "%s: libavro: %s", what, avro_strerror());
	c->has_meta = true;
	if (buf == NULL || len < 4 || memcmp(buf, "Obj\001", 4) != 0)
		return fail(c, "%s is not an Avro object container file (it does not begin with \"Obj\" and 1)", what);
	if ((r = avro_reader_memory(buf + 4, (int64_t) (len - 4))) == NULL)
		return fail(c, "%s: out of memory", what);
	watch(c, true);				/* libavro leaks the string a buffer cuts short */
	rc = avro_value_read(r, &c->meta) || avro_read(r, sync, SYNC_SIZE);
	if (rc != 0)
		avro_value_decref(&c->meta);
	c->has_meta = rc == 0;
	watch(c, false);
	alloc_watch_end(&c->watch, rc != 0);
	avro_reader_free(r);
	if (rc != 0)
		return fail(c, "%s is cut short or corrupt: its Avro header does not decode (%s)",
					what, avro_strerror());
	/* Every writer puts the metadata map in one block, as libavro sizes it. */
	if (avro_value_sizeof(&c->meta, &msize) != 0 || 4 + msize + SYNC_SIZE > len ||
		memcmp(buf + 4 + msize, sync, SYNC_SIZE) != 0)
		return fail(c, "%s is corrupt: its Avro header does not end with its sync marker", what);
	if (header_schema(c) != 0)
		return -1;
	return walk_blocks(c, 4 + msize + SYNC_SIZE, sync);
}

/* Frees what container_open allocated (any part of it). */
static void
container_close(Container *c)
{
	if (c->schema != NULL)
		avro_schema_decref(c->schema);
	if (c->has_meta)
		avro_value_decref(&c->meta);
	if (c->meta_class != NULL)
		avro_value_iface_decref(c->meta_class);
}

/*
 * Decodes the container's records with libavro's file reader (which
 * applies the codec), one generic value reused, and hands each to fn
 * (outside the watch). fmemopen gives the reader, which reads only from a
 * FILE, the buffer.
 */
static int
container_each(Container *c, int (*fn) (Container *c, avro_value_t *rec, void *state), void *state)
{
	FILE	   *fp;
	avro_file_reader_t reader;
	avro_value_iface_t *cls;
	avro_value_t rec;
	int			rc = 0;

	if (c->records == 0)
		return 0;				/* libavro's reader cannot open a file of no block */
	avro_set_error("%s", "");	/* a lookup of an absent field left its error */
	fp = fmemopen((void *) c->buf, c->len, "rb");
	if (fp == NULL)
		return fail(c, "%s: fmemopen: %s", c->what, strerror(errno));
	if (avro_file_reader_fp(fp, c->what, 1, &reader) != 0)
		return fail(c, "%s: libavro cannot open it: %s", c->what, avro_strerror());
	cls = avro_generic_class_from_schema(c->schema);
	if (cls == NULL || avro_generic_value_new(cls, &rec) != 0)
	{
		rc = fail(c, "%s: libavro: %s", c->what, avro_strerror());
		if (cls != NULL)
			avro_value_iface_decref(cls);
		avro_file_reader_close(reader);
		return rc;
	}
	for (c->current = 1; rc == 0 && c->current <= c->records; c->current++)
	{
		watch(c, true);			/* libavro leaks a string a corrupt block cuts short */
		rc = avro_file_reader_read_value(reader, &rec);
		watch(c, false);
		if (rc != 0)
			rc = fail(c, "%s: record %" PRId64 " of %" PRId64 " does not decode (%s)",
					  c->what, c->current, c->records, avro_strerror());
		else
			rc = fn(c, &rec, state);
	}
	watch(c, true);				/* what the reads allocated leaves the list as freed */
	avro_value_decref(&rec);
	avro_value_iface_decref(cls);
	avro_file_reader_close(reader);
	watch(c, false);
	alloc_watch_end(&c->watch, true);	/* what is still listed, nothing reaches */
	return rc;
}

/* Where a field is in the writer's schema, and its value in the current record. */
typedef struct FieldRef
{
	int			index;			/* in its record; -1: absent */
	bool		nullable;
	avro_schema_t type;			/* unwrapped */
	avro_value_t value;			/* records: the current record's */
} FieldRef;

/* A table of fields resolved in a file's schema. */
typedef struct Reading
{
	const FieldDef *defs;
	int			ndefs;
	FieldRef	refs[AVRO_RECORDS_MAX_FIELDS];
	AvroCell	cells[AVRO_RECORDS_MAX_FIELDS];
	int			tuple;			/* the KIND_TUPLE field, or -1 */
	int			ntuple;
	AvroCell   *tuple_cells;	/* its fields (name and type resolved) */
	bool	   *nullable;
	AvroRecordFn fn;
	void	   *arg;
} Reading;

static const char *const KIND_NAMES[] = {"an int", "a long", "a string", "a record", "a record", "an array of records"};

/* A value type of an Avro type, by avro_type_t; -1 for a type no cell has. */
static const int VALUE_TYPES[] = {
	ICEBERG_VALUE_STRING, ICEBERG_VALUE_BYTES, ICEBERG_VALUE_INT, ICEBERG_VALUE_LONG,
	ICEBERG_VALUE_FLOAT, ICEBERG_VALUE_DOUBLE, ICEBERG_VALUE_BOOLEAN, -1,
	-1, -1, ICEBERG_VALUE_FIXED, -1, -1, -1, -1
};

/* A field's name for a message, after its record's: three strings for "%s%s%s". */
#define FIELD_PATH(r, d) (d)->parent < 0 ? "" : (r)->defs[(d)->parent].name, (d)->parent < 0 ? "" : ".", (d)->name

/* The message's words for a field's type (NULL: not one unwrap accepts). */
#define type_words(t) ((t) == NULL ? "a union of more than null and one type" : TYPE_NAMES[avro_typeof(t)])

/*
 * Resolves the tuple's fields (each a primitive, or a union of one with
 * null): their names, optionality and types.
 */
static int
resolve_tuple(Container *c, Reading *r, avro_schema_t rec)
{
	r->ntuple = (int) avro_schema_record_size(rec);
	r->tuple_cells = calloc(r->ntuple + 1, sizeof(AvroCell));
	r->nullable = calloc(r->ntuple + 1, sizeof(bool));
	if (r->tuple_cells == NULL || r->nullable == NULL)
		return fail(c, "%s: out of memory", c->what);
	for (int j = 0; j < r->ntuple; j++)
	{
		avro_schema_t t = unwrap(avro_schema_record_field_get_by_index(rec, j), &r->nullable[j]);

		r->tuple_cells[j].name = avro_schema_record_field_name(rec, j);
		if (t == NULL || VALUE_TYPES[avro_typeof(t)] < 0)
			return fail(c, "%s: field \"%s\" of \"%s\" is %s, not a primitive type",
						c->what, r->tuple_cells[j].name, r->defs[r->tuple].name, type_words(t));
		r->tuple_cells[j].type = VALUE_TYPES[avro_typeof(t)];
	}
	return 0;
}

/*
 * Finds each field in its record's schema and checks its kind (an int may
 * stand for a long, as Avro's promotion allows); a required one that is
 * missing or of another type is an error naming it.
 */
static int
resolve_fields(Container *c, Reading *r)
{
	for (int i = 0; i < r->ndefs; i++)
	{
		const FieldDef *d = &r->defs[i];
		FieldRef   *f = &r->refs[i];
		avro_schema_t rec = d->parent < 0 ? c->schema : r->refs[d->parent].type;
		avro_schema_t t;
		bool		ok;

		f->index = rec == NULL ? -1 : avro_schema_record_field_get_index(rec, d->name);
		if (f->index < 0 && rec != NULL && d->alt != NULL)
			f->index = avro_schema_record_field_get_index(rec, d->alt);
		if (f->index < 0)
		{
			if (d->required)
				return fail(c, "%s: its schema has no field \"%s%s%s\" (required)", c->what, FIELD_PATH(r, d));
			continue;
		}
		t = unwrap(avro_schema_record_field_get_by_index(rec, f->index), &f->nullable);
		ok = t != NULL &&
			(d->kind == KIND_INT ? is_avro_int32(t) :
			 d->kind == KIND_LONG ? is_avro_int32(t) || is_avro_int64(t) :
			 d->kind == KIND_STRING ? is_avro_string(t) : d->kind != KIND_PAIRS ? is_avro_record(t) :
			 is_avro_array(t) && is_avro_record(avro_schema_array_items(t)));
		if (!ok)
			return fail(c, "%s: field \"%s%s%s\" is %s, not %s", c->what, FIELD_PATH(r, d),
						type_words(t), KIND_NAMES[d->kind]);
		f->type = t;
		r->cells[i].name = avro_schema_record_field_name(rec, f->index);
		r->cells[i].type = VALUE_TYPES[avro_typeof(t)] < 0 ? 0 : VALUE_TYPES[avro_typeof(t)];
		if (d->kind == KIND_TUPLE && (r->tuple = i, resolve_tuple(c, r, t) != 0))
			return -1;
	}
	return 0;
}

/* Reads a value that is not null into a cell of the type resolved for it. */
static void
cell_of(avro_value_t *v, AvroCell *cell)
{
	int32_t		i32 = 0;
	float		f = 0;
	const void *p = NULL;

	cell->present = true;
	if (cell->type == ICEBERG_VALUE_INT && avro_value_get_int(v, &i32) == 0)
		cell->i = i32;
	else if (cell->type == ICEBERG_VALUE_BOOLEAN && avro_value_get_boolean(v, &i32) == 0)
		cell->i = i32 != 0;
	else if (cell->type == ICEBERG_VALUE_LONG)
		avro_value_get_long(v, &cell->i);
	else if (cell->type == ICEBERG_VALUE_FLOAT && avro_value_get_float(v, &f) == 0)
		cell->d = f;
	else if (cell->type == ICEBERG_VALUE_DOUBLE)
		avro_value_get_double(v, &cell->d);
	else if (cell->type == ICEBERG_VALUE_STRING && avro_value_get_string(v, &cell->s, &cell->n) == 0)
		cell->n = cell->n > 0 ? cell->n - 1 : 0;	/* libavro counts the NUL */
	else if (cell->type == ICEBERG_VALUE_BYTES && avro_value_get_bytes(v, &p, &cell->n) == 0)
		cell->s = p;
	else if (cell->type == ICEBERG_VALUE_FIXED && avro_value_get_fixed(v, &p, &cell->n) == 0)
		cell->s = p;
}

/*
 * Element k of a KIND_PAIRS cell of the record being read: its two fields
 * (key, value) as cells; false when there is none or either is no primitive.
 */
bool
avro_records_pair(const AvroCell *cell, size_t k, AvroCell *key, AvroCell *value)
{
	AvroCell   *out[2] = {key, value};
	avro_value_t e;
	avro_value_t f;
	bool		ok = avro_value_get_by_index((avro_value_t *) cell->pairs, k, &e, NULL) == 0;

	for (int j = 0; ok && j < 2; j++)
	{
		memset(out[j], 0, sizeof(AvroCell));
		ok = avro_value_get_by_index(&e, j, &f, &out[j]->name) == 0 && VALUE_TYPES[avro_value_get_type(&f)] >= 0;
		out[j]->type = ok ? VALUE_TYPES[avro_value_get_type(&f)] : ICEBERG_VALUE_INT;
		if (ok)
			cell_of(&f, out[j]);
	}
	return ok;
}

/*
 * Reads the table's fields of one record (a record before its fields) and
 * its tuple, and hands them to the caller's function.
 */
static int
read_record(Container *c, avro_value_t *rec, void *state)
{
	Reading    *r = state;
	avro_value_t v;

	for (int i = 0; i < r->ndefs; i++)
	{
		const FieldDef *d = &r->defs[i];
		FieldRef   *f = &r->refs[i];

		r->cells[i].present = false;
		if (f->index < 0 || (d->parent >= 0 && !r->cells[d->parent].present))
			continue;
		if (!field_value(d->parent < 0 ? rec : &r->refs[d->parent].value, f->index, f->nullable, &v))
		{
			if (d->required)
				return fail(c, "%s: record %" PRId64 ": field \"%s%s%s\" is null",
							c->what, c->current, FIELD_PATH(r, d));
		}
		else if (d->kind >= KIND_RECORD)
		{
			f->value = v;
			r->cells[i].present = true;
			r->cells[i].pairs = avro_value_get_size(&v, &r->cells[i].n) == 0 ? &f->value : NULL;
		}
		else
			cell_of(&v, &r->cells[i]);
	}
	for (int j = 0; j < r->ntuple; j++)
	{
		r->tuple_cells[j].present = false;
		if (r->cells[r->tuple].present && field_value(&r->refs[r->tuple].value, j, r->nullable[j], &v))
			cell_of(&v, &r->tuple_cells[j]);
	}
	return r->fn(r->cells, r->tuple_cells, r->ntuple, r->arg, c->err, c->errlen);
}

/*
 * Streams the records of an Avro object container file in memory: each
 * record's fields named by defs, as cells, to fn. 0 when every record was
 * read, -1 with err written, or what fn returned to stop.
 */
int
avro_records_read(const char *buf, size_t len, const char *what, const FieldDef *defs,
				  int ndefs, AvroRecordFn fn, void *arg, char *err, size_t errlen)
{
	Container	c;
	Reading		r;
	int			rc;

	memset(&r, 0, sizeof(r));
	r.defs = defs;
	r.ndefs = ndefs < AVRO_RECORDS_MAX_FIELDS ? ndefs : AVRO_RECORDS_MAX_FIELDS;
	r.tuple = -1;
	r.fn = fn;
	r.arg = arg;
	rc = container_open(&c, buf, len, what, err, errlen);
	if (rc == 0)
		rc = resolve_fields(&c, &r);
	if (rc == 0)
		rc = container_each(&c, read_record, &r);
	free(r.tuple_cells);
	free(r.nullable);
	container_close(&c);
	return rc;
}

/*
 * Hands each key-value pair of a container's header metadata to cb, in
 * file order: Iceberg's "schema", "partition-spec", "partition-spec-id",
 * "format-version", "content", "snapshot-id", ..., and "avro.schema",
 * "avro.codec" (libavro's file reader keeps them to itself: the header is
 * decoded here). 0, -1 with err written, or what cb returned to stop.
 */
int
avro_manifest_metadata(const char *buf, size_t len, AvroMetadataCallback cb,
					   void *arg, char *err, size_t errlen)
{
	Container	c;
	avro_value_t v;
	size_t		count = 0;
	int			rc;

	rc = container_open(&c, buf, len, "Avro file", err, errlen);
	if (rc == 0)
		avro_value_get_size(&c.meta, &count);
	for (size_t i = 0; rc == 0 && i < count; i++)
	{
		const char *key;
		const void *p;
		size_t		n;

		avro_value_get_by_index(&c.meta, i, &v, &key);
		avro_value_get_bytes(&v, &p, &n);
		rc = cb(key, p, n, arg);
	}
	container_close(&c);
	return rc;
}
