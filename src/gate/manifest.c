/*
 * manifest.c
 *     A release manifest: parsed and validated from jsonb.
 *
 *   {"table": "sales.orders", "partition": "day=27/hour=08",
 *    "generation": "g-47", "store": "lake" | "file:///srv/lake",
 *    "prefix": "day=27/hour=08/g-47/",           optional, default partition + "/"
 *    "shard": "db07",                             optional: the shard of a sharded table's
 *                                                 partition (default: its key's shard=<label>)
 *    "period_start": "2026-11-27 08:00+00",       optional: the first period it holds (a boundary)
 *    "period_end": "2026-11-28 08:00+00",         optional: the end of the last (default: one period)
 *    "empty": true,                               optional
 *    "built_at": "2026-11-27 10:02+00",           optional: when the generation's data was read
 *    "files": {"path": size, "path": {"size": n, "etag": "..."}}
 *             or [{"path": "...", "size": n, "etag": "..."}, ...],
 *    or "files_location": "s3://bucket/key" | "file:///path"
 *             a JSON Lines object in the same store, one
 *             {"path": "...", "size": n, "etag": "..."} per line
 *             (read by manifest_lines.c, for manifests too large for jsonb)}
 *
 * A malformed manifest is an error (SQLSTATE 22023) that names the field,
 * so a publisher learns what to fix before anything is compared; so is a
 * field that is not one of these (a misspelt "period_end" ignored would
 * let the gate check one period of many).
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "gate/manifest.h"
#include "gate/manifest_error.h"

/* The error of a field of a manifest or (request) of a release request. */
#define field_error(request, field, ...) \
	((request) ? request_error((field), __VA_ARGS__) : manifest_error((field), __VA_ARGS__))

/* The fields a manifest may have. */
static const char *const manifest_fields[] = {
	"table", "partition", "generation", "store", "prefix", "shard", "period_start", "period_end", "empty",
	"built_at", "files", "files_location"
};

/*
 * Refuses a field that is not a manifest's: counted first (the common
 * case costs one lookup per known field), named when there is one.
 */
static void
check_known_fields(JsonbContainer *root)
{
	int			known = 0;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	k;

	for (int i = 0; i < lengthof(manifest_fields); i++)
		if (getKeyJsonValueFromContainer(root, manifest_fields[i], strlen(manifest_fields[i]), NULL) != NULL)
			known++;
	if (known == (int) JsonContainerSize(root))
		return;
	it = JsonbIteratorInit(root);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		bool		found = false;

		if (tok != WJB_KEY)
			continue;
		for (int i = 0; i < lengthof(manifest_fields) && !found; i++)
			found = k.val.string.len == strlen(manifest_fields[i]) &&
				memcmp(k.val.string.val, manifest_fields[i], k.val.string.len) == 0;
		if (!found)
			manifest_error(pnstrdup(k.val.string.val, Min(k.val.string.len, 200)),
						 "is not a field of a manifest: a field the gate would ignore could change what it "
						 "checks (a whole day's \"period_end\" misspelt would check its first period only)");
	}
}

/*
 * A period_start as manifests write it: ISO 8601 with its UTC offset. Any
 * other form would leave the session to decide which period the gate
 * checks: its TimeZone (no offset) or its DateStyle ("03/04/2026").
 */
#define ISO_TIMESTAMP_RE \
	"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]{1,6})?)?(Z|z|[+-][0-9]{2}(:?[0-9]{2})?)$"

/* Whether a text is an ISO 8601 timestamp with a UTC offset. */
static bool
is_iso_timestamp(const char *text)
{
	return DatumGetBool(DirectFunctionCall2Coll(textregexeq, C_COLLATION_OID, CStringGetTextDatum(text),
												CStringGetTextDatum(ISO_TIMESTAMP_RE)));
}

/* A top-level field, or NULL when absent. */
static JsonbValue *field_of(JsonbContainer *c, const char *name);

/*
 * An optional timestamp field of a manifest (or, request, a release
 * request): ISO 8601 with its UTC offset, finite; false when absent.
 */
