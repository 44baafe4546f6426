/*
 * unlisted.c
 *     Why a tracked table has no capture instance its worker can read
 *     (condition no_capture_instance): SQL Server is asked why
 *     (mssql/table_probe.c), so that the condition says whether the table
 *     does not exist, has no change data capture, or may not be read by
 *     the login, in the words finalize.track_table uses for the same.
 */
#include "postgres.h"

#include "mssql/table_probe.h"
#include "worker/unlisted.h"

/*
 * At most this many tables are asked about per cycle (one or two small
 * statements each); the others keep the general words until a later
 * cycle, whose own limit they share.
 */
#define UNLISTED_PROBES_PER_CYCLE 16

/* The general words, for a table SQL Server was not asked about. */
static char *
general_detail(const TrackedSource *t, const SourceConfig *cfg)
{
	if (t->capture_instance != NULL)
		return psprintf("Capture instance \"%s\" of %s.%s is not listed by sys.sp_cdc_help_change_data_capture "
						"for login \"%s\" as capturing that table, and no other instance of the table is (or "
						"the name no longer resolves: OBJECT_ID is NULL).",
						t->capture_instance, t->source_schema, t->source_name, cfg->conn.username);
	return psprintf("No capture instance of %s.%s is visible to login \"%s\": the table does not exist, "
					"change data capture is not enabled on it, or the login may not read it.",
					t->source_schema, t->source_name, cfg->conn.username);
}

/* The condition's detail from SQL Server's answer. */
static char *
probe_detail(const TrackedSource *t, const SourceConfig *cfg, const TableProbe *probe)
{
	TableProbeText text;
	char	   *message;

	table_probe_text(probe, t->source_schema, t->source_name, cfg->database, cfg->conn.username, &text);
	message = pstrdup(text.message);
	message[0] = pg_toupper((unsigned char) message[0]);
	return psprintf("%s%s. %s%s%s",
					t->capture_instance != NULL
					? psprintf("Capture instance \"%s\" is no longer listed for the login: ", t->capture_instance)
					: "", message, text.detail, text.hint ? " " : "", text.hint ? text.hint : "");
}

/*
 * Sets the detail of every job whose plan found no capture instance,
 * asking SQL Server about the first UNLISTED_PROBES_PER_CYCLE of them on
 * the cycle's connection (no transaction open).
 */
void
unlisted_details(MssqlConn *conn, const SourceConfig *cfg, TableJob *jobs, int njobs)
{
	int			probed = 0;

	for (int i = 0; i < njobs; i++)
	{
		TableJob   *job = &jobs[i];
		const TrackedSource *t = job->table;
		TableProbe	probe;

		if (job->plan == NULL || job->plan->action != PLAN_NO_INSTANCE)
			continue;
		probe.access = TABLE_UNKNOWN;
		if (probed < UNLISTED_PROBES_PER_CYCLE && !mssql_is_dead(conn))
		{
			mssql_probe_unlisted(conn, t->source_schema, t->source_name, t->object_id, &probe);
			probed++;
		}
		job->unlisted_detail = probe.access == TABLE_UNKNOWN || probe.access == TABLE_READABLE
			? general_detail(t, cfg) : probe_detail(t, cfg, &probe);
	}
}
