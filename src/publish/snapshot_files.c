/*
 * snapshot_files.c
 *     The files of an Iceberg snapshot that hold a release's partition.
 *
 * The snapshot's manifest list is read from the store (as the caller,
 * with the checks of the gate's store: USAGE and a user mapping, or
 * pg_read_server_files), then each of its manifests, one at a time: the
 * memory is one manifest's bytes plus the partition's files. Every live
 * entry (added or existing; a deleted entry is a file this snapshot
 * removed) of the partition is kept with its size and record count: data
 * files, position deletes (one record per deleted row) and equality
 * deletes (whose rows cannot be counted). An entry's content decides, not
 * its manifest's: a writer that put a delete file in a data manifest is
 * still counted right.
 *
 * The Avro reader's callbacks must not raise (avro_manifest.h): they
 * allocate without raising and stop the read when memory runs out, and
 * the error is raised once the reader has freed its own.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "gate/store_listing.h"
#include "lake/avro_manifest.h"
#include "publish/partition_match.h"
#include "publish/snapshot_files.h"

/* A manifest of the list, as kept between the list's read and its own. */
typedef struct ListedManifest
{
	char	   *path;
	int64		spec_id;
} ListedManifest;

/* What the callbacks share. */
typedef struct CollectState
{
	SnapshotFiles *out;
	const char *base;
	const SpecMatch *match;		/* the current manifest's spec */
	ListedManifest *listed;
	int			nlisted;
	int			listed_cap;
	size_t		prefix_len;		/* of the first key: the common prefix so far */
	char	   *first_key;
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

/* Grows an array of *cap elements of size to hold one more; false when memory ran out. */
static bool
grow_quiet(CollectState *st, void **items, int n, int *cap, size_t size)
{
	void	   *bigger;

	if (n < *cap)
		return true;
	bigger = alloc_quiet(st, size * (size_t) Max(*cap * 2, 64));
	if (bigger == NULL)
		return false;
	if (*items != NULL)
	{
		memcpy(bigger, *items, size * n);
		pfree(*items);
	}
	*items = bigger;
	*cap = Max(*cap * 2, 64);
	return true;
}

/*
 * A location as the store names it: Hadoop's "file:/path" is
 * "file:///path", and "s3a://" and "s3n://" are "s3://" (the same
 * objects, read by other clients).
 */
char *
iceberg_location(const char *location)
{
	if (strncmp(location, "file:/", 6) == 0 && strncmp(location, "file://", 7) != 0)
		return psprintf("file://%s", location + 5);
	if (strncmp(location, "s3a://", 6) == 0 || strncmp(location, "s3n://", 6) == 0)
		return psprintf("s3://%s", location + 6);
	return pstrdup(location);
}

/* The list's callback: keeps each manifest's path and spec. */
static int
list_entry(const IcebergManifestFile *mf, void *arg)
{
	CollectState *st = (CollectState *) arg;
	ListedManifest *lm;

	if (!grow_quiet(st, (void **) &st->listed, st->nlisted, &st->listed_cap, sizeof(ListedManifest)))
		return 1;
	lm = &st->listed[st->nlisted];
	if ((lm->path = strdup_quiet(st, mf->manifest_path)) == NULL)
		return 1;
	lm->spec_id = mf->partition_spec_id;
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
 * Keeps a file of the partition: its store key and size in the
 * inventory, its records in the counts. A file outside the store is
 * counted (it cannot be checked), not kept.
 */
static int
keep_file(CollectState *st, const IcebergManifestEntry *e)
{
	SnapshotFiles *out = st->out;
	const char *path = e->file_path;
	size_t		blen = strlen(st->base);
	char	   *key;
	InvObject  *o;

	/* Normalized without psprintf (which raises): the two forms differ in their prefix only. */
	if (strncmp(path, "file:/", 6) == 0 && strncmp(path, "file://", 7) != 0 && strncmp(st->base, "file://", 7) == 0)
		key = strncmp(path + 5, st->base + 7, blen - 7) == 0 ? strdup_quiet(st, path + 5 + blen - 7) : NULL;
	else if (strncmp(path, "s3a://", 6) == 0 || strncmp(path, "s3n://", 6) == 0)
		key = strncmp(path + 6, st->base + 5, blen - 5) == 0 ? strdup_quiet(st, path + 6 + blen - 5) : NULL;
	else
		key = strncmp(path, st->base, blen) == 0 ? strdup_quiet(st, path + blen) : NULL;
	if (st->oom)
		return 1;
	if (key == NULL || !path_is_safe(key, strlen(key)))
	{
		if (out->outside++ == 0 && (out->outside_example = strdup_quiet(st, path)) == NULL)
			return 1;
		return 0;
	}
	if (!grow_quiet(st, (void **) &out->files.items, out->files.n, &out->files.capacity, sizeof(InvObject)))
		return 1;
	o = &out->files.items[out->files.n++];
	memset(o, 0, sizeof(*o));
	o->path = key;
	o->path_len = strlen(key);
	o->size = e->file_size_in_bytes;
	narrow_prefix(st, key);
	out->bytes += e->file_size_in_bytes;
	if (e->content == 0)
	{
		out->data_files++;
		out->records += e->record_count;
	}
	else
	{
		out->delete_files++;
		if (e->content == 1)
			out->position_deletes += e->record_count;
		else
			out->equality_delete_files++;
	}
	return 0;
}

/* A manifest's callback: keeps the live entries of the partition. */
static int
manifest_entry(const IcebergManifestEntry *e, void *arg)
{
	CollectState *st = (CollectState *) arg;
	const char *absent;

	if (e->status == 2)
		return 0;				/* removed by this snapshot */
	st->out->entries++;
	if (!entry_in_partition(st->match, e, &absent))
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
read_object(const Manifest *store, const char *base, const char *location, const char *what, StringInfo buf)
{
	char	   *normal = iceberg_location(location);
	char	   *key = store_location_key(normal, base);

	if (key == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" is not an object of store \"%s\"", what, location, store->store),
				 errdetail("The snapshot's files are read with the caller's rights from the release's store, "
						   "whose objects begin with \"%s\".", base),
				 errhint("Name the store that holds the table's warehouse in \"store\".")));
	resetStringInfo(buf);
	store_read_object(store, key, append_chunk, buf);
}

/* Raises a failed read of the reader's, or of memory, for an object. */
static void
check_read(int rc, const CollectState *st, const char *what, const char *location, const char *err)
{
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
 * Collects the partition's files of the snapshot whose manifest list is
 * at manifest_list, from the store (whose locations begin with base), as
 * the caller: out's inventory (keys, sizes), counts, and the files that
 * cannot be checked (outside the store) or placed (a spec without a
 * requested field).
 */
void
snapshot_files_collect(const Manifest *store, const char *base, const char *manifest_list,
					   const IcebergLayout *layout, const ReleaseRequest *r, SnapshotFiles *out)
{
	StringInfo	buf = makeStringInfo();
	CollectState st = {0};
	char		err[512] = "";
	int			rc;
	char	   *slash;

	memset(out, 0, sizeof(*out));
	st.out = out;
	st.base = base;
	read_object(store, base, manifest_list, "manifest list", buf);
	rc = avro_manifest_list_read(buf->data, buf->len, list_entry, &st, err, sizeof(err));
	check_read(rc, &st, "manifest list", manifest_list, err);
	for (int i = 0; i < st.nlisted; i++)
	{
		const IcebergSpec *spec = lake_layout_spec(layout, st.listed[i].spec_id);
		SpecMatch	match;

		CHECK_FOR_INTERRUPTS();
		if (spec == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("manifest \"%s\" was written under partition spec " INT64_FORMAT
							", which table \"%s\" does not have", st.listed[i].path, st.listed[i].spec_id,
							r->iceberg_table),
					 errhint("The table's metadata and its snapshot disagree; check the catalog's table.")));
		spec_match_prepare(spec, r, &match);
		st.match = &match;
		read_object(store, base, st.listed[i].path, "manifest", buf);
		rc = avro_manifest_read(buf->data, buf->len, manifest_entry, &st, err, sizeof(err));
		check_read(rc, &st, "manifest", st.listed[i].path, err);
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
}
