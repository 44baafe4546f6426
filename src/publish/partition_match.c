/*
 * partition_match.c
 *     Which files of a snapshot belong to a release's partition.
 *
 * A request names the partition by its Iceberg fields' values as Iceberg
 * prints them in paths: a time transform's as a date ("2026" for year,
 * "2026-11" for month, "2026-11-27" for day, "2026-11-27-08" for hour),
 * any other field's as its value's text (identity, bucket[N] and
 * truncate[W] values, integers in decimal; an identity of a date column,
 * which Iceberg stores as days since 1970, as its date, 2026-11-27), null
 * for the null partition.
 * A file belongs to the partition when every field matches. A file
 * written under a spec that lacks one of the fields cannot be placed (its
 * rows may be the partition's or not): the caller makes it a problem,
 * never a file silently left out.
 */
#include "postgres.h"

#include "gate/manifest.h"
#include "gate/manifest_error.h"
#include "publish/partition_match.h"

/*
 * Resolves the request's partition against one spec: each field's
 * transform, a time transform's value read as its unit (a value that is
 * none is an error naming the field and the form).
 */
void
spec_match_prepare(const IcebergSpec *spec, const ReleaseRequest *r, SpecMatch *out)
{
	static const char *const forms[] = {"2026", "2026-11", "2026-11-27", "2026-11-27-08"};

	memset(out, 0, sizeof(*out));
	out->spec_id = spec->spec_id;
	out->criteria = palloc0(sizeof(SpecCriterion) * Max(r->ncriteria, 1));
	for (int i = 0; i < r->ncriteria; i++)
	{
		const PartitionCriterion *c = &r->criteria[i];
		const IcebergSpecField *f = NULL;
		SpecCriterion *sc = &out->criteria[out->ncriteria++];

		for (int j = 0; j < spec->nfields && f == NULL; j++)
			if (strcmp(spec->fields[j].name, c->field) == 0)
				f = &spec->fields[j];
		sc->c = c;
		if (f == NULL)
		{
			out->missing_field = c->field;
			continue;
		}
		sc->timed = epoch_unit_of(f->transform, &sc->unit);
		sc->source_id = f->source_id;
		sc->is_date = !sc->timed && !c->is_null && epoch_unit_parse(EPOCH_DAY, c->value, &sc->days);
		if (sc->timed && !c->is_null && !epoch_unit_parse(sc->unit, c->value, &sc->ordinal))
			request_error("partition", "field \"%s\" is the %s transform of its column, so its value is written "
						  "like \"%s\", not \"%s\"", c->field, f->transform, forms[sc->unit], c->value);
	}
}

/*
 * Whether a file's partition tuple is the request's partition. *absent is
 * set to a requested field the tuple does not carry (then false): its
 * spec, or the manifest, does not have it.
 */
bool
entry_in_partition(const SpecMatch *m, const IcebergManifestEntry *e, const char **absent)
{
	*absent = m->missing_field;
	if (m->missing_field != NULL)
		return false;
	for (int i = 0; i < m->ncriteria; i++)
	{
		const SpecCriterion *sc = &m->criteria[i];
		const IcebergPartitionValue *v = NULL;

		for (int j = 0; j < e->npartition && v == NULL; j++)
			if (strcmp(e->partition[j].name, sc->c->field) == 0)
				v = &e->partition[j];
		if (v == NULL)
		{
			*absent = sc->c->field;
			return false;
		}
		if (sc->c->is_null || v->is_null)
		{
			if (sc->c->is_null != v->is_null)
				return false;
			continue;
		}
		if (sc->timed)
		{
			if ((v->type != ICEBERG_VALUE_INT && v->type != ICEBERG_VALUE_LONG) || v->int_value != sc->ordinal)
				return false;
		}
		else if (sc->is_date && v->type == ICEBERG_VALUE_INT)
		{
			if (v->int_value != sc->days)
				return false;
		}
		else if (v->text == NULL || strcmp(v->text, sc->c->value) != 0)
			return false;
	}
	return true;
}

