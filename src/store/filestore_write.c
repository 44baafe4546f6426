/*
 * filestore_write.c
 *     One small object of a local store (file://) read whole or replaced
 *     whole: what a publication's _SUCCESS marker needs.
 *
 * The path rules are the listing's (filestore.c): the root may be reached
 * through links (an administrator's choice); below it every part is opened
 * relative to its parent without following a link, and only a regular file
 * is read, so nothing outside the root is ever read or written and no FIFO
 * blocks a read. Unlike the listing, missing directories below the root
 * are created, as a key of an object store needs none (a marker's
 * directory may not exist yet for a period without data); the root itself
 * never is: a store that is not there (an unmounted volume) is an error.
 *
 * A replacement is atomic and durable: a temporary file in the object's
 * directory, written and fsync'ed, renamed over the object, then the
 * directory fsync'ed, so a reader sees the old object or the new one,
 * never a part of one, and a crash keeps one of them. Files are created
 * readable by everyone on the host (0644; directories 0755) as COPY ... TO
 * a file creates them: readers of a lake are other programs.
 *
 * Nothing here raises but for memory: the delivery runs with no
 * transaction open. Failures come back in the system's words (strerror)
 * with a code, as S3's errors do.
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/fd.h"

#include "store/filestore_write.h"

#define NOFOLLOW_DIR (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* Sets a local store's error: its code and a sentence naming the path. */
static void
file_error(StoreError *err, const char *code, const char *root, const char *path, int errnum)
{
	err->http_status = 0;
	strlcpy(err->code, code, sizeof(err->code));
	snprintf(err->message, sizeof(err->message), "\"%s/%s\": %s", root, path, strerror(errnum));
}

/* Opens name relative to dirfd, counted in PostgreSQL's budget of files; -1 with errno set. */
static int
open_counted(int dirfd, const char *name, int flags, mode_t mode)
{
	int			fd;
	int			save_errno;

	if (!AcquireExternalFD())
	{
		errno = EMFILE;
		return -1;
	}
	fd = openat(dirfd, name, flags, mode);
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
 * Opens the directory that holds key below root, part by part without
 * following a link, creating the missing ones when create is set; *name
 * is then the key's last part. -1 with err set when a part is missing (not
 * creating: *absent), a link, not a directory, or cannot be opened.
 */
static int
open_parent(const char *root, const char *key, bool create, const char **name, bool *absent, StoreError *err)
{
	char	   *parts = pstrdup(key);
	char	   *last = strrchr(parts, '/');
	char	   *save = NULL;
	int			fd = open_counted(AT_FDCWD, root, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);

	*absent = false;
	*name = key + (last ? last + 1 - parts : 0);
	if (fd < 0)
	{
		file_error(err, errno == ENOENT ? "NoSuchStore" : "StoreUnreadable", root, "", errno);
		return -1;
	}
	if (last != NULL)
	{
		*last = '\0';
		for (char *part = strtok_r(parts, "/", &save); part; part = strtok_r(NULL, "/", &save))
		{
			bool		made = create && mkdirat(fd, part, 0755) == 0;
			int			next = open_counted(fd, part, NOFOLLOW_DIR, 0);
			int			save_errno = errno;

			if (next >= 0 && made)
				(void) fchmod(next, 0755);	/* not the server's umask */
			close_counted(fd);
			if (next < 0)
			{
				*absent = !create && save_errno == ENOENT;
				file_error(err, save_errno == ELOOP || save_errno == ENOTDIR ? "NotADirectory" : "OpenFailed",
						   root, key, save_errno);
				return -1;
			}
			fd = next;
		}
	}
	return fd;
}

/*
 * Reads one small file below root whole into *body (palloc'd,
 * NUL-terminated, *len bytes). *found is false, and the result true, when
 * there is none. False with err set when it is a link, not a regular file,
 * longer than max_bytes (ResponseTooLarge) or cannot be read.
 */
bool
filestore_read_small(const char *root, const char *key, size_t max_bytes, char **body, size_t *len,
					 bool *found, StoreError *err)
{
	const char *name;
	bool		absent;
	int			dir = open_parent(root, key, false, &name, &absent, err);
	int			fd;
	struct stat st;
	ssize_t		n = 0;

	*found = false;
	*body = NULL;
	*len = 0;
	if (dir < 0)
		return absent;
	fd = open_counted(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
	close_counted(dir);
	if (fd < 0)
	{
		file_error(err, errno == ELOOP ? "SymbolicLink" : "OpenFailed", root, key, errno);
		return errno == ENOENT;
	}
	if (fstat(fd, &st) != 0)
		file_error(err, "ReadFailed", root, key, errno);
	else if (!S_ISREG(st.st_mode))
		file_error(err, "NotAFile", root, key, EINVAL);
	else if ((size_t) st.st_size > max_bytes)
		file_error(err, "ResponseTooLarge", root, key, EFBIG);
	else
	{
		*body = palloc(st.st_size + 1);
		/* Up to the size seen: a file that grows meanwhile is read as it was. */
		while (*len < (size_t) st.st_size &&
			   ((n = read(fd, *body + *len, st.st_size - *len)) > 0 || (n < 0 && errno == EINTR)))
			*len += n > 0 ? n : 0;
		(*body)[*len] = '\0';
		if (n < 0)
			file_error(err, "ReadFailed", root, key, errno);
		else
			*found = true;
	}
	close_counted(fd);
	return *found;
}

/* Writes all of a body to fd; false with errno set when it could not. */
static bool
write_all(int fd, const char *body, size_t len)
{
	for (size_t done = 0; done < len;)
	{
		ssize_t		w = write(fd, body + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
		{
			if (w == 0)
				errno = ENOSPC;
			return false;
		}
		done += w;
	}
	return true;
}

/*
 * Replaces (or creates) one file below root with body, atomically and
 * durably (see the top of this file), creating missing directories below
 * the root. The temporary file is named after the process, begins with a
 * dot (readers of lakes skip such names), and is removed on a failure.
 * False with err set when any step fails.
 */
bool
filestore_replace(const char *root, const char *key, const char *body, size_t len, StoreError *err)
{
	const char *name;
	bool		absent;
	int			dir = open_parent(root, key, true, &name, &absent, err);
	char	   *tmp = NULL;
	int			fd;
	const char *step = NULL;

	if (dir < 0)
		return false;
	/*
	 * A new file of a name nobody can guess (O_EXCL): a file or a hard link
	 * planted under a predictable name would be truncated and written.
	 */
	fd = -1;
	for (int i = 0; i < 8 && fd < 0; i++)
	{
		uint64		nonce = 0;

		if (!pg_strong_random(&nonce, sizeof(nonce)))
			break;
		tmp = psprintf(".%s.finalize-%016llx.tmp", name, (unsigned long long) nonce);
		fd = open_counted(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0)
		step = "CreateFailed";
	else
	{
		if (fchmod(fd, 0644) != 0 || !write_all(fd, body, len))
			step = "WriteFailed";
		else if (pg_fsync(fd) != 0)
			step = "FsyncFailed";
		close_counted(fd);
		if (step == NULL && renameat(dir, tmp, dir, name) != 0)
			step = "RenameFailed";
		else if (step == NULL && pg_fsync(dir) != 0)
			step = "FsyncFailed";
	}
	if (step != NULL)
	{
		int			save_errno = errno;

		/* Only a file of ours: none was created when the create failed. */
		if (fd >= 0)
			(void) unlinkat(dir, tmp, 0);
		file_error(err, step, root, key, save_errno);
	}
	close_counted(dir);
	return step == NULL;
}
