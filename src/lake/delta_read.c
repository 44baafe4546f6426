/*
 * delta_read.c
 *     One poll of a Delta consumer: its table's _delta_log/ read through
 *     the store interface (store/store.h) and judged (delta_log.c) into an
 *     observation that lake_observe records as it records an Iceberg one.
 *
 * What is read: after the version read last, a listing of the names from
 * it on (a block of a thousand versions at a time: names are the version
 * in 20 digits, so a prefix of 17 lists one block), the version read last
 * again (its commit time tells a table created again from the same one),
 * and each commit after it, up to DELTA_RUN_MAX a poll. The first time
 * (and after a rollback to nothing provable), _last_checkpoint says where
 * to list from, and the commits are read back from the newest to the
 * newest that carries the LSN. Only JSON commits are read: when those
 * that would prove something were cleaned up and a Parquet checkpoint
 * stands for them, the consumer's condition says so (checkpoint_only).
 * Every object is read under a size cap with the store's own time limits,
 * and every loop checks for interrupts.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/hsearch.h"

#include "core/redact.h"
#include "lake/delta_fetch.h"

/* Commits judged in one poll; the next poll goes on from there. */
#define DELTA_RUN_MAX 1000
/* Commits read back to find what a version holds. */
#define DELTA_BACK_MAX 200

/* The condition of a first read whose commits were cleaned up. */
static void
checkpoint_only(DeltaReader *r, int64 missing, int64 checkpoint)
{
	r->obs->condition = LAKE_CHECKPOINT_ONLY;
	r->obs->detail = psprintf("Commit %lld of Delta table %s, which finalize would read to find the LSN the table "
							  "holds, was cleaned up; only a Parquet checkpoint (version %lld) stands for it, and "
							  "finalize reads JSON commits only. The table's next commit that carries the LSN "
							  "(lsn_from) proves it again.",
							  (long long) missing, r->location, (long long) checkpoint);
}

/*
 * What a version holds, read back from it (delta_back_step) up to
 * DELTA_BACK_MAX commits, the first `first` of them stepped by an earlier
 * poll: *walk says why when nothing is found. Returns the step that ended
 * the walk (MORE: the cap or a missing commit, *missing its version);
 * false when the store failed, or when the poll's time ran out (r->cut,
 * with r->walk_next and r->walk_steps where it stopped).
 */
static bool
walk_back(DeltaReader *r, int64 version, int first, DeltaBack *walk, Lsn *lsn, DeltaBackStep *step,
		  int64 *missing, int64 *head_ts)
{
	*step = DELTA_BACK_MORE;
	*missing = -1;
	for (int i = first; i < DELTA_BACK_MAX && *step == DELTA_BACK_MORE; i++)
	{
		DeltaCommit c;
		bool		found;

		CHECK_FOR_INTERRUPTS();
		if (i > first && delta_out_of_time(r))
		{
			/* nothing found yet: the next poll goes on from here */
			r->cut = true;
			r->walk_next = version;
			r->walk_steps = i;
			return false;
		}
		if (i > 0 && version <= r->walk_floor)
		{
			walk->reason = psprintf("none did down to version %lld either, when read before", (long long) version);
			*step = DELTA_BACK_NONE;
			return true;
		}
		if (!delta_read_commit(r, version, &c, &found))
			return false;
		if (!found)
		{
			*missing = version;
			return true;
		}
		if (i == 0 && head_ts != NULL)
			*head_ts = c.timestamp_ms;
		*step = delta_back_step(walk, &c, &version, lsn);
	}
	return true;
}

/*
 * Per consumer (lake_id), the newest version a first read walked back from
 * without finding a carrier, for as long as this worker runs: the next
 * poll reads back only to it (a carrier missed then only makes it lag), so
 * that a consumer whose lsn_from names nothing costs one commit a poll,
 * not two hundred. And a walk the poll's time cut: where it stopped, so
 * that the next poll goes on from there (a slow store still finishes it;
 * walking again from the newest commit each poll would never end).
 */
typedef struct WalkedEntry
{
	int64		lake_id;
	int64		walked_from;	/* -1: none */
	uint32		lsn_from_hash;	/* the lsn_from it was walked for */
	int64		resume_head;	/* a cut walk's newest commit (-1: none) */
	int64		resume_next;	/* the version it reads next */
	int			resume_steps;	/* commits it stepped */
	int64		resume_head_ts; /* the newest commit's time */
	bool		resume_has_id;	/* resume_id: the metaData.id it met */
	char		resume_id[DELTA_KEEP_MAX + 128];
	bool		resume_has_identity;	/* resume_identity: its newest commit's, listed before it was read */
	char		resume_identity[256];
} WalkedEntry;

