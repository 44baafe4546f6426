/*
 * delta_fetch.c
 *     What a poll of a Delta consumer fetches from its store: listings of
 *     _delta_log/ (a block of a thousand versions at a time: names are the
 *     version in 20 digits, so a prefix of 17 lists one block), commits
 *     read under a size cap and parsed in a memory context of their own,
 *     the identity of a commit (its size and ETag, or a local file's hash),
 *     and a store's failure turned into the consumer's condition in the
 *     store's own words.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/redact.h"
#include "lake/delta_fetch.h"

/* Blocks of a thousand names listed in one poll. */
#define DELTA_LIST_BLOCKS 8
#define VERSIONS_PER_BLOCK 1000


/*
 * Whether this consumer's poll has used its time: what was judged so far
 * is recorded, and the next poll goes on from there.
 */
bool
delta_out_of_time(const DeltaReader *r)
{
	return r->deadline != 0 && GetCurrentTimestamp() >= r->deadline;
}

/* The cancellation check run before each line of a commit. */
static void
tick(void)
{
	CHECK_FOR_INTERRUPTS();
}

/* Notes the commits and checkpoints of a batch of names. */
static void
consume_names(ListingSink *sink, const Inventory *batch)
{
	LogListing *l = (LogListing *) sink;

	for (int i = 0; i < batch->n; i++)
	{
		const char *path = batch->items[i].path;
		const char *slash = strrchr(path, '/');
		int64_t		version;

		switch (delta_log_name(slash != NULL ? slash + 1 : path, &version))
		{
			case DELTA_FILE_COMMIT:
				if (version == l->want)
					l->want_identity = MemoryContextStrdup(l->cxt, psprintf(INT64_FORMAT " %s", batch->items[i].size,
																		   batch->items[i].etag != NULL
																		   ? pnstrdup(batch->items[i].etag,
																					  batch->items[i].etag_len)
																		   : "-"));
				l->from_listed |= version == l->from;
				l->newest_commit = Max(l->newest_commit, version);
				break;
			case DELTA_FILE_CHECKPOINT:
				l->newest_checkpoint = Max(l->newest_checkpoint, version);
				break;
			case DELTA_FILE_OTHER:
				break;
		}
	}
}

/* Whether a store's error refuses the credentials (an S3 or Azure code, or HTTP 401/403). */
static bool
refused(const StoreError *err)
{
	static const char *const codes[] = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
	"InvalidCredentials", "AuthenticationFailed", "AuthorizationFailure", "AuthorizationPermissionMismatch"};

	for (int i = 0; i < lengthof(codes); i++)
		if (strcmp(err->code, codes[i]) == 0)
			return true;
	return err->http_status == 401 || err->http_status == 403;
}

/*
 * Sets the observation's condition for a store's failure, in the store's
 * own words (its code, HTTP status and message, secrets redacted).
 */
void
delta_store_failed(DeltaReader *r, const char *doing, const StoreError *err)
{
	bool		missing = strcmp(err->code, "NoSuchBucket") == 0 || strcmp(err->code, "ContainerNotFound") == 0;

	r->obs->condition = refused(err) ? LAKE_STORE_AUTH_FAILED : missing ? LAKE_TABLE_NOT_FOUND
		: LAKE_STORE_UNREACHABLE;
	r->obs->detail = psprintf("Could not %s of Delta table %s in %s: %s%s %s", doing, r->location,
							  store_describe(r->store), err->code,
							  err->http_status > 0 ? psprintf(" (HTTP %ld):", err->http_status) : ":",
							  redact_secrets(err->message, r->store->secrets));
}

/* A listing into l that keeps the identity of commit want (-1: none). */
static void
listing_init(DeltaReader *r, LogListing *l, int64 from, int64 want)
{
	memset(l, 0, sizeof(*l));
	l->sink.consume = consume_names;
	l->from = from;
	l->newest_commit = -1;
	l->newest_checkpoint = -1;
	l->want = want;
	l->cxt = r->cxt;
}

/*
 * A local commit's identity: its size and a hash of its bytes (a local
 * listing has no checksum, and an MD5 needs a resource owner this worker
 * does not have outside a transaction), *out NULL when it is not there.
 */
