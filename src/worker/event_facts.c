/*
 * event_facts.c
 *     Turns the event-time facts SQL Server computed for a range into what
 *     the write path stores (docs/design/event_time.md):
 *
 *   - rows per event period: SQL Server groups event times in local slots
 *     of whole seconds (a divisor of both the granularity and 15 minutes:
 *     zones are offset by multiples of 15 minutes, so a slot lies inside
 *     one period of the table's zone); each slot becomes the earliest
 *     instant its start may denote (the rule of commit times: in a
 *     fall-back hour a row may be counted an hour early, which can only
 *     make it look late, never hide lateness), then its period, cut in the
 *     table's period_zone;
 *   - the lateness sketch: SQL Server buckets commit time minus event time
 *     as local wall times. Where the zones' offsets differ over the range
 *     (a DST change between event and commit, an event zone other than the
 *     server's, a datetimeoffset read at the server's current offset) the
 *     wall difference can be off by up to the spread of the offsets: every
 *     row's lateness is moved by the bound of that error from the top of
 *     its bucket, so an allowance drawn from the sketch errs long, never
 *     short;
 *   - the span of event times.
 */
#include "postgres.h"

#include <math.h>

#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "core/event_time_sql.h"
#include "core/json_build.h"
#include "core/period_zone.h"
#include "core/sketch.h"
#include "core/timeconv.h"
#include "worker/event_facts.h"

/* 1900-01-01 00:00, the origin of SQL Server's slots and milliseconds, as a PostgreSQL timestamp. */
#define ORIGIN_1900 ((Timestamp) -36524 * USECS_PER_DAY)

/*
 * How far past the end of a span its zone's offsets are looked at (see
 * wall_correction_ms): the largest DST shift any zone has made.
 */
#define DST_MARGIN ((int64) 2 * USECS_PER_HOUR)

/*
 * The slot SQL Server groups event times by, in seconds: the greatest
 * common divisor of the granularity and 15 minutes, the quantum of zone
 * offsets (granularities of event-time tables are whole seconds that
 * divide a day or whole days, or calendar months: 15 minutes).
 */
int64
event_slot_seconds(const Interval *granularity)
{
	int64		usecs;
	int64		a;
	int64		b = PERIOD_OFFSET_QUANTUM / USECS_PER_SEC;

	if (!interval_usecs(granularity, &usecs))
		return b;
	a = usecs / USECS_PER_SEC;
	if (a <= 0)
		return 1;
	while (b != 0)
	{
		int64		r = a % b;

		a = b;
		b = r;
	}
	return a;
}

/*
 * Whether SQL Server's type of an event column is a date/time type an event
 * column may have; utc is set for datetimeoffset, whose values carry their
 * own offset.
 */
bool
event_type_supported(const char *sql_server_type, bool *utc)
{
	static const char *const local_types[] = {"datetime", "datetime2", "smalldatetime", "date"};

	*utc = pg_strcasecmp(sql_server_type, "datetimeoffset") == 0;
	if (*utc)
		return true;
	for (int i = 0; i < lengthof(local_types); i++)
		if (pg_strcasecmp(sql_server_type, local_types[i]) == 0)
			return true;
	return false;
}

/* A local time (or UTC for datetimeoffset) as the earliest instant it may denote. */
static TimestampTz
event_instant(Timestamp local, const pg_tz *tz)
{
	return tz == NULL ? (TimestampTz) local : local_to_instant_earliest(local, tz);
}

/* An instant as ISO 8601 in UTC, whatever the session's TimeZone and DateStyle. */
static char *
iso_utc(TimestampTz ts)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
		elog(ERROR, "event period out of range");
	return psprintf("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year, tm.tm_mon, tm.tm_mday,
					tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec);
}

/* Rows of one event period and operation, before merging. */
typedef struct PeriodRows
{
	bool		null_event;
	TimestampTz period;
	int64		inserts;
	int64		updates;
	int64		deletes;
} PeriodRows;

