/*
 * lsn_sql.c
 *     The SQL entry point of LSN parsing, kept apart from lsn.c so that lsn.c
 *     stays pure (the C unit tests link it without a server).
 */
#include "postgres.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "core/lsn.h"

PG_FUNCTION_INFO_V1(finalize_lsn_normalize);

/* Longest piece of a refused text an error message repeats. */
#define LSN_ECHO_MAX 64

/*
 * The refused text as an error message shows it: cut (at a character
 * boundary) so that a pipeline sending megabytes of garbage does not put
 * them into the server log.
 */
static char *
lsn_echo(const char *text)
{
	int			len = strlen(text);

	if (len <= LSN_ECHO_MAX)
		return pstrdup(text);
	return psprintf("%.*s...", pg_mbcliplen(text, len, LSN_ECHO_MAX), text);
}

/*
 * finalize_internal.lsn_normalize(text) → lsn: the one place a reported LSN enters
 * the catalog, so every stored LSN has the form whose string order is LSN
 * order whatever the pipeline wrote. Anything else is an error (22023), not
 * a guess: a misread LSN could claim changes the pipeline never applied.
 */
Datum
finalize_lsn_normalize(PG_FUNCTION_ARGS)
{
	char	   *input = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Lsn			lsn;
	char		out[LSN_TEXT_LEN + 1];

	if (!lsn_parse_any(input, &lsn))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid LSN \"%s\"", lsn_echo(input)),
				 errdetail("An LSN is written as 0x and 20 hex digits (0x0000002D00000F2A0002), or as "
						   "Debezium's source.commit_lsn writes it: three groups of 8, 8 and 4 hex digits "
						   "separated by colons (0000002d:00000f2a:0002).")));
	lsn_format(&lsn, out);
	PG_RETURN_TEXT_P(cstring_to_text(out));
}
