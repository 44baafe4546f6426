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

#include <stdlib.h>

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
 * The newest carrier of the property on the ancestry shared by the ref's
 * new head and the snapshot seen before (the first of head's ancestors
 * that is also one of seen's), or NULL when they share none that carries
 * it. seen's ancestors are marked first (by index: the snapshots are
 * sorted by id), so the cost is one walk of each, not their product.
 */
static const LakeSnapshot *
shared_carrier(const LakeMetadata *md, const LakeSnapshot *head, const LakeSnapshot *seen)
{
	bool	   *mine = calloc(md->nsnapshots, sizeof(bool));
	const LakeSnapshot *found = NULL;
	int			steps = 0;

	if (mine == NULL)
		return NULL;			/* no memory: nothing shown to be shared */
	for (const LakeSnapshot *s = seen; s != NULL && steps <= md->nsnapshots; s = parent_of(md, s), steps++)
		mine[s - md->snapshots] = true;
	steps = 0;
	for (const LakeSnapshot *s = head; s != NULL && steps <= md->nsnapshots; s = parent_of(md, s), steps++)
		if (s->lsn_text != NULL && mine[s - md->snapshots])
		{
			found = s;
			break;
		}
	free(mine);
	return found;
}

/* The newest snapshot with the property on head's ancestry, or NULL. */
static const LakeSnapshot *
newest_carrier(const LakeMetadata *md, const LakeSnapshot *head)
{
	int			steps = 0;

	for (const LakeSnapshot *s = head; s != NULL && steps <= md->nsnapshots; s = parent_of(md, s), steps++)
		if (s->lsn_text != NULL)
			return s;
	return NULL;
}

/*
 * A rollback: what the ref still holds is held's LSN (when it is one), or
 * nothing provable; the ref's new claim is v's carrier's, when valid.
 */
static LakeVerdict
rollback(LakeVerdict v, const LakeSnapshot *held, const char *reason)
{
	v.outcome = LAKE_ROLLBACK;
	v.reason = reason;
	v.held_known = held != NULL && lsn_parse_any(held->lsn_text, &v.held_lsn);
	v.has_lsn = v.carrier != NULL && lsn_parse_any(v.carrier->lsn_text, &v.lsn);
	return v;
}

/* What a walk of the ref's ancestry found. */
typedef struct Walk
{
	const LakeSnapshot *carrier;	/* the newest snapshot with the property */
	const LakeSnapshot *valid;	/* the newest whose property is an LSN */
	Lsn			valid_lsn;
	const LakeSnapshot *older;	/* the first snapshot older than the head
								 * seen last, or NULL */
	bool		reached;		/* it came to the head seen last (or to its
								 * child) */
	int			walked;
} Walk;

/*
 * Walks the ref's ancestry from its head to the snapshot seen last (or to
 * a snapshot whose parent it is: that one may have expired), noting the
 * newest carrier of the property, the newest valid one, and the first
 * snapshot older than the one seen (a lower sequence number), where it
 * stops. Without a head seen before it stops at the first valid carrier.
 * The walk is bounded by the number of snapshots (a loop of parents cannot
 * hang it).
 */
static Walk
walk(const LakeMetadata *md, const LakeSnapshot *head, const LakeSeen *seen)
{
	Walk		w;

	memset(&w, 0, sizeof(w));
	for (const LakeSnapshot *s = head; s != NULL && w.walked <= md->nsnapshots; s = parent_of(md, s))
	{
		w.walked++;
		if (seen->any && s->id == seen->head_id)
		{
			w.reached = true;
			break;
		}
		if (seen->any && s->sequence > 0 && seen->head_sequence > 0 && s->sequence < seen->head_sequence)
		{
			w.older = s;
			break;
		}
		if (s->lsn_text != NULL && w.carrier == NULL)
			w.carrier = s;
		if (s->lsn_text != NULL && w.valid == NULL && lsn_parse_any(s->lsn_text, &w.valid_lsn))
		{
			w.valid = s;
			if (!seen->any)
				break;
		}
		if (seen->any && s->has_parent && s->parent_id == seen->head_id)
		{
			w.reached = true;
			break;
		}
	}
	return w;
}

/*
 * What the metadata proves, given what was recorded before (seen). The
 * ref's ancestry is walked from its head to the head seen last: reaching
 * it (or its child) proves descent, and then the newest carrier's LSN
 * against the recorded one decides. Not reaching it is a rollback: the ref
 * moved off that lineage (what the two share holds), or went back to an
 * older snapshot (what that snapshot's ancestry holds), or its history back
 * to the head seen last has expired, so that it still holds what was
 * proven cannot be shown. A table created again under the same name
 * (another table-uuid), or a ref that is gone, holds none of it. Descent
 * is decided before the newest carrier's value is read, and a malformed
 * newest carrier never hides a valid one below it that went down.
 */
LakeVerdict
lake_judge(const LakeMetadata *md, const LakeSeen *seen)
{
	LakeVerdict v;
	const LakeSnapshot *head;
	const LakeSnapshot *seen_snap;
	Walk		w;
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
	v.head = head;
	w = walk(md, head, seen);
	v.walked = w.walked;
	v.carrier = w.carrier;
	if (seen->any && !w.reached)
	{
		/* The new head's own claim, wherever the walk stopped. */
		v.carrier = newest_carrier(md, head);
		seen_snap = lake_find_snapshot(md, seen->head_id);
		if (seen_snap != NULL)
			return rollback(v, shared_carrier(md, head, seen_snap),
							"the ref moved to a snapshot that does not descend from the one seen last");
		if (w.older != NULL)
			return rollback(v, newest_carrier(md, w.older),
							"the ref moved back to a snapshot older than the one seen last");
		return rollback(v, NULL, "the ref's history back to the snapshot seen last has expired, so that it "
						"still holds what was proven cannot be shown");
	}
	v.descends = seen->any;
	if (w.valid != NULL && seen->any && lsn_cmp(&w.valid_lsn, &seen->lsn) < 0)
	{
		v.carrier = w.valid;
		return rollback(v, w.valid, "the newest LSN property on the ref went down");
	}
	if (w.carrier != NULL && w.carrier != w.valid)
	{
		v.outcome = LAKE_MALFORMED;
		v.reason = "the property's value is not an LSN (0x and 20 hex digits, or Debezium's 8:8:4 form)";
		return v;
	}
	if (w.valid == NULL)
	{
		/* Nothing new carries the property: the recorded LSN stands (or there is none). */
		v.outcome = seen->any ? LAKE_SAME : LAKE_NOTHING;
		return v;
	}
	v.has_lsn = true;
	v.lsn = w.valid_lsn;
	if (!seen->any)
	{
		v.outcome = LAKE_ADVANCE;
		return v;
	}
	cmp = lsn_cmp(&v.lsn, &seen->lsn);
	v.outcome = cmp > 0 ? LAKE_ADVANCE : LAKE_SAME;
	return v;
}
