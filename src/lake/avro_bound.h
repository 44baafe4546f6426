/*
 * avro_bound.h
 *     What decoding an Avro block's records will cost, found before libavro
 *     decodes them: the writer's schema as a shape (built here from
 *     libavro's schema, which avro_manifest.c describes, and checked), and a walk of a record
 *     over it that checks every value lies in the block and is one
 *     the schema allows, and adds up the memory libavro's generic values
 *     will take, a record at a time. Pure: malloc'd, no PostgreSQL, no libavro.
 */
#ifndef FINALIZE_LAKE_AVRO_BOUND_H
#define FINALIZE_LAKE_AVRO_BOUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The types of Avro a manifest's schema may use (a map is refused). */
typedef enum ShapeType
{
	SHAPE_NULL,
	SHAPE_BOOLEAN,
	SHAPE_INT,
	SHAPE_LONG,
	SHAPE_FLOAT,
	SHAPE_DOUBLE,
	SHAPE_STRING,
	SHAPE_BYTES,
	SHAPE_FIXED,
	SHAPE_ENUM,
	SHAPE_RECORD,
	SHAPE_ARRAY,
	SHAPE_UNION
} ShapeType;

/* One type of the schema; a named type used again is the same node. */
typedef struct ShapeNode
{
	ShapeType	type;
	int			nkids;			/* a record's fields, a union's branches, an array's items (1) */
	int			kids;			/* where they start in AvroShape.kids */
	int64_t		size;			/* a fixed's bytes, an enum's symbols */
	size_t		instance;		/* about the bytes of its generic value in libavro */
	bool		empty;			/* written in no bytes (null, fixed 0, records of such) */
	const void *key;			/* the schema it was made of */
} ShapeNode;

/* A schema as nodes, children before their parent. */
typedef struct AvroShape
{
	ShapeNode  *nodes;
	int			nnodes;
	int		   *kids;
	int			nkids;
} AvroShape;

/* A type of the writer's schema, as the library that parsed it describes it. */
typedef struct ShapeInfo
{
	int			type;			/* a ShapeType, SHAPE_LINK, or -1 (a map) */
	int			nkids;			/* a record's fields, a union's branches, an array's items (1) */
	int64_t		size;			/* a fixed's bytes, an enum's symbols */
	const char *words;			/* its type as a message names it ("a string") */
	const char *name;			/* a named type's, a link's target's */
	const void *target;			/* a link's target */
} ShapeInfo;

#define SHAPE_LINK 100			/* a named type used again, by its name */

typedef void (*ShapeDescribeFn) (const void *schema, ShapeInfo *info);
typedef const void *(*ShapeKidFn) (const void *schema, int i);

extern int	avro_shape_build(AvroShape *sh, const void *schema, ShapeDescribeFn describe, ShapeKidFn kid,
							 const char *what, char *err, size_t errlen);
extern void avro_shape_free(AvroShape *sh);
extern int	avro_bound_record(const AvroShape *sh, int root, const char **p, const char *end,
							  size_t budget, bool (*stop) (void), char *why, size_t whylen);

#endif							/* FINALIZE_LAKE_AVRO_BOUND_H */
