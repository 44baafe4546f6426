/*
 * event_columns.c
 *     Before the ranges of event-time tables are read, their event columns
 *     are checked against what each capture instance their plans read
 *     captures (sys.sp_cdc_get_captured_columns, one batch): the column
 *     must be captured, with a date/time type. A table whose column is not
 *     gets the condition event_column_invalid with what SQL Server lists,
 *     and nothing is read or recorded for it: its verdict waits. Whether
 *     each segment's column is a datetimeoffset (read in UTC) is decided
 *     here, from the type SQL Server reports.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"

#include "core/io_interrupts.h"
#include "mssql/cdc_reader.h"
#include "worker/event_facts.h"
#include "worker/table_reads.h"

/* The read of an instance's columns in a list, added when missing. */
static CdcColumns *
columns_of(CdcColumns *list, int *n, const char *instance)
{
	for (int i = 0; i < *n; i++)
		if (strcmp(list[i].instance, instance) == 0)
			return &list[i];
	memset(&list[*n], 0, sizeof(CdcColumns));
	list[*n].instance = instance;
	return &list[(*n)++];
}

/* The captured column an event column names: exact, else the one case-insensitive match. */
static int
find_column(const CdcColumns *c, const char *name)
{
	int			found = -1;

	for (int i = 0; i < c->ncolumns; i++)
		if (strcmp(c->names[i], name) == 0)
			return i;
	for (int i = 0; i < c->ncolumns; i++)
		if (pg_strcasecmp(c->names[i], name) == 0)
		{
			if (found >= 0)
				return -1;
			found = i;
		}
	return found;
}

/* The captured columns of an instance, listed for a message. */
static char *
column_list(const CdcColumns *c)
{
	StringInfoData s;

	initStringInfo(&s);
	for (int i = 0; i < c->ncolumns && i < 50; i++)
		appendStringInfo(&s, "%s%s (%s)", i ? ", " : "", c->names[i], c->types[i]);
	if (c->ncolumns > 50)
		appendStringInfo(&s, " and %d more", c->ncolumns - 50);
	return s.data;
}

/* Checks one table's event column in the instances of its segments. */
static void
check_job(TableJob *job, CdcColumns *list, int n, const char *login)
{
	const TrackedSource *t = job->table;
	/* a baseline reads no segment: its instance is checked, so a wrong column shows at once */
	int			nseg = Max(job->plan->nsegments, 1);

	for (int s = 0; s < nseg; s++)
	{
		const char *ci = job->plan->nsegments > 0 ? job->plan->seg[s].instance->name : job->plan->instance->name;
		CdcColumns *c = columns_of(list, &n, ci);
		int			i;

		if (!c->outcome.ok)
		{
			job->event_condition = COND_READ_FAILED;
			job->event_problem = psprintf("Listing the captured columns of capture instance \"%s\" "
										  "(sys.sp_cdc_get_captured_columns) as login \"%s\" failed: %s",
										  ci, login, c->outcome.error);
			return;
		}
		i = find_column(c, t->event_column);
		if (i < 0)
		{
			job->event_condition = COND_EVENT_COLUMN_INVALID;
			job->event_problem = psprintf("The event_time_column \"%s\" of table \"%s\" is not a column that "
										  "capture instance \"%s\" captures (it captures: %s). Nothing is "
										  "recorded for the table until it is: fix the name with "
										  "finalize.alter_tracked_table(%s, event_time_column => '...') "
										  "while the table has no verdict, or track it again.",
										  t->event_column, t->table_name, ci, column_list(c),
										  quote_literal_cstr(t->table_name));
			return;
		}
		job->event_name[s] = c->names[i];
		if (!event_type_supported(c->types[i], &job->event_utc[s]))
		{
			job->event_condition = COND_EVENT_COLUMN_INVALID;
			job->event_problem = psprintf("The event_time_column \"%s\" of table \"%s\" has type %s in capture "
										  "instance \"%s\"; an event column must be datetime, datetime2, "
										  "smalldatetime, date or datetimeoffset. Nothing is recorded for the "
										  "table until it is.", c->names[i], t->table_name, c->types[i], ci);
			return;
		}
	}
}

/*
 * Checks the event column of every job whose table has one, in one batch.
 * Returns false only when the connection was lost (err says why); a job
 * whose column cannot be used gets event_condition and event_problem.
 */
bool
event_columns_check(MssqlConn *conn, const char *login, TableJob **jobs, int njobs, MssqlError *err)
{
	CdcColumns *list = palloc0(sizeof(CdcColumns) * (2 * njobs + 1));
	int			n = 0;
	bool		alive;

	for (int j = 0; j < njobs; j++)
		if (jobs[j]->table->event_column != NULL)
		{
			for (int s = 0; s < jobs[j]->plan->nsegments; s++)
				(void) columns_of(list, &n, jobs[j]->plan->seg[s].instance->name);
			if (jobs[j]->plan->nsegments == 0)
				(void) columns_of(list, &n, jobs[j]->plan->instance->name);
		}
	if (n == 0)
		return true;
	alive = cdc_read_captured_columns(conn, list, n, err);
	io_interrupts_rethrow();
	if (!alive)
		return false;
	for (int j = 0; j < njobs; j++)
		if (jobs[j]->table->event_column != NULL)
			check_job(jobs[j], list, n, login);
	return true;
}
