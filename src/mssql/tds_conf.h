/*
 * tds_conf.h
 *     A source's private FreeTDS configuration, and what FreeTDS's log says
 *     about a failed TLS handshake. Pure: no I/O, no allocation.
 */
#ifndef FINALIZE_TDS_CONF_H
#define FINALIZE_TDS_CONF_H

#include <stdbool.h>
#include <stddef.h>

/* What goes into the one section of a source's configuration file. */
typedef struct TdsConf
{
	const char *section;		/* a name that never resolves: finalize-<oid>.invalid */
	const char *host;
	int			port;
	const char *encrypt;		/* "off", "request" or "require" */
	const char *ca_file;		/* NULL: verify nothing (trust_server_certificate) */
	const char *dump_path;		/* FreeTDS's log of this connection (errors only) */
} TdsConf;

/* Why a TLS connection failed, as far as FreeTDS's log tells. */
typedef enum TlsFailure
{
	TLS_FAILURE_NONE = 0,		/* the log shows no TLS failure */
	TLS_FAILURE_CERT_STATUS,	/* the chain did not verify: status holds GnuTLS's bits */
	TLS_FAILURE_HOSTNAME,		/* the certificate does not name the host */
	TLS_FAILURE_STEP,			/* a step failed ("loading CA file failed: ..."): detail */
	TLS_FAILURE_NOT_NEGOTIATED	/* a login refused before any TLS step (no encryption agreed) */
} TlsFailure;

extern bool tds_conf_value_ok(const char *value);
extern int	tds_conf_format(char *buf, size_t size, const TdsConf *conf);
extern TlsFailure tds_conf_tls_failure(const char *log, unsigned *status, char *detail, size_t detail_size);

#endif							/* FINALIZE_TDS_CONF_H */
