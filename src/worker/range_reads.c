/*
 * range_reads.c
 *     Reads batch 2 of a cycle for a set of tables: each table's ranges
 *     (one per segment of its plan, with their event-time facts), then
 *     every instance's min LSN and DDL, each instance read once however many
 *     tables share it; tables whose reads were lost are read again on their
 *     own. What the reads mean is judge.c's.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/hsearch.h"

#include "mssql/cdc_reader.h"
#include "worker/event_facts.h"
#include "worker/table_reads.h"

/* An instance's place in a cycle's list of instance reads, by name. */
typedef struct InstanceSlot
{
	const char *name;			/* hash key: the string it points to */
	int			index;
} InstanceSlot;

/* Hashes the name a key points to. */
static uint32
name_hash(const void *key, Size keysize pg_attribute_unused())
{
	const char *name = *(const char *const *) key;

	return hash_bytes((const unsigned char *) name, (int) strlen(name));
}

/* Compares the names two keys point to. */
static int
name_match(const void *key1, const void *key2, Size keysize pg_attribute_unused())
{
	return strcmp(*(const char *const *) key1, *(const char *const *) key2);
}

/* A table of instance reads by name, in the current memory context. */
static HTAB *
instance_slots(int size)
{
	HASHCTL		ctl = {0};

	ctl.keysize = sizeof(const char *);
	ctl.entrysize = sizeof(InstanceSlot);
	ctl.hash = name_hash;
	ctl.match = name_match;
	ctl.hcxt = CurrentMemoryContext;
	return hash_create("finalize instance reads", Max(size, 16), &ctl,
					   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}

/* Finds or adds the read of an instance in a list (slots: the list by name). */
static CdcInstance *
instance_read(CdcInstance *list, int *n, HTAB *slots, const char *name, bool want_ddl)
{
	bool		found;
	InstanceSlot *slot = hash_search(slots, &name, HASH_ENTER, &found);

	if (found)
	{
		list[slot->index].want_ddl |= want_ddl;
		return &list[slot->index];
	}
	slot->index = *n;
	memset(&list[*n], 0, sizeof(CdcInstance));
	list[*n].name = name;
	list[*n].want_ddl = want_ddl;
	return &list[(*n)++];
}

/*
 * Reads batch 2 for a set of tables (cdc_read_ranges). A statement that
 * fails costs only the tables that need it; tables whose statements never
 * ran (an error that aborts the batch) or were cut by error 601 (a NOLOCK
 * scan that lost its place when rows moved) are read again on their own.
 */
void
read_table_jobs(MssqlConn *conn, TableJob **jobs, int njobs, MssqlError *err, int attempts, int server_offset_minutes)
{
	CdcInstance *insts = palloc0(sizeof(CdcInstance) * (2 * njobs + 1));
	CdcRange  **ranges = palloc0(sizeof(CdcRange *) * (2 * njobs + 1));
	int			ninsts = 0;
	int			nranges = 0;
	bool		alive;
	TableJob  **again = palloc0(sizeof(TableJob *) * (njobs + 1));
	int			nagain = 0;
	HTAB	   *slots = instance_slots(2 * njobs + 1);

	for (int j = 0; j < njobs; j++)
	{
		TablePlan  *p = jobs[j]->plan;

		memset(jobs[j]->seg, 0, sizeof(jobs[j]->seg));
		jobs[j]->error = NULL;
		for (int s = 0; s < p->nsegments; s++)
		{
			CdcRange   *r = &jobs[j]->seg[s];

			r->instance = p->seg[s].instance->name;
			r->start = p->seg[s].start;
			r->end = p->seg[s].end;
			if (jobs[j]->table->event_column != NULL)
			{
				r->events = palloc0(sizeof(CdcEvents));
				r->events->column = jobs[j]->event_name[s] ? jobs[j]->event_name[s] : jobs[j]->table->event_column;
				r->events->utc = jobs[j]->event_utc[s];
				r->events->server_offset_minutes = server_offset_minutes;
				r->events->slot_seconds = event_slot_seconds(&jobs[j]->table->granularity);
			}
			else
			{
				/* A commit-time table's periods each get facts of their own. */
				r->splits = jobs[j]->splits;
				r->nsplits = jobs[j]->nsplits;
			}
			ranges[nranges++] = r;
			jobs[j]->inst[s] = instance_read(insts, &ninsts, slots, p->seg[s].instance->name, true);
		}
		if (p->action == PLAN_RESUME || p->action == PLAN_INSTANCE_GAP)
			jobs[j]->inst[0] = instance_read(insts, &ninsts, slots, p->instance->name, false);
	}
	alive = cdc_read_ranges(conn, ranges, nranges, insts, ninsts, err);

	/* Each table's first error in the batch; which tables to read again. */
	for (int j = 0; j < njobs; j++)
	{
		TableJob   *job = jobs[j];
		const CdcOutcome *outcomes[6];
		const CdcOutcome *first = NULL;
		int			n = 0;
		bool		retry = false;

		for (int s = 0; s < job->plan->nsegments; s++)
		{
			outcomes[n++] = &job->seg[s].outcome;
			if (job->seg[s].events != NULL)
				outcomes[n++] = &job->seg[s].events->outcome;
		}
		for (int s = 0; s < Max(job->plan->nsegments, 1); s++)
			if (job->inst[s] != NULL)
				outcomes[n++] = &job->inst[s]->outcome;
		for (int i = 0; i < n; i++)
		{
			if (outcomes[i]->ok)
				continue;
			if (first == NULL || outcomes[i]->position < first->position)
				first = outcomes[i];
			if (alive && (outcomes[i]->nolock_lost || (outcomes[i]->never_ran && njobs > 1)))
				retry = true;
		}
		if (first != NULL)
			job->error = pstrdup(first->error);
		if (retry && attempts > 0)
			again[nagain++] = job;
	}
	for (int j = 0; j < nagain; j++)
		read_table_jobs(conn, &again[j], 1, err, attempts - 1, server_offset_minutes);
}
