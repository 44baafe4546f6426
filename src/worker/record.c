/*
 * record.c
 *     Records one table's write in the cycle's write transaction, each in
 *     its own subtransaction so that one table's failure (or a lock held too
 *     long by another session) costs only that table.
 */
#include "postgres.h"

#include "core/db.h"
#include "core/settings.h"
#include "worker/clock_steps.h"
#include "worker/judge.h"
#include "worker/record.h"

/*
 * Applies one table's write (inside subxact_try). A table untracked since
 * the cycle read it gets nothing: its name may already be tracked again, as
 * another table, maybe on another server. A condition alone takes no lock
 * on the verdict (a session holding it is what the condition may report).
 */
static void
apply_write(void *arg)
{
	TableWrite *w = (TableWrite *) arg;
	const TrackedSource *t = w->table;

	if (w->kind != WRITE_CONDITION && !ws_still_tracked(t->table_id))
	{
		ereport(DEBUG1,
				(errmsg("finalize: table \"%s\" was untracked during the cycle; nothing is recorded for it",
						t->table_name)));
		return;
	}
	switch (w->kind)
	{
		case WRITE_NONE:
			break;
		case WRITE_RANGES:
			for (int i = 0; i < w->nfacts; i++)
			{
				w->facts[i].clock_tolerance = w->clock_tolerance;
				ws_record_range(&w->facts[i]);
			}
			if (w->clock_step != CLOCK_STEADY)
				record_clock_step(w);
			if (w->capture_instance != NULL)
				ws_set_capture_instance(t->table_id, w->capture_instance);
			ws_set_condition(t->table_id, COND_NONE, NULL);
			break;
		case WRITE_DATA_LOSS:
			ws_record_event(t->table_id, "data_loss", &w->event_start, &w->event_end,
							w->capture_instance, w->detail,
							w->resume ? NULL : "data_lost", w->state_detail);
			if (w->resume)
				ws_resume_after_loss(t->table_id, &w->resume_at, w->resume_time, w->lost_until,
									 w->capture_instance, true, w->resume_detail, w->clock_tolerance);
			ws_set_condition(t->table_id, COND_NONE, NULL);
			break;
		case WRITE_SCHEMA_BLOCKED:
			ws_record_event(t->table_id, "schema_blocked", &w->event_start, &w->event_end,
							w->capture_instance, w->detail, "schema_blocked", w->state_detail);
			ws_set_condition(t->table_id, COND_NONE, NULL);
			break;
		case WRITE_RESUME:
			ws_resume_after_loss(t->table_id, &w->resume_at, w->resume_time, w->lost_until,
								 w->capture_instance, false, w->resume_detail, w->clock_tolerance);
			ws_set_condition(t->table_id, COND_NONE, NULL);
			break;
		case WRITE_CONDITION:
			ws_set_condition(t->table_id, w->condition, w->condition_detail);
			break;
	}
}

/*
 * Records one table's write in its own subtransaction, so that one table's
 * failure does not lose the others'. A lock another session holds on the
 * table's rows (never waited for: _lock_tracked takes it NOWAIT in the
 * worker) and any other failure become the table's condition (and false).
 */
bool
record_write(TableWrite *w)
{
	ErrorData  *e;
	TableWrite	cw;

	/* Nothing to write needs no subtransaction and no lookup. */
	if (w->kind == WRITE_NONE)
		return true;
	if (subxact_try(apply_write, w, &e))
		return true;
	memset(&cw, 0, sizeof(cw));
	cw.table = w->table;
	if (e->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
		write_condition(&cw, COND_LOCK_TIMEOUT,
					  psprintf("Another session holds a lock on this table's rows (for example an open transaction "
							   "that called finalize.resume_table, finalize.record_range or finalize.acknowledge_loss): "
							   "%s. The worker does not wait for it, which would slow every table of the source; "
							   "nothing was lost, and the next cycle records it once the lock is released.",
							   e->message));
	else
	{
		write_condition(&cw, COND_RECORD_FAILED, psprintf("Recording failed: %s", e->message));
		ereport(WARNING,
				(errmsg("finalize could not record the facts of table \"%s\": %s",
						w->table->table_name, e->message)));
	}
	(void) subxact_try(apply_write, &cw, NULL);
	return false;
}
