/*
 * manifest_files.c
 *     The files of a manifest (and a listing given as jsonb): checked and
 *     read into an inventory, walked in place in jsonb key order, and
 *     written back as jsonb. A file that is off is the manifest's error
 *     (manifest_error), naming the field and the entry.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/numeric.h"

#include "core/json_build.h"
#include "gate/manifest.h"
#include "gate/manifest_error.h"

/*
 * The on-disk header of a numeric in its short form (numeric.c; on-disk,
 * so pg_upgrade keeps it stable): a positive one with display scale 0 is
 * a whole number, whose base-10000 digits are read directly.
 */
#define NUM_SHORT_FLAGS_MASK 0xE000	/* the short flag and its sign */
#define NUM_SHORT_POSITIVE 0x8000
#define NUM_SHORT_DSCALE_MASK 0x1F80
#define NUM_SHORT_WEIGHT_SIGN 0x0040
#define NUM_SHORT_WEIGHT_MASK 0x003F

/*
 * A positive whole number of at most 16 decimal digits, read without the
 * function-call machinery (a manifest holds millions of sizes); false for
 * anything else, which size_of reads the general way.
 */
static bool
size_fast(Numeric n, int64 *out)
{
	const char *data = VARDATA_ANY(n);
	int			len = VARSIZE_ANY_EXHDR(n);
	uint16		header;
	const int16 *digits;
	int			ndigits;
	int			weight;
	int64		v = 0;

	if (len < (int) sizeof(uint16))
		return false;
	memcpy(&header, data, sizeof(uint16));
	if ((header & NUM_SHORT_FLAGS_MASK) != NUM_SHORT_POSITIVE || (header & NUM_SHORT_DSCALE_MASK) != 0 ||
		(header & NUM_SHORT_WEIGHT_SIGN) != 0)
		return false;
	weight = header & NUM_SHORT_WEIGHT_MASK;
	digits = (const int16 *) (data + sizeof(uint16));
	ndigits = (len - sizeof(uint16)) / sizeof(int16);
	if (ndigits == 0)
	{
		*out = 0;				/* zero has no digits */
		return true;
	}
	if (weight > 3 || ndigits > weight + 1)
		return false;
	for (int i = 0; i <= weight; i++)
		v = v * 10000 + (i < ndigits ? digits[i] : 0);
	*out = v;
	return true;
}

/*
 * A size: a JSON number that is a non-negative whole number. (Read without
 * going through text: a manifest can hold a million of them.)
 */
static int64
size_of(JsonbValue *v, const char *field, const char *path, int path_len)
{
	Numeric		n;
	int64		size;

	if (v == NULL || v->type != jbvNumeric)
		manifest_error(field, "entry \"%s\": the size must be a number of bytes", pnstrdup(path, path_len));
	n = v->val.numeric;
	if (size_fast(n, &size))
		return size;
	if (numeric_is_nan(n) || numeric_is_inf(n) ||
		DatumGetInt32(DirectFunctionCall1(numeric_scale, NumericGetDatum(n))) > 0)
		manifest_error(field, "entry \"%s\": the size %s is not a whole number of bytes", pnstrdup(path, path_len),
					 DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(n))));
	/* numeric_int8's own error would name neither the field nor the entry */
	if (DatumGetBool(DirectFunctionCall2(numeric_lt, NumericGetDatum(n), NumericGetDatum(int64_to_numeric(0)))))
		manifest_error(field, "entry \"%s\": the size %s is negative", pnstrdup(path, path_len),
					 DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(n))));
	if (DatumGetBool(DirectFunctionCall2(numeric_gt, NumericGetDatum(n),
										 NumericGetDatum(int64_to_numeric(PG_INT64_MAX)))))
		manifest_error(field, "entry \"%s\": the size %s is larger than any object", pnstrdup(path, path_len),
					 DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(n))));
	size = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(n)));
	return size;
}