static HTAB *walked = NULL;

/* This consumer's entry in walked, made empty when new or walked for another lsn_from. */
static WalkedEntry *
walked_entry(int64 lake_id, uint32 from_hash)
{
	WalkedEntry *e;
	bool		found;

	if (walked == NULL)
	{
		HASHCTL		ctl = {0};

		ctl.keysize = sizeof(int64);
		ctl.entrysize = sizeof(WalkedEntry);
		walked = hash_create("finalize Delta walks", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	e = hash_search(walked, &lake_id, HASH_ENTER, &found);
	if (!found || e->lsn_from_hash != from_hash)
	{
		e->walked_from = -1;
		e->resume_head = -1;
		e->lsn_from_hash = from_hash;
	}
	return e;
}

/* Keeps where a walk the poll's time cut stopped, to go on from there. */
static void
keep_resume(DeltaReader *r, WalkedEntry *e, int64 newest, const DeltaBack *walk, int64 head_ts,
			const char *identity)
{
	e->resume_head = -1;
	if ((walk->table_id != NULL && strlen(walk->table_id) >= sizeof(e->resume_id)) ||
		(identity != NULL && strlen(identity) >= sizeof(e->resume_identity)))
		return;					/* cannot be kept: the next poll walks again */
	e->resume_has_id = walk->table_id != NULL;
	strlcpy(e->resume_id, walk->table_id != NULL ? walk->table_id : "", sizeof(e->resume_id));
	e->resume_has_identity = identity != NULL;
	strlcpy(e->resume_identity, identity != NULL ? identity : "", sizeof(e->resume_identity));
	e->resume_head = newest;
	e->resume_next = r->walk_next;
	e->resume_steps = r->walk_steps;
	e->resume_head_ts = head_ts;
}

/*
 * walk_back for a first read, from the newest commit (*newest) down to
 * what an earlier poll walked, or on from where a walk an earlier poll's
 * time cut stopped (then *newest becomes that walk's newest commit, still
 * listed: what it proves is proven of that version). *identity: the
 * newest commit's, listed before it was read (the caller checks it again).
 */
static bool
walk_first(DeltaReader *r, int64 *newest, DeltaBack *walk, Lsn *lsn, DeltaBackStep *step, int64 *missing,
		   int64 *head_ts, char **identity)
{
	WalkedEntry *e;
	bool		ok;
	int64		from = *newest;
	int			first = 0;

	e = walked_entry(r->obs->consumer->lake_id,
					 hash_bytes((const unsigned char *) r->lsn_from_text, strlen(r->lsn_from_text)));
	if (e->resume_head >= 0 && e->resume_head <= *newest)
	{
		*newest = e->resume_head;
		from = e->resume_next;
		first = e->resume_steps;
		*head_ts = e->resume_head_ts;
		walk->table_id = e->resume_has_id ? pstrdup(e->resume_id) : NULL;
		*identity = e->resume_has_identity ? pstrdup(e->resume_identity) : NULL;
	}
	else if (!delta_listed_identity(r, *newest, identity))
		return false;
	r->walk_floor = e->walked_from >= 0 && e->walked_from <= *newest ? e->walked_from : -1;
	ok = walk_back(r, from, first, walk, lsn, step, missing, head_ts);
	r->walk_floor = -1;
	e->resume_head = -1;
	if (!ok && r->cut)
		keep_resume(r, e, *newest, walk, *head_ts, *identity);
	else if (ok && *missing < 0 && (*step == DELTA_BACK_NONE || *step == DELTA_BACK_MORE))
		e->walked_from = *newest;
	else if (ok)
		e->walked_from = -1;
	return ok;
}

/*
 * The table's metaData.id when the walk of a first read found the carrier
 * before any metaData: read on back from the carrier (walk->at) to the
 * newest commit with metaData, up to DELTA_BACK_MAX commits. Not found
 * there (cleaned up, a Parquet checkpoint holds it, or further back), it
 * stays unknown: delta_judge then counts any CREATE/REPLACE TABLE that
 * removes data as a rollback, and the first metaData.id met is the table's.
 */
static bool
learn_table_id(DeltaReader *r, DeltaBack *walk)
{
	for (int64 v = walk->at - 1; v >= 0 && v >= walk->at - DELTA_BACK_MAX && walk->table_id == NULL; v--)
	{
		DeltaCommit c;
		bool		found;

		CHECK_FOR_INTERRUPTS();
		if (delta_out_of_time(r))
			break;				/* unknown for now: the CREATE/REPLACE rule holds */
		if (!delta_read_commit(r, v, &c, &found))
			return false;
		if (!found || c.malformed != NULL)
			break;
		walk->table_id = c.table_id;
	}
	return true;
}

/*
 * Whether a commit's identity listed now is the one listed before it was
 * read: else it changed while it was read, and nothing is recorded (the
 * next poll reads it again); false too when the store failed.
 */
static bool
head_unchanged(DeltaReader *r, int64 version, const char *before)
{
	char	   *now;

	if (!delta_listed_identity(r, version, &now))
		return false;
	if (before != NULL && now != NULL && strcmp(before, now) == 0)
		return true;
	r->cut = true;
	return false;
}

/*
 * A first read: the newest commit (listed from _last_checkpoint's version,
 * or the whole log without one) and the LSN the table holds there.
 */
static void
read_first(DeltaReader *r)
{
	LakeObservation *obs = r->obs;
	int64_t		checkpoint = -1;
	char	   *body = NULL;
	size_t		len = 0;
	bool		found = false;
	StoreError	err;
	LogListing	l;
	DeltaBack	walk = {0};
	DeltaBackStep step;
	int64		missing;
	int64		head_ts = 0;
	Lsn			lsn;
	char	   *head_identity = NULL;

	if (!store_read(r->store, psprintf("%s_last_checkpoint", r->log), 1024 * 1024, &body, &len, &found, &err))
	{
		delta_store_failed(r, "read _last_checkpoint", &err);
		return;
	}
	if (!found || !delta_last_checkpoint(body, len, &checkpoint))
		checkpoint = -1;
	if (!delta_list_log(r, checkpoint, &l))
		return;
	if (l.newest_commit < 0 && l.newest_checkpoint < 0)
	{
		obs->condition = LAKE_TABLE_NOT_FOUND;
		obs->detail = psprintf("Delta table %s has no commit in %s.", r->location, r->log);
		return;
	}
	if (l.newest_commit < 0)
	{
		checkpoint_only(r, l.newest_checkpoint, l.newest_checkpoint);
		return;
	}
	if (!walk_first(r, &l.newest_commit, &walk, &lsn, &step, &missing, &head_ts, &head_identity))
		return;
	if (missing >= 0 && Max(checkpoint, l.newest_checkpoint) >= missing)
	{
		checkpoint_only(r, missing, Max(checkpoint, l.newest_checkpoint));
		return;
	}
	if (missing >= 0)
	{
		obs->condition = LAKE_LOG_MALFORMED;
		obs->detail = psprintf("Commit %lld of Delta table %s is missing from its log, and no checkpoint stands "
							   "for it.", (long long) missing, r->location);
		return;
	}
	if (step == DELTA_BACK_MALFORMED)
	{
		obs->condition = LAKE_LOG_MALFORMED;
		obs->detail = psprintf("The newest commit of Delta table %s that carries the LSN (lsn_from) cannot be "
							   "read: %s.", r->location, walk.reason);
		return;
	}
	if (step != DELTA_BACK_FOUND)
	{
		/* Nothing provable yet: the next carrier proves it. Said, so that a wrong lsn_from is seen. */
		obs->condition = LAKE_LSN_MISSING;
		obs->detail = psprintf("No commit of Delta table %s read back from version %lld carries the LSN at lsn_from "
							   "\"%s\": %s. The verdict waits for the first commit that does; check lsn_from and "
							   "that the pipeline writes the LSN with each commit.", r->location,
							   (long long) l.newest_commit, r->lsn_from_text,
							   walk.reason != NULL ? walk.reason : "the newest 200 commits carry none");
		return;
	}
	if (walk.table_id == NULL && !learn_table_id(r, &walk))
		return;
	if (!head_unchanged(r, l.newest_commit, head_identity))
		return;
	obs->identity = delta_identity(r->store_identity, head_identity);
	obs->has_head = true;
	obs->head_id = l.newest_commit;
	obs->head_sequence = head_ts;
	obs->has_lsn = true;
	obs->lsn = lsn;
	obs->table_uuid = walk.table_id;
}

/* A rollback to nothing provable: the version read last is gone. */
static void
gone(DeltaReader *r, const char *reason)
{
	r->obs->rolled_back = true;
	r->obs->reason = reason;
}

/*
 * A commit listed but not there when read (the version read last, or the
 * one after it): gone (why) only when a listing now agrees; still listed,
 * a store that answered 404 for a moment (eventual consistency, a replica
 * behind) is the store's condition, not a loss.
 */
static void
cleaned_up(DeltaReader *r, int64 version, const char *why)
{
	char	   *identity;

	if (!delta_listed_identity(r, version, &identity))
		return;
	if (identity != NULL)
	{
		r->obs->condition = LAKE_STORE_UNREACHABLE;
		r->obs->detail = psprintf("Commit %lld of Delta table %s is listed in %s but could not be read (not "
								  "found); the next poll reads it again.", (long long) version, r->location,
								  store_describe(r->store));
		return;
	}
	gone(r, why);
}

/*
 * Each RESTORE of the run to a version before the one read last: what
 * that version held, read back from it (unknown: nothing provable).
 * Returns how many commits of the run can be judged (the time used up
 * before a RESTORE was resolved: those before it), -1 when the store failed.
 */
static int
resolve_restores(DeltaReader *r, DeltaCommit *commits, int n, int64 seen_version)
{
	for (int i = 0; i < n; i++)
	{
		DeltaBack	walk = {0};
		DeltaBackStep step;
		int64		missing;

		if (!commits[i].restore || !commits[i].has_restore_version ||
			commits[i].restore_version >= seen_version)
			continue;
		if (delta_out_of_time(r))
		{
			r->cut = true;
			return i;
		}
		if (!walk_back(r, commits[i].restore_version, 0, &walk, &commits[i].restored_lsn, &step, &missing, NULL))
			return r->obs->condition != LAKE_OK ? -1 : i;
		commits[i].restored_known = step == DELTA_BACK_FOUND;
	}
	return n;
}

/*
 * Turns a judged run into the observation, with the identity of its head
 * (from_identity: that of the version read last, listed this poll).
 */
static void
observe_run(DeltaReader *r, const DeltaVerdict *v, int64 from, char *from_identity)
{
	LakeObservation *obs = r->obs;
	char	   *head_identity = from_identity;

	if (v->outcome == DELTA_MALFORMED)
	{
		obs->condition = LAKE_LOG_MALFORMED;
		obs->detail = psprintf("Commit %lld of Delta table %s cannot be read: %s. finalize reads no further until "
							   "it can (a RESTORE after it would go unseen).",
							   (long long) v->malformed_version, r->location, v->reason);
		return;
	}
	obs->rolled_back = v->outcome == DELTA_ROLLBACK;
	obs->held_known = v->held_known;
	obs->held_lsn = v->held_lsn;
	obs->reason = v->reason;
	obs->has_head = true;
	obs->head_id = v->head_version;
	obs->head_sequence = v->head_timestamp_ms;
	obs->has_carrier = v->has_carrier;
	obs->carrier_id = v->carrier_version;
	obs->has_lsn = v->has_lsn;
	obs->lsn = v->lsn;
	obs->table_uuid = v->table_id;
	if (v->head_version != from && !delta_listed_identity(r, v->head_version, &head_identity))
		return;					/* the store failed: its condition, nothing recorded */
	obs->identity = delta_identity(r->store_identity, head_identity);
}

/*
 * Nothing new after the version read last: recorded again (the same LSN)
 * only to keep its identity when it was not recorded yet (a consumer read
 * before identities were kept).
 */
static void
observe_same(DeltaReader *r, const DeltaSeen *seen, char *identity)
{
	LakeObservation *obs = r->obs;

	obs->has_head = true;
	obs->head_id = seen->version;
	obs->head_sequence = seen->timestamp_ms;
	obs->has_lsn = true;
	obs->lsn = seen->lsn;
	obs->table_uuid = seen->table_id;
	obs->identity = delta_identity(r->store_identity, identity);
}

/*
 * The commits after the version read last: gone (not listed, or written
 * again) is a rollback; none is nothing new (no observation: a quiet
 * consumer writes nothing); else each is read in order and judged.
 */
static void
read_after(DeltaReader *r, const DeltaSeen *seen)
{
	LogListing	l;
	DeltaCommit again;
	DeltaCommit *commits;
	DeltaVerdict v;
	bool		found;
	int			n;

	if (!delta_list_log(r, seen->version, &l))
		return;
	if (delta_seen_gone(seen, l.from_listed, NULL) != NULL)
	{
		gone(r, delta_seen_gone(seen, l.from_listed, NULL));
		return;
	}
	if (r->store->kind == STORE_FILE && l.from_listed && !delta_file_identity(r, seen->version, &l.want_identity))
		return;
	if (delta_identity_gone(r->seen_identity, r->store_identity, l.want_identity) != NULL)
	{
		gone(r, delta_identity_gone(r->seen_identity, r->store_identity, l.want_identity));
		return;
	}
	if (l.newest_commit <= seen->version)
	{
		if (l.want_identity != NULL &&
			(r->seen_identity == NULL || strcmp(r->seen_identity, delta_identity(r->store_identity, l.want_identity)) != 0))
			observe_same(r, seen, l.want_identity);
		return;
	}
	if (!delta_read_commit(r, seen->version, &again, &found))
		return;
	if (!found)
	{
		cleaned_up(r, seen->version, delta_seen_gone(seen, false, NULL));
		return;
	}
	if (delta_seen_gone(seen, true, &again) != NULL)
	{
		gone(r, delta_seen_gone(seen, true, &again));
		return;
	}
	n = (int) Min(l.newest_commit - seen->version, DELTA_RUN_MAX);
	commits = palloc0(sizeof(DeltaCommit) * n);
	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (i > 0 && delta_out_of_time(r))
		{
			n = i;				/* judged so far: recorded; the next poll goes on */
			break;
		}
		if (!delta_read_commit(r, seen->version + 1 + i, &commits[i], &found))
			return;
		if (!found && i == 0)
		{
			cleaned_up(r, seen->version + 1,
					   "commits after the version read last were removed before they were read (the log was "
					   "cleaned up past it), so that it still holds what was proven cannot be shown");
			return;
		}
		if (!found)
		{
			n = i;
			break;
		}
		if (r->bytes_read >= DELTA_READ_BUDGET && i + 1 < n)
		{
			n = i + 1;			/* the next poll goes on from there */
			break;
		}
	}
	n = resolve_restores(r, commits, n, seen->version);
	if (n <= 0)
		return;
	v = delta_judge(seen, commits, n);
	observe_run(r, &v, seen->version, l.want_identity);
}

/*
 * Whether an error raised while a log was read came from judging what the
 * store answered (memory, stack depth, a limit, characters the database
 * cannot hold), not from reaching the store: the log's condition.
 */
static bool
judging_error(int sqlerrcode)
{
	return sqlerrcode == ERRCODE_OUT_OF_MEMORY || sqlerrcode == ERRCODE_STATEMENT_TOO_COMPLEX ||
		sqlerrcode == ERRCODE_PROGRAM_LIMIT_EXCEEDED || sqlerrcode == ERRCODE_UNTRANSLATABLE_CHARACTER ||
		sqlerrcode == ERRCODE_INVALID_TEXT_REPRESENTATION || sqlerrcode == ERRCODE_CHARACTER_NOT_IN_REPERTOIRE;
}

/*
 * Reads a consumer's table and fills r->obs (no transaction is open); false
 * when there is nothing to record (the poll's time ran out before anything
 * was judged: an empty observation would clear the consumer's condition).
 */
bool
delta_read_consumer(DeltaReader *r, const LakeConsumer *c)
{
	DeltaSeen	seen;

	memset(&seen, 0, sizeof(seen));
	seen.any = c->seen.any;
	seen.version = c->seen.head_id;
	seen.timestamp_ms = c->seen.head_sequence;
	seen.lsn = c->seen.lsn;
	seen.table_id = c->seen.table_uuid;
	r->seen_identity = c->seen_identity;
	PG_TRY();
	{
		if (seen.any)
			read_after(r, &seen);
		else
			read_first(r);
	}
	PG_CATCH();
	{
		/* A local store's listing raises in the system's words: that consumer's condition. */
		MemoryContext cxt = r->cxt;
		ErrorData  *error;

		MemoryContextSwitchTo(cxt);
		error = CopyErrorData();
		if (error->sqlerrcode == ERRCODE_QUERY_CANCELED || error->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN ||
			proc_exit_inprogress)
			PG_RE_THROW();
		FlushErrorState();
		r->cut = false;
		memset(r->obs, 0, sizeof(*r->obs));
		r->obs->consumer = c;
		r->obs->condition = judging_error(error->sqlerrcode) ? LAKE_LOG_MALFORMED : LAKE_STORE_UNREACHABLE;
		r->obs->detail = psprintf("Could not %s the log of Delta table %s in %s: %s",
								  judging_error(error->sqlerrcode) ? "judge" : "read", r->location,
								  store_describe(r->store),
								  text_excerpt(redact_secrets(error->message, r->store->secrets), 1024));
	}
	PG_END_TRY();
	return !(r->cut && r->obs->condition == LAKE_OK && !r->obs->has_head && !r->obs->rolled_back);
}
