/*
 * manifest_lines.c
 *     A manifest's files from a JSON Lines object: one
 *     {"path": "...", "size": n, "etag": "..."} per line ("etag" optional,
 *     the keys of the inline "files" array), blank lines ignored.
 *
 * A manifest of ten million files does not fit a jsonb (256 MB) and should
 * not be held anyway, so the object is fed here a chunk at a time as it is
 * read from the store; each line is parsed by PostgreSQL's JSON parser
 * (pg_parse_json, no jsonb built), checked like an inline entry, counted
 * into the manifest's summary (count, bytes, the listing's digest) and put
 * into a tuplesort. A malformed line (or one that is not valid in the
 * database's encoding) is an error that names the object and the line
 * number, before anything is compared or stored.
 */
#include "postgres.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "core/pg_compat.h"
#include "gate/manifest_lines.h"

/* Which known key a field of a line is. */
typedef enum LineField
{
	LF_OTHER,
	LF_PATH,
	LF_SIZE,
	LF_ETAG
} LineField;

/* What the parser's callbacks collect of one line. */
typedef struct LineState
{
	int			depth;
	LineField	field;			/* the top-level field being read */
	char	   *path;
	char	   *size;
	JsonTokenType size_type;
	char	   *etag;
	bool		etag_null;
	const char *wrong;			/* a field of the wrong type, or NULL */
	bool		not_object;
} LineState;

/* Raises the error of a malformed line: the object, the line, what is wrong. */
pg_noreturn static void
bad_line(ManifestLines *r, const char *fmt,...) pg_attribute_printf(2, 3);

static void
bad_line(ManifestLines *r, const char *fmt,...)
{
	char		detail[1024];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid manifest: field \"files_location\": line " INT64_FORMAT " of \"%s\" %s",
					r->line_no, r->source, detail),
			 errhint("Each line of the object is {\"path\": \"...\", \"size\": n} or {\"path\": \"...\", "
					 "\"size\": n, \"etag\": \"...\"}.")));
}

/* A nested object or array: only allowed nowhere (every field is a scalar). */
static JsonActionResult
line_open(void *state)
{
	LineState  *st = state;

	if (st->depth == 1 && st->field != LF_OTHER)
		st->wrong = st->field == LF_PATH ? "path" : st->field == LF_SIZE ? "size" : "etag";
	st->depth++;
	return JSON_ACTION_OK;
}

/* The end of a nested object or array. */
static JsonActionResult
line_close(void *state)
{
	((LineState *) state)->depth--;
	return JSON_ACTION_OK;
}

/* The document must be an object: an array at the top is not. */
static JsonActionResult
line_array_start(void *state)
{
	LineState  *st = state;

	if (st->depth == 0)
		st->not_object = true;
	line_open(state);
	return JSON_ACTION_OK;
}

/* Notes which top-level field comes. */
static JsonActionResult
line_field(void *state, char *fname, bool isnull pg_attribute_unused())
{
	LineState  *st = state;

	if (st->depth == 1)
		st->field = strcmp(fname, "path") == 0 ? LF_PATH : strcmp(fname, "size") == 0 ? LF_SIZE
			: strcmp(fname, "etag") == 0 ? LF_ETAG : LF_OTHER;
	return JSON_ACTION_OK;
}

/* Keeps the value of a known top-level field. */
static JsonActionResult
line_scalar(void *state, char *token, JsonTokenType type)
{
	LineState  *st = state;

	if (st->depth == 0)
		st->not_object = true;
	if (st->depth != 1)
		return JSON_ACTION_OK;
	switch (st->field)
	{
		case LF_PATH:
			if (type != JSON_TOKEN_STRING)
				st->wrong = "path";
			st->path = token;
			break;
		case LF_SIZE:
			st->size = token;
			st->size_type = type;
			break;
		case LF_ETAG:
			if (type == JSON_TOKEN_NULL)
				st->etag_null = true;
			else if (type != JSON_TOKEN_STRING)
				st->wrong = "etag";
			else
				st->etag = token;
			break;
		case LF_OTHER:
			break;
	}
	st->field = LF_OTHER;
	return JSON_ACTION_OK;
}

/* A size as JSON writes a whole number of bytes: digits only. */
static bool
parse_size(const char *token, int64 *out)
{
	int64		v = 0;

	if (token[0] == '\0')
		return false;
	for (const char *c = token; *c; c++)
	{
		if (*c < '0' || *c > '9')
			return false;
		if (v > (PG_INT64_MAX - (*c - '0')) / 10)
			return false;
		v = v * 10 + (*c - '0');
	}
	*out = v;
	return true;
}

