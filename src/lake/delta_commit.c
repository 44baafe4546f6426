/*
 * delta_commit.c
 *     A Delta Lake commit file (_delta_log/NNNNNNNNNNNNNNNNNNNN.json) read
 *     into what it proves: its time, operation, whether it changes data,
 *     a RESTORE's version, metaData.id and the LSN at lsn_from.
 *
 * A commit is newline-delimited JSON, one action per line (commitInfo,
 * add, remove, metaData, protocol, txn, cdc, ...). Each line is parsed by
 * PostgreSQL's JSON parser with semantic actions (no jsonb is built, so a
 * commit of many thousand add actions costs one pass), under the caller's
 * size cap; a line that is not a JSON object makes the whole commit
 * malformed, never half read. Pure: the caller reads the file.
 */
#include "postgres.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"

#include "core/pg_compat.h"
#include "lake/delta_log.h"

#define USER_METADATA "userMetadata"

/* Which action a line is. */
typedef enum Action
{
	ACT_OTHER,
	ACT_COMMIT_INFO,
	ACT_ADD_REMOVE,
	ACT_METADATA
} Action;

/* What the callbacks collect of one line into the commit. */
typedef struct LineState
{
	DeltaCommit *out;
	const DeltaLsnFrom *from;
	int			depth;
	Action		action;
	bool		remove;			/* the action is a remove */
	char	   *field;			/* the key just read at depth 1 or 2 (NULL: none yet) */
	char	   *param;			/* operationParameters' field (depth 3; NULL: none yet) */
	uint64		arrays;			/* bit d: the container at depth d is an array */
	bool		not_object;
	char	   *user_metadata;
	bool		has_in_commit_ts;
	const char *top_key;		/* a key of the line's own object to keep */
	char	   *top_token;		/* its value */
	JsonTokenType top_type;
} LineState;

/* The place of an LSN a consumer's lsn_from names, or false when it names none. */
bool
delta_lsn_from_parse(const char *text, DeltaLsnFrom *out)
{
	if (text == NULL || text[0] == '\0')
		return false;
	if (strcmp(text, USER_METADATA) == 0)
	{
		out->place = DELTA_LSN_USER_METADATA;
		out->key = NULL;
		return true;
	}
	if (strncmp(text, USER_METADATA ".", strlen(USER_METADATA) + 1) == 0)
	{
		out->place = DELTA_LSN_USER_METADATA_KEY;
		out->key = text + strlen(USER_METADATA) + 1;
		return out->key[0] != '\0';
	}
	out->place = DELTA_LSN_COMMIT_INFO_KEY;
	out->key = text;
	return true;
}

/* A whole non-negative number, or false. */
static bool
parse_int64(const char *s, int64_t *out)
{
	int64_t		v = 0;

	if (s == NULL || *s == '\0')
		return false;
	for (; *s; s++)
	{
		if (*s < '0' || *s > '9' || v > (PG_INT64_MAX - (*s - '0')) / 10)
			return false;
		v = v * 10 + (*s - '0');
	}
	*out = v;
	return true;
}

/*
 * Whether a key (which may be unset: a value can come before any key, as
 * in an array) is a name; every comparison with a key goes through here.
 */
static bool
key_is(const char *key, const char *name)
{
	return key != NULL && name != NULL && strcmp(key, name) == 0;
}

/* Whether the container at a depth is an array (deeper than 63: counted as one). */
static bool
in_array(const LineState *st, int depth)
{
	return depth >= 64 || (st->arrays & ((uint64) 1 << depth)) != 0;
}

/* An object opens one level deeper. */
static JsonActionResult
on_open(void *state)
{
	LineState  *st = state;

	st->depth++;
	if (st->depth < 64)
		st->arrays &= ~((uint64) 1 << st->depth);
	return JSON_ACTION_OK;
}

/* A line that is an array is no action; an array's elements are no field's value. */
static JsonActionResult
on_array_open(void *state)
{
	LineState  *st = state;

	if (st->depth == 0)
		st->not_object = true;
	st->depth++;
	if (st->depth < 64)
		st->arrays |= (uint64) 1 << st->depth;
	return JSON_ACTION_OK;
}

/* The end of an object or array. */
static JsonActionResult
on_close(void *state)
{
	((LineState *) state)->depth--;
	return JSON_ACTION_OK;
}

/*
 * Frees what a slot holds. The parser hands each token and key over to
 * the callbacks: one not kept is freed at once, so that a line of a
 * million elements costs no million strings.
 */
static void
free_slot(char **slot)
{
	if (*slot != NULL)
		pfree(*slot);
	*slot = NULL;
}

/* Keeps a token in a slot (its own copy when another slot took it already). */
static void
keep_token(char **slot, char *token, bool *kept)
{
	free_slot(slot);
	*slot = *kept ? pstrdup(token) : token;
	*kept = true;
}

