/*
 * privilege_hint.c
 *     Says which of finalize's roles to grant when PostgreSQL refuses one
 *     of its objects: "permission denied for schema finalize", "... for
 *     function track_table", "... for view facts".
 *
 * PostgreSQL raises these itself, before any of finalize's code runs (the
 * parser checks USAGE on the schema, the executor EXECUTE on a function
 * and SELECT on a relation), and names neither finalize nor a role. An
 * emit_log_hook adds the hint to the error on its way to the client and
 * the log: it matches the message by its untranslated format and the
 * object's name, so it works in every language, and it reads no catalog
 * (it runs while the error is being reported, where a lookup that failed
 * would be an error inside an error). So the roles of the objects are
 * listed here, as the install script grants them; test_security.py checks
 * the two agree for every object of the schema. Functions and relations
 * are matched by name only, so their hints are given only in the
 * database finalize serves (finalize.database): whether the session is in
 * it is read once, when its first statement is parsed, before anything
 * the executor refuses.
 *
 * PostgreSQL calls the hook only for messages it logs: with
 * log_min_messages above error, the hints are not given.
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "parser/analyze.h"
#include "utils/elog.h"

#include "core/privilege_hint.h"
#include "core/settings.h"

/* An object of schema finalize that roles are granted, and the least role granted it. */
typedef struct GrantedObject
{
	const char *name;
	const char *role;
} GrantedObject;

#define READER "finalize_reader"
#define PIPELINE "finalize_pipeline"
#define PUBLISHER "finalize_publisher"
#define ADMIN "finalize_admin"

/* The functions roles may call (every signature of a name has the same role). */
static const GrantedObject granted_functions[] = {
	{"finalized_until", READER}, {"is_final", READER}, {"wait_final", READER},
	{"explain_verdict", READER}, {"period_start", READER}, {"period_end", READER},
	{"mssql_local_to_instant", READER}, {"dropped_notifications", READER},
	{"released_generation", READER}, {"render_location", READER}, {"lateness", READER},
	{"report_progress", PIPELINE}, {"report_processed", PIPELINE},
	{"changes_by_period", PUBLISHER}, {"changes_by_event_period", PUBLISHER},
	{"release_gate", PUBLISHER}, {"release_iceberg", PUBLISHER},
	{"compare_inventories", PUBLISHER}, {"register_partition", PUBLISHER},
	{"retired_generations", PUBLISHER},
	{"track_table", ADMIN}, {"untrack_table", ADMIN}, {"alter_tracked_table", ADMIN},
	{"resume_table", ADMIN}, {"release_source", ADMIN}, {"record_range", ADMIN},
	{"purge_facts", ADMIN}, {"quote_mssql_ident", ADMIN}, {"add_consumer", ADMIN},
	{"alter_consumer", ADMIN}, {"drop_consumer", ADMIN}, {"track_derived", ADMIN},
	{"acknowledge_loss", ADMIN}, {"track_sharded", ADMIN}, {"add_shard", ADMIN},
	{"drop_shard", ADMIN}, {"set_projection", ADMIN}, {"release_report", ADMIN},
	{"acknowledge_alert", ADMIN}, {"add_publication", ADMIN}, {"drop_publication", ADMIN},
	{"retry_publication", ADMIN},
};

/* The tables and views roles may read. */
static const GrantedObject granted_relations[] = {
	{"status", READER}, {"consumers", READER}, {"late_data", READER}, {"alerts", READER},
	{"alert_deliveries", READER},
	{"facts", PUBLISHER}, {"releases", PUBLISHER},
	{"tracked_table", ADMIN}, {"watermark", ADMIN}, {"fact", ADMIN}, {"source_status", ADMIN},
	{"table_condition", ADMIN}, {"source_workers", ADMIN}, {"consumer", ADMIN},
	{"consumer_hold", ADMIN}, {"derived_input", ADMIN}, {"loss", ADMIN}, {"loss_ack", ADMIN},
	{"lake_consumer", ADMIN}, {"shard_consumer", ADMIN}, {"partition_registration", ADMIN},
	{"projection", ADMIN}, {"release", ADMIN}, {"published", ADMIN}, {"event_fact", ADMIN},
	{"lateness_hour", ADMIN}, {"late_period", ADMIN}, {"alert", ADMIN}, {"alert_delivery", ADMIN},
	{"alert_target_state", ADMIN}, {"publications", ADMIN}, {"publication", ADMIN},
	{"publication_event", ADMIN},
};

