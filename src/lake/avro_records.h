/*
 * avro_records.h
 *     Between avro_manifest.c (the one file that calls libavro) and
 *     manifest_read.c (what Iceberg's records mean): the records of an Avro
 *     object container file in memory, streamed one at a time as typed
 *     values of the fields a table names. No libavro type appears here.
 */
#ifndef FINALIZE_LAKE_AVRO_RECORDS_H
#define FINALIZE_LAKE_AVRO_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lake/avro_manifest.h"

typedef enum FieldKind
{
	KIND_INT,					/* an Avro int */
	KIND_LONG,					/* a long, or an int (Avro promotes it) */
	KIND_STRING,
	KIND_RECORD,				/* a nested record: the parent of other fields */
	KIND_TUPLE,					/* a nested record whose every field (a
								 * primitive) is read: a partition tuple */
	KIND_PAIRS					/* an array of records of two fields (Iceberg's
								 * map with int keys: key, value), each
								 * element read by avro_records_pair */
} FieldKind;

/*
 * A field to read: looked up by name (or alt) in the top record or in the
 * record of an earlier field (parent). A required field that is missing,
 * of another kind or null is an error naming it; an optional one is then
 * not present.
 */
typedef struct FieldDef
{
	const char *name;
	const char *alt;			/* another name writers gave it, or NULL */
	FieldKind	kind;
	bool		required;
	int			parent;			/* index of a KIND_RECORD field, or -1 */
	int			value_at;		/* for the caller: where its value goes */
	int			has_at;			/* for the caller: its has_ flag, or -1 */
} FieldDef;

#define AVRO_RECORDS_MAX_FIELDS 24

/* The value of a field in the record being read. */
typedef struct AvroCell
{
	const char *name;			/* the field's name in the writer's schema */
	bool		present;		/* in the schema, and not null */
	IcebergValueType type;		/* as written */
	int64_t		i;				/* INT, LONG, BOOLEAN */
	double		d;				/* FLOAT, DOUBLE */
	const char *s;				/* STRING (NUL-terminated), BYTES, FIXED */
	size_t		n;				/* the bytes of s, without a NUL; PAIRS: elements */
	const void *pairs;			/* PAIRS: the array, for avro_records_pair */
} AvroCell;

/*
 * Called with one record: cells[i] is defs[i]'s value (a record's cell is
 * present when the record is), tuple the KIND_TUPLE record's fields in the
 * writer's order. Returns 0 to go on; -1 (err written) or another value to
 * stop. Pointers are valid during the call only.
 */
typedef int (*AvroRecordFn) (const AvroCell *cells, const AvroCell *tuple, int ntuple,
							 void *arg, char *err, size_t errlen);

extern bool avro_records_pair(const AvroCell *cell, size_t k, AvroCell *key, AvroCell *value);
extern int	avro_records_read(const char *buf, size_t len, const char *what,
							  const FieldDef *defs, int ndefs, AvroRecordFn fn, void *arg,
							  char *err, size_t errlen);

#endif							/* FINALIZE_LAKE_AVRO_RECORDS_H */
