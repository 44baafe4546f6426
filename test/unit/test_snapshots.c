/*
 * Unit tests of what an Iceberg table's snapshots prove (lake/snapshots.c):
 * the newest carrier of the LSN property on a ref's ancestry, snapshots
 * without it (compactions, deletes), branches, rollbacks (the LSN going
 * down, a ref that no longer descends from the recorded snapshot, a ref
 * moved back after the recorded one expired, a dropped ref, a table
 * created again), malformed properties and metadata, a parent loop.
 * Built and run by test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "lake/snapshots.h"

#include "tap.h"

#define MAXS 32

static LakeSnapshot snaps[MAXS];
static int	nsnaps;
static LakeMetadata md;

/* Starts a table with no snapshots and no ref. */
static void
reset(void)
{
	nsnaps = 0;
	memset(&md, 0, sizeof(md));
	md.snapshots = snaps;
}

/* Adds a snapshot (parent 0: none; lsn NULL: no property) and points the ref at it. */
static void
add(int64_t id, int64_t parent, int64_t seq, const char *lsn)
{
	LakeSnapshot *s = &snaps[nsnaps++];

	memset(s, 0, sizeof(*s));
	s->id = id;
	s->has_parent = parent != 0;
	s->parent_id = parent;
	s->sequence = seq;
	s->lsn_text = lsn;
	md.nsnapshots = nsnaps;
	lake_sort_snapshots(&md);
	md.ref_found = true;
	md.refs_listed = true;
	md.ref_snapshot_id = id;
}

/* Points the ref at a snapshot. */
static void
ref_at(int64_t id)
{
	md.ref_found = true;
	md.ref_snapshot_id = id;
}

/* What was recorded: the head seen last and the LSN proven. */
static LakeSeen
seen(int64_t id, int64_t seq, const char *lsn)
{
	LakeSeen	s;

	memset(&s, 0, sizeof(s));
	s.any = true;
	s.head_id = id;
	s.head_sequence = seq;
	if (!lsn_parse_any(lsn, &s.lsn))
	{
		printf("Bail out! bad LSN in test: %s\n", lsn);
		exit(1);
	}
	return s;
}

/* Whether an LSN has a text. */
static bool
lsn_is(const Lsn *l, const char *text)
{
	Lsn			want;

	return lsn_parse_any(text, &want) && lsn_cmp(l, &want) == 0;
}

#define L1 "0x00000010000000100001"
#define L2 "0x00000020000000200001"
#define L3 "0x00000030000000300001"

static void
test_first_poll(void)
{
	LakeSeen	none = {0};
	LakeVerdict v;

	reset();
	v = lake_judge(&md, &none);
	check(v.outcome == LAKE_NOTHING, "a table without snapshots proves nothing");

	add(1, 0, 1, NULL);
	v = lake_judge(&md, &none);
	check(v.outcome == LAKE_NOTHING, "a snapshot without the property proves nothing");

	add(2, 1, 2, L1);
	add(3, 2, 3, NULL);
	v = lake_judge(&md, &none);
	check(v.outcome == LAKE_ADVANCE && v.carrier && v.carrier->id == 2 && lsn_is(&v.lsn, L1),
		  "the newest carrier below a compaction is found");

	add(4, 3, 4, "0000003a:00000f2a:0002");
	v = lake_judge(&md, &none);
	check(v.outcome == LAKE_ADVANCE && lsn_is(&v.lsn, "0x0000003A00000F2A0002"),
		  "Debezium's LSN form is read");
}

static void
test_following(void)
{
	LakeSeen	s;
	LakeVerdict v;

	reset();
	add(1, 0, 1, L1);
	add(2, 1, 2, NULL);
	s = seen(1, 1, L1);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_SAME, "a compaction after the recorded carrier changes nothing");

	add(3, 2, 3, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ADVANCE && v.carrier->id == 3 && lsn_is(&v.lsn, L2),
		  "a newer carrier descending from the recorded one advances");

	add(4, 3, 4, L2);
	s = seen(3, 3, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_SAME, "a replay of the same LSN changes nothing");

	add(5, 4, 5, L1);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1),
		  "a newest property that went down is a rollback to it");
}

static void
test_branches(void)
{
	LakeSeen	s;
	LakeVerdict v;

	/* main: 1 (L1) <- 2 (L2); audit: 1 <- 3 (L3), main stays at 2 */
	reset();
	add(1, 0, 1, L1);
	add(2, 1, 2, L2);
	add(3, 1, 3, L3);
	ref_at(2);
	s = seen(2, 2, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_SAME, "a commit to another branch does not count");

	/* main replaced by the audit branch: 3 does not descend from 2 */
	ref_at(3);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1) && lsn_is(&v.lsn, L3),
		  "a ref that moved off the recorded lineage is a rollback to what both share");

	/* rolled back to 1, the snapshot before the recorded one */
	ref_at(1);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1),
		  "a ref moved back to an ancestor is a rollback to its carrier");

	/* rolled back to a compaction below the recorded head: its own claim is the carrier below it */
	reset();
	add(1, 0, 1, L1);
	add(2, 1, 2, NULL);
	add(3, 2, 3, L2);
	ref_at(2);
	s = seen(3, 3, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1) && v.has_lsn && lsn_is(&v.lsn, L1),
		  "a rollback to a compaction claims the carrier below it");

	/* rolled back to a snapshot without any carrier on its ancestry */
	reset();
	add(1, 0, 1, NULL);
	add(2, 1, 2, L1);
	ref_at(1);
	s = seen(2, 2, L1);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && !v.held_known, "a rollback below every carrier holds nothing provable");
}

