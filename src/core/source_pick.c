/*
 * source_pick.c
 *     The pool's scheduling rule: which due source a worker takes next.
 *
 * Sources due longest first: among the sources a worker may take, the one
 * whose cycle has been due for the longest (a requested cycle counts as due
 * since forever). A source keeps its home: the worker that served it last
 * holds its connection and what the cycle remembers (cycle.c's settled
 * state), so another worker takes it only once it has been due for
 * steal_after, and the source then moves home (a new login). It takes it
 * in due order when its home is stuck (one cycle running longer than
 * steal_after: most likely a source that hangs), and otherwise only when
 * none of its own sources is due: when every worker is merely behind (a
 * busy machine), each works through its own sources rather than all of
 * them trading sources and logging in again at every cycle. No source
 * starves: a due source is taken by the next worker free of its own once
 * steal_after has passed.
 *
 * Isolation from sources that fail: a source whose last cycle failed
 * (failures > 0: it did not answer, refused the login, broke the TLS
 * handshake) or was slow (it took longer than a poll interval: a server
 * that answers each statement just within its timeout) is taken only while
 * fewer than retry_lane_size() workers run such cycles, so that a few
 * sources that hang until their timeouts never hold every worker: the
 * other workers keep serving the sources that answer.
 */
#include <stddef.h>

#include "core/source_pick.h"

/*
 * How many workers of a pool of nworkers may run the cycles of failing
 * sources at once: half, at least one. With a pool of one, that worker serves
 * every source (there is nobody else to isolate them on).
 */
int
retry_lane_size(int nworkers)
{
	return nworkers <= 1 ? 1 : nworkers / 2;
}

/* Whether an entry's home is a worker other than this one that runs. */
static bool
homed_elsewhere(const PoolSource *e, const PickRules *r)
{
	if (e->home < 0 || e->home == r->me)
		return false;
	if (r->home_alive == NULL || e->home >= r->nworkers)
		return false;
	return r->home_alive[e->home];
}

/* Whether the home of an entry homed elsewhere is stuck in one cycle (unknown: stuck). */
static bool
home_stuck(const PoolSource *e, const PickRules *r)
{
	return r->home_stuck == NULL || r->home_stuck[e->home];
}

/* The best entry found so far of one kind. */
typedef struct Best
{
	int			i;
	int64_t		due;
	bool		home;			/* at home here */
} Best;

/* Keeps entry i if it goes before the best so far: longest due first; on a tie, the one at home here. */
static void
consider(Best *b, int i, int64_t due, bool at_home)
{
	if (b->i < 0 || due < b->due || (due == b->due && at_home && !b->home))
	{
		b->i = i;
		b->due = due;
		b->home = at_home;
	}
}

/*
 * The index of the entry this worker should serve now, or -1. *wake_at is
 * set to the earliest time an entry it passed over becomes takeable (left
 * alone when there is none): the worker sleeps until then, or until its
 * latch is set.
 */
int
source_pick(const PoolSource *entries, int n, const PickRules *r, int64_t *wake_at)
{
	Best		best = {.i = -1};	/* its own, and those of stuck or gone homes */
	Best		spare = {.i = -1};	/* those of homes that are only behind */

	for (int i = 0; i < n; i++)
	{
		const PoolSource *e = &entries[i];
		int64_t		due;
		int64_t		ready;
		bool		mine;

		if (e->dboid == 0 || e->dboid != r->dboid || e->removed || e->busy >= 0)
			continue;
		if (r->only_serverid != 0 && e->serverid != r->only_serverid)
			continue;
		if ((e->failures > 0 || e->slow) && r->only_serverid == 0 && !r->retry_lane_open)
			continue;			/* the worker that ends a failing cycle wakes the others */
		due = e->requested ? INT64_MIN : e->due;
		mine = !homed_elsewhere(e, r);
		ready = due;
		if (!mine)
		{
			/* A request puts it first, but its home gets steal_after to take it. */
			int64_t		since = e->requested && e->requested_at < e->due ? e->requested_at : e->due;

			ready = since > INT64_MAX - r->steal_after ? INT64_MAX : since + r->steal_after;
		}
		if (ready > r->now)
		{
			if (ready < *wake_at)
				*wake_at = ready;
			continue;
		}
		consider(mine || home_stuck(e, r) ? &best : &spare, i, due, e->home == r->me);
	}
	return best.i >= 0 ? best.i : spare.i;
}
