/*
 * json_build.c
 *     Helpers over pushJsonbValue: keys, scalars and nested documents.
 *     pushJsonbValue returns the finished value when the outermost
 *     container closes; jb_end_* pass it on for jb_finish.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "core/json_build.h"

/* Pushes the key of the next value, unless in an array (key NULL). */
void
jb_key(JsonbParseState **st, const char *key)
{
	JsonbValue	k;

	if (key == NULL)
		return;
	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	pushJsonbValue(st, WJB_KEY, &k);
}

/* Pushes a scalar as an object's value or an array's element. */
static void
push_scalar(JsonbParseState **st, const char *key, JsonbValue *v)
{
	/* Scalars live in a container: documents here are objects or arrays. */
	Assert(*st != NULL);
	jb_key(st, key);
	pushJsonbValue(st, key != NULL ? WJB_VALUE : WJB_ELEM, v);
}

/* Opens an object (as the value of key, an element, or the document). */
void
jb_begin_object(JsonbParseState **st, const char *key)
{
	jb_key(st, key);
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
}

/* Opens an array (as the value of key, an element, or the document). */
void
jb_begin_array(JsonbParseState **st, const char *key)
{
	jb_key(st, key);
	pushJsonbValue(st, WJB_BEGIN_ARRAY, NULL);
}

/* Closes an object; the document once the outermost one closes. */
JsonbValue *
jb_end_object(JsonbParseState **st)
{
	return pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/* Closes an array; the document once the outermost one closes. */
JsonbValue *
jb_end_array(JsonbParseState **st)
{
	return pushJsonbValue(st, WJB_END_ARRAY, NULL);
}

/* A string, or JSON null when value is NULL. */
void
jb_text(JsonbParseState **st, const char *key, const char *value)
{
	JsonbValue	v;

	if (value == NULL)
		v.type = jbvNull;
	else
	{
		v.type = jbvString;
		v.val.string.val = (char *) value;
		v.val.string.len = strlen(value);
	}
	push_scalar(st, key, &v);
}

/* An integer as a JSON number. */
void
jb_int(JsonbParseState **st, const char *key, int64 value)
{
	JsonbValue	v;

	v.type = jbvNumeric;
	v.val.numeric = DatumGetNumeric(DirectFunctionCall1(int8_numeric, Int64GetDatum(value)));
	push_scalar(st, key, &v);
}

/* A boolean. */
void
jb_bool(JsonbParseState **st, const char *key, bool value)
{
	JsonbValue	v;

	v.type = jbvBool;
	v.val.boolean = value;
	push_scalar(st, key, &v);
}

/*
 * A finished jsonb document as a value (or JSON null when NULL); its
 * containers are unpacked into the one being built, so it nests.
 */
void
jb_jsonb(JsonbParseState **st, const char *key, const Jsonb *value)
{
	JsonbValue	v;

	if (value == NULL)
	{
		v.type = jbvNull;
		push_scalar(st, key, &v);
		return;
	}
	jb_key(st, key);
	v.type = jbvBinary;
	v.val.binary.data = (JsonbContainer *) &value->root;
	v.val.binary.len = VARSIZE(value) - VARHDRSZ;
	pushJsonbValue(st, key != NULL ? WJB_VALUE : WJB_ELEM, &v);
}

/* A JSON document given as text (parsed once), or null when NULL. */
void
jb_json_text(JsonbParseState **st, const char *key, const char *json)
{
	jb_jsonb(st, key, json == NULL ? NULL
			 : DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(json))));
}

/* The document built, as jsonb. */
Jsonb *
jb_finish(JsonbValue *top)
{
	return JsonbValueToJsonb(top);
}

/* The document built, as text (for SPI arguments and messages). */
char *
jb_finish_text(JsonbValue *top)
{
	Jsonb	   *jb = JsonbValueToJsonb(top);

	return JsonbToCString(NULL, &jb->root, VARSIZE(jb));
}
