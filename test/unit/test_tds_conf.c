/*
 * Unit tests of a source's private FreeTDS configuration and of reading
 * FreeTDS's log of a failed TLS handshake (tds_conf.c). The log lines are
 * the ones FreeTDS 1.3.17 writes (src/tds/tls.c, login.c), as captured in
 * ../shared/reference/freetds-tls.md. Built and run by
 * test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "mssql/tds_conf.h"

#include "tap.h"

/* A configuration with everything set, as the worker writes it. */
static TdsConf
full(void)
{
	TdsConf		c;

	c.section = "finalize-16384.invalid";
	c.host = "sql1.example.com";
	c.port = 1433;
	c.encrypt = "require";
	c.ca_file = "/etc/finalize/ca.pem";
	c.dump_path = "/var/lib/postgresql/15/main/pg_finalize/tds/16384.log";
	return c;
}

int
main(void)
{
	char		buf[2048];
	char		detail[256];
	unsigned	status;
	TdsConf		c = full();
	int			n;

	/* Values the configuration can carry, and the ones it cannot. */
	check(tds_conf_value_ok("sql1.example.com"), "a host name is fine");
	check(tds_conf_value_ok("/etc/ssl/certs/ca-certificates.crt"), "a path is fine");
	check(!tds_conf_value_ok(""), "empty is refused");
	check(!tds_conf_value_ok("h;encryption = off"), "';' (a comment) is refused");
	check(!tds_conf_value_ok("h#x"), "'#' (a comment) is refused");
	check(!tds_conf_value_ok("a]b"), "']' (ends a section name) is refused");
	check(!tds_conf_value_ok("a=b"), "'=' is refused");
	check(!tds_conf_value_ok("h\nencryption = off"), "a newline (a new line of options) is refused");
	check(!tds_conf_value_ok("/a  b"), "two blanks (FreeTDS collapses them) are refused");
	check(!tds_conf_value_ok(" /a"), "a leading blank is refused");
	memset(buf, 'a', 201);
	buf[201] = '\0';
	check(!tds_conf_value_ok(buf), "more than 200 characters is refused");
	buf[200] = '\0';
	check(tds_conf_value_ok(buf), "200 characters is fine");

	/* The file: an empty [global], one section, the CA only when verifying. */
	n = tds_conf_format(buf, sizeof(buf), &c);
	check(n > 0 && strncmp(buf, "[global]\n[finalize-16384.invalid]\n", 34) == 0, "global section first, empty");
	check(strstr(buf, "\tencryption = require\n") != NULL, "encryption written");
	check(strstr(buf, "\tca file = /etc/finalize/ca.pem\n") != NULL, "ca file written");
	check(strstr(buf, "\tcheck certificate hostname = yes\n") != NULL, "hostname checked");
	check(strstr(buf, "\tdebug flags = 0x6\n") != NULL, "errors only in the log (no packet dumps)");
	c.ca_file = NULL;
	n = tds_conf_format(buf, sizeof(buf), &c);
	check(n > 0 && strstr(buf, "ca file") == NULL, "no ca file when nothing is verified");
	c = full();
	c.host = "h;x";
	check(tds_conf_format(buf, sizeof(buf), &c) == -1, "a host that would break the file is refused");
	c = full();
	c.port = 0;
	check(tds_conf_format(buf, sizeof(buf), &c) == -1, "port 0 is refused");
	c = full();
	check(tds_conf_format(buf, 40, &c) == -1, "a buffer too small is refused, not truncated");

	/* Reading the log of a failed login. */
	check(tds_conf_tls_failure(NULL, &status, detail, sizeof(detail)) == TLS_FAILURE_NONE, "no log, no reason");
	check(tds_conf_tls_failure("net.c:400:Connection refused\n", &status, detail, sizeof(detail)) ==
		  TLS_FAILURE_NONE, "a refused TCP connection is no TLS failure");
	check(tds_conf_tls_failure("tls.c:372:Certificate status: 66\ntls.c:560:handshake failed: Error in the certificate.\n",
							   &status, detail, sizeof(detail)) == TLS_FAILURE_CERT_STATUS && status == 66,
		  "unknown issuer: status 66");
	check(tds_conf_tls_failure("tls.c:372:Certificate status: 1026\n", &status, detail, sizeof(detail)) ==
		  TLS_FAILURE_CERT_STATUS && status == 1026, "expired: status 1026");
	check(tds_conf_tls_failure("tls.c:433:Certificate hostname does not match\ntls.c:560:handshake failed: Error in the certificate.\n",
							   &status, detail, sizeof(detail)) == TLS_FAILURE_HOSTNAME, "name mismatch");
	check(tds_conf_tls_failure("tls.c:484:loading CA file failed: Error while reading file.\n",
							   &status, detail, sizeof(detail)) == TLS_FAILURE_STEP &&
		  strcmp(detail, "loading CA file failed: Error while reading file.") == 0, "CA file unreadable, in GnuTLS's words");
	check(tds_conf_tls_failure("tls.c:560:handshake failed: A TLS fatal alert has been received.\n",
							   &status, detail, sizeof(detail)) == TLS_FAILURE_STEP &&
		  strstr(detail, "fatal alert") != NULL, "another handshake failure keeps GnuTLS's words");
	check(tds_conf_tls_failure("login.c:412:login packet rejected\n", &status, detail, sizeof(detail)) ==
		  TLS_FAILURE_NOT_NEGOTIATED, "a login refused before any TLS step: not negotiated");
	check(tds_conf_tls_failure("tls.c:1:Certificate status: 66\n", &status, detail, 1) == TLS_FAILURE_CERT_STATUS &&
		  detail[0] == '\0', "a detail buffer of one byte stays a string");
	return tap_done();
}
