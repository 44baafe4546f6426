/*
 * manifest.h
 *     A release manifest: parsed and validated from jsonb (manifest.c), its
 *     files read and written as jsonb (manifest_files.c); the errors of
 *     both are manifest_error.h's.
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
	char	   *store;			/* a finalize_s3 or finalize_azure server name, or a file:// URL */
	char	   *prefix;			/* the generation's location, ending in "/" */
	char	   *shard;			/* the shard of a sharded table's partition, or NULL */
	bool		has_period;
	TimestampTz period_start;
	bool		has_period_end;
	TimestampTz period_end;		/* exclusive: a partition may hold several periods */
	bool		empty;			/* an intentionally empty partition */
	bool		has_built_at;
	TimestampTz built_at;		/* when the generation's data was read (optional) */
	Inventory	files;			/* inline "files"; empty with files_location */
	char	   *files_location; /* s3://bucket/key or file:///path of a JSON
								 * Lines object of the files; NULL when inline */
	/* What was read from files_location (its summary, as stored). */
	int64		files_count;
	int64		files_bytes;
	uint64		files_digest[2];
	bool		files_any_etag;
	bool		external_catalog;	/* the partition's catalog is elsewhere (an
									 * Iceberg table's): its periods are the
									 * manifest's, finalize's catalog view is
									 * not checked */
} Manifest;

/* in manifest.c */
extern void manifest_parse(Jsonb *jb, Manifest *m);
extern bool manifest_timestamp_field(JsonbContainer *root, const char *name, TimestampTz *out, bool request);
extern char *manifest_string_field(JsonbContainer *c, const char *name, bool required, bool request);

/* in manifest_files.c */
extern void inventory_from_jsonb(JsonbValue *v, const char *field, Inventory *inv);
extern bool jsonb_files_cursor(JsonbValue *v, const char *field, InvCursor *cursor);
extern void inventory_push_object(JsonbParseState **st, const InvObject *o);
extern void inventory_push_jsonb(JsonbParseState **st, const char *key, const Inventory *inv);

#endif							/* FINALIZE_MANIFEST_H */
