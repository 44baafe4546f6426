/*
 * keytab_file.c
 *     A Kerberos source's keytab as a file of PostgreSQL's temporary
 *     directory (base/pgsql_tmp/pgsql_tmp_finalize_<server oid>.keytab.<pid>,
 *     mode 0600): the user mapping holds it (base64), and MIT's library reads
 *     keytabs from files, so kerberos.c writes it here and copies it into
 *     memory at once, before any request to the KDC; the file is then
 *     removed. That directory is never in a base backup, and PostgreSQL
 *     empties it when it starts and after a crash (remove_temp_files_after_
 *     crash): a file a process left by dying in between goes then.
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "core/pg_compat.h"
#include "mssql/keytab_file.h"
#include "mssql/mssql_options.h"

/*
 * Writes the user mapping's keytab (base64) to path, mode 0600.
 * False with err set when it is not base64 or cannot be written.
 */
bool
keytab_file_write(const MssqlConnInfo *k, const char *path, MssqlError *err)
{
	int			n;
	char	   *raw = mssql_keytab_decode(k->keytab, &n);
	int			fd;
	bool		ok;

	if (raw == NULL)
	{
		mssql_error_fail(err, "Kerberos: the keytab option of the user mapping is not a keytab in base64 "
						 "(base64 -w0 file.keytab) of at most 64 kB");
		err->kerberos_failed = true;
		return false;
	}
	/* a file left by a process of the same pid, or anything planted there, is not written through */
	(void) unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | PG_BINARY, S_IRUSR | S_IWUSR);
	ok = fd >= 0 && write(fd, raw, n) == n;
	if (fd >= 0 && close(fd) != 0)
		ok = false;
	explicit_bzero(raw, n);
	pfree(raw);
	if (!ok)
	{
		mssql_error_fail(err, psprintf("Kerberos: could not write the keytab to \"%s\": %m", path));
		err->local_failed = true;
		(void) unlink(path);
	}
	return ok;
}
