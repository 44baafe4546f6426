/*
 * json_build.h
 *     The one way this extension builds JSON in C: thin helpers over
 *     PostgreSQL's jsonb builder (pushJsonbValue), so no string is ever
 *     escaped by hand and nested documents are pushed as values.
 *
 *     A key is NULL inside an array (or for the top-level value).
 */
#ifndef FINALIZE_JSON_BUILD_H
#define FINALIZE_JSON_BUILD_H

#include "utils/jsonb.h"

extern void jb_begin_object(JsonbParseState **st, const char *key);
extern void jb_begin_array(JsonbParseState **st, const char *key);
extern JsonbValue *jb_end_object(JsonbParseState **st);
extern JsonbValue *jb_end_array(JsonbParseState **st);
extern void jb_key(JsonbParseState **st, const char *key);
extern void jb_text(JsonbParseState **st, const char *key, const char *value);
extern void jb_int(JsonbParseState **st, const char *key, int64 value);
extern void jb_bool(JsonbParseState **st, const char *key, bool value);
extern void jb_jsonb(JsonbParseState **st, const char *key, const Jsonb *value);
extern void jb_json_text(JsonbParseState **st, const char *key, const char *json);
extern Jsonb *jb_finish(JsonbValue *top);
extern char *jb_finish_text(JsonbValue *top);

#endif							/* FINALIZE_JSON_BUILD_H */
