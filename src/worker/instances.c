/*
 * instances.c
 *     Finding the capture instances of each of thousands of tables.
 *
 * plan_table (plan.c, pure) looks at the instances it is given: those that
 * capture the table's source object and the one the table followed so far
 * (by name, which plan_replaced needs even when it now captures another
 * object). Handing each table only those, found through two sorted
 * indexes, keeps a cycle over n tables and n instances at n log n instead
 * of n squared.
 */
#include "postgres.h"

#include "worker/instances.h"

/* Orders instances by source object id, then by their position in the list. */
static int
cmp_object(const void *a, const void *b)
{
	const CaptureInstance *x = *(const CaptureInstance *const *) a;
	const CaptureInstance *y = *(const CaptureInstance *const *) b;

	if (x->source_object_id != y->source_object_id)
		return x->source_object_id < y->source_object_id ? -1 : 1;
	return (x > y) - (x < y);
}

/* Orders instances by name. */
static int
cmp_name(const void *a, const void *b)
{
	return strcmp((*(const CaptureInstance *const *) a)->name, (*(const CaptureInstance *const *) b)->name);
}

/* Indexes a cycle's instances (pointers into the caller's list, which must outlive it). */
void
instance_index_build(InstanceIndex *ix, const CaptureInstance *instances, int n)
{
	ix->n = n;
	ix->by_object = palloc(sizeof(CaptureInstance *) * (n + 1));
	ix->by_name = palloc(sizeof(CaptureInstance *) * (n + 1));
	for (int i = 0; i < n; i++)
		ix->by_object[i] = ix->by_name[i] = &instances[i];
	if (n > 1)
	{
		qsort(ix->by_object, n, sizeof(CaptureInstance *), cmp_object);
		qsort(ix->by_name, n, sizeof(CaptureInstance *), cmp_name);
	}
}

/* Orders candidates by their position in the original list. */
static int
cmp_position(const void *a, const void *b)
{
	const CaptureInstance *x = *(const CaptureInstance *const *) a;
	const CaptureInstance *y = *(const CaptureInstance *const *) b;

	return (x > y) - (x < y);
}

/*
 * The instances plan_table needs for a table, copied (in the original
 * order, so that ties break as they would over the whole list) into a new
 * array in the current memory context that lives as long as the plan.
 */
int
instances_of(const InstanceIndex *ix, const TrackedSource *table, CaptureInstance **out)
{
	const CaptureInstance **found;
	int			nfound = 0;
	int			lo = 0,
				hi = ix->n,
				end;

	/* the instances of the table's source object: [lo, end) of by_object */
	while (table->object_id != 0 && lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (ix->by_object[mid]->source_object_id < table->object_id)
			lo = mid + 1;
		else
			hi = mid;
	}
	end = lo;
	while (table->object_id != 0 && end < ix->n && ix->by_object[end]->source_object_id == table->object_id)
		end++;
	found = palloc(sizeof(CaptureInstance *) * (end - lo + 2));
	for (int i = lo; i < end; i++)
		found[nfound++] = ix->by_object[i];

	if (table->capture_instance != NULL && ix->n > 0)
	{
		CaptureInstance key = {.name = table->capture_instance};
		const CaptureInstance *kp = &key;
		const CaptureInstance **hit = bsearch(&kp, ix->by_name, ix->n, sizeof(CaptureInstance *), cmp_name);
		bool		seen = false;

		/* names are unique in a database; the instance may capture another object now */
		for (int i = 0; hit != NULL && i < nfound; i++)
			seen |= (found[i] == *hit);
		if (hit != NULL && !seen)
			found[nfound++] = *hit;
	}
	if (nfound > 1)
		qsort(found, nfound, sizeof(CaptureInstance *), cmp_position);
	*out = palloc(sizeof(CaptureInstance) * (nfound + 1));
	for (int i = 0; i < nfound; i++)
		(*out)[i] = *found[i];
	pfree(found);
	return nfound;
}
