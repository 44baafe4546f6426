/*
 * snapshot_files.c
 *     The files of an Iceberg snapshot that hold a release's partition.
 *
 * The snapshot's manifest list is read from the store (as the caller,
 * with the checks of the gate's store: USAGE and a user mapping, or
 * pg_read_server_files), then each of its manifests, one at a time: the
 * memory is one manifest's bytes plus the partition's files. Every live
 * entry (added or existing; a deleted entry is a file a snapshot removed)
 * of the partition is kept with its size, record count and data sequence
 * number: data files, position deletes and equality deletes. An entry's
 * content decides, not its manifest's. Each data file's bounds of the
 * time column are checked against the release's periods on the way.
 *
 * Each object read is checked against what refers to it: a manifest's
 * length and entry counts against the list's record (an Avro container cut
 * at a block boundary reads as a valid, shorter file), and the live files
 * of every partition against the snapshot's summary (by the caller). For a
 * branch publish, every file added or removed since the branch's head must
 * be the partition's: a fast-forward publishes the whole snapshot.
 *
 * The Avro reader's callbacks must not raise (avro_manifest.h): they
 * allocate without raising and stop the read when memory runs out, and
 * the error is raised once the reader has freed its own. So is a cancel:
 * the reader asks io_must_stop while it decompresses and between records.
 * Every object is read whole into memory, at most
 * finalize.iceberg_max_manifest_size of it, and its blocks decompress to
 * at most as much.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "core/io_interrupts.h"
#include "core/settings.h"
#include "gate/store_listing.h"
#include "lake/avro_manifest.h"
#include "publish/partition_match.h"
#include "publish/snapshot_files.h"

/* A manifest of the list, as kept between the list's read and its own. */
typedef struct ListedManifest
{
	char	   *path;
	IcebergManifestFile mf;		/* its record (path not kept) */
} ListedManifest;

/* What the callbacks share. */
typedef struct CollectState
{
	SnapshotFiles *out;
	const ObjectStore *store;	/* where the files are */
	const SinceHead *since;
	const PeriodCheck *period;
	const SpecMatch *match;		/* the current manifest's spec */
	const IcebergManifestFile *mf;	/* the current manifest's record */
	int64		by_status[3];	/* its entries per status */
	ListedManifest *listed;
	int			nlisted;
	int			listed_cap;
	size_t		prefix_len;		/* of the first key: the common prefix so far */
	char	   *first_key;
	char	   *foreign;		/* a listed manifest that is no object of the store */
	bool		oom;
} CollectState;

/* Memory for a callback: NULL (and the read stopped) instead of an error. */
static void *
alloc_quiet(CollectState *st, size_t size)
{
	void	   *p = MemoryContextAllocExtended(CurrentMemoryContext, size, MCXT_ALLOC_NO_OOM | MCXT_ALLOC_HUGE);

	if (p == NULL)
		st->oom = true;
	return p;
}

/* A copy of a string for a callback, or NULL when memory ran out. */
static char *
strdup_quiet(CollectState *st, const char *s)
{
	size_t		n = strlen(s) + 1;
	char	   *p = alloc_quiet(st, n);

	if (p != NULL)
		memcpy(p, s, n);
	return p;
}

/*
 * Grows an array of *cap elements of size to hold n + 1 (doubling, at most
 * INT_MAX / 2 elements); false when memory ran out or it cannot grow.
 */
static bool
grow_quiet(CollectState *st, void **items, int n, int *cap, size_t size)
{
	size_t		bigger_cap;
	void	   *bigger;

	if (n < *cap)
		return true;
	bigger_cap = *cap == 0 ? 64 : (size_t) *cap * 2;
	if (bigger_cap > PG_INT32_MAX / 2 || (bigger = alloc_quiet(st, size * bigger_cap)) == NULL)
	{
		st->oom = true;
		return false;
	}
	if (*items != NULL)
	{
		memcpy(bigger, *items, size * (size_t) n);
		pfree(*items);
	}
	*items = bigger;
	*cap = (int) bigger_cap;
	return true;
}

/*
 * The list's callback: keeps each manifest's record and path. A path that
 * is no object of the store ends the read there (read_object then says
 * so), rather than after every record is kept: a list of millions of
 * empty records, a few bytes each, would take a hundred times its size.
 */
static int
list_entry(const IcebergManifestFile *mf, void *arg)
{
	CollectState *st = (CollectState *) arg;
	ListedManifest *lm;

	if (store_key_of(st->store, mf->manifest_path) == NULL)
	{
		st->foreign = strdup_quiet(st, mf->manifest_path);
		return 1;
	}

	if (!grow_quiet(st, (void **) &st->listed, st->nlisted, &st->listed_cap, sizeof(ListedManifest)))
		return 1;
	lm = &st->listed[st->nlisted];
	lm->mf = *mf;
	if ((lm->path = strdup_quiet(st, mf->manifest_path)) == NULL)
		return 1;
	lm->mf.manifest_path = NULL;
	st->nlisted++;
	return 0;
}

