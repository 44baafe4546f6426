/*
 * verdict_properties.c
 *     The verdict as an Iceberg table's properties: the names a
 *     publication's options give, what a loadTable answer holds of them
 *     (metadata.properties, a map of strings), and the one set-properties
 *     update that moves them to a final period's end.
 *
 * Two pairs of properties move independently, each only forward:
 * finalize's own (the period's end as UTC ISO 8601, with the id of the
 * event that moved it) and Gobblin's (completionWatermark, the same
 * instant in epoch milliseconds, with completionWatermarkTimezone, the
 * table's period zone). A pair whose watermark the table already holds at
 * or past the period's end is left as it is, so a repeated or late event,
 * or a commit whose answer was lost, never moves a property back.
 */
#include "postgres.h"


#include "core/json_build.h"
#include "core/redact.h"
#include "lake/metadata.h"
#include "lake/verdict_properties.h"
#include "lake/watermark.h"

/* Milliseconds from the Unix epoch to PostgreSQL's. */
#define PG_EPOCH_MS (INT64CONST(1000) * SECS_PER_DAY * (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE))

/* A name option of the publication: its string, NULL when absent or null. */
static char *
name_option(Jsonb *options, const char *key)
{
	return lake_string_value(lake_field(&options->root, key));
}

/*
 * The property names of a publication's options, as its options function
 * completed them (finalize_internal.publication_options_iceberg_property):
 * an option absent or null names no property.
 */
void
verdict_property_names(Jsonb *options, VerdictPropertyNames *names)
{
	names->finalized_until = name_option(options, "finalized_until_property");
	names->event_id = name_option(options, "event_id_property");
	names->watermark = name_option(options, "watermark_property");
	names->timezone = name_option(options, "watermark_timezone_property");
}

/* An instant as epoch milliseconds (periods end on whole seconds). */
static int64
epoch_ms(TimestampTz ts)
{
	return ts / 1000 + PG_EPOCH_MS;
}

/*
 * A property's value in the table: its text, NULL when absent, "" when it
 * is no string (then no time is read from it: refused, never overwritten).
 */
static const char *
property_value(JsonbContainer *props, const char *name)
{
	JsonbValue *v;

	if (name == NULL || props == NULL)
		return NULL;
	v = lake_field(props, name);
	if (v == NULL)
		return NULL;
	return v->type == jbvString ? lake_string_value(v) : "";
}

/* The set-properties update of a plan: each pair it moves, with its companion. */
static Jsonb *
update_jsonb(const VerdictPropertyNames *names, const VerdictPropertyValues *values, const WatermarkPlan *plan)
{
	JsonbParseState *st = NULL;
	char		iso[WATERMARK_ISO_LEN];

	watermark_format_iso(epoch_ms(values->period_end), iso);
	jb_begin_object(&st, NULL);
	jb_text(&st, "action", "set-properties");
	jb_begin_object(&st, "updates");
	if (plan->set_iso)
	{
		jb_text(&st, names->finalized_until, iso);
		if (names->event_id != NULL)
			jb_text(&st, names->event_id, values->event_id);
	}
	if (plan->set_ms)
	{
		jb_text(&st, names->watermark, psprintf(INT64_FORMAT, epoch_ms(values->period_end)));
		if (names->timezone != NULL)
			jb_text(&st, names->timezone, values->zone);
	}
	jb_end_object(&st);
	return jb_finish(jb_end_object(&st));
}

/* The sentence for a watermark property that holds no time. */
static char *
unreadable(const char *iceberg_table, const char *name, const char *value, const char *expected,
		   const char *option)
{
	return psprintf("property \"%s\" of Iceberg table %s holds \"%s\", which is not %s; finalize never "
					"overwrites a value it cannot compare with the period (it may be later). Remove the "
					"property from the table, or name another one with the option %s",
					name, iceberg_table, text_excerpt(value, 100), expected, option);
}

/*
 * Reads a loadTable answer (body) and plans the properties for a final
 * period: ALREADY when every named watermark is at or past its end; SET
 * with *update (a set-properties update) and *table_uuid
 * (NULL for a table without one); REFUSED with *error (a sentence) when
 * the answer is no table metadata or a named watermark holds no time.
 */
VerdictPropsOutcome
verdict_properties_plan(const char *body, const char *iceberg_table, const VerdictPropertyNames *names,
						const VerdictPropertyValues *values, char **table_uuid, Jsonb **update, char **error)
{
	Jsonb	   *doc = lake_parse_json(body);
	JsonbContainer *meta = doc != NULL ? lake_container(lake_field(&doc->root, "metadata")) : NULL;
	JsonbContainer *props;
	WatermarkSeen iso;
	WatermarkSeen ms;
	WatermarkPlan plan;

	*table_uuid = *error = NULL;
	*update = NULL;
	if (meta == NULL || !JsonContainerIsObject(meta))
	{
		*error = psprintf("the catalog's answer for Iceberg table %s has no \"metadata\" object", iceberg_table);
		return VERDICT_PROPS_REFUSED;
	}
	props = lake_container(lake_field(meta, "properties"));
	if (lake_field(meta, "properties") != NULL && (props == NULL || !JsonContainerIsObject(props)))
	{
		*error = psprintf("the metadata of Iceberg table %s has \"properties\" that are not an object", iceberg_table);
		return VERDICT_PROPS_REFUSED;
	}
	*table_uuid = lake_string_value(lake_field(meta, "table-uuid"));
	if (*table_uuid != NULL && !lake_uuid_ok(*table_uuid))
	{
		*error = psprintf("the metadata of Iceberg table %s has a \"table-uuid\" that is not a UUID", iceberg_table);
		return VERDICT_PROPS_REFUSED;
	}
	iso.named = names->finalized_until != NULL;
	iso.value = property_value(props, names->finalized_until);
	ms.named = names->watermark != NULL;
	ms.value = property_value(props, names->watermark);
	if (!watermark_plan(&iso, &ms, epoch_ms(values->period_end), &plan))
	{
		*error = plan.unreadable_iso
			? unreadable(iceberg_table, names->finalized_until, iso.value, "a UTC instant such as 2026-11-02T10:00:00Z",
						 "finalized_until_property")
			: unreadable(iceberg_table, names->watermark, ms.value, "epoch milliseconds such as 1793613600000",
						 "watermark_property");
		return VERDICT_PROPS_REFUSED;
	}
	if (!plan.set_iso && !plan.set_ms)
		return VERDICT_PROPS_ALREADY;
	*update = update_jsonb(names, values, &plan);
	return VERDICT_PROPS_SET;
}