/*
 * Whether the paths of a field are a publisher's (checked: they must stay
 * inside the store) or a store's own keys ("listing": any key a store holds
 * is a fact to compare, and "a/../b" is a legal S3 key).
 */
static inline bool
paths_checked(const char *field)
{
	return strcmp(field, "listing") != 0;
}

static void object_fields(const JsonbContainer *c, JsonbValue *size, JsonbValue **size_out,
						  JsonbValue *etag, JsonbValue **etag_out);

/*
 * Checks one file (path, value) of a manifest or a listing and fills *out;
 * the path and etag point into the jsonb (not NUL-terminated).
 */
static void
read_file(const char *field, bool check_path, const char *path, int path_len, JsonbValue *v, InvObject *out)
{
	if (check_path && !path_is_safe(path, path_len))
		manifest_error(field, "entry \"%s\": the path must be relative (no leading /), without empty, \".\" or \"..\" parts, "
					 "and at most 1024 bytes", pnstrdup(path, path_len));
	out->path = (char *) path;
	out->path_len = path_len;
	out->etag = NULL;
	out->etag_len = 0;
	if (v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data))
	{
		JsonbValue	size_v;
		JsonbValue	etag_v;
		JsonbValue *s;
		JsonbValue *e;

		object_fields(v->val.binary.data, &size_v, &s, &etag_v, &e);
		out->size = size_of(s, field, path, path_len);
		if (e != NULL && e->type != jbvNull)
		{
			if (e->type != jbvString || e->val.string.len == 0)
				manifest_error(field, "entry \"%s\": the etag must be a non-empty string", pnstrdup(path, path_len));
			out->etag = e->val.string.val;
			out->etag_len = e->val.string.len;
		}
	}
	else
		out->size = size_of(v, field, path, path_len);
}

/*
 * Checks and adds one file of a manifest or a listing; its path and ETag
 * stay in the jsonb, which outlives the inventory.
 */
static void
add_file(Inventory *inv, const char *field, bool check_path, const char *path, int path_len, JsonbValue *v)
{
	InvObject	o;

	read_file(field, check_path, path, path_len, v, &o);
	inventory_append(inv, &o);
}

/*
 * State of a cursor over a jsonb object of files. It reads the object's
 * pairs in place, through the JEntry layout jsonb.h documents (keys first,
 * then values, each entry a length or, every JB_OFFSET_STRIDE, an end
 * offset): a million pairs through JsonbIteratorNext cost as much again as
 * the comparison itself, and the order is the object's own.
 */
typedef struct JsonbFilesCursor
{
	const JsonbContainer *c;
	const char *base;			/* the data after the JEntry array */
	int			n;				/* pairs */
	int			i;				/* the next pair */
	uint32		key_off;		/* where the next key's data starts */
	uint32		val_off;		/* where the next value's data starts */
	const char *field;
	bool		check_path;
} JsonbFilesCursor;

/*
 * The length of a child whose data starts at offset (its JEntry holds
 * either the length or, every JB_OFFSET_STRIDE children, its end).
 */
static inline uint32
child_len(JEntry je, uint32 offset)
{
	return JBE_HAS_OFF(je) ? JBE_OFFLENFLD(je) - offset : JBE_OFFLENFLD(je);
}

/*
 * A value of a container as a JsonbValue, as jsonb_util.c's fillJsonbValue
 * fills one (not exported): numerics and containers are int-aligned.
 */
static void
fill_value(const char *base, uint32 offset, uint32 len, JEntry je, JsonbValue *v)
{
	if (JBE_ISNULL(je))
		v->type = jbvNull;
	else if (JBE_ISSTRING(je))
	{
		v->type = jbvString;
		v->val.string.val = (char *) base + offset;
		v->val.string.len = len;
	}
	else if (JBE_ISNUMERIC(je))
	{
		v->type = jbvNumeric;
		v->val.numeric = (Numeric) (base + INTALIGN(offset));
	}
	else if (JBE_ISBOOL_TRUE(je) || JBE_ISBOOL_FALSE(je))
	{
		v->type = jbvBool;
		v->val.boolean = JBE_ISBOOL_TRUE(je);
	}
	else
	{
		Assert(JBE_ISCONTAINER(je));
		v->type = jbvBinary;
		v->val.binary.data = (JsonbContainer *) (base + INTALIGN(offset));
		v->val.binary.len = len - (INTALIGN(offset) - offset);
	}
}

