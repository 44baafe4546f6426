/*
 * manifest_error.c
 *     The one error for a malformed manifest or release request: SQLSTATE
 *     22023, naming the field, with a hint that says what the whole should
 *     look like, so a publisher learns what to fix before anything is
 *     compared. Used by the manifest's parsing (manifest.c), its files
 *     (manifest_files.c), the checks made once its table is known
 *     (release_checks.c) and Iceberg's release requests (publish/).
 */
#include "postgres.h"

#include "gate/manifest_error.h"

/* What a manifest and a release request are, for their errors' hints. */
#define MANIFEST_HINT "A manifest is {\"table\", \"partition\", \"generation\", \"store\", \"files\": {\"path\": size, ...}} " \
	"with optional \"prefix\", \"period_start\", \"period_end\", \"empty\", \"built_at\" and " \
	"{\"size\": n, \"etag\": \"...\"} per file."
#define REQUEST_HINT "A release request is {\"table\", \"catalog\", \"iceberg_table\", \"store\", \"partition\": " \
	"{\"field\": \"value\", ...}} with one of \"branch\", \"wap_id\" or \"snapshot_id\", and optional " \
	"\"period_start\", \"period_end\", \"target_branch\" or \"tag\", \"row_count\", \"time_column\" and " \
	"\"built_at\"."

/* Raises the error for a malformed field of a manifest or (request) a release request. */
pg_noreturn static void pg_attribute_printf(3, 0)
raise_field_error(bool request, const char *field, const char *fmt, va_list ap)
{
	char		detail[1024];

	vsnprintf(detail, sizeof(detail), fmt, ap);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid %s: field \"%s\" %s", request ? "release request" : "manifest", field, detail),
			 errhint("%s", request ? REQUEST_HINT : MANIFEST_HINT)));
	pg_unreachable();
}

/* Raises the one error for a malformed manifest. */
void
manifest_error(const char *field, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	raise_field_error(false, field, fmt, ap);
	va_end(ap);
}

/*
 * Raises the one error for a malformed release request of an Iceberg
 * table (finalize.release_iceberg), as manifest_error does a manifest's.
 */
void
request_error(const char *field, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	raise_field_error(true, field, fmt, ap);
	va_end(ap);
}

/*
 * The error for a manifest (or, request, a release request) whose field
 * is off, for the checks made once its table is known (release_checks.c).
 */
void
manifest_field_error(bool request, const char *field, const char *detail)
{
	if (request)
		request_error(field, "%s", detail);
	manifest_error(field, "%s", detail);
}