/*
 * Refuses a partition that leaves out a time field of a spec its files
 * may be written under: those files hold rows of any period (a request for
 * {} on a table partitioned by hour holds every hour), so no period the
 * request gives could be checked for them.
 */
static void
require_time_fields(const ReleaseRequest *r, const IcebergSpec *spec)
{
	for (int j = 0; j < spec->nfields; j++)
	{
		EpochUnit	unit;
		bool		named = false;

		if (!epoch_unit_of(spec->fields[j].transform, &unit))
			continue;
		for (int i = 0; i < r->ncriteria && !named; i++)
			named = strcmp(r->criteria[i].field, spec->fields[j].name) == 0;
		if (!named)
			request_error("partition", "does not name field \"%s\" (the %s transform) of partition spec %lld: "
						  "the partition's files would hold rows of every %s, whose finality no period can "
						  "vouch for; name its value", spec->fields[j].name, spec->fields[j].transform,
						  (long long) spec->spec_id, spec->fields[j].transform);
	}
}

/*
 * Refuses a time field of the request that transforms another column than
 * the others (*source: the first one's, -1 before it), in this spec or
 * another: a day of one column and an hour of another hold rows of any
 * hour of the first, and a field of the same name over another column in
 * a newer spec places its files by that column, so no one span is what
 * the files hold.
 */
static void
require_one_time_column(const SpecCriterion *sc, const IcebergSpec *spec, const IcebergLayout *layout,
						int64 *source)
{
	const IcebergColumn *c;
	const IcebergColumn *first;

	if (*source < 0 || sc->source_id == *source)
	{
		*source = sc->source_id;
		return;
	}
	c = lake_layout_column(layout, NULL, sc->source_id);
	first = lake_layout_column(layout, NULL, *source);
	request_error("partition", "names time field \"%s\", which partition spec %lld makes a transform of column "
				  "\"%s\", while the partition's other time fields transform column \"%s\": its files are placed "
				  "by different columns, so which periods they hold cannot be told; partition the table by time "
				  "transforms of the one column its periods are about", sc->c->field, (long long) spec->spec_id,
				  c != NULL ? c->name : "?", first != NULL ? first->name : "?");
}

/*
 * The instants the files of one spec hold by the request's time fields
 * there (each a transform of column *source): the intersection of each
 * one's span (a day and its hour: the hour). False when the spec lacks a
 * requested field (none of its files is the partition's) or has no time
 * field among them (*untimed).
 */
static bool
spec_period(const ReleaseRequest *r, const IcebergLayout *layout, const IcebergSpec *spec, TimestampTz *start,
			TimestampTz *end, bool *untimed, int64 *source)
{
	SpecMatch	m;
	bool		any = false;

	spec_match_prepare(spec, r, &m);
	*untimed = false;
	if (m.missing_field != NULL)
		return false;
	*untimed = true;
	require_time_fields(r, spec);
	for (int i = 0; i < m.ncriteria; i++)
	{
		TimestampTz s;
		TimestampTz e;

		if (!m.criteria[i].timed || m.criteria[i].c->is_null)
			continue;
		require_one_time_column(&m.criteria[i], spec, layout, source);
		if (!epoch_unit_span(m.criteria[i].unit, m.criteria[i].ordinal, &s, &e))
			request_error("partition", "field \"%s\" names a period outside the years 1 to 9999",
						  m.criteria[i].c->field);
		*start = any ? Max(*start, s) : s;
		*end = any ? Min(*end, e) : e;
		any = true;
	}
	if (any && *start >= *end)
		request_error("partition", "its time fields name periods that do not overlap, so it holds no rows");
	*untimed = !any;
	return any;
}

/*
 * The instants the partition holds by its time fields: over every spec of
 * the table whose files can be the partition's, the union of what they
 * hold (after a spec's day field became an hour field, a request for the
 * day holds the whole day, whatever the newer files cut), all of one
 * column. False when no spec bounds it by time (the request must then give
 * period_start).
 */