/*
 * The "size" and "etag" of a file given as {"size": n, "etag": "..."}, in
 * one pass over the object's pairs (NULL when absent; other keys are
 * ignored): a tenth of a large manifest's files carry one, and a lookup by
 * key per field cost more than the rest of reading the file.
 */
static void
object_fields(const JsonbContainer *c, JsonbValue *size, JsonbValue **size_out, JsonbValue *etag,
			  JsonbValue **etag_out)
{
	int			n = JsonContainerSize(c);
	const char *base = (const char *) &c->children[2 * n];
	uint32		key_off = 0;
	uint32		val_off = n > 0 ? getJsonbOffset(c, n) : 0;

	*size_out = NULL;
	*etag_out = NULL;
	for (int i = 0; i < n; i++)
	{
		JEntry		kje = c->children[i];
		JEntry		vje = c->children[n + i];
		uint32		klen = child_len(kje, key_off);
		uint32		vlen = child_len(vje, val_off);

		if (klen == 4 && memcmp(base + key_off, "size", 4) == 0)
		{
			fill_value(base, val_off, vlen, vje, size);
			*size_out = size;
		}
		else if (klen == 4 && memcmp(base + key_off, "etag", 4) == 0)
		{
			fill_value(base, val_off, vlen, vje, etag);
			*etag_out = etag;
		}
		key_off += klen;
		val_off += vlen;
	}
}

/* Next file of a jsonb object, in jsonb key order. */
static bool
jsonb_files_next(InvCursor *cursor, InvObject *out)
{
	JsonbFilesCursor *st = (JsonbFilesCursor *) cursor->state;
	JEntry		kje;
	JEntry		vje;
	uint32		klen;
	uint32		vlen;
	JsonbValue	v;

	if (st->i >= st->n)
		return false;
	kje = st->c->children[st->i];
	vje = st->c->children[st->n + st->i];
	Assert(JBE_ISSTRING(kje));
	klen = child_len(kje, st->key_off);
	vlen = child_len(vje, st->val_off);
	fill_value(st->base, st->val_off, vlen, vje, &v);
	read_file(st->field, st->check_path, st->base + st->key_off, klen, &v, out);
	st->key_off += klen;
	st->val_off += vlen;
	st->i++;
	return true;
}

/*
 * A cursor over a set of files given as a jsonb object, or false when they
 * are given another way (an array), which needs inventory_from_jsonb.
 */
