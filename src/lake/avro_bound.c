/*
 * avro_bound.c
 *     Walks a block's records over the writer's schema before libavro
 *     decodes them, so that libavro is only ever handed records it decodes
 *     whole, within a memory budget.
 *
 * Why: libavro's generic reader decodes whatever a record says. An array
 * of 40 million empty strings, 40 MB in a block, asked libavro for
 * gigabytes; the allocator could only refuse by returning NULL, and
 * libavro's array then kept counting elements it had lost and crashed the
 * backend when it freed them (array.c, generic.c: a failed growth leaves
 * data NULL and the count as it was). Nothing refused in the middle of
 * libavro is safe, so nothing is: every value is checked to lie in the
 * block and to be one the schema allows (lengths, union branches, enum
 * symbols, int ranges, as libavro reads them), and the memory its generic
 * value will take is added up (generously: a string's bytes and its
 * wrapper, an array's items twice, libavro's arrays doubling as they grow,
 * a union's branch); a record over the budget is refused before libavro
 * sees it. An array's items each take a byte at least (the shape refuses
 * items written in no bytes), so the walk is linear in the block's bytes;
 * the stop function is asked every STOP_EVERY values.
 *
 * Records are walked one at a time, each just before libavro decodes it:
 * the records before a bad one are still handed on, as a reader that
 * streams them does.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lake/avro_bound.h"
#include "lake/avro_manifest.h"

/* About the bytes of libavro's generic values (generic.c), rounded up. */
#define INSTANCE_SCALAR 16
#define INSTANCE_BUFFER 64		/* a string's, bytes', fixed's wrapped buffer */
#define INSTANCE_ARRAY 64
#define INSTANCE_UNION 32
#define HEAP_OVERHEAD 32		/* malloc's, and libavro's wrapper of a buffer */

#define STOP_EVERY 65536
/* Deeper than any manifest's schema (Iceberg's nest five levels or so). */
#define MAX_DEPTH 64
#define SHAPE_EMPTY_ITEMS (-2)
#define SHAPE_NO_MEMORY (-3)

/* A shape being made, and where its message goes. */
typedef struct Build
{
	AvroShape  *sh;
	ShapeDescribeFn describe;
	ShapeKidFn	kid;
	const char *what;
	char	   *err;
	size_t		errlen;
	const void *stack[MAX_DEPTH];	/* the types that enclose the one being made */
} Build;

/* Where the walk of a block is. */
typedef struct Walk
{
	const AvroShape *sh;
	const char *p;
	const char *end;
	size_t		mem;			/* what the current record will take */
	size_t		budget;
	bool		(*stop) (void);
	long		steps;
	int			result;			/* 0, or why the walk ended */
	char	   *why;
	size_t		whylen;
} Walk;

/*
 * Adds a node made of schema (of type, with its kids' node numbers),
 * computing whether it is written in no bytes and how large its generic
 * value is; its number, or SHAPE_NO_MEMORY, or SHAPE_EMPTY_ITEMS for an
 * array of items written in no bytes (its count alone would make a reader
 * loop).
 */
static int
shape_add(AvroShape *sh, const void *schema, ShapeType type, int64_t size, const int *kids, int nkids)
{
	ShapeNode  *nodes = realloc(sh->nodes, sizeof(ShapeNode) * (sh->nnodes + 1));
	int		   *more = nkids > 0 ? realloc(sh->kids, sizeof(int) * (sh->nkids + nkids)) : sh->kids;
	ShapeNode  *n;

	if (nodes != NULL)
		sh->nodes = nodes;
	if (more != NULL)
		sh->kids = more;
	if (nodes == NULL || (nkids > 0 && more == NULL))
		return SHAPE_NO_MEMORY;
	if (type == SHAPE_ARRAY && sh->nodes[kids[0]].empty)
		return SHAPE_EMPTY_ITEMS;
	n = &sh->nodes[sh->nnodes];
	memset(n, 0, sizeof(*n));
	n->type = type;
	n->size = size;
	n->key = schema;
	n->nkids = nkids;
	n->kids = sh->nkids;
	memcpy(sh->kids + sh->nkids, kids, sizeof(int) * nkids);
	sh->nkids += nkids;
	n->empty = type == SHAPE_NULL || (type == SHAPE_FIXED && size == 0) || type == SHAPE_RECORD;
	n->instance = type == SHAPE_STRING || type == SHAPE_BYTES || type == SHAPE_FIXED ? INSTANCE_BUFFER :
		type == SHAPE_ARRAY ? INSTANCE_ARRAY : type == SHAPE_UNION ? INSTANCE_UNION : INSTANCE_SCALAR;
	for (int i = 0; type == SHAPE_RECORD && i < nkids; i++)
	{
		n->empty = n->empty && sh->nodes[kids[i]].empty;
		n->instance += sh->nodes[kids[i]].instance;
	}
	return sh->nnodes++;
}

