/*
 * filestore.c
 *     Local stores (file:// URLs): the files under a prefix, walked directly.
 *
 * The listing has what an S3 listing has: keys relative to the store's
 * root, and sizes; an MD5 checksum (what S3 reports as the ETag of an object
 * uploaded in one part) is computed only for the files whose manifest entry
 * carries one, since reading every file would dominate the gate's cost.
 * Symbolic links are not followed anywhere below the root, and only
 * regular files are ever opened, so a listing never leaves the store and
 * never blocks on a FIFO. The files go to the listing's sink a batch at a
 * time (at most LISTING_BATCH, in a memory context reset after each), so
 * a walk of ten million files holds one batch and one open directory per
 * level, never the whole listing.
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cryptohash.h"
#include "common/md5.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/memutils.h"

#include "store/filestore.h"

/* The directory of a file:///absolute/path URL; an error for any other form. */
char *
filestore_root(const char *url)
{
	const char *path = url + strlen("file://");
	size_t		len;

	if (strncmp(url, "file://", 7) != 0 || path[0] != '/')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: field \"store\" \"%s\" is not a local store URL", url),
				 errhint("Local stores are written file:///absolute/path (three slashes).")));
	len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	return pnstrdup(path, len);
}

/* One walk of a store: where its files go. */
typedef struct FileWalk
{
	const char *root;
	ListingSink *sink;
	WantsChecksum wants;
	void	   *arg;
	MemoryContext batch_cxt;	/* the batch's objects and their strings */
	Inventory	batch;
	size_t		budget;			/* bytes of directory entries held at once */
	size_t		held;			/* held by the directories being walked */
} FileWalk;

/* Hands the batch to the sink, then frees it. */
static void
flush_batch(FileWalk *w)
{
	if (w->batch.n == 0)
		return;
	w->sink->consume(w->sink, &w->batch);
	MemoryContextReset(w->batch_cxt);
	memset(&w->batch, 0, sizeof(w->batch));
}

/* Flags of every open below the root: never through a symbolic link. */
#define NOFOLLOW_FLAGS (O_RDONLY | O_NOFOLLOW | O_CLOEXEC)

/*
 * Opens name relative to an open directory, counted in PostgreSQL's budget
 * of file descriptors (the walk holds one per directory level, outside
 * fd.c's own files). -1 with errno set when the open fails.
 */
static int
open_counted(int dirfd, const char *name, int flags)
{
	int			fd;
	int			save_errno;

	if (!AcquireExternalFD())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("too many files open to list the local store"),
				 errdetail("Listing holds one file descriptor per directory level of the partition's prefix."),
				 errhint("Raise max_files_per_process, or keep partitions less deep.")));
	fd = openat(dirfd, name, flags);
	if (fd < 0)
	{
		save_errno = errno;
		ReleaseExternalFD();
		errno = save_errno;
	}
	return fd;
}

/* Closes what open_counted opened. */
static void
close_counted(int fd)
{
	close(fd);
	ReleaseExternalFD();
}

/*
 * One step down a path: opens name below parent and closes parent, which
 * is closed (and its count released) even when the open raises, since
 * nothing else would ever close it. -1 with errno set when the open fails.
 */
static int
open_step(int parent, const char *name, int flags)
{
	int			fd;
	int			save_errno;

	PG_TRY();
	{
		fd = open_counted(parent, name, flags);
	}
	PG_CATCH();
	{
		close_counted(parent);
		PG_RE_THROW();
	}
	PG_END_TRY();
	save_errno = errno;
	close_counted(parent);
	errno = save_errno;
	return fd;
}

/* Raises the error for a directory of the store that cannot be read. */
static void
unreadable(const char *root, const char *key_dir)
{
	ereport(ERROR,
			(errcode_for_file_access(),
			 errmsg("could not read directory \"%s/%s\" of local store \"file://%s\": %m", root, key_dir, root)));
}

/*
 * The MD5 of a regular file in an open directory, as lower-case hex; NULL if
 * it is not a regular file any more or cannot be read. Opened without
 * following a link and without blocking (a FIFO put there meanwhile would
 * otherwise hang the gate), then checked to be a regular file.
 */
