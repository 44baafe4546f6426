/*
 * Unit tests of the pool's scheduling rule (core/source_pick.c): sources
 * due longest first, a source kept at its home worker until it waited
 * steal_after, failing sources only while the retry lane is open, a
 * dedicated worker's one source, and when a worker that found nothing
 * should look again. Built and run by test/offline/test_unit_c.py;
 * prints TAP.
 */
#include "postgres.h"

#include "core/source_pick.h"

#include "tap.h"

#define DB 5
#define SEC 1000000

/* A listed source of the test database, due at the given time, served by nobody yet. */
static PoolSource
src(uint32_t serverid, int64_t due)
{
	PoolSource	e;

	memset(&e, 0, sizeof(e));
	e.dboid = DB;
	e.serverid = serverid;
	e.due = due;
	e.home = -1;
	e.busy = -1;
	return e;
}

/* The rules of pool worker `me` of four (all alive) at `now`. */
static PickRules
rules(int me, int64_t now, const bool *alive)
{
	PickRules	r;

	memset(&r, 0, sizeof(r));
	r.dboid = DB;
	r.me = me;
	r.now = now;
	r.steal_after = SEC / 2;
	r.retry_lane_open = true;
	r.home_alive = alive;
	r.nworkers = 4;
	return r;
}

int
main(void)
{
	bool		alive[4] = {true, true, true, true};
	PoolSource	e[6];
	PickRules	r;
	int64_t		wake;

	/* Longest due first. */
	e[0] = src(100, 10 * SEC);
	e[1] = src(101, 5 * SEC);
	e[2] = src(102, 8 * SEC);
	r = rules(0, 20 * SEC, alive);
	wake = INT64_MAX;
	check(source_pick(e, 3, &r, &wake) == 1, "the source due longest is taken first");

	/* Not yet due: nothing, and the wake-up is the earliest due time. */
	r = rules(0, 4 * SEC, alive);
	wake = INT64_MAX;
	check(source_pick(e, 3, &r, &wake) == -1, "nothing is taken before it is due");
	check(wake == 5 * SEC, "the worker wakes when the first source is due");

	/* Busy, removed, free and other-database entries are never taken. */
	e[1].busy = 2;
	e[2].removed = true;
	e[0].dboid = 0;
	e[3] = src(103, 1 * SEC);
	e[3].dboid = DB + 1;
	r = rules(0, 20 * SEC, alive);
	wake = INT64_MAX;
	check(source_pick(e, 4, &r, &wake) == -1, "a busy source (its cycle runs), a removed one, a free entry and another database's are not taken");

	/* Home: another live worker's source waits steal_after. */
	e[0] = src(100, 10 * SEC);
	e[0].home = 1;
	r = rules(0, 10 * SEC + SEC / 4, alive);
	wake = INT64_MAX;
	check(source_pick(e, 1, &r, &wake) == -1, "another worker's source is left to it while it waited less than steal_after");
	check(wake == 10 * SEC + SEC / 2, "and the worker looks again when steal_after has passed");
	r = rules(0, 10 * SEC + SEC / 2, alive);
	check(source_pick(e, 1, &r, &wake) == 0, "after steal_after it is taken (its home is busy)");
	r = rules(1, 10 * SEC, alive);
	check(source_pick(e, 1, &r, &wake) == 0, "its home worker takes it as soon as it is due");
	alive[1] = false;
	r = rules(0, 10 * SEC, alive);
	check(source_pick(e, 1, &r, &wake) == 0, "a source whose home worker is gone is anybody's at once");
	alive[1] = true;

	/* A tie on due time goes to the source at home here. */
	e[0] = src(100, 10 * SEC);
	e[1] = src(101, 10 * SEC);
	e[1].home = 0;
	r = rules(0, 11 * SEC, alive);
	check(source_pick(e, 2, &r, &wake) == 1, "on a tie the source kept here goes first (its connection is open)");

	/* Long overdue elsewhere beats recently due at home: due longest first. */
	e[0] = src(100, 1 * SEC);
	e[0].home = 2;
	e[1] = src(101, 9 * SEC);
	e[1].home = 0;
	r = rules(0, 10 * SEC, alive);
	check(source_pick(e, 2, &r, &wake) == 0, "a source of a busy worker due long ago goes before one due just now");

	/*
	 * A home that is only behind (its cycles run, none for long) keeps its
	 * sources while this worker has its own due: a worker takes another's
	 * source, and its new login, only when stuck or free.
	 */
	{
		bool		stuck[4] = {false, false, true, false};

		r.home_stuck = stuck;
		check(source_pick(e, 2, &r, &wake) == 0, "the source of a stuck worker goes first in due order");
		stuck[2] = false;
		check(source_pick(e, 2, &r, &wake) == 1, "a worker that is only behind keeps its source while this one has its own due");
		e[1].due = 11 * SEC;
		wake = INT64_MAX;
		check(source_pick(e, 2, &r, &wake) == 0, "with none of its own due this worker takes it after steal_after");
		check(wake == 11 * SEC, "and looks again when its own is due");
	}

	/* Requested cycles go first. */
	e[0] = src(100, 1 * SEC);
	e[1] = src(101, 50 * SEC);
	e[1].requested = true;
	r = rules(0, 10 * SEC, alive);
	check(source_pick(e, 2, &r, &wake) == 1, "a requested cycle is due at once and goes first");

	/* A requested cycle of a source homed on a live, busy worker: its home gets steal_after first. */
	e[0] = src(100, 50 * SEC);
	e[0].home = 2;
	e[0].requested = true;
	e[0].requested_at = 10 * SEC;
	r = rules(0, 10 * SEC + SEC / 4, alive);
	wake = INT64_MAX;
	check(source_pick(e, 1, &r, &wake) == -1, "a request does not move a source from its home at once");
	check(wake == 10 * SEC + SEC / 2, "the other worker looks again steal_after after the request");
	r = rules(0, 10 * SEC + SEC, alive);
	check(source_pick(e, 1, &r, &wake) == 0, "a request its busy home did not take in steal_after moves");
	r = rules(2, 10 * SEC, alive);
	check(source_pick(e, 1, &r, &wake) == 0, "its home takes a requested cycle at once");

	/* A slow source (its last cycle outlasted a poll interval) waits for the lane like a failing one. */
	e[0] = src(100, 1 * SEC);
	e[0].slow = true;
	e[1] = src(101, 5 * SEC);
	r = rules(0, 10 * SEC, alive);
	r.retry_lane_open = false;
	check(source_pick(e, 2, &r, &wake) == 1, "a slow source is not taken while the retry lane is full");
	r.retry_lane_open = true;
	check(source_pick(e, 2, &r, &wake) == 0, "a slow source due longest is taken once the lane has room");

	/* The retry lane. */
	e[0] = src(100, 1 * SEC);
	e[0].failures = 3;
	e[1] = src(101, 5 * SEC);
	r = rules(0, 10 * SEC, alive);
	check(source_pick(e, 2, &r, &wake) == 0, "a failing source due longer is taken while the retry lane is open");
	r.retry_lane_open = false;
	check(source_pick(e, 2, &r, &wake) == 1, "with the retry lane full, a healthy source is taken instead");
	e[1].busy = 3;
	wake = INT64_MAX;
	check(source_pick(e, 2, &r, &wake) == -1 && wake == INT64_MAX,
		  "a failing source waits for the lane, not for a time (the end of a failing cycle wakes the workers)");

	/* A dedicated worker takes only its source, failing or not. */
	e[0] = src(100, 1 * SEC);
	e[1] = src(101, 1 * SEC);
	e[1].failures = 2;
	r = rules(70, 10 * SEC, alive);
	r.only_serverid = 101;
	r.retry_lane_open = false;
	check(source_pick(e, 2, &r, &wake) == 1, "a dedicated worker takes its one source, even failing with the lane full");
	r.only_serverid = 102;
	check(source_pick(e, 2, &r, &wake) == -1, "and never another");

	/* The lane's size. */
	check(retry_lane_size(1) == 1 && retry_lane_size(2) == 1 && retry_lane_size(4) == 2 && retry_lane_size(5) == 2,
		  "the retry lane is half the pool, at least one worker");

	/* No overflow near the end of time. */
	e[0] = src(100, INT64_MAX - 10);
	e[0].home = 1;
	r = rules(0, 10 * SEC, alive);
	wake = INT64_MAX;
	check(source_pick(e, 1, &r, &wake) == -1 && wake == INT64_MAX, "steal_after added to a due time near the end of time does not wrap");

	return tap_done();
}
