/*
 * delta_log.c
 *     What a Delta Lake table's commits prove about a pipeline's progress.
 *
 * A writer puts the LSN it has durably applied into the commit that
 * writes the data (delta-rs's CommitProperties(custom_metadata=...), a
 * top-level key of commitInfo; Spark's userMetadata). A table at a version
 * holds every commit before it, so the newest commit that changes data
 * and carries the LSN proves how far the table holds the source. Commits
 * that change no data (OPTIMIZE, VACUUM, anything whose adds and removes
 * say dataChange false) neither advance nor hold it, whatever they carry.
 * A RESTORE takes the table back to what an older version held, a
 * metaData.id that changes is another table, an LSN that goes down takes
 * back what was above it, and a version read before that is gone or
 * written again means the log was replaced: each is a rollback, and the
 * table then holds what the rule proves of the version it went back to
 * (nothing provable when that cannot be shown).
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "mb/pg_wchar.h"

#include "lake/delta_log.h"

/* Digits of a version in a log file's name. */
#define VERSION_DIGITS 20

/* The version a name starts with (20 digits), or false. */
static bool
name_version(const char *name, int64_t *version)
{
	int64_t		v = 0;

	for (int i = 0; i < VERSION_DIGITS; i++)
	{
		if (name[i] < '0' || name[i] > '9' || v > (PG_INT64_MAX - (name[i] - '0')) / 10)
			return false;
		v = v * 10 + (name[i] - '0');
	}
	*version = v;
	return true;
}

/*
 * The kind of a file of _delta_log/ by its name (without the folder): a
 * commit (NNNNNNNNNNNNNNNNNNNN.json), a checkpoint (classic, multi-part or
 * v2: NNNNNNNNNNNNNNNNNNNN.checkpoint[...].parquet or .json), or another
 * (_last_checkpoint, .crc, temporary and compacted files).
 */
DeltaLogKind
delta_log_name(const char *name, int64_t *version)
{
	size_t		len = strlen(name);

	if (len < VERSION_DIGITS + 5 || !name_version(name, version))
		return DELTA_FILE_OTHER;
	if (strcmp(name + VERSION_DIGITS, ".json") == 0)
		return DELTA_FILE_COMMIT;
	if (strncmp(name + VERSION_DIGITS, ".checkpoint.", 12) == 0 &&
		(strcmp(name + len - 8, ".parquet") == 0 || strcmp(name + len - 5, ".json") == 0))
		return DELTA_FILE_CHECKPOINT;
	return DELTA_FILE_OTHER;
}

/* The name of a version's commit file (without the folder). */
void
delta_commit_name(int64_t version, char out[32])
{
	snprintf(out, 32, "%020lld.json", (long long) version);
}

/*
 * Whether a commit writes data as far as its LSN says: it adds or removes
 * data (dataChange true), or it is a write that had nothing to write (an
 * empty append or streaming batch, a MERGE that matched nothing: no file
 * at all, and an operation that writes data). A commit whose files change
 * no data (OPTIMIZE), or without files from an operation that writes none
 * (VACUUM, a property or schema change), is maintenance, whatever it
 * carries; a RESTORE is judged apart.
 */
static bool
writes_data(const DeltaCommit *c)
{
	static const char *const writes[] = {"WRITE", "STREAMING UPDATE", "MERGE", "UPDATE", "DELETE"};

	if (c->restore)
		return false;
	if (c->data_change)
		return true;
	if (c->file_actions || c->operation == NULL)
		return false;
	for (size_t i = 0; i < lengthof(writes); i++)
		if (strcmp(c->operation, writes[i]) == 0)
			return true;
	return false;
}

/*
 * Whether a commit creates the table, or replaces it (CREATE TABLE, CREATE
 * OR REPLACE TABLE, REPLACE TABLE, their AS SELECT forms, as delta-rs and
 * Spark name them): the table before it is another one, whatever its
 * metaData.id says (Spark may keep the id; an id never read says nothing).
 */
static bool
replaces_table(const DeltaCommit *c)
{
	return c->operation != NULL && strstr(c->operation, "TABLE") != NULL &&
		(strstr(c->operation, "CREATE") != NULL || strstr(c->operation, "REPLACE") != NULL);
}

