/*
 * metadata.c
 *     Reads an Iceberg REST catalog's JSON answers with PostgreSQL's JSON
 *     parser (jsonb): the table metadata of loadTable (its refs, its
 *     snapshots' ids, parents, sequence numbers and the one summary
 *     property finalize follows), the config's overrides, an OAuth2 token
 *     and an error's message. Anything else in them is ignored. An answer
 *     that is not what the REST specification says is refused with a
 *     sentence saying what was wrong, never half read.
 */
#include "postgres.h"

#include "access/xact.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "core/db.h"
#include "core/json_parse.h"
#include "lake/metadata.h"

/*
 * A JSON text as jsonb in the current memory context, or NULL when it is
 * not JSON (core/json_parse.c).
 */
Jsonb *
lake_parse_json(const char *body)
{
	return json_parse_quiet(body);
}

/* The value of a key of an object container, or NULL. */
JsonbValue *
lake_field(JsonbContainer *obj, const char *key)
{
	if (obj == NULL || !JsonContainerIsObject(obj))
		return NULL;
	return getKeyJsonValueFromContainer(obj, key, strlen(key), NULL);
}

/* The container of an object or array value, or NULL for a scalar. */
JsonbContainer *
lake_container(JsonbValue *v)
{
	return v != NULL && v->type == jbvBinary ? v->val.binary.data : NULL;
}

/* A JSON number that is an integer of 64 bits, into *out. */
bool
lake_int64_value(JsonbValue *v, int64 *out)
{
	char	   *text;
	char	   *end;

	if (v == NULL || v->type != jbvNumeric)
		return false;
	text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
	errno = 0;
	*out = strtoll(text, &end, 10);
	return errno == 0 && end != text && *end == '\0';
}