/* Narrows the common prefix of the keys kept so far to key's. */
static void
narrow_prefix(CollectState *st, const char *key)
{
	size_t		i = 0;

	if (st->first_key == NULL)
	{
		st->first_key = (char *) key;
		st->prefix_len = strlen(key);
		return;
	}
	while (i < st->prefix_len && key[i] == st->first_key[i])
		i++;
	st->prefix_len = i;
}

/*
 * An entry's data sequence number: its own, else (an added entry of v2)
 * its manifest's; -1 when neither says.
 */
static int64
entry_sequence(const CollectState *st, const IcebergManifestEntry *e)
{
	if (e->has_sequence_number)
		return e->sequence_number;
	if (e->status == 1 && st->mf->has_sequence_number)
		return st->mf->sequence_number;
	return -1;
}

/* Keeps a position-delete file of the partition with the data file it names. */
static int
keep_position_delete(CollectState *st, const IcebergManifestEntry *e)
{
	SnapshotFiles *out = st->out;
	PositionDelete *d;
	const char *ref = e->referenced_data_file != NULL ? store_key_of(st->store, e->referenced_data_file) : NULL;

	if (!grow_quiet(st, (void **) &out->deletes, out->ndeletes, &out->deletes_cap, sizeof(PositionDelete)))
		return 1;
	d = &out->deletes[out->ndeletes++];
	d->referenced = ref != NULL ? strdup_quiet(st, ref) : NULL;
	d->sequence = entry_sequence(st, e);
	d->records = e->record_count;
	return st->oom ? 1 : 0;
}

/*
 * Checks a data file of the partition against the release's periods by
 * its bounds and null count of the time column: one outside them, one
 * with rows of no time, or one without bounds or a null count that can be
 * read, is counted (the first named); which of them refuses the release
 * is the caller's.
 */
static int
check_bounds(CollectState *st, const IcebergManifestEntry *e)
{
	SnapshotFiles *out = st->out;
	int64_t		lo = 0;
	int64_t		hi = 0;
	BoundsProof proof = file_bounds_prove(&st->period->col, e, st->period->start_us, st->period->end_us, &lo, &hi);

	if (proof == BOUNDS_OUTSIDE && out->outside_period++ == 0)
	{
		out->outside_lo_us = lo;
		out->outside_hi_us = hi;
		if ((out->outside_period_example = strdup_quiet(st, e->file_path)) == NULL)
			return 1;
	}
	if (proof == BOUNDS_NULLS && out->null_time++ == 0 &&
		(out->null_time_example = strdup_quiet(st, e->file_path)) == NULL)
		return 1;
	if ((proof == BOUNDS_MISSING || proof == BOUNDS_MALFORMED) && out->unbounded++ == 0 &&
		(out->unbounded_example = strdup_quiet(st, e->file_path)) == NULL)
		return 1;
	return 0;
}

/*
 * Keeps a file of the partition: its store key, size and sequence number,
 * its records in the counts. A file outside the store is counted (it
 * cannot be checked), not kept.
 */
static int
keep_file(CollectState *st, const IcebergManifestEntry *e)
{
	SnapshotFiles *out = st->out;
	const char *at = store_key_of(st->store, e->file_path);
	char	   *key;
	InvObject  *o;

	if (at == NULL)
	{
		if (out->outside++ == 0 && (out->outside_example = strdup_quiet(st, e->file_path)) == NULL)
			return 1;
		return e->content == 0 && st->period->active ? check_bounds(st, e) : 0;
	}
	if ((key = strdup_quiet(st, at)) == NULL ||
		!grow_quiet(st, (void **) &out->files.items, out->files.n, &out->files.capacity, sizeof(InvObject)) ||
		!grow_quiet(st, (void **) &out->sequences, out->files.n, &out->capacity, sizeof(int64)))
		return 1;
	o = &out->files.items[out->files.n];
	memset(o, 0, sizeof(*o));
	o->path = key;
	o->path_len = strlen(key);
	o->size = e->file_size_in_bytes;
	out->sequences[out->files.n++] = e->content == 0 ? entry_sequence(st, e) : -2;
	narrow_prefix(st, key);
	out->bytes += e->file_size_in_bytes;
	if (e->content == 0)
	{
		out->data_files++;
		out->records += e->record_count;
		return st->period->active ? check_bounds(st, e) : 0;
	}
	out->delete_files++;
	if (e->content == 1)
		return keep_position_delete(st, e);
	out->uncountable_deletes++;
	return 0;
}

/*
 * The index of the snapshot that added (or removed) an entry among those
 * since the target's head, -1 when it is older, -2 when unknown (then it
 * counts as new: an unknown change is no proven non-change).
 */
