/*
 * verdict_properties.h
 *     The verdict of a tracked table as properties of an Iceberg table
 *     (verdict_properties.c): which properties a publication names, what a
 *     loadTable answer holds of them, and the set-properties update that
 *     moves them forward to a period's end, never back (watermark.c's
 *     rule). Used by the iceberg_property publication target (push/) and
 *     by release_iceberg's publish commit (publish/).
 */
#ifndef FINALIZE_LAKE_VERDICT_PROPERTIES_H
#define FINALIZE_LAKE_VERDICT_PROPERTIES_H

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

/* The properties a publication writes; NULL: not written. */
typedef struct VerdictPropertyNames
{
	char	   *finalized_until;	/* the period's end, UTC ISO 8601 */
	char	   *event_id;		/* the event that moved finalized_until */
	char	   *watermark;		/* Gobblin's completionWatermark (epoch ms) */
	char	   *timezone;		/* Gobblin's completionWatermarkTimezone */
} VerdictPropertyNames;

/* The values for one final period. */
typedef struct VerdictPropertyValues
{
	TimestampTz period_end;
	const char *event_id;
	const char *zone;			/* the table's period zone */
} VerdictPropertyValues;

typedef enum VerdictPropsOutcome
{
	VERDICT_PROPS_ALREADY,		/* every property at or past the period */
	VERDICT_PROPS_SET,			/* *update moves some forward */
	VERDICT_PROPS_REFUSED		/* the answer cannot be read, or a property
								 * holds no time: *error */
} VerdictPropsOutcome;

extern void verdict_property_names(Jsonb *options, VerdictPropertyNames *names);
extern VerdictPropsOutcome verdict_properties_plan(const char *body, const char *iceberg_table,
												   const VerdictPropertyNames *names,
												   const VerdictPropertyValues *values, char **table_uuid,
												   Jsonb **update, char **error);

#endif							/* FINALIZE_LAKE_VERDICT_PROPERTIES_H */
