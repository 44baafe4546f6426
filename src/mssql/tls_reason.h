/*
 * tls_reason.h
 *     GnuTLS's words for a certificate verification status.
 */
#ifndef FINALIZE_TLS_REASON_H
#define FINALIZE_TLS_REASON_H

#include <stddef.h>

extern void tls_status_text(unsigned status, char *buf, size_t size);

#endif							/* FINALIZE_TLS_REASON_H */