static int
since_index(const CollectState *st, const IcebergManifestEntry *e)
{
	int64		id;
	int			lo = 0;
	int			hi = st->since->n;

	if (e->has_snapshot_id)
		id = e->snapshot_id;
	else if (st->mf->has_added_snapshot_id)
		id = st->mf->added_snapshot_id;
	else
		return -2;
	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (st->since->ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < st->since->n && st->since->ids[lo] == id ? lo : -1;
}

/*
 * Notes a change since the target's head: a removal is counted for its
 * snapshot (checked against the summaries later); one outside the
 * partition is a change the release did not audit.
 */
static int
note_change(CollectState *st, const IcebergManifestEntry *e, bool in_partition)
{
	int			k;

	if (st->since->n == 0 || (k = since_index(st, e)) == -1)
		return 0;
	if (e->status == 2 && k >= 0)
		st->out->removed_seen[k]++;
	if (!in_partition && st->out->changed_outside++ == 0 &&
		(st->out->changed_example = strdup_quiet(st, e->file_path)) == NULL)
		return 1;
	return 0;
}

/* A manifest's callback: counts every entry, keeps the live ones of the partition. */
static int
manifest_entry(const IcebergManifestEntry *e, void *arg)
{
	CollectState *st = (CollectState *) arg;
	const char *absent;
	bool		in_partition = entry_in_partition(st->match, e, &absent);

	if (e->status >= 0 && e->status <= 2)
		st->by_status[e->status]++;
	if (note_change(st, e, in_partition) != 0)
		return 1;
	if (e->status == 2)
		return 0;				/* removed by a snapshot */
	if (e->content == 0)
		st->out->all_data_files++;
	else
		st->out->all_delete_files++;
	if (!in_partition)
	{
		if (absent != NULL && st->out->unplaced++ == 0)
		{
			st->out->unplaced_field = absent;
			st->out->unplaced_spec = st->match->spec_id;
		}
		return 0;
	}
	return keep_file(st, e);
}

/* finalize.iceberg_max_manifest_size as SHOW gives it ("128MB"). */
static char *
limit_text(void)
{
	return GetConfigOptionByName("finalize.iceberg_max_manifest_size", NULL, false);
}

/* Appends a chunk the store gave to the buffer. */
static void
append_chunk(void *arg, const char *data, size_t len)
{
	appendBinaryStringInfo((StringInfo) arg, data, len);
}

/*
 * Reads one object of the snapshot (its manifest list, a manifest) into
 * buf, as the caller; what = "manifest list" or "manifest".
 */
static void
read_object(const Manifest *m, const ObjectStore *store, const char *location, const char *what, StringInfo buf)
{
	const char *key = store_key_of(store, location);

	if (key == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" is not an object of store \"%s\"", what, store_location_shown(store, location),
						m->store),
				 errdetail("The snapshot's files are read with the caller's rights from the release's store, "
						   "whose objects begin with \"%s\".", store_base(store)),
				 errhint("Name the store that holds the table's warehouse in \"store\".")));
	resetStringInfo(buf);
	if (!store_read_object(m, store, key, (size_t) finalize_iceberg_max_manifest_kb * 1024, append_chunk, buf))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s \"%s\" is larger than finalize.iceberg_max_manifest_size (%s)", what, location,
						limit_text()),
				 errdetail("finalize holds a manifest list or manifest in memory while it reads it; nothing was released."),
				 errhint("Check who writes the table's files; for a genuine file, a superuser can raise "
						 "finalize.iceberg_max_manifest_size (at most 256MB).")));
}

/*
 * Raises a failed read of the reader's, or of memory, for an object: a
 * cancel first, then a file over the limit (a decompression bomb, or far
 * larger than Iceberg writes), then anything else as corrupt.
 */
static void
check_read(int rc, const CollectState *st, const char *what, const char *location, const char *err)
{
	io_interrupts_rethrow();
	if (rc == AVRO_READ_STOPPED)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("reading %s \"%s\" was interrupted", what, location)));
	if (rc == AVRO_READ_TOO_LARGE)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("could not read %s \"%s\": %s", what, location, err),
				 errdetail("finalize reads at most finalize.iceberg_max_manifest_size (%s) of a file's blocks "
						   "decompressed, and of one record's values in memory; nothing was released.",
						   limit_text()),
				 errhint("Check who writes the table's files: Iceberg's writers stay far below it. For a genuine "
						 "file, a superuser can raise the setting (at most 256MB).")));
	if (st->oom)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory reading %s \"%s\"", what, location)));
	if (rc < 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("could not read %s \"%s\": %s", what, location, err),
				 errdetail("It is not an Iceberg %s as the specification writes one; nothing was released.", what),
				 errhint("Check that the object was not cut or replaced, and audit a snapshot whose files are whole.")));
}

