/*
 * advance_payload.c
 *     The payload of a verdict's advance on NOTIFY channel "finalize".
 *
 * A worker cycle that crosses an hour boundary advances thousands of
 * verdicts in one statement (_advance_sources), so the payload is built
 * here rather than by SQL helpers that cost tens of microseconds a call.
 * The text is the documented one (README, "NOTIFY"), key order and
 * json_build_object's spacing included, so listeners see no change:
 *   {"table" : ..., "old" : ..., "new" : ..., "lsn" : ..., "commit_time" : ...}
 * with times in UTC ISO 8601 (fractions only when there are any), null for
 * what is unknown, and "kind" : "derived" last for a derived table.
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(finalize_advance_payload);

/* Appends a time as UTC ISO 8601 (as finalize_internal.utc_iso writes it), or null. */
static void
append_utc(StringInfo buf, bool isnull, TimestampTz ts)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (isnull || TIMESTAMP_NOT_FINITE(ts) || timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
	{
		appendStringInfoString(buf, "null");
		return;
	}
	/* to_char's YYYY: the year without era (1 BC is year 0 in pg_tm) */
	appendStringInfo(buf, "\"%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year > 0 ? tm.tm_year : 1 - tm.tm_year,
					 tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	if (fsec != 0)
		appendStringInfo(buf, ".%06d", (int) fsec);
	appendStringInfoString(buf, "Z\"");
}

/* Appends a JSON string (escaped by PostgreSQL's escape_json), or null. */
static void
append_text(StringInfo buf, FunctionCallInfo fcinfo, int arg)
{
	if (PG_ARGISNULL(arg))
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, text_to_cstring(PG_GETARG_TEXT_PP(arg)));
}

/*
 * finalize_internal.advance_payload(table_name, kind, old_until, new_until,
 * offset_lsn, offset_commit_time): the payload text.
 */
Datum
finalize_advance_payload(PG_FUNCTION_ARGS)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"table\" : ");
	append_text(&buf, fcinfo, 0);
	appendStringInfoString(&buf, ", \"old\" : ");
	append_utc(&buf, PG_ARGISNULL(2), PG_ARGISNULL(2) ? 0 : PG_GETARG_TIMESTAMPTZ(2));
	appendStringInfoString(&buf, ", \"new\" : ");
	append_utc(&buf, PG_ARGISNULL(3), PG_ARGISNULL(3) ? 0 : PG_GETARG_TIMESTAMPTZ(3));
	appendStringInfoString(&buf, ", \"lsn\" : ");
	append_text(&buf, fcinfo, 4);
	appendStringInfoString(&buf, ", \"commit_time\" : ");
	append_utc(&buf, PG_ARGISNULL(5), PG_ARGISNULL(5) ? 0 : PG_GETARG_TIMESTAMPTZ(5));
	if (!PG_ARGISNULL(1) && strcmp(text_to_cstring(PG_GETARG_TEXT_PP(1)), "source") != 0)
	{
		appendStringInfoString(&buf, ", \"kind\" : ");
		append_text(&buf, fcinfo, 1);
	}
	appendStringInfoChar(&buf, '}');
	PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));
}