bool
jsonb_files_cursor(JsonbValue *v, const char *field, InvCursor *cursor)
{
	JsonbFilesCursor *st;
	JsonbContainer *c;

	if (v == NULL || v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		return false;
	c = v->val.binary.data;
	st = palloc(sizeof(JsonbFilesCursor));
	st->c = c;
	st->n = JsonContainerSize(c);
	st->base = (const char *) &c->children[2 * st->n];
	st->i = 0;
	st->key_off = 0;
	st->val_off = st->n > 0 ? getJsonbOffset(c, st->n) : 0;
	st->field = field;
	st->check_path = paths_checked(field);
	cursor->next = jsonb_files_next;
	cursor->state = st;
	return true;
}

/* Orders objects by path (bytes, then length), to find duplicates. */
static int
object_cmp(const void *a, const void *b)
{
	const InvObject *x = a;
	const InvObject *y = b;
	int			c = memcmp(x->path, y->path, Min(x->path_len, y->path_len));

	return c != 0 ? c : (x->path_len > y->path_len) - (x->path_len < y->path_len);
}

/*
 * Reads a set of files: an object {"path": size | {"size", "etag"}} or an
 * array [{"path", "size", "etag"}]. Errors name the field.
 */
void
inventory_from_jsonb(JsonbValue *v, const char *field, Inventory *inv)
{
	JsonbIterator *it;
	JsonbValue	val;
	JsonbIteratorToken tok;
	bool		check_path = paths_checked(field);

	if (v == NULL || v->type == jbvNull)
		manifest_error(field, "%s", strcmp(field, "files") == 0 ? "is missing (give \"files\" or \"files_location\")"
					 : "is missing");
	if (v->type != jbvBinary)
		manifest_error(field, "must be an object {\"path\": size} or an array of {\"path\", \"size\"}");

	if (JsonContainerIsObject(v->val.binary.data))
	{
		InvCursor	cursor;
		InvObject	o;

		(void) jsonb_files_cursor(v, field, &cursor);
		while (cursor.next(&cursor, &o))
			inventory_append(inv, &o);
	}
	else if (JsonContainerIsArray(v->val.binary.data))
	{
		it = JsonbIteratorInit(v->val.binary.data);
		while ((tok = JsonbIteratorNext(&it, &val, true)) != WJB_DONE)
		{
			JsonbValue *p;

			if (tok != WJB_ELEM)
				continue;
			if (val.type != jbvBinary || !JsonContainerIsObject(val.val.binary.data))
				manifest_error(field, "must hold objects {\"path\", \"size\"}");
			p = getKeyJsonValueFromContainer(val.val.binary.data, "path", 4, NULL);
			if (p == NULL || p->type != jbvString || p->val.string.len == 0)
				manifest_error(field, "entry %d has no \"path\" string", inv->n + 1);
			add_file(inv, field, check_path, p->val.string.val, p->val.string.len, &val);
		}
		/* An array can name a path twice; an object cannot (jsonb keeps one). */
		if (inv->n > 1)
		{
			qsort(inv->items, inv->n, sizeof(InvObject), object_cmp);
			for (int i = 1; i < inv->n; i++)
				if (object_cmp(&inv->items[i - 1], &inv->items[i]) == 0)
					manifest_error(field, "lists \"%s\" twice", pnstrdup(inv->items[i].path, inv->items[i].path_len));
		}
	}
	else
		manifest_error(field, "must be an object {\"path\": size} or an array of {\"path\", \"size\"}");
}

/* Pushes a key of len bytes. */
static void
push_key(JsonbParseState **st, const char *key, int len)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = len;
	pushJsonbValue(st, WJB_KEY, &k);
}

/* Pushes an object's value: a size. */
static void
push_size(JsonbParseState **st, int64 size)
{
	JsonbValue	v;

	v.type = jbvNumeric;
	v.val.numeric = int64_to_numeric(size);
	pushJsonbValue(st, WJB_VALUE, &v);
}

/*
 * Pushes one object as {"path": size} or {"path": {"size", "etag"}} into
 * an open jsonb object.
 */
void
inventory_push_object(JsonbParseState **st, const InvObject *o)
{
	push_key(st, o->path, o->path_len);
	if (o->etag == NULL)
		push_size(st, o->size);
	else
	{
		JsonbValue	v;

		pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
		push_key(st, "etag", 4);
		v.type = jbvString;
		v.val.string.val = (char *) o->etag;
		v.val.string.len = o->etag_len;
		pushJsonbValue(st, WJB_VALUE, &v);
		push_key(st, "size", 4);
		push_size(st, o->size);
		pushJsonbValue(st, WJB_END_OBJECT, NULL);
	}
}

/*
 * Pushes an inventory as a jsonb object {"path": size} or {"path": {"size",
 * "etag"}}, as the value of key (or as an element or the document when key
 * is NULL): a listing of a million objects skips the text round trip
 * (printing, then lexing and parsing it again).
 */
void
inventory_push_jsonb(JsonbParseState **st, const char *key, const Inventory *inv)
{
	jb_begin_object(st, key);
	for (int i = 0; i < inv->n; i++)
		inventory_push_object(st, &inv->items[i]);
	jb_end_object(st);
}
