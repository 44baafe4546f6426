/*
 * delta_log.h
 *     What a Delta Lake table's log proves about a pipeline's progress
 *     (docs/delta.md): a commit file of _delta_log/ parsed into the few
 *     facts the verdict needs (delta_commit.c), and the rule over a run of
 *     commits (delta_log.c): the LSN the table holds now, and whether data
 *     the recorded LSN covered left it (a rollback). Pure: the log is read
 *     elsewhere (delta_worker.c), nothing here reads or writes anything.
 */
#ifndef FINALIZE_LAKE_DELTA_LOG_H
#define FINALIZE_LAKE_DELTA_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/lsn.h"

/* A commit file is read whole up to this size (larger: malformed). */
#define DELTA_COMMIT_MAX_BYTES (64 * 1024 * 1024)
/* The longest string of a commit kept once it is parsed (delta_commit_keep). */
#define DELTA_KEEP_MAX 256

/* Where a commit carries the LSN (add_consumer's lsn_from). */
typedef enum DeltaLsnPlace
{
	DELTA_LSN_USER_METADATA,	/* commitInfo.userMetadata, the raw LSN */
	DELTA_LSN_USER_METADATA_KEY,	/* a key of userMetadata's JSON object */
	DELTA_LSN_COMMIT_INFO_KEY	/* a top-level key of commitInfo */
} DeltaLsnPlace;

typedef struct DeltaLsnFrom
{
	DeltaLsnPlace place;
	const char *key;			/* the key (not for USER_METADATA) */
} DeltaLsnFrom;

/* What one commit file proves. */
typedef struct DeltaCommit
{
	int64_t		version;
	const char *malformed;		/* why the file is no commit, or NULL */
	int64_t		timestamp_ms;	/* inCommitTimestamp, else commitInfo's
								 * timestamp; 0 when neither */
	const char *operation;		/* commitInfo.operation, or NULL */
	bool		data_change;	/* an add or remove with dataChange true */
	bool		file_actions;	/* any add or remove at all */
	bool		removes_data;	/* a remove with dataChange true */
	bool		restore;		/* a RESTORE */
	bool		has_restore_version;	/* operationParameters.version */
	int64_t		restore_version;
	const char *lsn_text;		/* the value at lsn_from, or NULL */
	const char *lsn_problem;	/* lsn_from holds no LSN text (a number, an
								 * object, userMetadata not JSON), or NULL */
	const char *table_id;		/* metaData.id, or NULL */
	/* Filled by the reader for a RESTORE to a version before the run: */
	bool		restored_known; /* restored_lsn is what that version held */
	Lsn			restored_lsn;
} DeltaCommit;

/* What was recorded: the version read last and what it proved. */
typedef struct DeltaSeen
{
	bool		any;			/* false before the first carrier */
	int64_t		version;
	int64_t		timestamp_ms;	/* the commit's, to know it again */
	Lsn			lsn;
	const char *table_id;		/* metaData.id, or NULL when not met */
} DeltaSeen;

typedef enum DeltaOutcome
{
	DELTA_SAME,					/* what was recorded still holds */
	DELTA_ADVANCE,				/* a newer carrier with a greater LSN */
	DELTA_ROLLBACK,				/* data the recorded LSN covered left */
	DELTA_MALFORMED				/* the first commit cannot be judged */
} DeltaOutcome;

/* What a run of commits after the one seen proves. */
typedef struct DeltaVerdict
{
	DeltaOutcome outcome;
	int			judged;			/* commits judged (a malformed one stops) */
	int64_t		head_version;	/* the last commit judged */
	int64_t		head_timestamp_ms;
	bool		has_lsn;		/* the LSN the table claims now */
	Lsn			lsn;
	bool		has_carrier;	/* carrier_version: the newest carrier */
	int64_t		carrier_version;
	bool		held_known;		/* ROLLBACK: what the table still holds */
	Lsn			held_lsn;
	const char *table_id;		/* the newest metaData.id */
	const char *reason;			/* ROLLBACK, MALFORMED: why, in English */
	int64_t		malformed_version;	/* where judging stopped, or -1 */
} DeltaVerdict;

/* What a walk back from the newest commit found so far. */
typedef enum DeltaBackStep
{
	DELTA_BACK_FOUND,			/* the newest carrier: *lsn */
	DELTA_BACK_MORE,			/* read *next_version and step again */
	DELTA_BACK_NONE,			/* nothing provable before this */
	DELTA_BACK_MALFORMED		/* the newest carrier cannot be read */
} DeltaBackStep;

typedef struct DeltaBack
{
	const char *table_id;		/* the newest metaData.id met */
	int64_t		at;				/* the version of the last commit stepped */
	const char *reason;			/* NONE, MALFORMED: why */
} DeltaBack;

/* The kind of a name in _delta_log/. */
typedef enum DeltaLogKind
{
	DELTA_FILE_OTHER,
	DELTA_FILE_COMMIT,			/* NNNNNNNNNNNNNNNNNNNN.json */
	DELTA_FILE_CHECKPOINT		/* NNNNNNNNNNNNNNNNNNNN.checkpoint....parquet or .json */
} DeltaLogKind;

/* in delta_commit.c */
extern bool delta_lsn_from_parse(const char *text, DeltaLsnFrom *out);
extern void delta_parse_commit(const char *body, size_t len, const DeltaLsnFrom *from, int64_t version,
							   void (*tick) (void), DeltaCommit *out);
extern bool delta_last_checkpoint(const char *body, size_t len, int64_t *version);

/* in delta_log.c */
extern DeltaLogKind delta_log_name(const char *name, int64_t *version);
extern void delta_commit_name(int64_t version, char out[32]);
extern DeltaVerdict delta_judge(const DeltaSeen *seen, const DeltaCommit *commits, int n);
extern DeltaBackStep delta_back_step(DeltaBack *walk, const DeltaCommit *c, int64_t *next_version, Lsn *lsn);
extern const char *delta_seen_gone(const DeltaSeen *seen, bool listed, const DeltaCommit *again);
extern void delta_commit_keep(const DeltaCommit *parsed, DeltaCommit *out);
extern char *delta_identity(const char *store, const char *head);
extern const char *delta_identity_gone(const char *seen, const char *store, const char *head);

#endif							/* FINALIZE_LAKE_DELTA_LOG_H */