/* Notes the action (depth 1), its field (2), or operationParameters' field (3). */
static JsonActionResult
on_field(void *state, char *fname, bool isnull pg_attribute_unused())
{
	LineState  *st = state;

	if (st->depth <= 2)
	{
		free_slot(&st->field);
		free_slot(&st->param);
		st->field = fname;
	}
	if (st->depth == 1)
		st->action = key_is(fname, "commitInfo") ? ACT_COMMIT_INFO
			: key_is(fname, "add") || key_is(fname, "remove") ? ACT_ADD_REMOVE
			: key_is(fname, "metaData") ? ACT_METADATA : ACT_OTHER;
	if (st->depth == 1)
		st->remove = key_is(fname, "remove");
	if (st->depth == 1 && st->action == ACT_ADD_REMOVE && st->top_key == NULL)
		st->out->file_actions = true;
	else if (st->depth == 3)
	{
		free_slot(&st->param);
		st->param = fname;
	}
	else if (st->depth > 3)
		pfree(fname);
	return JSON_ACTION_OK;
}

/* A commitInfo field's value (depth 2); *kept when a slot took the token. */
static void
commit_info_scalar(LineState *st, char *token, JsonTokenType type, bool *kept)
{
	DeltaCommit *c = st->out;
	int64_t		v;

	if (key_is(st->field, "timestamp") && type == JSON_TOKEN_NUMBER && !st->has_in_commit_ts &&
		parse_int64(token, &v))
		c->timestamp_ms = v;
	else if (key_is(st->field, "inCommitTimestamp") && type == JSON_TOKEN_NUMBER && parse_int64(token, &v))
	{
		c->timestamp_ms = v;
		st->has_in_commit_ts = true;
	}
	else if (key_is(st->field, "operation") && type == JSON_TOKEN_STRING)
	{
		keep_token((char **) &c->operation, token, kept);
		c->restore = strcmp(token, "RESTORE") == 0;
	}
	if (st->from->place == DELTA_LSN_USER_METADATA_KEY && key_is(st->field, USER_METADATA) &&
		type == JSON_TOKEN_STRING)
		keep_token(&st->user_metadata, token, kept);
	if ((st->from->place == DELTA_LSN_COMMIT_INFO_KEY && key_is(st->field, st->from->key)) ||
		(st->from->place == DELTA_LSN_USER_METADATA && key_is(st->field, USER_METADATA)))
	{
		if (type == JSON_TOKEN_STRING)
			keep_token((char **) &c->lsn_text, token, kept);
		else if (type != JSON_TOKEN_NULL)
			c->lsn_problem = "the value is not a string";
	}
}

/* Keeps what the verdict needs of a scalar. */
static JsonActionResult
on_scalar(void *state, char *token, JsonTokenType type)
{
	LineState  *st = state;
	DeltaCommit *c = st->out;
	bool		kept = false;

	if (st->depth == 0)
		st->not_object = true;
	else if (in_array(st, st->depth))
		;						/* an element is no field's value */
	else if (st->depth == 1 && st->top_key != NULL && key_is(st->field, st->top_key))
	{
		keep_token(&st->top_token, token, &kept);
		st->top_type = type;
	}
	else if (st->depth == 2 && st->action == ACT_COMMIT_INFO)
		commit_info_scalar(st, token, type, &kept);
	else if (st->depth == 3 && st->action == ACT_COMMIT_INFO && key_is(st->field, "operationParameters") &&
			 key_is(st->param, "version"))
		c->has_restore_version = parse_int64(token, &c->restore_version);
	else if (st->depth == 2 && st->action == ACT_ADD_REMOVE && key_is(st->field, "dataChange") &&
			 type == JSON_TOKEN_TRUE)
	{
		c->data_change = true;
		c->removes_data |= st->remove;
	}
	else if (st->depth == 2 && st->action == ACT_METADATA && key_is(st->field, "id") &&
			 type == JSON_TOKEN_STRING)
		keep_token((char **) &c->table_id, token, &kept);
	if (!kept && token != NULL)
		pfree(token);
	return JSON_ACTION_OK;
}

/* Parses one line (len bytes) with sem; false with *why when it is no JSON object. */
static bool
parse_line(char *line, int len, JsonSemAction *sem, const char **why)
{
	JsonLexContext *lex;
	JsonParseErrorType rc;
	LineState  *st = sem->semstate;

	st->depth = 0;
	st->action = ACT_OTHER;
	st->not_object = false;
	free_slot(&st->field);
	free_slot(&st->param);
	st->arrays = 0;
	st->remove = false;
	lex = compat_json_lexer(line, len, PG_UTF8);
	rc = pg_parse_json(lex, sem);
	if (rc != JSON_SUCCESS)
		*why = psprintf("is not JSON: %s", json_errdetail(rc, lex));
	compat_json_lexer_free(lex);
	free_slot(&st->field);
	free_slot(&st->param);
	if (rc == JSON_SUCCESS && st->not_object)
		*why = "is not a JSON object";
	return rc == JSON_SUCCESS && !st->not_object;
}