/* Whether a commit's LSN counts: it writes data (writes_data) and carries lsn_from. */
static bool
is_carrier(const DeltaCommit *c)
{
	return writes_data(c) && (c->lsn_text != NULL || c->lsn_problem != NULL);
}

/* Whether a carrier's LSN is one (lsn_parse_any's forms), into *lsn. */
static bool
carrier_lsn(const DeltaCommit *c, Lsn *lsn)
{
	return c->lsn_problem == NULL && c->lsn_text != NULL && lsn_parse_any(c->lsn_text, lsn);
}

/* Whether a valid carrier follows commits[i] in the run. */
static bool
valid_carrier_after(const DeltaCommit *commits, int n, int i)
{
	Lsn			lsn;

	for (int j = i + 1; j < n && commits[j].malformed == NULL; j++)
		if (is_carrier(&commits[j]) && carrier_lsn(&commits[j], &lsn))
			return true;
	return false;
}

/* The state of the table after each commit of a run (index 0: the one seen). */
typedef struct Held
{
	bool		any;
	Lsn			lsn;
} Held;

/*
 * Notes a rollback to held: the lowest held of a run's rollbacks counts.
 * One that still holds what was recorded (a RESTORE to a version of the
 * run at or above it, an LSN of the run going down to no lower) took back
 * only claims never recorded: no rollback.
 */
static void
note_rollback(DeltaVerdict *v, bool *rolled, const DeltaSeen *seen, Held held, const char *reason)
{
	if (seen->any && held.any && lsn_cmp(&held.lsn, &seen->lsn) >= 0)
		return;
	if (!*rolled)
	{
		v->held_known = held.any;
		v->held_lsn = held.lsn;
		v->reason = reason;
	}
	else if (v->held_known && (!held.any || lsn_cmp(&held.lsn, &v->held_lsn) < 0))
	{
		v->held_known = held.any;
		v->held_lsn = held.lsn;
		v->reason = reason;
	}
	*rolled = true;
}

/* What a RESTORE commit brings the table back to (states[k - seen]: in the run). */
static Held
restored(const DeltaSeen *seen, const DeltaCommit *c, const Held *states)
{
	Held		h = {false};

	if (!c->has_restore_version || c->restore_version >= c->version)
		return h;
	if (seen->any && c->restore_version >= seen->version)
		return states[c->restore_version - seen->version];
	h.any = c->restored_known;
	h.lsn = c->restored_lsn;
	return h;
}

/*
 * What the commits after the one seen prove (commits: versions
 * seen->version + 1 on, in order, none missing). Each commit moves the
 * table's state: a RESTORE to what its version held, another metaData.id
 * or a CREATE/REPLACE TABLE that removes data to nothing, a carrier to its LSN (a lower one than the state's is a
 * rollback to it). Judging stops before a malformed commit (one that is
 * no commit could be a RESTORE) and before a carrier whose LSN is no LSN
 * unless a valid carrier follows it in the run (it then proves no less):
 * what came before is still judged, and the next run starts there.
 */