static char *
file_md5(int dirfd, const char *name)
{
	int			fd = open_counted(dirfd, name, NOFOLLOW_FLAGS | O_NONBLOCK);
	char	   *volatile hex = NULL;

	if (fd < 0)
		return NULL;
	PG_TRY();
	{
		struct stat st;
		pg_cryptohash_ctx *ctx;
		uint8		digest[MD5_DIGEST_LENGTH];
		char	   *buf;
		ssize_t		n = -1;

		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
			(ctx = pg_cryptohash_create(PG_MD5)) != NULL)
		{
			buf = palloc(65536);
			if (pg_cryptohash_init(ctx) == 0)
				while ((n = read(fd, buf, 65536)) > 0)
				{
					CHECK_FOR_INTERRUPTS();
					if (pg_cryptohash_update(ctx, (uint8 *) buf, n) < 0)
						break;
				}
			if (n == 0 && pg_cryptohash_final(ctx, digest, sizeof(digest)) == 0)
			{
				hex = palloc(2 * MD5_DIGEST_LENGTH + 1);
				for (int i = 0; i < MD5_DIGEST_LENGTH; i++)
					snprintf(hex + 2 * i, 3, "%02x", digest[i]);
			}
			pg_cryptohash_free(ctx);
			pfree(buf);
		}
	}
	PG_FINALLY();
	{
		close_counted(fd);
	}
	PG_END_TRY();
	return hex;
}

/*
 * One entry of a directory, stat'ed: its sort key is its name, with a "/"
 * after a directory's (see walk).
 */
typedef struct DirEntry
{
	char	   *key;			/* name, plus "/" for a directory */
	int			key_len;
	bool		is_dir;
	int64		size;
} DirEntry;

/*
 * Orders a directory's entries as their keys sort in the merge (bytes,
 * then shorter first: INV_ORDER_BYTES), so the walk's keys need no sort.
 */
static int
dir_entry_cmp(const void *a, const void *b)
{
	const DirEntry *ea = a;
	const DirEntry *eb = b;
	int			c = memcmp(ea->key, eb->key, Min(ea->key_len, eb->key_len));

	if (c != 0)
		return c;
	return (ea->key_len > eb->key_len) - (ea->key_len < eb->key_len);
}

/*
 * Reads the next object of an open directory: false at its end. Entries
 * that vanished meanwhile, links, sockets and devices are skipped; a read
 * error raises.
 */
static bool
next_entry(FileWalk *w, DIR *dir, int dirfd, const char *key_dir, DirEntry *out)
{
	struct dirent *de;

	/* errno is cleared before each read: a file that vanished is not an error. */
	while ((errno = 0, de = readdir(dir)) != NULL)
	{
		struct stat st;
		int			name_len;

		CHECK_FOR_INTERRUPTS();
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		/* Relative to the open directory: no walk of the whole path per file. */
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
			(!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)))
			continue;			/* vanished meanwhile, or not an object */
		name_len = strlen(de->d_name);
		out->is_dir = S_ISDIR(st.st_mode);
		out->key_len = name_len + (out->is_dir ? 1 : 0);
		out->key = palloc(out->key_len + 1);
		memcpy(out->key, de->d_name, name_len);
		if (out->is_dir)
			out->key[name_len] = '/';
		out->key[out->key_len] = '\0';
		out->size = (int64) st.st_size;
		return true;
	}
	if (errno != 0)
		unreadable(w->root, key_dir);
	return false;
}

static void walk(FileWalk *w, int dirfd, const char *key_dir);

/*
 * Adds one entry of an open directory to the walk: a file to the batch
 * (with its checksum, when wanted), a directory walked recursively.
 */
static void
visit(FileWalk *w, int dirfd, const char *key_dir, DirEntry *e)
{
	int			dir_len = strlen(key_dir);

	if (e->is_dir)
	{
		char	   *name = pnstrdup(e->key, e->key_len - 1);
		char	   *key = dir_len ? psprintf("%s/%s", key_dir, name) : pstrdup(name);
		int			sub;

		check_stack_depth();	/* a tree of any depth is someone's choice */
		sub = open_counted(dirfd, name, NOFOLLOW_FLAGS | O_DIRECTORY);
		if (sub >= 0)
			walk(w, sub, key);
		else if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP)
			unreadable(w->root, key);
		pfree(key);
		pfree(name);
	}
	else
	{
		MemoryContext old = MemoryContextSwitchTo(w->batch_cxt);
		InvObject	o = {0};
		int			name_len = e->key_len;
		char	   *key = palloc(dir_len + 1 + name_len + 1);

		if (dir_len)
		{
			memcpy(key, key_dir, dir_len);
			key[dir_len] = '/';
			memcpy(key + dir_len + 1, e->key, name_len + 1);
			o.path_len = dir_len + 1 + name_len;
		}
		else
		{
			memcpy(key, e->key, name_len + 1);
			o.path_len = name_len;
		}
		o.path = key;
		o.size = e->size;
		if (w->wants != NULL && w->wants(key, w->arg))
		{
			o.etag = file_md5(dirfd, e->key);
			o.etag_len = o.etag ? strlen(o.etag) : 0;
		}
		inventory_append(&w->batch, &o);
		MemoryContextSwitchTo(old);
		if (w->batch.n >= LISTING_BATCH)
			flush_batch(w);
	}
}