/* Orders period rows by period, rows without an event time last. */
static int
period_rows_cmp(const void *a, const void *b)
{
	const PeriodRows *x = a;
	const PeriodRows *y = b;

	if (x->null_event != y->null_event)
		return x->null_event ? 1 : -1;
	if (x->period != y->period)
		return x->period < y->period ? -1 : 1;
	return 0;
}

/* The rows per event period as the JSON array _record_range takes. */
static Jsonb *
periods_json(const CdcEvents *ev, const pg_tz *tz, const PeriodSpec *spec)
{
	PeriodRows *rows = palloc0(sizeof(PeriodRows) * (ev->nslots + 1));
	JsonbParseState *st = NULL;
	int64		slot_usecs = ev->slot_seconds * USECS_PER_SEC;

	for (int i = 0; i < ev->nslots; i++)
	{
		const CdcEventSlot *s = &ev->slots[i];
		PeriodRows *r = &rows[i];

		r->null_event = s->null_event;
		if (!s->null_event)
			r->period = period_start_of(spec, event_instant(ORIGIN_1900 + s->slot * slot_usecs, tz),
										"event time");
		if (s->op == 2)
			r->inserts = s->rows;
		else if (s->op == 4)
			r->updates = s->rows;
		else
			r->deletes = s->rows;
	}
	qsort(rows, ev->nslots, sizeof(PeriodRows), period_rows_cmp);
	jb_begin_array(&st, NULL);
	for (int i = 0; i < ev->nslots;)
	{
		PeriodRows	sum = rows[i];
		int			j = i + 1;

		for (; j < ev->nslots && period_rows_cmp(&rows[j], &rows[i]) == 0; j++)
		{
			sum.inserts += rows[j].inserts;
			sum.updates += rows[j].updates;
			sum.deletes += rows[j].deletes;
		}
		jb_begin_object(&st, NULL);
		if (!sum.null_event)
			jb_text(&st, "period", iso_utc(sum.period));
		jb_int(&st, "inserts", sum.inserts);
		jb_int(&st, "updates", sum.updates);
		jb_int(&st, "deletes", sum.deletes);
		jb_end_object(&st);
		i = j;
	}
	return jb_finish(jb_end_array(&st));
}

/*
 * How far the wall-time lateness SQL Server measured may be from the real
 * one over this range, in ms: real = wall - offset(commit) + offset(event)
 * <= wall + max offset(event) - min offset(commit). Adding this to every
 * row keeps each at or above its real lateness (it is 0 when the offsets
 * agree throughout; below 0 when the events' offsets are smaller, as for a
 * datetimeoffset column read in UTC). event_tz NULL: the events were read
 * at a fixed offset, event_offset_s.
 */
static int64
wall_correction_ms(const pg_tz *event_tz, long event_offset_s, const pg_tz *server_tz, TimestampTz first_event,
				   TimestampTz last_event, TimestampTz first_commit, TimestampTz last_commit)
{
	long		emin = event_offset_s;
	long		emax = event_offset_s;
	long		smin;
	long		smax;

	/*
	 * Both spans end at the earliest reading of a local time, which in a
	 * fall-back hour lies up to the DST shift before the real instant (a
	 * range can lie wholly inside the repeated hour, its transition just
	 * after): the ends are widened by the largest shift, the starts need
	 * not be.
	 */
	if (event_tz != NULL)
		local_offset_range(event_tz, first_event, last_event + DST_MARGIN, &emin, &emax);
	local_offset_range(server_tz, Min(first_commit, last_commit), last_commit + DST_MARGIN, &smin, &smax);
	return (int64) (emax - smin) * 1000;
}

/*
 * The sketch of the buckets SQL Server counted, every row's lateness moved
 * by correction_ms (see wall_correction_ms): from the upper bound of its
 * bucket, so that it stays at or above the real lateness.
 */