/* A JSON string value as a C string, or NULL. */
char *
lake_string_value(JsonbValue *v)
{
	if (v == NULL || v->type != jbvString)
		return NULL;
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * A count of a snapshot summary (whose values are strings): n, 0 when
 * absent (writers leave out counts of zero), -1 when it is not a count.
 */
static int64
summary_count(JsonbContainer *summary, const char *key)
{
	char	   *text = lake_string_value(lake_field(summary, key));
	char	   *end;
	long long	n;

	if (text == NULL)
		return lake_field(summary, key) == NULL ? 0 : -1;
	errno = 0;
	n = strtoll(text, &end, 10);
	return errno == 0 && end != text && *end == '\0' && n >= 0 ? n : -1;
}

/* Reads the file counts of a snapshot's summary (-1 each without a summary that has them). */
static void
read_summary_counts(JsonbContainer *summary, LakeSnapshot *s)
{
	int64		deleted;
	int64		removed;

	s->removed_files = s->total_data_files = s->total_delete_files = -1;
	if (summary == NULL || !JsonContainerIsObject(summary) || lake_field(summary, "total-data-files") == NULL)
		return;
	deleted = summary_count(summary, "deleted-data-files");
	removed = summary_count(summary, "removed-delete-files");
	s->removed_files = deleted >= 0 && removed >= 0 ? deleted + removed : -1;
	s->total_data_files = summary_count(summary, "total-data-files");
	s->total_delete_files = summary_count(summary, "total-delete-files");
}

/* Reads one snapshot object; false with *error when it is not one. */
static bool
read_snapshot(JsonbContainer *obj, const char *lsn_property, LakeSnapshot *s, char **error)
{
	JsonbValue *v;
	JsonbContainer *summary;
	int64		n;

	memset(s, 0, sizeof(*s));
	if (obj == NULL || !JsonContainerIsObject(obj) || !lake_int64_value(lake_field(obj, "snapshot-id"), &n))
	{
		*error = pstrdup("a snapshot has no integer \"snapshot-id\"");
		return false;
	}
	s->id = n;
	v = lake_field(obj, "parent-snapshot-id");
	if (v != NULL && v->type != jbvNull)
	{
		if (!lake_int64_value(v, &n))
		{
			*error = psprintf("snapshot %lld has a \"parent-snapshot-id\" that is not an integer", (long long) s->id);
			return false;
		}
		s->has_parent = true;
		s->parent_id = n;
	}
	if (lake_int64_value(lake_field(obj, "sequence-number"), &n))
		s->sequence = n;
	if (lake_int64_value(lake_field(obj, "timestamp-ms"), &n))
		s->timestamp_ms = n;
	s->manifest_list = lake_string_value(lake_field(obj, "manifest-list"));
	summary = lake_container(lake_field(obj, "summary"));
	read_summary_counts(summary, s);
	if (summary != NULL && JsonContainerIsObject(summary))
	{
		s->summary = summary;
		s->operation = lake_string_value(lake_field(summary, "operation"));
		s->wap_id = lake_string_value(lake_field(summary, "wap.id"));
		v = lake_field(summary, lsn_property);
		/* A property that is there but no string is malformed, not absent. */
		if (v != NULL)
			s->lsn_text = v->type == jbvString ? lake_string_value(v) : "";
	}
	return true;
}

/* Reads where the ref points; false with *error when the refs are malformed. */
static bool
read_ref(JsonbContainer *meta, const char *ref, LakeMetadata *md, char **error)
{
	JsonbContainer *refs = lake_container(lake_field(meta, "refs"));
	int64		n;

	if (refs != NULL && JsonContainerIsObject(refs))
	{
		JsonbContainer *r = lake_container(lake_field(refs, ref));

		md->refs_listed = true;

		if (r == NULL)
			return true;
		if (!lake_int64_value(lake_field(r, "snapshot-id"), &n))
		{
			*error = psprintf("ref \"%s\" has no integer \"snapshot-id\"", ref);
			return false;
		}
		md->ref_found = true;
		md->ref_snapshot_id = n;
		return true;
	}
	if (lake_field(meta, "refs") != NULL)
	{
		*error = pstrdup("\"refs\" is not an object");
		return false;
	}
	/* Format v1 metadata without refs: main is the current snapshot. */
	md->refs_listed = lake_field(meta, "current-snapshot-id") != NULL;
	if (strcmp(ref, "main") == 0 && lake_int64_value(lake_field(meta, "current-snapshot-id"), &n) && n >= 0)
	{
		md->ref_found = true;
		md->ref_snapshot_id = n;
	}
	return true;
}

/* Whether a table-uuid is a UUID's text (36 hex digits and dashes). */
bool
lake_uuid_ok(const char *uuid)
{
	return strlen(uuid) == 36 && strspn(uuid, "0123456789abcdefABCDEF-") == 36;
}

/*
 * Reads a loadTable answer ({"metadata": {...}}) into md, in the current
 * memory context: where ref points, every snapshot with the LSN property's
 * value. False with *error (a sentence) when it is not table metadata.
 */
bool
lake_parse_metadata(const char *body, const char *ref, const char *lsn_property, LakeMetadata *md,
					char **error)
{
	Jsonb	   *doc = lake_parse_json(body);
	JsonbContainer *meta;
	JsonbContainer *list;
	int			n;

	memset(md, 0, sizeof(*md));
	*error = NULL;
	if (doc == NULL)
	{
		*error = pstrdup("the answer is not JSON");
		return false;
	}
	meta = lake_container(lake_field(&doc->root, "metadata"));
	if (meta == NULL || !JsonContainerIsObject(meta))
	{
		*error = pstrdup("the answer has no \"metadata\" object");
		return false;
	}
	md->table_uuid = lake_string_value(lake_field(meta, "table-uuid"));
	if (md->table_uuid != NULL && !lake_uuid_ok(md->table_uuid))
	{
		*error = pstrdup("\"table-uuid\" is not a UUID");
		return false;
	}
	if (!read_ref(meta, ref, md, error))
		return false;
	list = lake_container(lake_field(meta, "snapshots"));
	if (lake_field(meta, "snapshots") != NULL && (list == NULL || !JsonContainerIsArray(list)))
	{
		*error = pstrdup("\"snapshots\" is not an array");
		return false;
	}
	n = list != NULL ? (int) JsonContainerSize(list) : 0;
	md->snapshots = palloc0(sizeof(LakeSnapshot) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		/* A 64 MB answer lists a million snapshots: seconds of reading. */
		CHECK_FOR_INTERRUPTS();
		if (!read_snapshot(lake_container(getIthJsonbValueFromContainer(list, i)), lsn_property,
						   &md->snapshots[md->nsnapshots++], error))
			return false;
	}
	lake_sort_snapshots(md);
	for (int i = 1; i < md->nsnapshots; i++)
		if (md->snapshots[i].id == md->snapshots[i - 1].id)
		{
			*error = psprintf("snapshot %lld is listed twice", (long long) md->snapshots[i].id);
			return false;
		}
	return true;
}

/*
 * A property of a snapshot's summary (a release reads each lake consumer's
 * from it): *present when the summary has the key, and its text, or NULL
 * when the value is no string (malformed, not absent).
 */
const char *
lake_summary_text(const LakeSnapshot *s, const char *key, bool *present)
{
	JsonbValue *v = s->summary != NULL ? lake_field((JsonbContainer *) s->summary, key) : NULL;

	*present = v != NULL;
	return v != NULL && v->type == jbvString ? lake_string_value(v) : NULL;
}

/*
 * A string at body.path1 (or body.path1.path2) of a JSON answer, or NULL:
 * a token's access_token, a config's overrides.prefix, an error's
 * error.message.
 */
char *
lake_json_string(const char *body, const char *path1, const char *path2)
{
	Jsonb	   *doc = lake_parse_json(body);
	JsonbValue *v;

	if (doc == NULL)
		return NULL;
	v = lake_field(&doc->root, path1);
	if (path2 != NULL)
		v = lake_field(lake_container(v), path2);
	return lake_string_value(v);
}

/* A number at body.key (an OAuth2 token's expires_in), into *out. */
bool
lake_json_seconds(const char *body, const char *key, double *out)
{
	return json_number_field(body, key, out);
}
