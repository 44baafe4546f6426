/*
 * db.h
 *     finalize's bottom layer for PostgreSQL transactions and SPI: the short
 *     transactions of the background processes, the statements they run,
 *     subtransactions that confine a failing step, and SQL run as the
 *     extension's owner. Every subsystem uses these; none has its own.
 */
#ifndef FINALIZE_DB_H
#define FINALIZE_DB_H

#include "fmgr.h"
#include "access/htup.h"
#include "access/tupdesc.h"
#include "utils/palloc.h"

#include "core/lsn.h"

/* in db.c: the short transactions of a background process */
extern void db_begin(const char *activity);
extern void db_begin_write(const char *activity);
extern void db_commit(void);
extern void db_commit_and_continue(const char *activity);
extern MemoryContext db_caller_context(void);

/* in db.c: statements and their values */
extern int	db_query(const char *sql, int nargs, const Oid *types, Datum *values, const char *nulls,
					 bool read_only, long count);
extern void db_exec_internal(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls);
extern char *db_catalog_restoring(void);
extern const char *db_when_whole(void);
extern Datum db_lsn_datum(const Lsn *lsn);
extern Datum db_usecs_datum(int64 usecs);
extern Datum db_text_or_null(const char *s, char *nulls, int i);
extern char *db_text_copy(HeapTuple tup, TupleDesc desc, int col, MemoryContext cxt);

/* in subxact.c: steps that may fail without losing the transaction around them */
extern bool subxact_try(void (*fn) (void *), void *arg, ErrorData **error);
extern void subxact_rolled_back(void (*fn) (void *), void *arg);
extern bool subxact_input(PGFunction infunc, const char *text, Datum *result);

/* in owner.c: SQL run as the extension's owner on behalf of a caller */
extern Oid	function_owner(Oid fn);
extern void run_as_owner(Oid owner, void (*step) (void *), void *arg);

#endif							/* FINALIZE_DB_H */