bool
manifest_timestamp_field(JsonbContainer *root, const char *name, TimestampTz *out, bool request)
{
	JsonbValue *v = field_of(root, name);
	char	   *text;
	Datum		ts;

	if (v == NULL || v->type == jbvNull)
		return false;
	if (v->type != jbvString)
		field_error(request, name, "must be a timestamp string such as \"2026-11-27 08:00+00\"");
	text = pnstrdup(v->val.string.val, v->val.string.len);
	if (!is_iso_timestamp(text))
		field_error(request, name, "\"%s\" is not an ISO 8601 timestamp with a UTC offset, such as "
					 "\"2026-11-27T08:00:00Z\" or \"2026-11-27 08:00+00\" (the session's time zone "
					 "and date style must not decide what it means)", text);
	if (!subxact_input(timestamptz_in, text, &ts))
		field_error(request, name, "\"%s\" is not a timestamp", text);
	*out = DatumGetTimestampTz(ts);
	if (TIMESTAMP_NOT_FINITE(*out))
		field_error(request, name, "must be finite");
	return true;
}

/* A top-level field, or NULL when absent. */
static JsonbValue *
field_of(JsonbContainer *c, const char *name)
{
	return getKeyJsonValueFromContainer(c, name, strlen(name), NULL);
}

/* A required or optional string field of a manifest (or, request, a release request). */
char *
manifest_string_field(JsonbContainer *c, const char *name, bool required, bool request)
{
	JsonbValue *v = field_of(c, name);

	if (v == NULL || v->type == jbvNull)
	{
		if (required)
			field_error(request, name, "is missing");
		return NULL;
	}
	if (v->type != jbvString)
		field_error(request, name, "must be a string");
	if (v->val.string.len == 0)
		field_error(request, name, "must not be empty");
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* Parses and validates a manifest. */
void
manifest_parse(Jsonb *jb, Manifest *m)
{
	JsonbContainer *root = &jb->root;
	JsonbValue *v;

	memset(m, 0, sizeof(*m));
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: it must be a JSON object"),
				 errhint("A manifest is {\"table\", \"partition\", \"generation\", \"store\", \"files\": {\"path\": size, ...}}.")));

	check_known_fields(root);
	m->table = manifest_string_field(root, "table", true, false);
	m->partition = manifest_string_field(root, "partition", true, false);
	m->generation = manifest_string_field(root, "generation", true, false);
	m->store = manifest_string_field(root, "store", true, false);
	m->prefix = manifest_string_field(root, "prefix", false, false);
	/* Which shard, the sharded table decides (release_checks.c). */
	m->shard = manifest_string_field(root, "shard", false, false);
	if (!path_is_safe(m->partition, strlen(m->partition)))
		manifest_error("partition", "\"%s\" must be a relative key such as day=27/hour=08, without a leading /, "
					 "empty, \".\" or \"..\" parts", m->partition);
	if (m->prefix == NULL)
		m->prefix = psprintf("%s/", m->partition);
	else
	{
		size_t		len = strlen(m->prefix);
		char	   *bare = pnstrdup(m->prefix, len > 0 && m->prefix[len - 1] == '/' ? len - 1 : len);

		if (!path_is_safe(bare, strlen(bare)))
			manifest_error("prefix", "\"%s\" must be a relative location without a leading /, empty, \".\" or "
						 "\"..\" parts", m->prefix);
		m->prefix = psprintf("%s/", bare);
	}

	m->has_period = manifest_timestamp_field(root, "period_start", &m->period_start, false);
	m->has_period_end = manifest_timestamp_field(root, "period_end", &m->period_end, false);
	if (m->has_period_end && !m->has_period)
		manifest_error("period_end", "needs \"period_start\": a partition's periods are given by their first start "
					 "and their last end");
	m->has_built_at = manifest_timestamp_field(root, "built_at", &m->built_at, false);

	v = field_of(root, "empty");
	if (v != NULL && v->type != jbvNull)
	{
		if (v->type != jbvBool)
			manifest_error("empty", "must be true or false");
		m->empty = v->val.boolean;
	}

	v = field_of(root, "files_location");
	if (v != NULL && v->type != jbvNull)
	{
		JsonbValue *f = field_of(root, "files");

		if (f != NULL && f->type != jbvNull)
			manifest_error("files_location", "cannot be given with \"files\": a manifest gives its files inline "
						 "or names the object that lists them, not both");
		/* Read from the store later, as the caller (store_listing.c). */
		m->files_location = manifest_string_field(root, "files_location", true, false);
	}
	else
		inventory_from_jsonb(field_of(root, "files"), "files", &m->files);
	if (m->empty && m->files.n > 0)
		manifest_error("files", "must be empty when \"empty\" is true");
}
