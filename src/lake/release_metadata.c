/*
 * release_metadata.c
 *     Reads the refs (branches and tags) and the partition specs of a
 *     loadTable answer, for a release through an Iceberg catalog: which
 *     snapshot a branch names, whether a tag exists, what transform made
 *     each partition field a manifest's files carry, and the columns (a
 *     release's time column: its id and type). As metadata.c, an
 *     answer that is not what the REST specification says is refused with
 *     a sentence, never half read.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/jsonb.h"

#include "lake/metadata.h"
#include "lake/release_metadata.h"

/* Reads the "refs" object: every ref's name, type and snapshot. */
static bool
read_refs(JsonbContainer *meta, IcebergLayout *layout, char **error)
{
	JsonbContainer *refs = lake_container(lake_field(meta, "refs"));
	JsonbIterator *it;
	JsonbValue	k;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n;

	if (refs == NULL || !JsonContainerIsObject(refs))
	{
		int64		current;

		layout->refs = palloc0(sizeof(IcebergRef));
		/* Format v1 without refs: main is the current snapshot, if any. */
		if (lake_field(meta, "refs") == NULL &&
			lake_int64_value(lake_field(meta, "current-snapshot-id"), &current) && current >= 0)
		{
			layout->refs[0].name = pstrdup("main");
			layout->refs[0].snapshot_id = current;
			layout->nrefs = 1;
		}
		else if (lake_field(meta, "refs") != NULL)
		{
			*error = pstrdup("\"refs\" is not an object");
			return false;
		}
		return true;
	}
	n = JsonContainerSize(refs);
	layout->refs = palloc0(sizeof(IcebergRef) * Max(n, 1));
	it = JsonbIteratorInit(refs);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		IcebergRef *r;
		JsonbContainer *obj;
		char	   *type;

		if (tok != WJB_KEY)
			continue;
		(void) JsonbIteratorNext(&it, &v, true);
		r = &layout->refs[layout->nrefs++];
		r->name = pnstrdup(k.val.string.val, k.val.string.len);
		obj = lake_container(&v);
		type = obj != NULL ? lake_string_value(lake_field(obj, "type")) : NULL;
		if (obj == NULL || !lake_int64_value(lake_field(obj, "snapshot-id"), &r->snapshot_id) || type == NULL ||
			(strcmp(type, "branch") != 0 && strcmp(type, "tag") != 0))
		{
			*error = psprintf("ref \"%s\" has no integer \"snapshot-id\" or no \"type\" branch or tag", r->name);
			return false;
		}
		r->is_tag = strcmp(type, "tag") == 0;
	}
	return true;
}

/* Reads one partition spec ({"spec-id", "fields": [{"name", "transform", "source-id"}]}). */
static bool
read_spec(JsonbContainer *obj, IcebergSpec *spec, char **error)
{
	JsonbContainer *fields = obj != NULL ? lake_container(lake_field(obj, "fields")) : NULL;

	if (obj == NULL || !lake_int64_value(lake_field(obj, "spec-id"), &spec->spec_id) || fields == NULL ||
		!JsonContainerIsArray(fields))
	{
		*error = pstrdup("a partition spec has no integer \"spec-id\" or no \"fields\" array");
		return false;
	}
	spec->nfields = JsonContainerSize(fields);
	spec->fields = palloc0(sizeof(IcebergSpecField) * Max(spec->nfields, 1));
	for (int i = 0; i < spec->nfields; i++)
	{
		JsonbContainer *f = lake_container(getIthJsonbValueFromContainer(fields, i));
		IcebergSpecField *sf = &spec->fields[i];

		sf->name = f != NULL ? lake_string_value(lake_field(f, "name")) : NULL;
		sf->transform = f != NULL ? lake_string_value(lake_field(f, "transform")) : NULL;
		if (sf->name == NULL || sf->transform == NULL ||
			!lake_int64_value(lake_field(f, "source-id"), &sf->source_id))
		{
			*error = psprintf("a field of partition spec %lld has no \"name\", \"transform\" or \"source-id\"",
							  (long long) spec->spec_id);
			return false;
		}
	}
	return true;
}

/* Appends a schema's top-level fields ({"id", "name", "type"}) to the layout's columns. */
static bool
read_schema(JsonbContainer *schema, bool current, IcebergLayout *layout, int *cap, char **error)
{
	JsonbContainer *fields = schema != NULL ? lake_container(lake_field(schema, "fields")) : NULL;

	if (fields == NULL || !JsonContainerIsArray(fields))
	{
		*error = pstrdup("a schema has no \"fields\" array");
		return false;
	}
	for (int i = 0; i < (int) JsonContainerSize(fields); i++)
	{
		JsonbContainer *f = lake_container(getIthJsonbValueFromContainer(fields, i));
		IcebergColumn *c;

		CHECK_FOR_INTERRUPTS();
		if (layout->ncolumns == *cap)
		{
			*cap *= 2;
			layout->columns = repalloc(layout->columns, sizeof(IcebergColumn) * *cap);
		}
		c = &layout->columns[layout->ncolumns++];
		c->current = current;
		c->name = f != NULL ? lake_string_value(lake_field(f, "name")) : NULL;
		c->type = f != NULL ? lake_string_value(lake_field(f, "type")) : NULL;
		if (c->name == NULL || !lake_int64_value(lake_field(f, "id"), &c->id))
		{
			*error = pstrdup("a field of a schema has no \"name\" or no integer \"id\"");
			return false;
		}
	}
	return true;
}

