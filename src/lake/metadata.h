/*
 * metadata.h
 *     An Iceberg REST catalog's loadTable answer, read into what
 *     snapshots.c judges (and the catalog's other answers: its config, an
 *     OAuth2 token, an error).
 */
#ifndef FINALIZE_LAKE_METADATA_H
#define FINALIZE_LAKE_METADATA_H

#include "utils/jsonb.h"

#include "lake/snapshots.h"

extern bool lake_parse_metadata(const char *body, const char *ref, const char *lsn_property,
								LakeMetadata *md, char **error);
extern const char *lake_summary_text(const LakeSnapshot *s, const char *key, bool *present);
extern char *lake_json_string(const char *body, const char *path1, const char *path2);
extern Jsonb *lake_parse_json(const char *body);
extern JsonbValue *lake_field(JsonbContainer *obj, const char *key);
extern JsonbContainer *lake_container(JsonbValue *v);
extern bool lake_int64_value(JsonbValue *v, int64 *out);
extern char *lake_string_value(JsonbValue *v);
extern bool lake_uuid_ok(const char *uuid);

#endif							/* FINALIZE_LAKE_METADATA_H */