static void
test_expired(void)
{
	LakeSeen	s;
	LakeVerdict v;

	/* the recorded snapshot 2 expired; 5 descends from 3, newer */
	reset();
	add(3, 2, 3, NULL);
	add(4, 3, 4, L3);
	s = seen(2, 2, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ADVANCE && lsn_is(&v.lsn, L3),
		  "after the recorded snapshot expired, a newer greater carrier advances");

	reset();
	add(3, 2, 3, NULL);
	s = seen(2, 2, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_SAME, "after it expired, only compactions left prove the same");

	/* the ref moved back to snapshot 1 (sequence 1 < 2), 2 expired */
	reset();
	add(1, 0, 1, L1);
	s = seen(2, 2, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1),
		  "a head older than the expired recorded snapshot is a rollback");
	/* main replaced by a branch forked before the head seen last, which has expired */
	reset();
	add(9, 3, 9, NULL);
	s = seen(5, 5, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && !v.held_known,
		  "a head whose history back to the expired head seen last is gone is a rollback, not the same");
	snaps[0].lsn_text = L3;
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.has_lsn && lsn_is(&v.lsn, L3),
		  "even with a greater LSN: descent cannot be shown");

	/* seen head S (seq 4) expired; the ref reset to P (L1, seq 1), then H on P claims L3 */
	reset();
	add(1, 0, 1, L1);
	add(9, 1, 9, L3);
	s = seen(4, 4, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1) && v.has_lsn && lsn_is(&v.lsn, L3),
		  "after a reset to an older snapshot, what is held is that snapshot's, not the new claim");
}

static void
test_malformed_after_rollback(void)
{
	LakeSeen	s;
	LakeVerdict v;

	reset();
	add(1, 0, 1, L1);
	add(2, 1, 2, L2);
	add(3, 1, 3, "garbage");
	ref_at(3);
	s = seen(2, 2, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1) && !v.has_lsn,
		  "a malformed property does not hide a rollback");

	reset();
	add(1, 0, 1, L1);
	add(2, 1, 2, "garbage");
	s = seen(1, 1, L1);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_MALFORMED && v.descends, "a malformed property on a descendant is malformed");

	/* S (L2, seen) <- C (L1) <- M (garbage): the valid carrier below went down */
	reset();
	add(1, 0, 1, L2);
	add(2, 1, 2, L1);
	add(3, 2, 3, "garbage");
	s = seen(1, 1, L2);
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1),
		  "a malformed newest carrier does not hide a valid one that went down");
}


static void
test_long_lineages(void)
{
	static LakeSnapshot big[20001];
	LakeMetadata bm = {0};
	LakeSeen	s;
	LakeVerdict v;

	/* two lineages of 10,000 forking at the root: the rollback's shared carrier is found at once */
	for (int i = 0; i < 20001; i++)
	{
		memset(&big[i], 0, sizeof(big[i]));
		big[i].id = i + 1;
		big[i].sequence = i + 1;
		big[i].has_parent = i > 0;
		big[i].parent_id = i <= 10000 ? i : (i == 10001 ? 1 : i);
		big[i].lsn_text = i == 0 ? L1 : NULL;
	}
	bm.snapshots = big;
	bm.nsnapshots = 20001;
	bm.ref_found = bm.refs_listed = true;
	bm.ref_snapshot_id = 20001;
	lake_sort_snapshots(&bm);
	s = seen(10001, 10001, L2);
	v = lake_judge(&bm, &s);
	check(v.outcome == LAKE_ROLLBACK && v.held_known && lsn_is(&v.held_lsn, L1),
		  "a rollback across two long lineages finds what they share");
}

static void
test_odd(void)
{
	LakeSeen	s;
	LakeSeen	none = {0};
	LakeVerdict v;

	reset();
	add(1, 0, 1, L1);
	s = seen(1, 1, L1);
	md.ref_found = false;
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && !v.held_known, "a ref that was dropped is a rollback to nothing");
	md.refs_listed = false;
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_MALFORMED, "metadata that says nothing of refs is malformed, not a rollback");

	reset();
	add(1, 0, 1, L1);
	md.table_uuid = "b";
	s = seen(1, 1, L1);
	s.table_uuid = "a";
	v = lake_judge(&md, &s);
	check(v.outcome == LAKE_ROLLBACK && !v.held_known, "a table created again (another uuid) is a rollback");

	reset();
	add(1, 0, 1, "not an lsn");
	v = lake_judge(&md, &none);
	check(v.outcome == LAKE_MALFORMED && v.carrier != NULL, "a property that is no LSN is malformed");

	reset();
	add(1, 0, 1, L1);
	ref_at(9);
	v = lake_judge(&md, &none);
	check(v.outcome == LAKE_MALFORMED && v.carrier == NULL, "a ref to an unlisted snapshot is malformed metadata");

	/* parents in a loop: 1 -> 2 -> 1 */
	reset();
	add(1, 2, 1, NULL);
	add(2, 1, 2, NULL);
	v = lake_judge(&md, &none);
	check(v.outcome == LAKE_NOTHING && v.walked <= 3, "a parent loop ends the walk");
}

int
main(void)
{
	test_first_poll();
	test_following();
	test_branches();
	test_expired();
	test_malformed_after_rollback();
	test_long_lineages();
	test_odd();
	return tap_done();
}