/*
 * Visits a directory's entries in their sorted order, as many as the walk's
 * budget holds: what they hold is the context's own count of its blocks
 * (names rounded up by the allocator, the array's spare half), not an
 * estimate. They are read into entries_cxt, which is reset afterwards.
 * False when the directory has more entries, which are left unread (and
 * the ones visited were visited as they came, unsorted).
 */
static bool
visit_sorted(FileWalk *w, DIR *dir, int dirfd, const char *key_dir, MemoryContext entries_cxt)
{
	MemoryContext old = MemoryContextSwitchTo(entries_cxt);
	DirEntry   *entries = NULL;
	size_t		n = 0;
	size_t		cap = 0;
	size_t		held = 0;
	bool		complete = false;
	DirEntry	e;

	while (w->held + held < w->budget && n < MaxAllocHugeSize / sizeof(DirEntry) / 2)
	{
		if (!next_entry(w, dir, dirfd, key_dir, &e))
		{
			complete = true;
			break;
		}
		if (n == cap)
		{
			cap = cap ? cap * 2 : 64;
			entries = entries ? repalloc_huge(entries, sizeof(DirEntry) * cap)
				: palloc_extended(sizeof(DirEntry) * cap, MCXT_ALLOC_HUGE);
		}
		entries[n++] = e;
		if (n % 64 == 0)
			held = MemoryContextMemAllocated(entries_cxt, true);
	}
	held = MemoryContextMemAllocated(entries_cxt, true);
	MemoryContextSwitchTo(old);
	if (complete)
		qsort(entries, n, sizeof(DirEntry), dir_entry_cmp);
	w->held += held;
	for (size_t i = 0; i < n; i++)
		visit(w, dirfd, key_dir, &entries[i]);
	w->held -= held;
	MemoryContextReset(entries_cxt);
	return complete;
}

/*
 * Visits the rest of a directory too large to hold, or whose order is not
 * wanted, as its entries come (a sorted comparison sorts them), their names
 * freed every batch.
 */
static void
visit_rest(FileWalk *w, DIR *dir, int dirfd, const char *key_dir, MemoryContext entries_cxt)
{
	int			since_reset = 0;
	MemoryContext old = MemoryContextSwitchTo(entries_cxt);
	DirEntry	e;

	while (next_entry(w, dir, dirfd, key_dir, &e))
	{
		MemoryContextSwitchTo(old);
		visit(w, dirfd, key_dir, &e);
		if (++since_reset >= LISTING_BATCH)
		{
			MemoryContextReset(entries_cxt);
			since_reset = 0;
		}
		MemoryContextSwitchTo(entries_cxt);
	}
	MemoryContextSwitchTo(old);
}

/*
 * Adds the regular files under an open directory (key prefix key_dir) to
 * the walk's batches, recursively. Takes ownership of dirfd (from
 * open_counted). Subdirectories are opened relative to their parent without
 * following links, so the walk never leaves the directory it started in;
 * links, sockets and devices are not objects.
 *
 * The files come in byte order of their keys, so the sorted comparison
 * can spool the listing instead of sorting it (sorted_inventory.c checks
 * the order anyway and sorts whatever does not come in it): a directory's
 * entries are sorted by name with a "/" after a directory's name, and each
 * directory is walked where it sorts. That is the order of the full keys:
 * every key below an entry starts with its sort key (a file's key is its
 * name; a directory's keys continue after its "/"), so when two sort keys
 * differ within the shorter one, all keys below the two differ there too;
 * and the shorter cannot be a prefix of the other unless it is a file's
 * name, whose one key then sorts first, as bytes do (names hold no "/").
 * Plain names would be wrong: "a/x" (in directory "a") sorts after the
 * file "a.b", since "." is below "/". A directory with more entries than a
 * quarter of work_mem holds (all levels of the walk together) is listed as
 * it is read, and sorted later.
 */
static void
walk(FileWalk *w, int dirfd, const char *key_dir)
{
	DIR		   *volatile dir = fdopendir(dirfd);
	MemoryContext parent_cxt = CurrentMemoryContext;
	MemoryContext entries_cxt;

	if (dir == NULL)
	{
		close_counted(dirfd);
		unreadable(w->root, key_dir);
	}
	entries_cxt = AllocSetContextCreate(CurrentMemoryContext, "finalize directory entries", ALLOCSET_DEFAULT_SIZES);
	PG_TRY();
	{
		if (!visit_sorted(w, dir, dirfd, key_dir, entries_cxt))
			visit_rest(w, dir, dirfd, key_dir, entries_cxt);
	}
	PG_FINALLY();
	{
		closedir(dir);
		ReleaseExternalFD();
		/* An error may have left the entries' context current. */
		MemoryContextSwitchTo(parent_cxt);
		MemoryContextDelete(entries_cxt);
	}
	PG_END_TRY();
}

