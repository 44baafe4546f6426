/*
 * watermark.h
 *     The verdict as an Iceberg table's properties (watermark.c, pure):
 *     finalize's own property (the end of the final periods as UTC ISO
 *     8601) and Gobblin's completionWatermark (the same instant in epoch
 *     milliseconds), read and written as text, and whether a commit would
 *     move either forward. Nothing here reads or writes anything: the
 *     catalog's answers are read in verdict_properties.c.
 */
#ifndef FINALIZE_LAKE_WATERMARK_H
#define FINALIZE_LAKE_WATERMARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A UTC ISO instant's text: "YYYY-MM-DDTHH:MM:SS.mmmZ" and its NUL. */
#define WATERMARK_ISO_LEN 32

/* One watermark property as the table holds it. */
typedef struct WatermarkSeen
{
	bool		named;			/* the publication writes it */
	const char *value;			/* its value in the table, NULL when absent */
} WatermarkSeen;

/* What a commit for a period's end must do. */
typedef struct WatermarkPlan
{
	bool		set_iso;		/* finalize's property (and the event id) */
	bool		set_ms;			/* completionWatermark (and its zone) */
	bool		unreadable_iso; /* the table's value is no time: refused */
	bool		unreadable_ms;
} WatermarkPlan;

extern bool watermark_parse_iso(const char *text, int64_t *ms);
extern bool watermark_parse_ms(const char *text, int64_t *ms);
extern void watermark_format_iso(int64_t ms, char *buf);
extern bool watermark_plan(const WatermarkSeen *iso, const WatermarkSeen *ms, int64_t end_ms,
						   WatermarkPlan *plan);

#endif							/* FINALIZE_LAKE_WATERMARK_H */