/* Writes a message about the schema; returns -1. */
static __attribute__((format(printf, 2, 3))) int
refuse(Build *b, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(b->err, b->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/*
 * The node of a link (a named type used again): its target's, made
 * before, unless the target encloses it (a type that contains itself).
 */
static int
link_node(Build *b, const ShapeInfo *info, int depth)
{
	for (int i = 0; i < depth; i++)
		if (b->stack[i] == info->target)
			return refuse(b, "%s: its schema's type \"%s\" contains itself", b->what, info->name);
	for (int i = b->sh->nnodes; i > 0; i--)
		if (b->sh->nodes[i - 1].key == info->target)
			return i - 1;
	return refuse(b, "%s: its schema uses type \"%s\" before it is defined", b->what, info->name);
}

/* The node of a type, its kids made first; -1 with the message written. */
static int
build(Build *b, const void *schema, int depth)
{
	ShapeInfo	info;
	int		   *kids;
	int			node = 0;

	b->describe(schema, &info);
	if (depth >= MAX_DEPTH)
		return refuse(b, "%s: its schema nests deeper than %d levels", b->what, MAX_DEPTH);
	if (info.type == SHAPE_LINK)
		return link_node(b, &info, depth);
	if (info.type < 0)
		return refuse(b, "%s: its schema has %s, which no Iceberg manifest has "
					  "(Iceberg writes a map as an array of key-value records)", b->what, info.words);
	if ((kids = malloc(sizeof(int) * (info.nkids + 1))) == NULL)
		return refuse(b, "%s: out of memory", b->what);
	b->stack[depth] = schema;
	for (int i = 0; node >= 0 && i < info.nkids; i++)
		node = kids[i] = build(b, b->kid(schema, i), depth + 1);
	if (node >= 0)
		node = shape_add(b->sh, schema, (ShapeType) info.type, info.size, kids, info.nkids);
	free(kids);
	if (node == -1)
		return -1;				/* a kid's message is written */
	if (node == SHAPE_EMPTY_ITEMS)
	{
		b->describe(b->kid(schema, 0), &info);
		return refuse(b, "%s: its schema has an array of %s, whose items are written in no bytes",
					  b->what, info.words);
	}
	return node == SHAPE_NO_MEMORY ? refuse(b, "%s: out of memory", b->what) : node;
}

/*
 * The shape of a writer's schema, made through describe and kid (the
 * library that parsed it): its records' node, or -1 with err written for a
 * schema no reader can decode within bounds: a named type that contains
 * itself (its values nest as deep as the data say, and libavro's
 * recursion has no depth limit: the stack overflowed), an array whose
 * items are written in no bytes (its count alone, ten bytes, made libavro
 * loop that many times), records written in no bytes (a block's count
 * alone, the same), a map (libavro's tables never check an allocation),
 * a schema nested deeper than any manifest's.
 */
int
avro_shape_build(AvroShape *sh, const void *schema, ShapeDescribeFn describe, ShapeKidFn kid,
				 const char *what, char *err, size_t errlen)
{
	Build		b = {sh, describe, kid, what, err, errlen, {0}};
	int			root = build(&b, schema, 0);

	if (root >= 0 && sh->nodes[root].empty)
		return refuse(&b, "%s: its records are written in no bytes", what);
	return root;
}

/* Frees a shape's nodes. */
void
avro_shape_free(AvroShape *sh)
{
	free(sh->nodes);
	free(sh->kids);
	memset(sh, 0, sizeof(*sh));
}

/* Ends the walk with a result and, when corrupt, the words why; returns false. */
static bool
stop_walk(Walk *w, int result, const char *why)
{
	w->result = result;
	if (why != NULL)
		snprintf(w->why, w->whylen, "%s", why);
	return false;
}

/* Reads a long as libavro does (at most 10 bytes), within the block. */
static bool
walk_long(Walk *w, int64_t *out)
{
	uint64_t	v = 0;

	for (int shift = 0; shift < 70; shift += 7)
	{
		unsigned char b;

		if (w->p >= w->end)
			return stop_walk(w, AVRO_READ_FAILED, "it runs past the end of its block");
		b = (unsigned char) *w->p++;
		v |= (uint64_t) (b & 0x7f) << shift;
		if ((b & 0x80) == 0)
		{
			*out = (int64_t) (v >> 1) ^ -(int64_t) (v & 1);
			return true;
		}
	}
	return stop_walk(w, AVRO_READ_FAILED, "a number is longer than 10 bytes");
}

/* Passes n bytes of the block. */
static bool
walk_bytes(Walk *w, int64_t n)
{
	if (n < 0 || n > w->end - w->p)
		return stop_walk(w, AVRO_READ_FAILED, n < 0 ? "a length is negative" : "it runs past the end of its block");
	w->p += n;
	return true;
}

/* Adds n items of size bytes to what the record will take; false past the budget. */
static bool
charge(Walk *w, size_t n, size_t size)
{
	if (size > 0 && n > (w->budget - w->mem) / size)
		return stop_walk(w, AVRO_READ_TOO_LARGE, NULL);
	w->mem += n * size;
	return true;
}

static bool walk_value(Walk *w, int node);

/* An array: blocks of items (a negative count is followed by the block's size), up to a count of 0. */
static bool
walk_array(Walk *w, const ShapeNode *n)
{
	int			item = w->sh->kids[n->kids];
	int64_t		count,
				size;

	for (;;)
	{
		if (!walk_long(w, &count))
			return false;
		if (count == 0)
			return true;
		if (count == INT64_MIN || (count < 0 && !walk_long(w, &size)))
			return stop_walk(w, AVRO_READ_FAILED, "an array's block count is corrupt");
		count = count < 0 ? -count : count;
		/* every item takes a byte at least */
		if (count > w->end - w->p)
			return stop_walk(w, AVRO_READ_FAILED, "an array counts more items than its block has bytes");
		if (!charge(w, (size_t) count, 2 * w->sh->nodes[item].instance))
			return false;
		for (int64_t i = 0; i < count; i++)
			if (!walk_value(w, item))
				return false;
	}
}

/* One value of a node, and what its generic value will take. */
static bool
walk_value(Walk *w, int node)
{
	const ShapeNode *n = &w->sh->nodes[node];
	int64_t		v;

	if (++w->steps % STOP_EVERY == 0 && w->stop != NULL && w->stop())
		return stop_walk(w, AVRO_READ_STOPPED, NULL);
	switch (n->type)
	{
		case SHAPE_NULL:
			return true;
		case SHAPE_BOOLEAN:
			return walk_bytes(w, 1);
		case SHAPE_FLOAT:
			return walk_bytes(w, 4);
		case SHAPE_DOUBLE:
			return walk_bytes(w, 8);
		case SHAPE_LONG:
			return walk_long(w, &v);
		case SHAPE_INT:
			return walk_long(w, &v) &&
				(v == (int32_t) v || stop_walk(w, AVRO_READ_FAILED, "an int is out of range"));
		case SHAPE_ENUM:
			return walk_long(w, &v) &&
				((v >= 0 && v < n->size) || stop_walk(w, AVRO_READ_FAILED, "an enum's symbol is out of range"));
		case SHAPE_STRING:
		case SHAPE_BYTES:
			return walk_long(w, &v) && walk_bytes(w, v) && charge(w, 1, (size_t) v + 1 + HEAP_OVERHEAD);
		case SHAPE_FIXED:
			return walk_bytes(w, n->size) && charge(w, 1, (size_t) n->size + HEAP_OVERHEAD);
		case SHAPE_UNION:
			if (!walk_long(w, &v) || ((v < 0 || v >= n->nkids) &&
									  !stop_walk(w, AVRO_READ_FAILED, "a union's branch is out of range")))
				return false;
			node = w->sh->kids[n->kids + v];
			return charge(w, 1, w->sh->nodes[node].instance + HEAP_OVERHEAD) && walk_value(w, node);
		case SHAPE_RECORD:
			for (int i = 0; i < n->nkids; i++)
				if (!walk_value(w, w->sh->kids[n->kids + i]))
					return false;
			return true;
		case SHAPE_ARRAY:
			return walk_array(w, n);
	}
	return stop_walk(w, AVRO_READ_FAILED, "a value of an unknown type");
}

/*
 * Walks one record (of node root) at *p, before end: 0 when it lies there,
 * is one the schema allows and takes at most budget bytes as libavro's
 * generic value (*p is then past it); else AVRO_READ_FAILED (why says what
 * was wrong), AVRO_READ_TOO_LARGE or AVRO_READ_STOPPED.
 */
int
avro_bound_record(const AvroShape *sh, int root, const char **p, const char *end, size_t budget,
				  bool (*stop) (void), char *why, size_t whylen)
{
	Walk		w;

	memset(&w, 0, sizeof(w));
	w.sh = sh;
	w.p = *p;
	w.end = end;
	w.budget = budget;
	w.stop = stop;
	w.why = why;
	w.whylen = whylen;
	w.mem = sh->nodes[root].instance;
	if (!walk_value(&w, root))
		return w.result;
	*p = w.p;
	return 0;
}
