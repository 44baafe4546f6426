/*
 * json_parse.h
 *     JSON from outside parsed without raising (json_parse.c).
 */
#ifndef FINALIZE_JSON_PARSE_H
#define FINALIZE_JSON_PARSE_H

#include "utils/jsonb.h"

extern Jsonb *json_parse_quiet(const char *body);
extern char *json_string_field(const char *body, const char *key);
extern bool json_number_field(const char *body, const char *key, double *out);

#endif							/* FINALIZE_JSON_PARSE_H */