/*
 * Reads the top-level columns of the table's schemas ("schemas", or v1's
 * one "schema"), the current schema's first: what a release's time column
 * is and how its bounds are written.
 */
static bool
read_columns(JsonbContainer *meta, IcebergLayout *layout, char **error)
{
	JsonbContainer *schemas = lake_container(lake_field(meta, "schemas"));
	int64		current = -1;
	int			cap = 16;

	layout->columns = palloc0(sizeof(IcebergColumn) * cap);
	if (schemas == NULL || !JsonContainerIsArray(schemas))
	{
		if (lake_field(meta, "schemas") != NULL)
		{
			*error = pstrdup("\"schemas\" is not an array");
			return false;
		}
		return lake_field(meta, "schema") == NULL ||
			read_schema(lake_container(lake_field(meta, "schema")), true, layout, &cap, error);
	}
	(void) lake_int64_value(lake_field(meta, "current-schema-id"), &current);
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < (int) JsonContainerSize(schemas); i++)
		{
			JsonbContainer *schema = lake_container(getIthJsonbValueFromContainer(schemas, i));
			int64		id = -2;

			if (schema != NULL)
				(void) lake_int64_value(lake_field(schema, "schema-id"), &id);
			if ((id == current) == (pass == 0) && !read_schema(schema, pass == 0, layout, &cap, error))
				return false;
		}
	return true;
}

/*
 * Reads the refs, partition specs and columns of a loadTable answer into
 * layout, in the current memory context; false with *error (a sentence) when they are
 * not what the specification says. A v1 table without "partition-specs"
 * has its one "partition-spec" as spec 0.
 */
bool
lake_parse_layout(const char *body, IcebergLayout *layout, char **error)
{
	Jsonb	   *doc = lake_parse_json(body);
	JsonbContainer *meta;
	JsonbContainer *specs;

	memset(layout, 0, sizeof(*layout));
	*error = NULL;
	meta = doc != NULL ? lake_container(lake_field(&doc->root, "metadata")) : NULL;
	if (meta == NULL || !JsonContainerIsObject(meta))
	{
		*error = pstrdup("the answer has no \"metadata\" object");
		return false;
	}
	(void) lake_int64_value(lake_field(meta, "format-version"), &layout->format_version);
	(void) lake_int64_value(lake_field(meta, "default-spec-id"), &layout->default_spec_id);
	layout->table_uuid = lake_string_value(lake_field(meta, "table-uuid"));
	if (!read_refs(meta, layout, error))
		return false;
	specs = lake_container(lake_field(meta, "partition-specs"));
	if (specs == NULL || !JsonContainerIsArray(specs))
	{
		*error = pstrdup("the metadata has no \"partition-specs\" array");
		return false;
	}
	layout->nspecs = JsonContainerSize(specs);
	layout->specs = palloc0(sizeof(IcebergSpec) * Max(layout->nspecs, 1));
	for (int i = 0; i < layout->nspecs; i++)
		if (!read_spec(lake_container(getIthJsonbValueFromContainer(specs, i)), &layout->specs[i], error))
			return false;
	return read_columns(meta, layout, error);
}

/* The ref of that name, or NULL. */
const IcebergRef *
lake_layout_ref(const IcebergLayout *layout, const char *name)
{
	for (int i = 0; i < layout->nrefs; i++)
		if (strcmp(layout->refs[i].name, name) == 0)
			return &layout->refs[i];
	return NULL;
}

/* The partition spec of that id, or NULL. */
const IcebergSpec *
lake_layout_spec(const IcebergLayout *layout, int64 spec_id)
{
	for (int i = 0; i < layout->nspecs; i++)
		if (layout->specs[i].spec_id == spec_id)
			return &layout->specs[i];
	return NULL;
}

/*
 * A column by name in the current schema (name not NULL), else by id in
 * any schema (the current one's first); NULL when there is none.
 */
const IcebergColumn *
lake_layout_column(const IcebergLayout *layout, const char *name, int64 id)
{
	for (int i = 0; i < layout->ncolumns; i++)
		if (name != NULL ? layout->columns[i].current && strcmp(layout->columns[i].name, name) == 0
			: layout->columns[i].id == id)
			return &layout->columns[i];
	return NULL;
}
