/*
 * pg_compat.h
 *     Every difference between the PostgreSQL majors finalize builds on
 *     (15, 16, 17, 18), in one place: the rest of the tree is written
 *     against the newest API, and this header gives the older majors the
 *     same names (PostgreSQL's own PG_VERSION_NUM idiom, as pgvector and
 *     pg_cron use it). No other file tests PG_VERSION_NUM
 *     (test_packaging.py checks it).
 *
 * What differs, and why finalize behaves the same on every major
 * (docs/compatibility.md has the whole review):
 *
 * - pg_noreturn (18) replaced pg_attribute_noreturn(), and goes before the
 *   declaration (C11's _Noreturn); before 18 the GCC attribute, which may
 *   stand there too.
 * - AmBackgroundWorkerProcess() (17) replaced the global IsBackgroundWorker;
 *   GetNumberFromPGProc() (17) replaced PGPROC.pgprocno. Same meaning.
 * - object_aclcheck()/object_ownercheck() (16) replaced the per-class
 *   pg_foreign_server_aclcheck()/pg_database_ownercheck(). Same checks.
 * - The JSON parser's callbacks return JsonParseErrorType from 16 on
 *   (JSON_SUCCESS goes on parsing); before, they returned nothing.
 * - makeJsonLexContextCstringLen() takes the context to fill from 17 on,
 *   and freeJsonLexContext() frees what the lexer allocated (the escaped
 *   string buffer); before 17 the lexer is three pallocs, freed here.
 * - max_notify_queue_pages (17) bounds the NOTIFY queue, which
 *   pg_notification_queue_usage() is a share of; before, half of the
 *   queue's SLRU (8 GB).
 * - PG_TEMP_FILES_DIR and PG_TEMP_FILE_PREFIX moved from storage/fd.h to
 *   common/file_utils.h (16); same values. COMPAT_TEMP_DIR is the default
 *   tablespace's temporary directory (base/pgsql_tmp), never in a base
 *   backup and emptied when the server starts.
 * - Custom wait events (17, WaitEventExtensionNew): pg_stat_activity names
 *   what a finalize process waits for; on 15 and 16 every wait is the
 *   generic "Extension".
 * - PG_MODULE_MAGIC_EXT (18) names the library and its version in
 *   pg_get_loaded_modules().
 */
#ifndef FINALIZE_PG_COMPAT_H
#define FINALIZE_PG_COMPAT_H

#include "access/slru.h"
#include "catalog/pg_database.h"
#include "catalog/pg_foreign_server.h"
#include "commands/async.h"
#include "common/jsonapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/wait_event.h"

/* A function that never returns: pg_noreturn extern void f(...); */
#if PG_VERSION_NUM < 180000
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * The bytes of common/base64.h's binary side: uint8 since 18, char before
 * (pg_b64_encode's source, pg_b64_decode's destination).
 */
#if PG_VERSION_NUM >= 180000
typedef uint8 compat_b64_byte;
#else
typedef char compat_b64_byte;
#endif

#if PG_VERSION_NUM < 170000
#define AmBackgroundWorkerProcess() (IsBackgroundWorker)
#define GetNumberFromPGProc(proc) ((proc)->pgprocno)
#endif

/* The library's magic block, with its name and version where the server keeps them. */
#if PG_VERSION_NUM >= 180000
#define FINALIZE_MODULE_MAGIC PG_MODULE_MAGIC_EXT(.name = "finalize", .version = FINALIZE_VERSION)
#else
#define FINALIZE_MODULE_MAGIC PG_MODULE_MAGIC
#endif

/* Whether a role may use a foreign server (USAGE). */
static inline AclResult
compat_server_aclcheck(Oid serverid, Oid roleid)
{
#if PG_VERSION_NUM >= 160000
	return object_aclcheck(ForeignServerRelationId, serverid, roleid, ACL_USAGE);
#else
	return pg_foreign_server_aclcheck(serverid, roleid, ACL_USAGE);
#endif
}

/* Whether a role owns (or has the privileges of the owner of) a database. */
static inline bool
compat_database_ownercheck(Oid dboid, Oid roleid)
{
#if PG_VERSION_NUM >= 160000
	return object_ownercheck(DatabaseRelationId, dboid, roleid);
#else
	return pg_database_ownercheck(dboid, roleid);
#endif
}

/*
 * A JSON parser callback's result, and the value that goes on parsing:
 *   static JsonActionResult cb(void *state) { ...; return JSON_ACTION_OK; }
 */
#if PG_VERSION_NUM >= 160000
typedef JsonParseErrorType JsonActionResult;
#define JSON_ACTION_OK JSON_SUCCESS
#else
typedef void JsonActionResult;
#define JSON_ACTION_OK
#endif

/* A lexer over len bytes of json, with de-escaped strings (palloc'd). */
static inline JsonLexContext *
compat_json_lexer(char *json, int len, int encoding)
{
#if PG_VERSION_NUM >= 170000
	return makeJsonLexContextCstringLen(NULL, json, len, encoding, true);
#else
	return makeJsonLexContextCstringLen(json, len, encoding, true);
#endif
}

/* Frees a lexer of compat_json_lexer (and its error detail: use it before). */
static inline void
compat_json_lexer_free(JsonLexContext *lex)
{
#if PG_VERSION_NUM >= 170000
	freeJsonLexContext(lex);
#else
	if (lex->strval != NULL)
	{
		pfree(lex->strval->data);
		pfree(lex->strval);
	}
	pfree(lex);
#endif
}

/*
 * The pages pg_notification_queue_usage() is a share of: 17 and 18 divide
 * the pages between the queue's tail and head by max_notify_queue_pages
 * (a server setting, which may be small), 15 and 16 by half of the
 * SLRU's pages (async.c's (QUEUE_MAX_PAGE + 1) / 2, 8 GB).
 */
static inline double
compat_notify_queue_pages(void)
{
#if PG_VERSION_NUM >= 170000
	return (double) max_notify_queue_pages;
#else
	return (double) SLRU_PAGES_PER_SEGMENT * 0x10000 / 2;
#endif
}

/*
 * The wait event of a name: a custom one (shared by every process of the
 * cluster, registered on first use) from 17 on, the generic "Extension"
 * before. Call it in a process with shared memory, outside a critical
 * section. From 17 on it raises "too many custom wait events" once the
 * cluster's 128 are taken, holding the table's lock (WaitEventCustomLock)
 * as it raises: compat_wait_event_lock_release() lets go of that lock when
 * the error is caught and not re-raised (no transaction abort releases it
 * then).
 */
#if PG_VERSION_NUM >= 170000
#define compat_wait_event_new(name) WaitEventExtensionNew(name)
#define compat_wait_event_lock_release() \
	do { \
		if (LWLockHeldByMe(WaitEventCustomLock)) \
		{ \
			HOLD_INTERRUPTS();	/* LWLockRelease resumes them */ \
			LWLockRelease(WaitEventCustomLock); \
		} \
	} while (0)
#else
#define compat_wait_event_new(name) ((void) (name), (uint32) PG_WAIT_EXTENSION)
#define compat_wait_event_lock_release() ((void) 0)
#endif

#if PG_VERSION_NUM >= 160000
#include "common/file_utils.h"
#else
#include "storage/fd.h"
#endif
#define COMPAT_TEMP_DIR "base/" PG_TEMP_FILES_DIR
#define COMPAT_TEMP_PREFIX PG_TEMP_FILE_PREFIX

#endif							/* FINALIZE_PG_COMPAT_H */