/* Parses, checks and keeps one line (without its newline). */
static void
read_line(ManifestLines *r, char *line, int len)
{
	LineState	st = {0};
	JsonSemAction sem = {0};
	JsonLexContext *lex;
	JsonParseErrorType rc;
	InvObject	o = {0};

	if (len > 0 && line[len - 1] == '\r')
		line[--len] = '\0';
	for (int i = 0; i < len; i++)
		if (line[i] != ' ' && line[i] != '\t')
			goto parse;
	return;						/* a blank line */
parse:

	/*
	 * PostgreSQL 15's JSON parser takes raw bytes as they come: a path in
	 * another encoding (or cut in the middle of a character) would reach the
	 * comparison, the problems and the stored attempt.
	 */
	if (!pg_verify_mbstr(GetDatabaseEncoding(), line, len, true))
		bad_line(r, "is not valid %s", GetDatabaseEncodingName());
	sem.semstate = &st;
	sem.object_start = line_open;
	sem.object_end = line_close;
	sem.array_start = line_array_start;
	sem.array_end = line_close;
	sem.object_field_start = line_field;
	sem.scalar = line_scalar;
	lex = compat_json_lexer(line, len, GetDatabaseEncoding());
	rc = pg_parse_json(lex, &sem);
	if (rc != JSON_SUCCESS)
		bad_line(r, "is not JSON: %s", json_errdetail(rc, lex));
	compat_json_lexer_free(lex);
	if (st.not_object)
		bad_line(r, "is not a JSON object");
	if (st.wrong != NULL)
		bad_line(r, "has a \"%s\" that is not a %s", st.wrong, strcmp(st.wrong, "size") == 0 ? "number" : "string");
	if (st.path == NULL || st.path[0] == '\0')
		bad_line(r, "has no \"path\" string");
	o.path = st.path;
	o.path_len = strlen(st.path);
	if (!path_is_safe(o.path, o.path_len))
		bad_line(r, "has the path \"%s\": a path must be relative (no leading /), without empty, \".\" or \"..\" "
				 "parts, and at most 1024 bytes", o.path);
	if (st.size == NULL || st.size_type != JSON_TOKEN_NUMBER)
		bad_line(r, "(\"%s\"): the size must be a number of bytes", o.path);
	if (!parse_size(st.size, &o.size))
		bad_line(r, "(\"%s\"): the size %s is not a whole non-negative number of bytes", o.path, st.size);
	if (st.etag != NULL)
	{
		if (st.etag[0] == '\0')
			bad_line(r, "(\"%s\"): the etag must be a non-empty string", o.path);
		o.etag = st.etag;
		o.etag_len = strlen(st.etag);
		r->any_etag = true;
	}
	r->count++;
	r->bytes += o.size;
	inventory_digest_add(r->digest, o.path, o.path_len, o.size, o.etag, o.etag_len);
	sorted_inventory_put(r->sort, &o);
}

/* Starts reading the object source (its URL, named in errors). */
void
manifest_lines_begin(ManifestLines *r, const char *source)
{
	memset(r, 0, sizeof(*r));
	r->source = source;
	r->sort = sorted_inventory_begin("manifest object");
	initStringInfo(&r->partial);
	r->line_cxt = AllocSetContextCreate(CurrentMemoryContext, "finalize manifest lines", ALLOCSET_DEFAULT_SIZES);
}

/* Ends a line: parsed in the line context, reset every thousand lines. */
static void
end_line(ManifestLines *r, char *line, int len)
{
	MemoryContext old;

	r->line_no++;
	if (len > MANIFEST_LINE_MAX)
		bad_line(r, "is longer than %d bytes", MANIFEST_LINE_MAX);
	old = MemoryContextSwitchTo(r->line_cxt);
	read_line(r, line, len);
	MemoryContextSwitchTo(old);
	if (++r->in_batch >= 1000)
	{
		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(r->line_cxt);
		r->in_batch = 0;
	}
}

/*
 * Feeds the next bytes of the object: every line they end is read; the
 * rest waits for the next chunk.
 */
void
manifest_lines_feed(ManifestLines *r, const char *data, size_t len)
{
	const char *end = data + len;

	while (data < end)
	{
		const char *nl = memchr(data, '\n', end - data);

		if (nl == NULL)
		{
			if (r->partial.len + (end - data) > MANIFEST_LINE_MAX)
			{
				r->line_no++;
				bad_line(r, "is longer than %d bytes", MANIFEST_LINE_MAX);
			}
			appendBinaryStringInfo(&r->partial, data, end - data);
			return;
		}
		/* Copied whole: a line may span chunks, and "\r" is cut in place. */
		appendBinaryStringInfo(&r->partial, data, nl - data);
		end_line(r, r->partial.data, r->partial.len);
		resetStringInfo(&r->partial);
		data = nl + 1;
	}
}

/*
 * Ends the object (a last line without a newline is a line) and records
 * its summary in the manifest.
 */
void
manifest_lines_end(ManifestLines *r, Manifest *m)
{
	if (r->partial.len > 0)
	{
		end_line(r, r->partial.data, r->partial.len);
		resetStringInfo(&r->partial);
	}
	MemoryContextDelete(r->line_cxt);
	m->files_count = r->count;
	m->files_bytes = r->bytes;
	m->files_digest[0] = r->digest[0];
	m->files_digest[1] = r->digest[1];
	m->files_any_etag = r->any_etag;
	if (m->empty && r->count > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: field \"files_location\": \"%s\" lists " INT64_FORMAT
						" files, but \"empty\" is true", r->source, r->count),
				 errhint("An intentionally empty partition's manifest object has no lines.")));
}
