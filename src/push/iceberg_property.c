/*
 * iceberg_property.c
 *     The iceberg_property publication target: each final period moves
 *     properties of an Iceberg table to the period's end (finalize's
 *     finalize.finalized-until and Gobblin's completionWatermark by
 *     default, lake/verdict_properties.c), through the finalize_iceberg
 *     catalog the publication names, with the credentials of its owner's
 *     user mapping (as the lake worker reads the catalog).
 *
 * One attempt loads the table and reads the properties: when they are at
 * or past the period's end nothing is committed (the effect is already
 * there: a repeat after a lost answer or a restart, or release_iceberg's
 * publish commit that carried them); else ONE commit asserts the table's
 * uuid and sets them. A 409 (the table was committed to meanwhile) loads
 * it again and decides again, a few times at most. A commit whose answer
 * was lost is never sent again blindly: the next attempt loads the table
 * and finds the properties there. Properties never move back: a property
 * ahead of the period is left as it is, and a value that is no time is
 * refused, not overwritten.
 */
#include "postgres.h"

#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "core/json_build.h"
#include "lake/catalog.h"
#include "lake/metadata.h"
#include "lake/verdict_properties.h"
#include "push/target.h"

/* Loads and commits of one attempt when other writers keep committing first. */
#define MAX_COMMITS 3

/* What load() gives send(): the catalog, the table and the property names. */
typedef struct PropertyTarget
{
	LakeCatalog *cat;
	char	   *iceberg_table;
	VerdictPropertyNames names;
} PropertyTarget;

/* A copy in cxt of a string, NULL kept. */
static char *
copy(MemoryContext cxt, const char *s)
{
	return s != NULL ? MemoryContextStrdup(cxt, s) : NULL;
}

/*
 * In a transaction: the publication's catalog (its server's options and
 * the credentials of the server owner's user mapping), its Iceberg table
 * and property names, copied into cxt; NULL with *error when nothing can
 * be sent.
 */
static void *
property_load(const PushEvent *ev, MemoryContext cxt, char **error)
{
	ForeignServer *server = ev->server_name != NULL ? GetForeignServerByName(ev->server_name, true) : NULL;
	PropertyTarget *t;
	VerdictPropertyNames names;
	char	   *table;

	*error = NULL;
	if (server == NULL)
	{
		*error = psprintf("publication \"%s\" names catalog \"%s\", which does not exist", ev->publication,
						  ev->server_name != NULL ? ev->server_name : "");
		return NULL;
	}
	table = lake_string_value(lake_field(&ev->options->root, "iceberg_table"));
	if (table == NULL)
	{
		*error = psprintf("publication \"%s\" has no option iceberg_table", ev->publication);
		return NULL;
	}
	verdict_property_names(ev->options, &names);
	t = MemoryContextAllocZero(cxt, sizeof(PropertyTarget));
	t->cat = lake_catalog_config(server->serverid, cxt, error);
	if (t->cat == NULL)
		return NULL;
	t->iceberg_table = copy(cxt, table);
	t->names.finalized_until = copy(cxt, names.finalized_until);
	t->names.event_id = copy(cxt, names.event_id);
	t->names.watermark = copy(cxt, names.watermark);
	t->names.timezone = copy(cxt, names.timezone);
	return t;
}

/* Records a failed attempt: the catalog's words, every secret redacted. */
static void
failed(const PropertyTarget *t, const LakeAnswer *a, const char *why, PushResult *out)
{
	out->delivered = false;
	out->status = a != NULL ? a->status : 0;
	out->auth_failed = a != NULL && a->condition == LAKE_AUTH_FAILED;
	out->error = lake_redact(t->cat, psprintf("catalog \"%s\": %s", t->cat->name,
											  why != NULL ? why : a->error != NULL ? a->error : "no answer"));
}

/* The commit's body: the table's uuid asserted (when it has one), the properties set. */
static char *
commit_body(const char *uuid, Jsonb *update)
{
	JsonbParseState *st = NULL;

	jb_begin_object(&st, NULL);
	jb_begin_array(&st, "requirements");
	if (uuid != NULL)
	{
		jb_begin_object(&st, NULL);
		jb_text(&st, "type", "assert-table-uuid");
		jb_text(&st, "uuid", uuid);
		jb_end_object(&st);
	}
	jb_end_array(&st);
	jb_begin_array(&st, "updates");
	jb_jsonb(&st, NULL, update);
	jb_end_array(&st);
	return jb_finish_text(jb_end_object(&st));
}

/*
 * One attempt (no transaction open): the table loaded, its properties
 * read, and at most one commit per load; a 409 loads it again. Delivered
 * when the properties are at or past the period's end, by this attempt's
 * commit (checked in the catalog's answer) or before it (already).
 */
static void
property_send(void *target, const PushEvent *ev, HttpClient *client, PushResult *out)
{
	PropertyTarget *t = (PropertyTarget *) target;
	VerdictPropertyValues values = {ev->period_end, ev->event_id, ev->period_zone};
	LakeAnswer	a;
	char	   *uuid;
	Jsonb	   *update;
	char	   *error;

	memset(out, 0, sizeof(*out));
	out->retry_after = -1;
	/* A property never moves back: late data in a published period changes nothing here. */
	if (strcmp(ev->kind, "final") != 0)
	{
		out->delivered = out->already = true;
		return;
	}
	if (!lake_catalog_prepare(t->cat, client, &a))
	{
		failed(t, &a, NULL, out);
		return;
	}
	for (int commits = 0; commits < MAX_COMMITS; commits++)
	{
		VerdictPropsOutcome plan;

		CHECK_FOR_INTERRUPTS();
		lake_catalog_load_table(t->cat, client, t->iceberg_table, NULL, &a);
		if (a.condition != LAKE_OK)
			break;
		plan = verdict_properties_plan(a.body, t->iceberg_table, &t->names, &values, &uuid, &update, &error);
		if (plan == VERDICT_PROPS_REFUSED)
		{
			failed(t, &a, error, out);
			return;
		}
		if (plan == VERDICT_PROPS_ALREADY)
		{
			out->delivered = true;
			out->already = true;
			out->status = a.status;
			return;
		}
		lake_catalog_commit(t->cat, client, t->iceberg_table, commit_body(uuid, update), &a);
		if (a.condition == LAKE_OK)
		{
			/* The new metadata must hold what was set, or nothing is known to be there. */
			plan = verdict_properties_plan(a.body, t->iceberg_table, &t->names, &values, &uuid, &update, &error);
			if (plan != VERDICT_PROPS_ALREADY)
			{
				failed(t, &a, psprintf("committing to table %s: the catalog answered 200 with metadata whose "
									   "properties are not at the period's end%s%s", t->iceberg_table,
									   error != NULL ? ": " : "", error != NULL ? error : ""), out);
				return;
			}
			out->delivered = true;
			out->status = a.status;
			return;
		}
		if (a.status != 409)
			break;
	}
	if (a.status == 409)
		failed(t, &a, psprintf("%s (refused %d times in a row: the table keeps being committed to, or was "
							   "created again)", a.error != NULL ? a.error : "HTTP 409", MAX_COMMITS), out);
	else
		failed(t, &a, NULL, out);
}

const PushTargetKind push_iceberg_property_kind = {
	.name = "iceberg_property",
	.load = property_load,
	.send = property_send,
};