bool
delta_file_identity(DeltaReader *r, int64 version, char **out)
{
	char		name[32];
	char	   *body = NULL;
	size_t		len = 0;
	bool		found = false;
	StoreError	err;

	delta_commit_name(version, name);
	*out = NULL;
	if (!store_read(r->store, psprintf("%s%s", r->log, name), DELTA_COMMIT_MAX_BYTES, &body, &len, &found, &err))
	{
		delta_store_failed(r, psprintf("read commit %lld", (long long) version), &err);
		return false;
	}
	if (found)
		*out = psprintf("%zu h%016llx", len,
						(unsigned long long) hash_bytes_extended((const unsigned char *) body, (int) len, 0));
	if (body != NULL)
		pfree(body);
	return true;
}

/*
 * The identity of a commit (delta_identity's head part: its size and the
 * ETag of the store's listing, or file_identity), *out NULL when it is not
 * there; false when the store failed.
 */
bool
delta_listed_identity(DeltaReader *r, int64 version, char **out)
{
	StoreError	err;
	LogListing	l;
	char		name[32];

	if (r->store->kind == STORE_FILE)
		return delta_file_identity(r, version, out);
	delta_commit_name(version, name);
	listing_init(r, &l, -1, version);
	if (!store_list(r->store, psprintf("%s%s", r->log, name), &l.sink, &err))
	{
		delta_store_failed(r, "list the log", &err);
		return false;
	}
	*out = l.want_identity;
	return true;
}

/*
 * Lists _delta_log/ from a version on (from < 0: all of it), a block of a
 * thousand names at a time while the last block listed was full; the
 * identity of from's commit is kept.
 */
bool
delta_list_log(DeltaReader *r, int64 from, LogListing *l)
{
	StoreError	err;
	int64		block = Max(from, 0) / VERSIONS_PER_BLOCK;
	/* A local store lists directories (its prefixes end in /): the log's, whole. */
	bool		whole = from < 0 || r->store->kind == STORE_FILE;

	listing_init(r, l, from, from);
	for (int i = 0; i < (whole ? 1 : DELTA_LIST_BLOCKS); i++, block++)
	{
		char	   *prefix = whole ? pstrdup(r->log) : psprintf("%s%017lld", r->log, (long long) block);

		CHECK_FOR_INTERRUPTS();
		if (!store_list(r->store, prefix, &l->sink, &err))
		{
			delta_store_failed(r, "list the log", &err);
			return false;
		}
		/* The last block of versions (up to 9223372036854775807) has no next. */
		if (block + 1 > PG_INT64_MAX / VERSIONS_PER_BLOCK ||
			l->newest_commit < (block + 1) * VERSIONS_PER_BLOCK - 1)
			break;
	}
	return true;
}

/*
 * Reads and parses one commit (*found false when it is not there). The
 * body, its lines and the parser's tokens (several times the commit's
 * size) live in a context of their own, freed once the few strings the
 * verdict needs are copied out (delta_commit_keep): a run of a thousand
 * large commits holds a thousand small ones. What was read counts against
 * the poll's budget (r->bytes_read).
 */
bool
delta_read_commit(DeltaReader *r, int64 version, DeltaCommit *out, bool *found)
{
	char		name[32];
	char	   *body = NULL;
	size_t		len = 0;
	StoreError	err;
	DeltaCommit parsed;
	MemoryContext old;
	bool		ok;

	if (r->parse_cxt == NULL)
		r->parse_cxt = AllocSetContextCreate(r->cxt, "finalize Delta commit", ALLOCSET_DEFAULT_SIZES);
	delta_commit_name(version, name);
	old = MemoryContextSwitchTo(r->parse_cxt);
	ok = store_read(r->store, psprintf("%s%s", r->log, name), DELTA_COMMIT_MAX_BYTES, &body, &len, found, &err);
	if (ok && *found)
		delta_parse_commit(body, len, &r->from, version, tick, &parsed);
	MemoryContextSwitchTo(old);
	if (ok && *found)
		delta_commit_keep(&parsed, out);
	r->bytes_read += len;
	MemoryContextReset(r->parse_cxt);
	if (!ok && strcmp(err.code, "ResponseTooLarge") == 0)
	{
		/* The store answered: the commit is too large to judge, not the store unreachable. */
		memset(out, 0, sizeof(*out));
		out->version = version;
		out->malformed = psprintf("is larger than %d MB", DELTA_COMMIT_MAX_BYTES / (1024 * 1024));
		*found = true;
		return true;
	}
	if (!ok)
		delta_store_failed(r, psprintf("read commit %lld", (long long) version), &err);
	return ok;
}

