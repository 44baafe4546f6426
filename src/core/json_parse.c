/*
 * json_parse.c
 *     JSON that arrives from outside (a catalog's answer, an OAuth2 token)
 *     parsed into jsonb without raising: a text that is not JSON is NULL.
 */
#include "postgres.h"

#include "access/xact.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "core/db.h"
#include "core/json_parse.h"

/* A JSON text to parse, and its jsonb. */
typedef struct ParseCall
{
	const char *body;
	Datum		result;
} ParseCall;

/*
 * Parses a JSON text (subxact_try's step): its bytes are UTF-8, as
 * JSON's are, converted to the database's encoding first (invalid UTF-8
 * is an error, caught as malformed).
 */
static void
parse_step(void *arg)
{
	ParseCall  *c = (ParseCall *) arg;
	char	   *text = pg_any_to_server(c->body, strlen(c->body), PG_UTF8);

	c->result = DirectFunctionCall1(jsonb_in, CStringGetDatum(text));
}

/*
 * A JSON text as jsonb in the current memory context, or NULL when it is
 * not JSON (the parser's error is swallowed: a subtransaction confines
 * it). A caller between transactions (the lake worker, a
 * delivery) gets a transaction of its own to hold the subtransaction.
 */
Jsonb *
json_parse_quiet(const char *body)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		own = !IsTransactionState();
	bool		ok;
	Datum		d;
	ParseCall	call = {body, (Datum) 0};

	if (body == NULL)
		return NULL;
	if (own)
	{
		StartTransactionCommand();
		MemoryContextSwitchTo(cxt);
	}
	ok = subxact_try(parse_step, &call, NULL);
	d = call.result;
	if (own)
	{
		CommitTransactionCommand();
		MemoryContextSwitchTo(cxt);
	}
	return ok ? DatumGetJsonbP(d) : NULL;
}

/* The string at a key of a JSON object's text, or NULL (not JSON, no such key, not a string). */
char *
json_string_field(const char *body, const char *key)
{
	Jsonb	   *doc = json_parse_quiet(body);
	JsonbValue *v;

	if (doc == NULL || !JsonContainerIsObject(&doc->root))
		return NULL;
	v = getKeyJsonValueFromContainer(&doc->root, key, strlen(key), NULL);
	return v != NULL && v->type == jbvString ? pnstrdup(v->val.string.val, v->val.string.len) : NULL;
}

/* The number at a key of a JSON object's text, into *out; false when there is none. */
bool
json_number_field(const char *body, const char *key, double *out)
{
	Jsonb	   *doc = json_parse_quiet(body);
	JsonbValue *v;

	if (doc == NULL || !JsonContainerIsObject(&doc->root))
		return false;
	v = getKeyJsonValueFromContainer(&doc->root, key, strlen(key), NULL);
	if (v == NULL || v->type != jbvNumeric)
		return false;
	*out = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v->val.numeric)));
	return true;
}