bool
partition_period(const ReleaseRequest *r, const IcebergLayout *layout, TimestampTz *start, TimestampTz *end)
{
	bool		any = false;
	bool		untimed_spec = false;
	int64		source = -1;

	for (int i = 0; i < layout->nspecs; i++)
	{
		TimestampTz s;
		TimestampTz e;
		bool		untimed;

		if (!spec_period(r, layout, &layout->specs[i], &s, &e, &untimed, &source))
		{
			untimed_spec |= untimed;
			continue;
		}
		*start = any ? Min(*start, s) : s;
		*end = any ? Max(*end, e) : e;
		any = true;
	}
	if (any && untimed_spec)
		request_error("partition", "names time fields of some partition specs of the table that other specs "
					  "have without a time transform, so which periods its files hold cannot be told");
	return any;
}

/*
 * Whether a column is the source of a time field (year, month, day, hour)
 * of some spec of the table; *any when the specs have a time field at all.
 */
static bool
time_field_source(const IcebergLayout *layout, int64 id, bool *any, int64 *first, bool *several)
{
	bool		found = false;
	EpochUnit	unit;

	*any = *several = false;
	for (int i = 0; i < layout->nspecs; i++)
		for (int j = 0; j < layout->specs[i].nfields; j++)
		{
			const IcebergSpecField *f = &layout->specs[i].fields[j];

			if (!epoch_unit_of(f->transform, &unit))
				continue;
			*several |= *any && f->source_id != *first;
			if (!*any)
				*first = f->source_id;
			*any = true;
			found |= f->source_id == id;
		}
	return found;
}

/*
 * The column whose bounds prove which periods a data file holds, and its
 * name: the request's time_column (a date or time column of the current
 * schema, the source of the specs' time fields when they have any), else
 * the one column the specs' time fields are transforms of. With proof (the
 * partition has no time field: only bounds can show its files hold the
 * periods the request names) the column must hold instants (timestamptz):
 * a wall-clock value of no zone proves no period. NULL when there is none,
 * with *why; a time_column that cannot be the one is the request's error.
 */
const char *
release_time_column(const ReleaseRequest *r, const IcebergLayout *layout, bool proof, TimeColumn *col,
					char **why)
{
	const IcebergColumn *c = NULL;
	bool		any;
	bool		several;
	int64		first = -1;

	if (r->time_column != NULL && (c = lake_layout_column(layout, r->time_column, 0)) == NULL)
		request_error("time_column", "\"%s\" is not a column of \"%s\"", r->time_column, r->iceberg_table);
	(void) time_field_source(layout, c != NULL ? c->id : -1, &any, &first, &several);
	if (c == NULL && any && !several)
		c = lake_layout_column(layout, NULL, first);
	if (r->time_column != NULL && any && !time_field_source(layout, c->id, &any, &first, &several))
		request_error("time_column", "\"%s\" is not the column the time fields of the table's partition specs are "
					  "transforms of: leave it out, or name that column", r->time_column);
	*why = NULL;
	if (c == NULL)
		*why = pstrdup(several ? "the time fields of the table's partition specs are transforms of different "
						"columns, and the request names none in \"time_column\""
						: "the table has no year, month, day or hour partition field, and the request names no "
						"\"time_column\"");
	else if (!time_column_type(c->type, &col->unit, &col->zoned))
		*why = psprintf("column \"%s\" is %s %s, not a date and time column", c->name,
						c->type != NULL ? "of type" : "a", c->type != NULL ? c->type : "nested type");
	else if (proof && !col->zoned)
		*why = psprintf("column \"%s\" is a %s: its values are wall-clock times of no zone, so its bounds "
						"cannot prove which instants, and so which periods, a file holds", c->name, c->type);
	if (*why != NULL && r->time_column != NULL)
		request_error("time_column", "cannot be used: %s; name a timestamptz column", *why);
	if (*why != NULL)
		return NULL;
	col->field_id = (int32) c->id;
	return c->name;
}
