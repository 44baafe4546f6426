/*
 * mssql_error.c
 *     What a failed call to SQL Server says, as one line for logs, status
 *     and explain_verdict (an MssqlError is filled by mssql.c's callbacks,
 *     with the setters here).
 */
#include "postgres.h"

#include "mssql/mssql.h"

/*
 * One line describing an error, for logs, status and explain_verdict:
 * "SQL Server error 208 (severity 16): Invalid object name 'x'." or the
 * DB-Library error.
 */
const char *
mssql_error_text(const MssqlError *err)
{
	static char buf[sizeof(err->message) + 64];

	if (!err->set)
		return "unknown error";
	if (err->from_server)
		snprintf(buf, sizeof(buf), "SQL Server error %d (severity %d, state %d): %s",
				 err->number, err->severity, err->state, err->message);
	else if (err->number != 0)
		snprintf(buf, sizeof(buf), "DB-Library error %d: %s", err->number, err->message);
	else
		snprintf(buf, sizeof(buf), "%s", err->message);
	return buf;
}

/* Copies a message into an error, truncating safely. */
void
mssql_error_set(MssqlError *err, const char *text)
{
	strlcpy(err->message, text ? text : "", sizeof(err->message));
}

/* Fails a call with text, unless a callback already said what went wrong. */
void
mssql_error_fail(MssqlError *err, const char *text)
{
	if (!err->set)
	{
		err->set = true;
		mssql_error_set(err, text);
	}
}