DeltaVerdict
delta_judge(const DeltaSeen *seen, const DeltaCommit *commits, int n)
{
	DeltaVerdict v;
	Held	   *states = palloc0(sizeof(Held) * (n + 1));
	Held		cur = {seen->any, seen->lsn};
	bool		rolled = false;
	Lsn			lsn;
	int			i;

	memset(&v, 0, sizeof(v));
	v.head_version = seen->version;
	v.head_timestamp_ms = seen->timestamp_ms;
	v.table_id = seen->table_id;
	v.malformed_version = -1;
	states[0] = cur;
	for (i = 0; i < n; i++)
	{
		const DeltaCommit *c = &commits[i];

		if (c->malformed != NULL ||
			(is_carrier(c) && !carrier_lsn(c, &lsn) && !valid_carrier_after(commits, n, i)))
		{
			v.malformed_version = c->version;
			v.reason = c->malformed != NULL ? c->malformed
				: c->lsn_problem != NULL ? c->lsn_problem
				: "the value is not an LSN (0x and 20 hex digits, or Debezium's 8:8:4 form)";
			break;
		}
		if (c->table_id != NULL && v.table_id != NULL && strcmp(c->table_id, v.table_id) != 0)
		{
			cur.any = false;
			note_rollback(&v, &rolled, seen, cur, "the table was created again (its metaData.id changed)");
		}
		else if (replaces_table(c) && c->removes_data)
		{
			cur.any = false;
			note_rollback(&v, &rolled, seen, cur, psprintf("the table was replaced (%s removed its data)",
														   c->operation));
		}
		if (c->table_id != NULL)
			v.table_id = c->table_id;
		if (c->restore)
		{
			cur = restored(seen, c, states);
			note_rollback(&v, &rolled, seen, cur, "a RESTORE took the table back to an older version");
		}
		else if (is_carrier(c) && carrier_lsn(c, &lsn))
		{
			if (cur.any && lsn_cmp(&lsn, &cur.lsn) < 0)
				note_rollback(&v, &rolled, seen, (Held) {true, lsn}, "the LSN of the newest commit went down");
			cur.any = true;
			cur.lsn = lsn;
			v.has_carrier = true;
			v.carrier_version = c->version;
		}
		states[i + 1] = cur;
		v.head_version = c->version;
		v.head_timestamp_ms = c->timestamp_ms;
	}
	v.judged = i;
	v.has_lsn = cur.any;
	v.lsn = cur.lsn;
	if (rolled)
		v.outcome = DELTA_ROLLBACK;
	else if (i == 0 && v.malformed_version >= 0)
		v.outcome = DELTA_MALFORMED;
	else if (cur.any && (!seen->any || lsn_cmp(&cur.lsn, &seen->lsn) > 0))
		v.outcome = DELTA_ADVANCE;
	else
		v.outcome = DELTA_SAME;
	if (!rolled && v.outcome != DELTA_MALFORMED)
		v.reason = NULL;
	pfree(states);
	return v;
}

/*
 * One step of a walk back from the newest commit (a first read, or what a
 * RESTORE went back to): the newest carrier found (*lsn), the version to
 * read next (the one before, or the version a RESTORE went back to), or
 * the end: nothing provable (the first version passed, a RESTORE to an
 * unknown version, a commit of another metaData.id, one that created or
 * replaced the table without the LSN), or a newest carrier
 * that cannot be read.
 */
DeltaBackStep
delta_back_step(DeltaBack *walk, const DeltaCommit *c, int64_t *next_version, Lsn *lsn)
{
	walk->at = c->version;
	if (c->malformed != NULL)
	{
		walk->reason = c->malformed;
		return DELTA_BACK_MALFORMED;
	}
	if (c->table_id != NULL && walk->table_id != NULL && strcmp(c->table_id, walk->table_id) != 0)
	{
		walk->reason = "an older commit belongs to another table (its metaData.id differs)";
		return DELTA_BACK_NONE;
	}
	if (c->table_id != NULL && walk->table_id == NULL)
		walk->table_id = c->table_id;
	if (c->restore)
	{
		if (!c->has_restore_version || c->restore_version >= c->version)
		{
			walk->reason = "a RESTORE went back to a version it does not name";
			return DELTA_BACK_NONE;
		}
		*next_version = c->restore_version;
		return DELTA_BACK_MORE;
	}
	if (is_carrier(c))
	{
		if (carrier_lsn(c, lsn))
			return DELTA_BACK_FOUND;
		walk->reason = c->lsn_problem != NULL ? c->lsn_problem
			: "the value is not an LSN (0x and 20 hex digits, or Debezium's 8:8:4 form)";
		return DELTA_BACK_MALFORMED;
	}
	if (replaces_table(c))
	{
		walk->reason = psprintf("the table was created or replaced at version %lld (%s) by a commit without the LSN",
								(long long) c->version, c->operation);
		return DELTA_BACK_NONE;
	}
	if (c->version == 0)
	{
		walk->reason = "no commit carries the LSN";
		return DELTA_BACK_NONE;
	}
	*next_version = c->version - 1;
	return DELTA_BACK_MORE;
}

