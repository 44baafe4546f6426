/*
 * ddl_seen.h
 *     The unreviewed DDL of a table's ranges in a cycle, and whether it
 *     blocks the table (ddl_seen.c).
 */
#ifndef FINALIZE_DDL_SEEN_H
#define FINALIZE_DDL_SEEN_H

#include "utils/jsonb.h"

#include "mssql/cdc_reader.h"
#include "worker/judge.h"

/* The DDL a table's segments recorded, not yet reviewed. */
typedef struct DdlSeen
{
	Jsonb	   *list;			/* JSON array of the statements */
	const CdcDdl *first;		/* the earliest */
	const char *instance;		/* its capture instance */
	int			count;
	const CdcDdl *event_ddl;	/* the first that names the table's event column */
} DdlSeen;

extern void collect_segments_ddl(const TableJob *job, DdlSeen *seen);
extern void push_ddl_seen(JsonbParseState **st, const DdlSeen *seen);
extern bool ddl_blocks(const TableJob *job, const DdlSeen *seen, TableWrite *w);

#endif							/* FINALIZE_DDL_SEEN_H */