/* The callbacks of a commit's lines. */
static void
commit_sem(JsonSemAction *sem, LineState *st)
{
	memset(sem, 0, sizeof(*sem));
	sem->semstate = st;
	sem->object_start = on_open;
	sem->object_end = on_close;
	sem->array_start = on_array_open;
	sem->array_end = on_close;
	sem->object_field_start = on_field;
	sem->scalar = on_scalar;
}

/* The LSN in a key of userMetadata's JSON object, when lsn_from names one. */
static void
user_metadata_key(LineState *st)
{
	DeltaCommit *c = st->out;
	DeltaCommit inner;
	LineState	ist;
	JsonSemAction sem;
	const char *why = NULL;

	if (st->user_metadata == NULL)
		return;
	memset(&inner, 0, sizeof(inner));
	memset(&ist, 0, sizeof(ist));
	ist.out = &inner;
	ist.from = st->from;
	ist.top_key = st->from->key;
	commit_sem(&sem, &ist);
	if (!parse_line(st->user_metadata, strlen(st->user_metadata), &sem, &why))
		c->lsn_problem = "userMetadata is not a JSON object";
	else if (ist.top_token != NULL && ist.top_type == JSON_TOKEN_STRING)
		c->lsn_text = ist.top_token;
	else if (ist.top_token != NULL && ist.top_type != JSON_TOKEN_NULL)
		c->lsn_problem = "the value is not a string";
}

/*
 * Parses a commit file (len bytes, not NUL-terminated) of the given
 * version into *out; out->malformed says why when it is not a commit
 * (not UTF-8, a line that is no JSON object, no action at all). tick, when
 * given, runs before each line (the caller's cancellation check).
 */
void
delta_parse_commit(const char *body, size_t len, const DeltaLsnFrom *from, int64_t version,
				   void (*tick) (void), DeltaCommit *out)
{
	LineState	st;
	JsonSemAction sem;
	size_t		start = 0;
	int64_t		line_no = 0;
	int			actions = 0;

	memset(out, 0, sizeof(*out));
	memset(&st, 0, sizeof(st));
	out->version = version;
	st.out = out;
	st.from = from;
	commit_sem(&sem, &st);
	if (len > DELTA_COMMIT_MAX_BYTES)
	{
		out->malformed = psprintf("is larger than %d MB", DELTA_COMMIT_MAX_BYTES / (1024 * 1024));
		return;
	}
	if (pg_encoding_verifymbstr(PG_UTF8, body, (int) len) != (int) len)
	{
		out->malformed = "is not valid UTF-8";
		return;
	}
	while (start < len)
	{
		const char *nl = memchr(body + start, '\n', len - start);
		size_t		end = nl != NULL ? (size_t) (nl - body) : len;
		size_t		n = end - start;
		const char *why = NULL;
		char	   *line;

		line_no++;
		if (tick != NULL)
			tick();
		while (n > 0 && (body[start + n - 1] == '\r' || body[start + n - 1] == ' '))
			n--;
		if (n > 0)
		{
			line = pnstrdup(body + start, n);
			if (!parse_line(line, (int) n, &sem, &why))
			{
				out->malformed = psprintf("line " INT64_FORMAT " %s", line_no, why);
				pfree(line);
				return;
			}
			pfree(line);
			actions++;
		}
		start = end + 1;
	}
	if (actions == 0)
		out->malformed = "holds no action";
	else if (from->place == DELTA_LSN_USER_METADATA_KEY)
		user_metadata_key(&st);
}

/* The version of _last_checkpoint's JSON ({"version": n, ...}), or false. */
bool
delta_last_checkpoint(const char *body, size_t len, int64_t *version)
{
	DeltaCommit c;
	DeltaLsnFrom from = {DELTA_LSN_USER_METADATA, NULL};
	LineState	st;
	JsonSemAction sem;
	const char *why = NULL;
	char	   *line;
	bool		ok;

	if (len > 1024 * 1024 || pg_encoding_verifymbstr(PG_UTF8, body, (int) len) != (int) len)
		return false;
	memset(&c, 0, sizeof(c));
	memset(&st, 0, sizeof(st));
	st.out = &c;
	st.from = &from;
	st.top_key = "version";
	commit_sem(&sem, &st);
	line = pnstrdup(body, len);
	ok = parse_line(line, (int) len, &sem, &why) && st.top_token != NULL && st.top_type == JSON_TOKEN_NUMBER &&
		parse_int64(st.top_token, version);
	pfree(line);
	free_slot(&st.top_token);
	return ok;
}