/*
 * Why the version seen last no longer proves what it did, or NULL when it
 * still does: it is no longer listed (the log was deleted, or the table
 * created again at a lower version), or it was read again (again, when
 * the reader did) with another commit time (the table created again and
 * written as far).
 */
const char *
delta_seen_gone(const DeltaSeen *seen, bool listed, const DeltaCommit *again)
{
	if (!seen->any)
		return NULL;
	if (!listed)
		return "the version read last is no longer in the log (the table was deleted or created again)";
	if (again != NULL && again->malformed == NULL && seen->timestamp_ms != 0 &&
		again->timestamp_ms != seen->timestamp_ms)
		return "the version read last was written again (the table was created again)";
	return NULL;
}

/*
 * What a consumer records to know its table again (seen_identity): the
 * store's identity (store_identity) and the listing's identity of the
 * version read last (its size and ETag or MD5; NULL: unknown), a line each.
 */
char *
delta_identity(const char *store, const char *head)
{
	return psprintf("%s\n%s", store, head != NULL ? head : "");
}

/*
 * Why what was recorded (seen: a delta_identity, NULL when none was) no
 * longer stands for the table, or NULL: another store (its server dropped
 * and created again, or its endpoint, bucket or container changed), or the
 * version read last listed with another size or checksum (written again
 * in place, or the table deleted and created again as far). An unknown
 * part is not compared.
 */
const char *
delta_identity_gone(const char *seen, const char *store, const char *head)
{
	const char *nl = seen != NULL ? strchr(seen, '\n') : NULL;

	if (nl == NULL)
		return NULL;
	if (strlen(store) != (size_t) (nl - seen) || strncmp(seen, store, nl - seen) != 0)
		return "the store changed (its server was created again, or its endpoint, bucket or container changed), "
			"so the table read now may be another";
	if (nl[1] != '\0' && head != NULL && strcmp(nl + 1, head) != 0)
		return "the version read last was written again (its size or checksum in the store changed: the table was "
			"created again, or the commit replaced)";
	return NULL;
}

/*
 * The bytes of a UTF-8 string (a commit is verified UTF-8) up to max that
 * end at a character's end: a cut inside a character would store invalid
 * UTF-8. UTF-8 whatever the database's encoding (pg_mbcliplen's), as the
 * commit is.
 */
static int
utf8_cliplen(const char *s, size_t len, int max)
{
	int			n = 0;

	while ((size_t) n < len)
	{
		int			l = pg_utf_mblen((const unsigned char *) s + n);

		if (n + l > max)
			break;
		n += l;
	}
	return n;
}

/* A string of a commit capped at DELTA_KEEP_MAX bytes, told apart by its length and a hash when cut. */
static const char *
keep_capped(const char *s)
{
	size_t		len;

	if (s == NULL)
		return NULL;
	len = strlen(s);
	if (len <= DELTA_KEEP_MAX)
		return pstrdup(s);
	return psprintf("%.*s... (%zu bytes, hash %016llx)", utf8_cliplen(s, len, DELTA_KEEP_MAX / 2), s, len,
					(unsigned long long) hash_bytes_extended((const unsigned char *) s, (int) len, 0));
}

/*
 * Copies what the verdict needs of a parsed commit into the current memory
 * context (the parse's own, with every line and token, is then freed),
 * each string capped: an LSN longer than any LSN text is no LSN; a longer
 * metaData.id is kept by its start, length and hash (still told apart), an
 * operation and a reason by their start and length.
 */
void
delta_commit_keep(const DeltaCommit *parsed, DeltaCommit *out)
{
	DeltaCommit p = *parsed;	/* out may be parsed */

	*out = p;
	out->malformed = keep_capped(p.malformed);
	out->operation = keep_capped(p.operation);
	out->table_id = keep_capped(p.table_id);
	out->lsn_problem = keep_capped(p.lsn_problem);
	out->lsn_text = NULL;
	if (p.lsn_text != NULL && strlen(p.lsn_text) > DELTA_KEEP_MAX)
		out->lsn_problem = "the value is not an LSN (0x and 20 hex digits, or Debezium's 8:8:4 form): it is too long";
	else
		out->lsn_text = keep_capped(p.lsn_text);
}
