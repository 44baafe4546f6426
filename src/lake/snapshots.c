/*
 * snapshots.c
 *     What an Iceberg table's snapshots prove about a pipeline's progress.
 *
 * A writer puts the LSN it has durably applied into the summary of the
 * snapshot it commits (Spark's snapshot-property.<key>, pyiceberg's
 * snapshot_properties, ...). The snapshot a ref points to holds the data of
 * its ancestry, so the newest snapshot on that ancestry that carries the
 * property proves how far the ref holds the source: snapshots without it
 * (compactions, deletes, maintenance) neither advance nor hold it. A ref
 * that no longer descends from the snapshot recorded last, or whose newest
 * property went down, lost data the verdict covered: a rollback.
 */
#include "postgres.h"

#include "lake/snapshots.h"

/* Orders snapshots by id, for lake_find_snapshot. */
static int
snapshot_cmp(const void *a, const void *b)
{
	int64_t		x = ((const LakeSnapshot *) a)->id;
	int64_t		y = ((const LakeSnapshot *) b)->id;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* Sorts the snapshots by id (the metadata lists them by time, not id). */
void
lake_sort_snapshots(LakeMetadata *md)
{
	if (md->nsnapshots > 1)
		qsort(md->snapshots, md->nsnapshots, sizeof(LakeSnapshot), snapshot_cmp);
}

/* The snapshot with an id, or NULL when the metadata does not list it (expired). */
const LakeSnapshot *
lake_find_snapshot(const LakeMetadata *md, int64_t id)
{
	int			lo = 0,
				hi = md->nsnapshots;

	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (md->snapshots[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < md->nsnapshots && md->snapshots[lo].id == id ? &md->snapshots[lo] : NULL;
}

/* The parent of a snapshot, or NULL (none, or expired). */
static const LakeSnapshot *
parent_of(const LakeMetadata *md, const LakeSnapshot *s)
{
	return s->has_parent ? lake_find_snapshot(md, s->parent_id) : NULL;
}

/*
 * Whether snapshot id is an ancestor of (or is) from. The walk is bounded
 * by the number of snapshots, so a metadata whose parents form a loop
 * cannot hang it.
 */
static bool
is_ancestor(const LakeMetadata *md, const LakeSnapshot *from, int64_t id)
{
	int			steps = 0;

	for (const LakeSnapshot *s = from; s != NULL && steps <= md->nsnapshots; s = parent_of(md, s), steps++)
		if (s->id == id)
			return true;
	return false;
}

/*
 * The newest carrier of the property on the ancestry shared by the ref's
 * new head and the snapshot recorded before (the first of head's ancestors
 * that is also one of seen's), or NULL when they share none that carries
 * it or seen is no longer listed.
 */
static const LakeSnapshot *
shared_carrier(const LakeMetadata *md, const LakeSnapshot *head, const LakeSnapshot *seen)
{
	int			steps = 0;

	if (seen == NULL)
		return NULL;
	for (const LakeSnapshot *s = head; s != NULL && steps <= md->nsnapshots; s = parent_of(md, s), steps++)
		if (s->lsn_text != NULL && is_ancestor(md, seen, s->id))
			return s;
	return NULL;
}

/* A rollback: what the ref still holds is held's LSN, or nothing provable. */
static LakeVerdict
rollback(LakeVerdict v, const LakeSnapshot *held, const char *reason)
{
	v.outcome = LAKE_ROLLBACK;
	v.reason = reason;
	v.held_known = held != NULL && lsn_parse_any(held->lsn_text, &v.held_lsn);
	return v;
}

/*
 * Walks the ref's ancestry from its head: sets *carrier to the newest
 * snapshot with the property, and *reached when the walk came to the
 * recorded snapshot (it goes on past the carrier to find it). Returns how
 * many snapshots it looked at.
 */
static int
walk(const LakeMetadata *md, const LakeSnapshot *head, const LakeSeen *seen, const LakeSnapshot **carrier,
	 bool *reached)
{
	int			walked = 0;

	for (const LakeSnapshot *s = head; s != NULL && walked <= md->nsnapshots; s = parent_of(md, s))
	{
		walked++;
		if (seen->any && s->id == seen->snapshot_id)
		{
			*reached = true;
			if (*carrier == NULL && s->lsn_text != NULL)
				*carrier = s;
			break;
		}
		if (*carrier == NULL && s->lsn_text != NULL)
		{
			*carrier = s;
			if (!seen->any)
				break;
		}
	}
	return walked;
}

/*
 * What the metadata proves, given what was recorded before (seen). The
 * ref's ancestry is walked from its head through the parents to the newest
 * carrier, and on to the recorded snapshot when there was one: reaching it
 * proves the ref descends from it. When the recorded snapshot has expired
 * from the metadata, descent cannot be proven by the walk: a head whose
 * sequence number is below the recorded one went back in time (a
 * rollback); otherwise the ref is taken to descend from it (expiry removes
 * old snapshots, not a branch's recent history) and the LSNs decide. A
 * table created again under the same name (another table-uuid) holds none
 * of what was recorded.
 */
LakeVerdict
lake_judge(const LakeMetadata *md, const LakeSeen *seen)
{
	LakeVerdict v;
	const LakeSnapshot *head;
	const LakeSnapshot *carrier = NULL;
	const LakeSnapshot *seen_snap;
	bool		reached = false;
	int			cmp;

	memset(&v, 0, sizeof(v));
	if (seen->any && seen->table_uuid != NULL && md->table_uuid != NULL &&
		strcmp(seen->table_uuid, md->table_uuid) != 0)
		return rollback(v, NULL, "the table was dropped and created again (its table-uuid changed)");
	if (!md->ref_found && seen->any && !md->refs_listed)
	{
		/* Not a table that lost its ref: metadata that says nothing of refs. */
		v.outcome = LAKE_MALFORMED;
		v.reason = "the metadata has neither \"refs\" nor \"current-snapshot-id\"";
		return v;
	}
	if (!md->ref_found)
	{
		if (seen->any)
			return rollback(v, NULL, "the ref no longer exists");
		v.outcome = LAKE_NOTHING;
		return v;
	}
	head = lake_find_snapshot(md, md->ref_snapshot_id);
	if (head == NULL)
	{
		v.outcome = LAKE_MALFORMED;
		v.reason = "the ref points to a snapshot the metadata does not list";
		return v;
	}
	v.walked = walk(md, head, seen, &carrier, &reached);
	v.carrier = carrier;
	if (carrier != NULL && !lsn_parse_any(carrier->lsn_text, &v.lsn))
	{
		v.outcome = LAKE_MALFORMED;
		v.reason = "the property's value is not an LSN (0x and 20 hex digits, or Debezium's 8:8:4 form)";
		return v;
	}
	if (!seen->any)
	{
		v.outcome = carrier != NULL ? LAKE_ADVANCE : LAKE_NOTHING;
		return v;
	}
	seen_snap = lake_find_snapshot(md, seen->snapshot_id);
	if (!reached && seen_snap != NULL)
		return rollback(v, shared_carrier(md, head, seen_snap),
						"the ref moved to a snapshot that does not descend from the one recorded");
	if (!reached && head->sequence > 0 && seen->sequence > 0 && head->sequence < seen->sequence)
		return rollback(v, carrier != NULL && lsn_cmp(&v.lsn, &seen->lsn) < 0 ? carrier : NULL,
						"the ref moved back to a snapshot older than the one recorded");
	if (carrier == NULL)
	{
		/* The recorded carrier expired and nothing newer carries the property. */
		v.outcome = LAKE_SAME;
		return v;
	}
	cmp = lsn_cmp(&v.lsn, &seen->lsn);
	if (cmp < 0)
		return rollback(v, carrier, "the newest LSN property on the ref went down");
	v.outcome = cmp > 0 ? LAKE_ADVANCE : LAKE_SAME;
	return v;
}
