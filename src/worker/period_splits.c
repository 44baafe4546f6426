/*
 * period_splits.c
 *     Where a commit-time table's next read splits its range, so that SQL
 *     Server aggregates it per period (tsql.c) and every period's counts
 *     are facts of their own: changes_by_period is exact for each final
 *     period, and a release can reconcile an Iceberg partition's row count
 *     with them (docs/release-iceberg.md).
 */
#include "postgres.h"

#include "core/period_zone.h"
#include "core/timeconv.h"
#include "worker/period_splits.h"

/* How far from a change of the server's UTC offset a read is not split. */
#define SPLIT_DST_MARGIN (3 * USECS_PER_HOUR)

/*
 * Sets the split points of a table's read (plan_period_splits): its period
 * boundaries since its offset's commit time up to max_instant (the cycle's
 * max LSN's), in the server's wall time. None for an event-time table (its
 * periods are event periods), before the first range, or when the
 * server's UTC offset changes in the span or within SPLIT_DST_MARGIN of it
 * (a wall time there could name two instants): the range is then one
 * fact, as before.
 */
void
job_splits(const SourceConfig *cfg, TimestampTz max_instant, TableJob *job)
{
	const TrackedSource *t = job->table;
	const PeriodZone *zone;
	PeriodSpec	spec;
	long		min_s;
	long		max_s;
	const char *name = t->period_zone != NULL && strcmp(t->period_zone, "UTC") != 0 ? t->period_zone : NULL;

	job->nsplits = 0;
	if (t->event_column != NULL || !t->has_offset || t->offset_time >= max_instant ||
		!period_zone_lookup(name, &zone) || period_spec_make(&t->granularity, zone, true, &spec) != GRANULARITY_OK)
		return;
	/*
	 * Commit times are read as their earliest instant: within a DST
	 * fall-back's repeated hour that is an hour early, so a span near an
	 * offset change (either side, by the margin) is not split.
	 */
	local_offset_range(cfg->tz, t->offset_time - SPLIT_DST_MARGIN, max_instant + SPLIT_DST_MARGIN, &min_s, &max_s);
	if (min_s != max_s)
		return;
	{
		Timestamp	out[CDC_MAX_SPLITS];
		int			n = plan_period_splits(&spec, t->offset_time, max_instant, (int32) min_s, out, CDC_MAX_SPLITS);

		if (n == 0)
			return;
		job->splits = palloc(sizeof(Timestamp) * n);
		memcpy(job->splits, out, sizeof(Timestamp) * n);
		job->nsplits = n;
	}
}