/* The foreign-data wrappers whose servers admins create. */
static const GrantedObject granted_wrappers[] = {
	{"finalize_mssql", ADMIN}, {"finalize_s3", ADMIN}, {"finalize_iceberg", ADMIN},
	{"finalize_webhook", ADMIN},
	{"finalize_dagster", ADMIN}, {"finalize_azure", ADMIN},
};

static emit_log_hook_type prev_emit_log_hook = NULL;
static post_parse_analyze_hook_type prev_post_parse_analyze_hook = NULL;

/* Whether this session is in the database finalize serves: -1 until known. */
static int	in_finalize_database = -1;

/* Whether name occurs in message as a whole identifier. */
static bool
names(const char *message, const char *name)
{
	size_t		len = strlen(name);

	for (const char *p = strstr(message, name); p != NULL; p = strstr(p + 1, name))
	{
		bool		before = p > message && (isalnum((unsigned char) p[-1]) || p[-1] == '_');
		bool		after = isalnum((unsigned char) p[len]) || p[len] == '_';

		if (!before && !after)
			return true;
	}
	return false;
}

/* The object of objects[n] that message names, or NULL. */
static const GrantedObject *
named_object(const char *message, const GrantedObject *objects, int n)
{
	for (int i = 0; i < n; i++)
		if (names(message, objects[i].name))
			return &objects[i];
	return NULL;
}

/*
 * post_parse_analyze_hook: reads once per session whether it is in the
 * database finalize serves, for the emit_log_hook (which may read no
 * catalog).
 */
static void
note_database_hook(ParseState *pstate, Query *query, JumbleState *jstate)
{
	if (prev_post_parse_analyze_hook)
		prev_post_parse_analyze_hook(pstate, query, jstate);
	if (in_finalize_database < 0 && OidIsValid(MyDatabaseId))
	{
		char	   *name = get_database_name(MyDatabaseId);

		in_finalize_database = name != NULL && finalize_database != NULL &&
			strcmp(name, finalize_database) == 0;
	}
}

/* The hint for a refusal PostgreSQL raised (its message's format and text), or NULL. */
static char *
privilege_hint(const char *format, const char *message)
{
	const GrantedObject *object;

	if (strcmp(format, "permission denied for schema %s") == 0 && names(message, FINALIZE_SCHEMA))
		return pstrdup("An administrator grants one of finalize's roles: finalize_reader to ask for verdicts, "
					   "finalize_pipeline to report a pipeline's progress, finalize_publisher to release "
					   "partitions, finalize_admin to track tables (GRANT finalize_reader TO <role>;).");
	if (strcmp(format, "permission denied for foreign-data wrapper %s") == 0)
	{
		object = named_object(message, granted_wrappers, lengthof(granted_wrappers));
		if (object != NULL)
			return psprintf("Members of %s may create servers of %s: an administrator can run GRANT %s TO <role>;",
							object->role, object->name, object->role);
	}
	if (in_finalize_database != 1)
		return NULL;
	if (strcmp(format, "permission denied for function %s") == 0)
	{
		object = named_object(message, granted_functions, lengthof(granted_functions));
		if (object != NULL)
			return psprintf("Members of %s may call finalize.%s: an administrator can run GRANT %s TO <role>;",
							object->role, object->name, object->role);
	}
	else if (strcmp(format, "permission denied for table %s") == 0 ||
			 strcmp(format, "permission denied for view %s") == 0)
	{
		/* The message does not say whether reading or writing was refused. */
		object = named_object(message, granted_relations, lengthof(granted_relations));
		if (object != NULL)
			return psprintf("Members of %s may read finalize.%s (GRANT %s TO <role>;); "
							"no role writes finalize's tables, its functions do.",
							object->role, object->name, object->role);
	}
	return NULL;
}

/* emit_log_hook: adds the hint to a refusal of finalize's objects that has none. */
static void
privilege_hint_hook(ErrorData *edata)
{
	if (edata->elevel == ERROR && edata->sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE &&
		edata->hint == NULL && edata->message_id != NULL && edata->message != NULL)
		edata->hint = privilege_hint(edata->message_id, edata->message);
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/* Installs the hooks (from _PG_init). */
void
privilege_hint_install(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = privilege_hint_hook;
	prev_post_parse_analyze_hook = post_parse_analyze_hook;
	post_parse_analyze_hook = note_database_hook;
}
