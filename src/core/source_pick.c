/*
 * source_pick.c
 *     The pool's scheduling rule: which due source a worker takes next.
 *
 * Sources due longest first: among the sources a worker may take, the one
 * whose cycle has been due for the longest (a requested cycle counts as due
 * since forever). A source keeps its home: the worker that served it last
 * holds its connection and what the cycle remembers (cycle.c's settled
 * state), so another worker takes it only once it has been due for
 * steal_after — its home is busy, most likely with a source that hangs —
 * and the source then moves home. No source starves: whoever is busy, a
 * due source is taken by the next worker free once steal_after has passed.
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

/*
 * The index of the entry this worker should serve now, or -1. *wake_at is
 * set to the earliest time an entry it passed over becomes takeable (left
 * alone when there is none): the worker sleeps until then, or until its
 * latch is set.
 */
int
source_pick(const PoolSource *entries, int n, const PickRules *r, int64_t *wake_at)
{
	int			best = -1;
	int64_t		best_due = 0;
	bool		best_home = false;

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
		/* Longest due first; on a tie, a source at home here keeps its connection. */
		if (best < 0 || due < best_due || (due == best_due && e->home == r->me && !best_home))
		{
			best = i;
			best_due = due;
			best_home = e->home == r->me;
		}
	}
	return best;
}
