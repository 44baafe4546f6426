/*
 * instances.h
 *     Finding the capture instances of each of thousands of tables.
 */
#ifndef FINALIZE_INSTANCES_H
#define FINALIZE_INSTANCES_H

#include "worker/plan.h"

typedef struct InstanceIndex
{
	const CaptureInstance **by_object;	/* by source object id, then position */
	const CaptureInstance **by_name;	/* by name (strcmp) */
	int			n;
} InstanceIndex;

extern void instance_index_build(InstanceIndex *ix, const CaptureInstance *instances, int n);
extern int	instances_of(const InstanceIndex *ix, const TrackedSource *table, CaptureInstance **out);

#endif							/* FINALIZE_INSTANCES_H */
