/*
 * manifest.h
 *     A release manifest: parsed and validated from jsonb.
 */
#ifndef FINALIZE_MANIFEST_H
#define FINALIZE_MANIFEST_H

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

#include "gate/inventory.h"

typedef struct Manifest
{
	char	   *table;
	char	   *partition;
	char	   *generation;
	char	   *store;			/* a finalize_s3 server name or a file:// URL */
	char	   *prefix;			/* the generation's location, ending in "/" */
	bool		has_period;
	TimestampTz period_start;
	bool		empty;			/* an intentionally empty partition */
	bool		has_built_at;
	TimestampTz built_at;		/* when the generation's data was read (optional) */
	Inventory	files;
} Manifest;

extern void manifest_parse(Jsonb *jb, Manifest *m);
extern void inventory_from_jsonb(JsonbValue *v, const char *field, Inventory *inv);
extern bool jsonb_files_cursor(JsonbValue *v, const char *field, InvCursor *cursor);
extern void inventory_push_object(JsonbParseState **st, const InvObject *o);
extern void inventory_push_jsonb(JsonbParseState **st, const char *key, const Inventory *inv);

#endif							/* FINALIZE_MANIFEST_H */
