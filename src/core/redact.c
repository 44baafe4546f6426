/*
 * redact.c
 *     Replaces every secret in a text by "[redacted]": each secret as it
 *     was sent, JSON-escaped (with "/" as is and as "\/", as servers echo
 *     it) and percent-encoded, the longest form first, so that a secret
 *     that holds another is replaced whole.
 *
 * Each form is replaced in one left-to-right pass that resumes after the
 * replacement and never reads what it wrote: "[redacted]" may itself hold
 * a secret's letters, and a pass that started over would never end (nor
 * is a "[redacted]" already there read again: a text redacted twice is
 * redacted once). The passes are linear in the text (which callers bound:
 * an answer's body, an error message), and check for interrupts between
 * replacements.
 * Secrets shorter than REDACT_MIN_SECRET are left out (see redact.h).
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"

#include "core/http.h"
#include "core/redact.h"

#define MARKER "[redacted]"

/* Appends text[from, stop) with every occurrence of form in it replaced. */
static void
replace_between(StringInfo buf, const char *from, const char *stop, const char *form)
{
	size_t		n = strlen(form);
	const char *hit;

	while ((hit = memmem(from, stop - from, form, n)) != NULL)
	{
		CHECK_FOR_INTERRUPTS();
		appendBinaryStringInfo(buf, from, hit - from);
		appendStringInfoString(buf, MARKER);
		from = hit + n;
	}
	appendBinaryStringInfo(buf, from, stop - from);
}

/*
 * The text with every occurrence of form replaced, or text itself when
 * there is none. What was replaced before is left alone (a secret inside
 * "[redacted]", such as "redacted", is not replaced again however often a
 * text is redacted), so redacting is idempotent.
 */
static char *
replace_all(char *text, const char *form)
{
	const char *from = text;
	StringInfoData buf;

	if (strstr(text, form) == NULL)
		return text;
	initStringInfo(&buf);
	for (;;)
	{
		const char *marker = strstr(from, MARKER);

		replace_between(&buf, from, marker != NULL ? marker : from + strlen(from), form);
		if (marker == NULL)
			return buf.data;
		appendStringInfoString(&buf, MARKER);
		from = marker + strlen(MARKER);
	}
}

/* A secret as a JSON string holds it: '"' and '\' escaped, '/' too when slash. */
static char *
json_form(const char *secret, bool slash)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (const char *c = secret; *c; c++)
	{
		if (*c == '"' || *c == '\\' || (slash && *c == '/'))
			appendStringInfoChar(&buf, '\\');
		appendStringInfoChar(&buf, *c);
	}
	return buf.data;
}

/* list_sort comparator: longer strings first. */
static int
longest_first(const ListCell *a, const ListCell *b)
{
	size_t		la = strlen((const char *) lfirst(a));
	size_t		lb = strlen((const char *) lfirst(b));

	return la > lb ? -1 : la < lb ? 1 : 0;
}

/*
 * A copy of text (NULL: "") with every form of every secret (a list of
 * char *, NULLs allowed) of at least REDACT_MIN_SECRET bytes replaced.
 * Applied to a whole text before it is cut or made printable, so that no
 * cut or replaced byte can leave part of a secret.
 */
char *
redact_secrets(const char *text, List *secrets)
{
	char	   *out = pstrdup(text != NULL ? text : "");
	List	   *forms = NIL;
	ListCell   *lc;

	foreach(lc, secrets)
	{
		const char *secret = (const char *) lfirst(lc);

		if (secret == NULL || strlen(secret) < REDACT_MIN_SECRET)
			continue;
		forms = lappend(forms, (char *) secret);
		forms = lappend(forms, json_form(secret, false));
		forms = lappend(forms, json_form(secret, true));
		forms = lappend(forms, http_uri_encode(secret));
	}
	list_sort(forms, longest_first);
	foreach(lc, forms)
		out = replace_all(out, (const char *) lfirst(lc));
	list_free(forms);
	return out;
}

/*
 * At most max bytes of a remote system's text, printable ASCII only (any
 * other byte is '?'): it goes into a message, a text column and the server
 * log, whatever bytes the remote sent. Redact first, then cut: a cut must
 * not split a secret.
 */
char *
text_excerpt(const char *text, size_t max)
{
	size_t		n = Min(strlen(text), max);
	char	   *out = palloc(n + 1);

	for (size_t i = 0; i < n; i++)
		out[i] = (text[i] >= 0x20 && text[i] < 0x7f) ? text[i] : '?';
	out[n] = '\0';
	return out;
}