/*
 * Lists the files whose keys start with prefix (which ends in "/") under a
 * local store's root into sink, a batch at a time; with in_order, in byte
 * order of their keys as far as work_mem allows (see walk), for a sink that
 * would otherwise sort them. The root may be reached through links (an
 * administrator's choice); below it, no part of the prefix is: a prefix
 * that passes through a link has no objects.
 */
void
filestore_list(const char *root, const char *prefix, ListingSink *sink,
			   WantsChecksum wants_checksum, void *arg, bool in_order)
{
	int			fd = open_counted(AT_FDCWD, root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char	   *dir = pstrdup(prefix);
	char	   *part;
	char	   *save = NULL;
	FileWalk	w = {0};

	if (fd < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("local store \"file://%s\" does not exist", root),
				 errhint("Check the \"store\" field of the manifest.")));
	for (part = strtok_r(dir, "/", &save); part != NULL; part = strtok_r(NULL, "/", &save))
	{
		int			next = open_step(fd, part, NOFOLLOW_FLAGS | O_DIRECTORY);
		int			saved_errno = errno;

		if (next < 0)
		{
			if (saved_errno == ENOENT || saved_errno == ENOTDIR || saved_errno == ELOOP)
				return;			/* no such prefix (or a link): no objects */
			errno = saved_errno;
			unreadable(root, prefix);
		}
		fd = next;
	}
	w.root = root;
	w.sink = sink;
	w.wants = wants_checksum;
	w.arg = arg;
	w.batch_cxt = AllocSetContextCreate(CurrentMemoryContext, "finalize listing batch", ALLOCSET_DEFAULT_SIZES);
	/*
	 * A quarter of work_mem for the entries held over all levels: the two
	 * sets being compared take work_mem each (and both a spool and its sort
	 * for a moment when one turns out of order).
	 */
	w.budget = in_order ? (size_t) work_mem * 1024 / 4 : 0;
	/* Keys are the prefix (without its last "/") and the names below it. */
	walk(&w, fd, pnstrdup(prefix, Max((int) strlen(prefix) - 1, 0)));
	flush_batch(&w);
	MemoryContextDelete(w.batch_cxt);
}

/*
 * Reads one object of the store (a manifest's files_location) a chunk at a
 * time into fn: opened part by part from the root without following a
 * link, and only if it is a regular file, like every file of a listing. A
 * file that cannot be opened or read is an error in the system's words.
 * False, with nothing past max_bytes fed, when it is longer than that.
 */
bool
filestore_read(const char *root, const char *key, size_t max_bytes, FileChunkFn fn, void *arg)
{
	volatile bool fits = true;

	int			fd = open_counted(AT_FDCWD, root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char	   *parts = pstrdup(key);
	char	   *save = NULL;
	char	   *part = strtok_r(parts, "/", &save);
	volatile int file = -1;

	if (fd < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("local store \"file://%s\" does not exist", root),
				 errhint("Check the \"store\" field of the manifest.")));
	while (part != NULL)
	{
		char	   *next_part = strtok_r(NULL, "/", &save);
		int			next = open_step(fd, part, NOFOLLOW_FLAGS | (next_part ? O_DIRECTORY : O_NONBLOCK));
		int			saved_errno = errno;

		if (next < 0)
		{
			errno = saved_errno;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not open manifest object \"file://%s/%s\": %m", root, key),
					 errdetail("Below the store's root no symbolic link is followed."),
					 errhint("Check the \"files_location\" field of the manifest.")));
		}
		fd = next;
		part = next_part;
	}
	file = fd;
	PG_TRY();
	{
		struct stat st;
		char	   *buf = palloc(65536);
		ssize_t		n;
		size_t		done = 0;

		if (fstat(file, &st) != 0 || !S_ISREG(st.st_mode))
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("manifest object \"file://%s/%s\" is not a regular file", root, key),
					 errhint("Check the \"files_location\" field of the manifest.")));
		fits = (uint64) st.st_size <= max_bytes;
		while (fits && (n = read(file, buf, 65536)) != 0)
		{
			if (n < 0)
			{
				if (errno == EINTR)
					continue;
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not read manifest object \"file://%s/%s\": %m", root, key)));
			}
			CHECK_FOR_INTERRUPTS();
			if ((size_t) n > max_bytes - done)
				fits = false;	/* it grew meanwhile */
			else
			{
				fn(arg, buf, n);
				done += n;
			}
		}
		pfree(buf);
	}
	PG_FINALLY();
	{
		close_counted(file);
	}
	PG_END_TRY();
	return fits;
}
