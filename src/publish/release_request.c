/*
 * release_request.c
 *     A release request of an Iceberg table, parsed and validated from
 *     jsonb:
 *
 *   {"table": "sales.orders",                  the tracked table
 *    "catalog": "lake_catalog",                a finalize_iceberg server
 *    "iceberg_table": "sales.orders",          the catalog's table, "ns.table"
 *    "store": "lake" | "file:///srv/lake",      where its files are (finalize_s3, finalize_azure or local)
 *    "partition": {"commit_time_day": "2026-11-27"},   {} for every file
 *    "branch": "audit" | "wap_id": "w-42" | "snapshot_id": 123,   the audited snapshot
 *    "target_branch": "main" | "tag": "name" | true,        optional; default main
 *    "period_start", "period_end",              optional with a time transform
 *    "row_count": "inserts" | "net" | "changes" | "none",   optional
 *    "built_at": "..."}                         optional, as a manifest's
 *
 * As a manifest, a request with a field that is not one of these is
 * refused: a misspelt "period_end" or "row_count" ignored would check less
 * than its writer meant.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/numeric.h"

#include "gate/inventory.h"
#include "gate/manifest.h"
#include "gate/manifest_error.h"
#include "publish/release_request.h"

/* The fields a request may have. */
static const char *const request_fields[] = {
	"table", "catalog", "iceberg_table", "store", "partition", "branch", "wap_id", "snapshot_id",
	"target_branch", "tag", "period_start", "period_end", "row_count", "built_at", "time_column"
};

/* Refuses a field that is not a request's, by name. */
static void
check_known_fields(JsonbContainer *root)
{
	JsonbIterator *it = JsonbIteratorInit(root);
	JsonbIteratorToken tok;
	JsonbValue	k;

	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		bool		found = false;

		if (tok != WJB_KEY)
			continue;
		for (int i = 0; i < lengthof(request_fields) && !found; i++)
			found = k.val.string.len == strlen(request_fields[i]) &&
				memcmp(k.val.string.val, request_fields[i], k.val.string.len) == 0;
		if (!found)
			request_error(pnstrdup(k.val.string.val, Min(k.val.string.len, 200)),
						  "is not a field of a release request: a field finalize would ignore could change "
						  "what it checks");
	}
}

/* A top-level field, or NULL when absent or null. */
static JsonbValue *
field_of(JsonbContainer *c, const char *name)
{
	JsonbValue *v = getKeyJsonValueFromContainer(c, name, strlen(name), NULL);

	return v != NULL && v->type != jbvNull ? v : NULL;
}

/* Orders criteria by field name (the partition key's order). */
static int
criterion_cmp(const void *a, const void *b)
{
	return strcmp(((const PartitionCriterion *) a)->field, ((const PartitionCriterion *) b)->field);
}

/*
 * A field name or value as part of the partition's key: "%", "/" and "="
 * percent-encoded, and the string "null" as "%6Eull" (the key's null is
 * the JSON null), so that two partitions never share a key (and with it
 * a lock and a release history).
 */
static void
append_key_part(StringInfo key, const char *s)
{
	if (strcmp(s, "null") == 0)
	{
		appendStringInfoString(key, "%6Eull");
		return;
	}
	for (; *s != '\0'; s++)
	{
		if (*s == '%' || *s == '/' || *s == '=')
			appendStringInfo(key, "%%%02X", (unsigned char) *s);
		else
			appendStringInfoChar(key, *s);
	}
}

/*
 * Reads "partition": an object of Iceberg partition field names to their
 * values (strings, integers, or null), and names the partition
 * "field=value/..." in field order ("all" for {}, every file; see
 * append_key_part).
 */
static void
read_partition(JsonbContainer *root, ReleaseRequest *r)
{
	JsonbValue *v = field_of(root, "partition");
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	k;
	JsonbValue	val;
	StringInfoData key;

	if (v == NULL)
		request_error("partition", "is missing: give the partition's Iceberg fields, such as "
					  "{\"commit_time_day\": \"2026-11-27\"}, or {} for every file of the table");
	if (v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		request_error("partition", "must be an object of partition field names to values");
	r->criteria = palloc0(sizeof(PartitionCriterion) * Max(JsonContainerSize(v->val.binary.data), 1));
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		PartitionCriterion *c;

		if (tok != WJB_KEY)
			continue;
		(void) JsonbIteratorNext(&it, &val, true);
		c = &r->criteria[r->ncriteria++];
		c->field = pnstrdup(k.val.string.val, k.val.string.len);
		if (val.type == jbvNull)
			c->is_null = true;
		else if (val.type == jbvString && val.val.string.len > 0)
			c->value = pnstrdup(val.val.string.val, val.val.string.len);
		else if (val.type == jbvNumeric)
			c->value = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(val.val.numeric)));
		else
			request_error("partition", "field \"%s\" must be a non-empty string, a number or null", c->field);
	}
	qsort(r->criteria, r->ncriteria, sizeof(PartitionCriterion), criterion_cmp);
	initStringInfo(&key);
	for (int i = 0; i < r->ncriteria; i++)
	{
		if (i > 0)
			appendStringInfoChar(&key, '/');
		append_key_part(&key, r->criteria[i].field);
		appendStringInfoChar(&key, '=');
		if (r->criteria[i].is_null)
			appendStringInfoString(&key, "null");
		else
			append_key_part(&key, r->criteria[i].value);
	}
	r->partition_key = r->ncriteria > 0 ? key.data : pstrdup("all");
	if (!path_is_safe(r->partition_key, strlen(r->partition_key)))
		request_error("partition", "names \"%s\", which is no partition key (a value with \"/\" or an empty, "
					  "\".\" or \"..\" part)", r->partition_key);
}

