/*
 * tds_conf.c
 *     A source's private FreeTDS configuration, and what FreeTDS's log says
 *     about a failed TLS handshake.
 *
 * FreeTDS 1.3 takes its TLS settings (encryption, ca file, check
 * certificate hostname) only from a configuration file: DB-Library's
 * DBSETLENCRYPT is unimplemented and a login record has no CA file. So each
 * connection gets a file of its own, written just before dbopen and named
 * through dbsetifile (mssql.c), holding an empty [global] section and one
 * section named finalize-<server oid>.invalid: a name that never resolves,
 * so that FreeTDS never falls back to the machine's freetds.conf (whose
 * [global] could say "encryption = off") and no setting of one source can
 * reach another's connection.
 *
 * FreeTDS reports every failed TLS handshake to DB-Library's error handler
 * as 20002 "Adaptive Server connection failed"; the reason (GnuTLS's
 * verification status, a hostname mismatch, an unreadable CA file) is
 * written only to its log. The section therefore also names a log of the
 * connection's errors, which login.c reads back after a failed login.
 *
 * Nothing here does I/O or allocates: the unit tests link it alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mssql/tds_conf.h"

/*
 * Whether a value can be written on a line of freetds.conf and read back
 * as it is: FreeTDS cuts a value at ';' or '#', a section name at ']',
 * collapses runs of blanks, and reads lines of at most 255 bytes.
 */
bool
tds_conf_value_ok(const char *value)
{
	size_t		len = strlen(value);

	if (len == 0 || len > 200)
		return false;
	for (const unsigned char *c = (const unsigned char *) value; *c; c++)
	{
		if (*c < 0x20 || *c == 0x7f || strchr(";#[]=", *c) != NULL)
			return false;
		if (*c == ' ' && c[1] == ' ')
			return false;
	}
	return value[0] != ' ' && value[len - 1] != ' ';
}

/*
 * The configuration file of one connection into buf. Returns its length,
 * or -1 when a value cannot be written safely or buf is too small. The log
 * keeps errors only (debug flags 0x6: severe and error; no packet dumps, so
 * no password), appended to a file login.c empties before each login.
 */
int
tds_conf_format(char *buf, size_t size, const TdsConf *conf)
{
	int			n;

	if (!tds_conf_value_ok(conf->section) || !tds_conf_value_ok(conf->host) ||
		!tds_conf_value_ok(conf->encrypt) || !tds_conf_value_ok(conf->dump_path) ||
		(conf->ca_file != NULL && !tds_conf_value_ok(conf->ca_file)) ||
		conf->port < 1 || conf->port > 65535)
		return -1;
	n = snprintf(buf, size,
				 "[global]\n"
				 "[%s]\n"
				 "\thost = %s\n"
				 "\tport = %d\n"
				 "\tencryption = %s\n"
				 "%s%s%s"
				 "\tcheck certificate hostname = yes\n"
				 "\tdump file = %s\n"
				 "\tdump file append = yes\n"
				 "\tdebug flags = 0x6\n",
				 conf->section, conf->host, conf->port, conf->encrypt,
				 conf->ca_file ? "\tca file = " : "", conf->ca_file ? conf->ca_file : "",
				 conf->ca_file ? "\n" : "",
				 conf->dump_path);
	return (n < 0 || (size_t) n >= size) ? -1 : n;
}

/* Copies the rest of the line from p into detail. */
static void
copy_line(const char *p, char *detail, size_t detail_size)
{
	size_t		len = strcspn(p, "\r\n");

	if (detail_size == 0)
		return;
	if (len >= detail_size)
		len = detail_size - 1;
	memcpy(detail, p, len);
	detail[len] = '\0';
}

/*
 * Why the TLS handshake of a login failed, from FreeTDS's log of it
 * (src/tds/tls.c of FreeTDS 1.3): the verification status, a hostname
 * mismatch, or the step that failed with GnuTLS's words ("loading CA file
 * failed: Error while reading file."). A login rejected with none of these
 * is NOT_NEGOTIATED: with encryption required, the server did not agree to
 * encrypt. The most specific line wins.
 */
TlsFailure
tds_conf_tls_failure(const char *log, unsigned *status, char *detail, size_t detail_size)
{
	static const char *const steps[] = {
		"loading CA file failed: ", "loading CRL file failed: ", "initializing tls failed: ",
		"allocating credentials failed: ", "initializing session failed: ", "setting credential failed: ",
	};
	const char *p;
	TlsFailure	found = TLS_FAILURE_NONE;

	if (detail_size > 0)
		detail[0] = '\0';
	*status = 0;
	if (log == NULL)
		return TLS_FAILURE_NONE;
	if ((p = strstr(log, "Certificate hostname does not match")) != NULL)
	{
		copy_line(p, detail, detail_size);
		return TLS_FAILURE_HOSTNAME;
	}
	if ((p = strstr(log, "Certificate status: ")) != NULL)
	{
		*status = (unsigned) strtoul(p + strlen("Certificate status: "), NULL, 10);
		copy_line(p, detail, detail_size);
		return TLS_FAILURE_CERT_STATUS;
	}
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if ((p = strstr(log, steps[i])) != NULL)
		{
			copy_line(p, detail, detail_size);
			return TLS_FAILURE_STEP;
		}
	if ((p = strstr(log, "handshake failed: ")) != NULL)
	{
		copy_line(p, detail, detail_size);
		found = TLS_FAILURE_STEP;
	}
	else if (strstr(log, "login packet rejected") != NULL)
		found = TLS_FAILURE_NOT_NEGOTIATED;
	return found;
}
