/*
 * filestore.c
 *     Local stores (file:// URLs): the files under a prefix, walked directly.
 *
 * The listing has what an S3 listing has: keys relative to the store's
 * root, and sizes; an MD5 checksum (what S3 reports as the ETag of an object
 * uploaded in one part) is computed only for the files whose manifest entry
 * carries one, since reading every file would dominate the gate's cost.
 * Symbolic links are not followed, so a listing never leaves the root.
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cryptohash.h"
#include "common/md5.h"
#include "miscadmin.h"
#include "storage/fd.h"

#include "filestore.h"

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

/* The MD5 of a file as lower-case hex, or NULL if it cannot be read. */
static char *
file_md5(const char *fullpath)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_MD5);
	uint8		digest[MD5_DIGEST_LENGTH];
	char	   *hex = palloc(2 * MD5_DIGEST_LENGTH + 1);
	char	   *buf = palloc(65536);
	int			fd = OpenTransientFile(fullpath, O_RDONLY | PG_BINARY);
	ssize_t		n;

	if (fd < 0 || pg_cryptohash_init(ctx) < 0)
	{
		if (fd >= 0)
			CloseTransientFile(fd);
		pg_cryptohash_free(ctx);
		return NULL;
	}
	while ((n = read(fd, buf, 65536)) > 0)
	{
		CHECK_FOR_INTERRUPTS();
		if (pg_cryptohash_update(ctx, (uint8 *) buf, n) < 0)
			break;
	}
	CloseTransientFile(fd);
	if (n != 0 || pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
	{
		pg_cryptohash_free(ctx);
		return NULL;
	}
	pg_cryptohash_free(ctx);
	for (int i = 0; i < MD5_DIGEST_LENGTH; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	return hex;
}

/* Adds the regular files under dir (key prefix key_dir) to out, recursively. */
static void
walk(const char *root, const char *key_dir, Inventory *out, WantsChecksum wants, void *arg)
{
	char	   *dirpath = key_dir[0] ? psprintf("%s/%s", root, key_dir) : pstrdup(root);
	DIR		   *dir = AllocateDir(dirpath);
	struct dirent *de;

	if (dir == NULL && (errno == ENOENT || errno == ENOTDIR))
	{
		pfree(dirpath);
		return;					/* no such prefix: no objects */
	}
	while ((de = ReadDir(dir, dirpath)) != NULL)
	{
		char	   *key;
		char	   *full;
		struct stat st;

		CHECK_FOR_INTERRUPTS();
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		/* Relative to the open directory: no walk of the whole path per file. */
		if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;			/* vanished meanwhile */
		if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
			continue;			/* links, sockets: not objects */
		key = key_dir[0] ? psprintf("%s/%s", key_dir, de->d_name) : pstrdup(de->d_name);
		if (S_ISDIR(st.st_mode))
			walk(root, key, out, wants, arg);
		else if (wants != NULL && wants(key, arg))
		{
			full = psprintf("%s/%s", root, key);
			inventory_add(out, key, (int64) st.st_size, file_md5(full));
			pfree(full);
		}
		else
			inventory_add(out, key, (int64) st.st_size, NULL);
		pfree(key);
	}
	FreeDir(dir);
	pfree(dirpath);
}

/*
 * Lists the files whose keys start with prefix (which ends in "/") under a
 * local store's root.
 */
void
filestore_list(const char *root, const char *prefix, Inventory *out,
			   WantsChecksum wants_checksum, void *arg)
{
	struct stat st;
	size_t		len = strlen(prefix);
	char	   *dir = pnstrdup(prefix, len > 0 && prefix[len - 1] == '/' ? len - 1 : len);

	if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("local store \"file://%s\" does not exist", root),
				 errhint("Check the \"store\" field of the manifest.")));
	walk(root, dir, out, wants_checksum, arg);
}
