/*
 * redact.h
 *     Secrets kept out of the texts a remote system sends back (an answer's
 *     body, curl's words about a URL): one implementation for the lake's
 *     catalogs and the alerts' webhook targets; and the excerpt of such a
 *     text that a message or a column keeps.
 */
#ifndef FINALIZE_REDACT_H
#define FINALIZE_REDACT_H

#include "nodes/pg_list.h"

/*
 * The shortest secret redaction replaces, the least every user-mapping
 * validator accepts: a shorter string could not be told from ordinary text
 * (a one-letter "secret" would rewrite every word that holds the letter).
 * A secret from elsewhere (an OAuth2 token) that is shorter is refused
 * where it arrives, never used.
 */
#define REDACT_MIN_SECRET 8

extern char *redact_secrets(const char *text, List *secrets);
extern char *text_excerpt(const char *text, size_t max);

#endif							/* FINALIZE_REDACT_H */
