/*
 * tls_reason.c
 *     GnuTLS's words for a certificate verification status: the one file
 *     that calls GnuTLS. FreeTDS (built with GnuTLS on Debian) logs only the
 *     status bits of a failed verification ("Certificate status: 66"); the
 *     library that set them also says what they mean ("The certificate is NOT
 *     trusted. The certificate issuer is unknown.").
 */
#include <stdio.h>
#include <string.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "mssql/tls_reason.h"

/* The text of a gnutls_certificate_status_t, into buf. */
void
tls_status_text(unsigned status, char *buf, size_t size)
{
	gnutls_datum_t out = {NULL, 0};

	if (size == 0)
		return;
	if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0) < 0 || out.data == NULL)
		snprintf(buf, size, "verification status %u", status);
	else
	{
		size_t		len = out.size;

		/* GnuTLS ends its sentences with a blank. */
		while (len > 0 && (out.data[len - 1] == ' ' || out.data[len - 1] == '\0'))
			len--;
		snprintf(buf, size, "%.*s", (int) len, (const char *) out.data);
	}
	gnutls_free(out.data);
}