static void
build_sketch(const CdcEvents *ev, int64 correction_ms, Sketch *s)
{
	int			lowest = SKETCH_BUCKETS;
	int			highest = -1;

	sketch_init(s);
	for (int i = 0; i < ev->nbuckets; i++)
	{
		const CdcLateBucket *b = &ev->buckets[i];
		int			index = (int) Min(b->bucket, SKETCH_BUCKETS - 1);

		if (b->rows <= 0)
			continue;
		if (correction_ms == 0)
		{
			if (b->bucket == -2)
				sketch_add(s, -1, b->rows);
			else if (b->bucket == -1)
				sketch_add(s, 0, b->rows);
			else
			{
				index = Max(index, 0);
				(void) sketch_add_bucket(s, index, b->rows);
				lowest = Min(lowest, index);
				highest = Max(highest, index);
			}
		}
		else if (b->bucket == -2 && correction_ms < 0)
			sketch_add(s, -1, b->rows);		/* still an event after its commit */
		else
		{
			/* a negative wall lateness is below 0: its upper bound is 0 */
			double		upper = b->bucket < 0 ? 0.0 : pow(SKETCH_GAMMA, index);
			int64		moved = (int64) ceil(upper) + correction_ms;

			sketch_add(s, moved < 0 ? -1 : moved, b->rows);
		}
	}
	/*
	 * Rows counted by bucket have no exact lateness: their bucket bounds
	 * stand for the extremes, so that a quantile capped at the maximum is
	 * never cut below a bucket's rows.
	 */
	if (highest >= 0)
	{
		int64		hi = (int64) ceil(pow(SKETCH_GAMMA, highest));
		int64		lo = lowest == 0 ? 1 : (int64) floor(pow(SKETCH_GAMMA, lowest - 1)) + 1;

		if (s->zero == 0 && s->negative == 0)
			s->min_ms = lo;
		s->max_ms = Max(s->max_ms, hi);
	}
}

/*
 * Fills the event-time facts of a range (f's event_periods, sketch and
 * event span) from what SQL Server computed; returns NULL, or why they
 * cannot be used (the range is then not recorded: the verdict waits).
 */
char *
event_facts_build(const CdcEvents *ev, const TrackedSource *t, const pg_tz *server_tz, RangeFacts *f)
{
	const pg_tz *tz = server_tz;
	const PeriodZone *period_zone;
	PeriodSpec	spec;
	int64		event_rows = 0;
	int64		correction = 0;
	Sketch	   *s;

	if (ev->utc)
		tz = NULL;
	else if (t->event_zone != NULL && (tz = pg_tzset(t->event_zone)) == NULL)
		return psprintf("The event_time_zone \"%s\" of table \"%s\" is not a time zone this server knows.",
						t->event_zone, t->table_name);
	if (!period_zone_lookup(t->period_zone, &period_zone))
		return psprintf("The period_zone \"%s\" of table \"%s\" is not a time zone this server knows.",
						t->period_zone, t->table_name);
	if (period_spec_make(&t->granularity, period_zone, true, &spec) != GRANULARITY_OK)
		return psprintf("Table \"%s\" has a granularity that defines no periods.", t->table_name);
	for (int i = 0; i < ev->nslots; i++)
		event_rows += ev->slots[i].rows;
	if (event_rows != f->inserts + f->updates + f->deletes)
		return psprintf("SQL Server counted %lld row(s) by event period but %lld in the range of capture "
						"instance \"%s\": the range changed between the two reads, so neither is recorded.",
						(long long) event_rows, (long long) (f->inserts + f->updates + f->deletes),
						f->capture_instance);

	f->event_periods = periods_json(ev, tz, &spec);
	f->has_event_span = ev->has_span;
	if (ev->has_span)
	{
		f->first_event = event_instant(ORIGIN_1900 + ev->min_ms * INT64CONST(1000), tz);
		f->last_event = event_instant(ORIGIN_1900 + ev->max_ms * INT64CONST(1000), tz);
		if (f->first_event > f->last_event)
			f->first_event = f->last_event;
		if (f->has_rows)
			correction = wall_correction_ms(tz, (long) ev->server_offset_minutes * 60, server_tz, f->first_event,
											f->last_event, f->first_time, f->last_time);
	}
	s = palloc(sizeof(Sketch));
	build_sketch(ev, correction, s);
	f->sketch = sketch_count(s) > 0 ? sketch_bytea(s) : NULL;
	return NULL;
}