/* Reads which snapshot is audited: exactly one of branch, wap_id and snapshot_id. */
static void
read_audit(JsonbContainer *root, ReleaseRequest *r)
{
	JsonbValue *id = field_of(root, "snapshot_id");
	int			given = (field_of(root, "branch") != NULL) + (field_of(root, "wap_id") != NULL) + (id != NULL);

	if (given != 1)
		request_error(given == 0 ? "branch" : "snapshot_id",
					  "%s: name the audited snapshot by exactly one of \"branch\" (the head of the branch the "
					  "audit wrote to), \"wap_id\" (the snapshot staged with that wap.id) or \"snapshot_id\"",
					  given == 0 ? "is missing" : "is given with another");
	if ((r->audit_name = manifest_string_field(root, "branch", false, true)) != NULL)
		r->audit = AUDIT_BRANCH;
	else if ((r->audit_name = manifest_string_field(root, "wap_id", false, true)) != NULL)
		r->audit = AUDIT_WAP_ID;
	else
	{
		char	   *text = id->type == jbvString ? pnstrdup(id->val.string.val, id->val.string.len)
			: id->type == jbvNumeric ? DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(id->val.numeric)))
			: "";
		char	   *end;

		r->audit = AUDIT_SNAPSHOT;
		errno = 0;
		r->audit_snapshot_id = strtoll(text, &end, 10);
		if (text[0] == '\0' || *end != '\0' || errno != 0)
			request_error("snapshot_id", "\"%s\" is not a snapshot id (a 64-bit integer, as a number or a string)",
						  text);
	}
}

/* Reads where to publish: a branch to fast-forward (default main) or a tag to create. */
static void
read_target(JsonbContainer *root, ReleaseRequest *r)
{
	JsonbValue *tag = field_of(root, "tag");

	r->target = manifest_string_field(root, "target_branch", false, true);
	if (tag != NULL && r->target != NULL)
		request_error("tag", "is given with \"target_branch\": a release either moves a branch or creates a tag");
	if (tag == NULL)
	{
		if (r->target == NULL)
			r->target = pstrdup("main");
		if (r->audit == AUDIT_BRANCH && strcmp(r->target, r->audit_name) == 0)
			request_error("branch", "\"%s\" is also the target branch: audit a snapshot the readers of \"%s\" do "
						  "not see yet (a WAP branch, a wap.id or a snapshot id)", r->audit_name, r->target);
		return;
	}
	r->to_tag = true;
	if (tag->type == jbvBool && tag->val.boolean)
		r->target = NULL;		/* the default name, once the table is known */
	else if (tag->type == jbvString && tag->val.string.len > 0)
		r->target = pnstrdup(tag->val.string.val, tag->val.string.len);
	else
		request_error("tag", "must be a tag name, or true for finalize's name finalize/<table>/<partition>");
}

/* Reads "row_count": what the partition's rows must equal in the CDC facts. */
static void
read_row_count(JsonbContainer *root, ReleaseRequest *r)
{
	static const char *const names[] = {"default", "none", "inserts", "net", "changes"};
	char	   *rule = manifest_string_field(root, "row_count", false, true);

	r->rows = ROWS_DEFAULT;
	if (rule == NULL)
		return;
	for (int i = 1; i < lengthof(names); i++)
		if (strcmp(rule, names[i]) == 0)
		{
			r->rows = (RowCountRule) i;
			return;
		}
	request_error("row_count", "\"%s\" is not one of \"inserts\" (an append-only table: its rows are the "
				  "inserts), \"net\" (inserts less deletes), \"changes\" (a change log: one row per change) "
				  "or \"none\"", rule);
}

/* The rule's name as the report says it. */
const char *
row_count_rule_name(RowCountRule rule)
{
	static const char *const names[] = {"default", "none", "inserts", "net", "changes"};

	return names[rule];
}

/* Parses and validates a release request. */
void
release_request_parse(Jsonb *jb, ReleaseRequest *r)
{
	JsonbContainer *root = &jb->root;
	const char *dot;

	memset(r, 0, sizeof(*r));
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid release request: it must be a JSON object"),
				 errhint("A release request is {\"table\", \"catalog\", \"iceberg_table\", \"store\", \"partition\", "
						 "\"branch\"}.")));
	check_known_fields(root);
	r->table = manifest_string_field(root, "table", true, true);
	r->catalog = manifest_string_field(root, "catalog", true, true);
	r->iceberg_table = manifest_string_field(root, "iceberg_table", true, true);
	r->store = manifest_string_field(root, "store", true, true);
	dot = strrchr(r->iceberg_table, '.');
	if (dot == NULL || dot == r->iceberg_table || dot[1] == '\0' || strstr(r->iceberg_table, "..") != NULL ||
		r->iceberg_table[0] == '.')
		request_error("iceberg_table", "\"%s\" must be namespace.table (levels joined by \".\")", r->iceberg_table);
	read_partition(root, r);
	read_audit(root, r);
	read_target(root, r);
	read_row_count(root, r);
	r->has_period = manifest_timestamp_field(root, "period_start", &r->period_start, true);
	r->has_period_end = manifest_timestamp_field(root, "period_end", &r->period_end, true);
	if (r->has_period_end && !r->has_period)
		request_error("period_end", "needs \"period_start\"");
	r->has_built_at = manifest_timestamp_field(root, "built_at", &r->built_at, true);
	r->time_column = manifest_string_field(root, "time_column", false, true);
}