/*
 * Checks a manifest read against its record in the list: its length, and
 * its entries per status against the counts the list gives (an object cut
 * at a block boundary, or replaced, is an error, never fewer files).
 */
static void
check_manifest_whole(const CollectState *st, const ListedManifest *lm, size_t len)
{
	const IcebergManifestFile *mf = &lm->mf;
	const char *why = NULL;

	if (mf->manifest_length > 0 && (int64) len != mf->manifest_length)
		why = psprintf("it is %zu bytes long, the manifest list says " INT64_FORMAT, len, mf->manifest_length);
	else if ((mf->has_added_files_count && st->by_status[1] != mf->added_files_count) ||
			 (mf->has_existing_files_count && st->by_status[0] != mf->existing_files_count) ||
			 (mf->has_deleted_files_count && st->by_status[2] != mf->deleted_files_count))
		why = psprintf("it holds " INT64_FORMAT " added, " INT64_FORMAT " existing and " INT64_FORMAT
					   " deleted entries, which are not the counts the manifest list gives",
					   st->by_status[1], st->by_status[0], st->by_status[2]);
	if (why != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("manifest \"%s\" is not the one the snapshot's manifest list describes", lm->path),
				 errdetail("%s; nothing was released.", why),
				 errhint("The object was cut or replaced after the snapshot was committed: audit a snapshot whose files are whole.")));
}

/* Reads one manifest of the list and checks it whole. */
static void
read_manifest(const Manifest *m, const ObjectStore *store, const IcebergLayout *layout, const ReleaseRequest *r, CollectState *st,
			  const ListedManifest *lm, StringInfo buf)
{
	const IcebergSpec *spec = lake_layout_spec(layout, lm->mf.partition_spec_id);
	SpecMatch	match;
	char		err[512] = "";
	int			rc;

	if (spec == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("manifest \"%s\" was written under partition spec %d, which table \"%s\" does not have",
						lm->path, lm->mf.partition_spec_id, r->iceberg_table),
				 errhint("The table's metadata and its snapshot disagree; check the catalog's table.")));
	spec_match_prepare(spec, r, &match);
	st->match = &match;
	st->mf = &lm->mf;
	memset(st->by_status, 0, sizeof(st->by_status));
	read_object(m, store, lm->path, "manifest", buf);
	io_interrupts_begin();
	rc = avro_manifest_read(buf->data, buf->len, manifest_entry, st, err, sizeof(err));
	check_read(rc, st, "manifest", lm->path, err);
	check_manifest_whole(st, lm, buf->len);
}

/*
 * Collects the partition's files of the snapshot whose manifest list is
 * at manifest_list, from the store (opened for the release m), as
 * the caller: out's inventory (keys, sizes), counts, the files that cannot
 * be checked (outside the store) or placed (a spec without a requested
 * field), and the changes since the target's head (since) outside it.
 */
void
snapshot_files_collect(const Manifest *m, const ObjectStore *store, const char *manifest_list,
					   const IcebergLayout *layout, const ReleaseRequest *r, const SinceHead *since,
					   const PeriodCheck *period, SnapshotFiles *out)
{
	StringInfo	buf = makeStringInfo();
	CollectState st = {0};
	char		err[512] = "";
	int			rc;
	char	   *slash;

	memset(out, 0, sizeof(*out));
	out->removed_seen = palloc0(sizeof(int64) * Max(since->n, 1));
	st.out = out;
	st.store = store;
	st.since = since;
	st.period = period;
	/* Bounded and cancellable (core/io_interrupts.c: the reader's stop function). */
	avro_read_limits((size_t) finalize_iceberg_max_manifest_kb * 1024, io_must_stop);
	read_object(m, store, manifest_list, "manifest list", buf);
	io_interrupts_begin();
	rc = avro_manifest_list_read(buf->data, buf->len, list_entry, &st, err, sizeof(err));
	check_read(rc, &st, "manifest list", manifest_list, err);
	if (st.foreign != NULL)
	{
		read_object(m, store, st.foreign, "manifest", buf);	/* raises: no object of the store */
		elog(ERROR, "manifest \"%s\" was read as no object of store \"%s\"", st.foreign, m->store);
	}
	for (int i = 0; i < st.nlisted; i++)
	{
		CHECK_FOR_INTERRUPTS();
		read_manifest(m, store, layout, r, &st, &st.listed[i], buf);
		out->manifests++;
	}
	/* The files' common directory: what the store lists. */
	out->prefix = st.first_key != NULL ? pnstrdup(st.first_key, st.prefix_len) : pstrdup("");
	slash = strrchr(out->prefix, '/');
	if (slash != NULL)
		slash[1] = '\0';
	else
		out->prefix[0] = '\0';
	pfree(buf->data);
	count_position_deletes(out);
}
