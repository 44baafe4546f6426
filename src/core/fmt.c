/*
 * fmt.c
 *     Text of LSNs and times for messages.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/fmt.h"

/* An LSN as 0x + 20 upper-case hex digits. */
char *
fmt_lsn(const Lsn *lsn)
{
	char	   *text = palloc(LSN_TEXT_LEN + 1);

	lsn_format(lsn, text);
	return text;
}

/* A local datetime (SQL Server's wall clock) as text. */
char *
fmt_local(Timestamp ts)
{
	return DatumGetCString(DirectFunctionCall1(timestamp_out, TimestampGetDatum(ts)));
}

/* An instant as text in the session's zone. */
char *
fmt_instant(TimestampTz ts)
{
	/* timestamptz_to_str returns a static buffer: copy it. */
	return pstrdup(timestamptz_to_str(ts));
}

/* A span of microseconds as an interval's text ("00:01:00"). */
char *
fmt_usecs(int64 usecs)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = usecs;
	return DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv)));
}
