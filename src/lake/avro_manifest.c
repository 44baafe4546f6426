/*
 * avro_manifest.c
 *     The one file that talks to libavro (Apache Avro C): the records of an
 *     Avro object container file in memory (an Iceberg manifest list or
 *     manifest) streamed one at a time as the fields a table names
 *     (avro_records.h; manifest_read.c says what they mean), and the
 *     key-value metadata of its header.
 *
 * The container itself (header, blocks, codecs) is read without libavro
 * (avro_container.c says why): libavro is given the writer's schema, once
 * it is known to decode within bounds, and one block's decompressed
 * records at a time through a memory reader. Fields are found by name,
 * once per file (libavro keeps no field-id). All is malloc'd (never
 * palloc) and freed before a read returns, what libavro loses on its
 * error paths too (alloc_watch.c).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <avro.h>

#include "lake/alloc_watch.h"
#include "lake/avro_bound.h"
#include "lake/avro_container.h"
#include "lake/avro_records.h"

/* Larger than any manifest's schema (a few kB: the partition's fields are in it). */
#define MAX_SCHEMA (1 << 20)

/* One container file being read, and where its errors are written. */
typedef struct Container
{
	AvroContainer file;			/* its header and blocks (avro_container.c) */
	const char *what;			/* "manifest list" or "manifest" */
	char	   *err;
	size_t		errlen;
	struct avro_allocator_state saved;	/* libavro's allocator outside a watch */
	AllocWatch	watch;
	avro_schema_t schema;		/* the writer's schema, or NULL */
	AvroShape	shape;			/* its shape (avro_bound.c) */
	int			root;			/* the records' node */
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
	return AVRO_READ_FAILED;
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

/* A libavro type as avro_bound.c makes its shape of it. */
static void
describe(const void *schema, ShapeInfo *info)
{
	static const int types[] = {
		SHAPE_STRING, SHAPE_BYTES, SHAPE_INT, SHAPE_LONG, SHAPE_FLOAT, SHAPE_DOUBLE, SHAPE_BOOLEAN,
		SHAPE_NULL, SHAPE_RECORD, SHAPE_ENUM, SHAPE_FIXED, -1, SHAPE_ARRAY, SHAPE_UNION, SHAPE_LINK
	};
	avro_schema_t s = (avro_schema_t) schema;

	memset(info, 0, sizeof(*info));
	info->type = types[avro_typeof(s)];
	info->words = TYPE_NAMES[avro_typeof(s)];
	info->nkids = is_avro_record(s) ? (int) avro_schema_record_size(s) :
		is_avro_union(s) ? (int) avro_schema_union_size(s) : is_avro_array(s) ? 1 : 0;
	info->size = is_avro_fixed(s) ? avro_schema_fixed_size(s) :
		is_avro_enum(s) ? avro_schema_enum_number_of_symbols(s) : 0;
	info->target = is_avro_link(s) ? avro_schema_link_target(s) : NULL;
	info->name = is_avro_named_type(s) ? avro_schema_name(s) :
		is_avro_link(s) ? avro_schema_name(avro_schema_link_target(s)) : NULL;
}

/* The i-th type inside a record (its field's), a union (its branch) or an array (its items). */
static const void *
kid(const void *schema, int i)
{
	avro_schema_t s = (avro_schema_t) schema;

	return is_avro_record(s) ? avro_schema_record_field_get_by_index(s, i) :
		is_avro_union(s) ? avro_schema_union_branch(s, i) : avro_schema_array_items(s);
}

/*
 * Parses the header's schema and makes its shape: records (not written in
 * no bytes, which would make a block's count alone a loop) that libavro
 * decodes within bounds.
 */
static int
header_schema(Container *c)
{
	const AvroMeta *m = avro_container_meta(&c->file, "avro.schema");
	if (m == NULL)
		return fail(c, "%s: its Avro header has no schema (avro.schema)", c->what);
	if (m->len > MAX_SCHEMA)
		return fail(c, "%s: its Avro schema is larger than %d bytes", c->what, MAX_SCHEMA);
	if (avro_schema_from_json_length(m->value, m->len, &c->schema) != 0)
	{
		c->schema = NULL;
		return fail(c, "%s: the schema in its Avro header does not parse (%s)",
					c->what, avro_strerror());
	}
	if (!is_avro_record(c->schema))
		return fail(c, "%s: its records are %s, not records", c->what, TYPE_NAMES[avro_typeof(c->schema)]);
	c->root = avro_shape_build(&c->shape, c->schema, describe, kid, c->what, c->err, c->errlen);
	return c->root < 0 ? AVRO_READ_FAILED : 0;
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
 * Opens a container: its header and blocks (avro_container.c), then its
 * schema. 0, or a negative AVRO_READ_* with err written.
 */
static int
container_open(Container *c, const char *buf, size_t len, const char *what, char *err, size_t errlen)
{
	int			rc;

	memset(c, 0, sizeof(*c));
	avro_set_error("%s", "");	/* libavro prefixes some errors to the last one */
	c->what = what;
	c->err = err;
	c->errlen = errlen;
	rc = avro_container_open(&c->file, buf, len, what, err, errlen);
	return rc != 0 ? rc : header_schema(c);
}

/* Frees what container_open allocated (any part of it). */
static void
container_close(Container *c)
{
	if (c->schema != NULL)
		avro_schema_decref(c->schema);
	avro_shape_free(&c->shape);
	avro_container_close(&c->file);
}

/*
 * Decodes the record at *p into rec and hands it to fn (outside the watch),
 * once avro_bound.c found that it lies before end, is one the schema
 * allows and fits the budget; *p is then past it. The decoding is watched
 * all the same: what libavro would lose on an error is freed.
 */
static int
read_one(Container *c, avro_reader_t r, const char **p, const char *end, avro_value_t *rec,
		 int (*fn) (Container *c, avro_value_t *rec, void *state), void *state)
{
	const char *at = *p;
	char		why[256] = "";
	int			rc;

	rc = avro_container_stop() ? AVRO_READ_STOPPED :
		avro_bound_record(&c->shape, c->root, p, end, avro_container_budget(), avro_container_stop, why, sizeof(why));
	if (rc == AVRO_READ_STOPPED)
		snprintf(c->err, c->errlen, "%s: the read was interrupted", c->what);
	else if (rc == AVRO_READ_TOO_LARGE)
		snprintf(c->err, c->errlen, "%s: record %" PRId64 " of %" PRId64 " would take more than %zu bytes "
				 "of memory to decode", c->what, c->current, c->file.records, avro_container_budget());
	if (rc == 0)
	{
		avro_reader_memory_set_source(r, at, (int64_t) (*p - at));
		watch(c, true);
		rc = avro_value_read(r, rec);
		watch(c, false);
		snprintf(why, sizeof(why), "%s", avro_strerror());
	}
	if (rc != 0 && rc != AVRO_READ_STOPPED && rc != AVRO_READ_TOO_LARGE)
		return fail(c, "%s: record %" PRId64 " of %" PRId64 " does not decode (%s)",
					c->what, c->current, c->file.records, why);
	return rc != 0 ? rc : fn(c, rec, state);
}

/*
 * Decodes the container's records, a block at a time (decompressed by
 * avro_container_next) through a memory reader, one generic value reused,
 * and hands each to fn.
 */
static int
container_each(Container *c, int (*fn) (Container *c, avro_value_t *rec, void *state), void *state)
{
	avro_reader_t r = avro_reader_memory("", 0);
	avro_value_iface_t *cls = r != NULL ? avro_generic_class_from_schema(c->schema) : NULL;
	avro_value_t rec;
	int64_t		count;
	const char *data;
	size_t		len;
	int			rc = 0;

	avro_set_error("%s", "");	/* a lookup of an absent field left its error */
	if (cls == NULL || avro_generic_value_new(cls, &rec) != 0)
	{
		rc = fail(c, "%s: libavro: %s", c->what, avro_strerror());
		if (cls != NULL)
			avro_value_iface_decref(cls);
		if (r != NULL)
			avro_reader_free(r);
		return rc;
	}
	c->current = 1;
	while (rc == 0 && (rc = avro_container_next(&c->file, &count, &data, &len)) == 1)
	{
		const char *end = data + len;

		for (rc = 0; rc == 0 && count > 0; count--, c->current++)
			rc = read_one(c, r, &data, end, &rec, fn, state);
	}
	watch(c, true);				/* what the reads allocated leaves the list as freed */
	avro_value_decref(&rec);
	avro_value_iface_decref(cls);
	watch(c, false);
	alloc_watch_end(&c->watch, true);	/* what is still listed, nothing reaches */
	avro_reader_free(r);
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
 * read, a negative AVRO_READ_* with err written, or what fn returned to
 * stop.
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
 * "avro.codec" (avro_container.c decodes the header). 0, a negative
 * AVRO_READ_* with err written, or what cb returned to stop.
 */
int
avro_manifest_metadata(const char *buf, size_t len, AvroMetadataCallback cb,
					   void *arg, char *err, size_t errlen)
{
	Container	c;
	int			rc;

	rc = container_open(&c, buf, len, "Avro file", err, errlen);
	for (int i = 0; rc == 0 && i < c.file.nmeta; i++)
		rc = cb(c.file.meta[i].key, c.file.meta[i].value, c.file.meta[i].len, arg);
	container_close(&c);
	return rc;
}
