/*
 * marker.c
 *     The success_marker publication target: a _SUCCESS object in the
 *     directory of a period that became final, in a finalize_s3 server's
 *     bucket or a local directory (file://), where Hive-style readers
 *     (Airflow's S3KeySensor, Luigi's S3FlagTarget, Oozie's done-flag) and
 *     Paimon's partition.mark-done-action look for it.
 *
 * The body is Paimon's success file by default, {"creationTime": <ms>,
 * "modificationTime": <ms>} plus finalize's event under "finalize" (Paimon
 * ignores unknown fields); or empty; or Hadoop's S3A committer SuccessData
 * (format "s3a"), finalize's fields in its "diagnostics".
 *
 * One effect per period: the marker is read first. One that says it was
 * written for this table's period (by any publication) is kept as it is
 * (already); an empty marker, for format "empty", too. Any other is
 * replaced, keeping its creationTime as Paimon's re-marking does.
 *
 * Never ahead: a directory may hold several periods (an hourly table
 * marked per day: dt={date}/), and its marker says the whole directory is
 * complete. So the marker of a directory is written by the event of its
 * last period only, the one after which the template renders another
 * directory: events are delivered in period order, each only once its
 * period is final, so every period before it is final too. The events of
 * the other periods write nothing (outcome already). That also covers the
 * hour a DST fall-back repeats (dt=.../hour=01/ twice).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/db.h"
#include "core/json_build.h"
#include "core/redact.h"
#include "core/settings.h"
#include "lake/metadata.h"
#include "push/marker_path.h"
#include "push/target.h"
#include "store/store.h"

/* The largest marker read back: S3A's SuccessData lists files and metrics. */
#define MARKER_MAX_BYTES (1024 * 1024)

typedef enum MarkerFormat
{
	MARKER_PAIMON,
	MARKER_EMPTY,
	MARKER_S3A
} MarkerFormat;

/* What load() found, for send(). */
typedef struct MarkerTarget
{
	ObjectStore store;
	char	   *key;			/* <directory>/_SUCCESS, relative to the store */
	char	   *shown;			/* the marker's URL, as messages name it */
	MarkerFormat format;
	bool		waits;			/* not its directory's last period */
	Jsonb	   *event;			/* finalize's event (ev->body) */
	char	   *table;			/* the event's table and period, as in its
								 * body: what a marker of this period says */
	char	   *period_start;
	char	   *period_end;
} MarkerTarget;

/* A string option of the publication, or NULL. */
static char *
option_text(const PushEvent *ev, const char *name)
{
	return ev->options ? lake_string_value(lake_field(&ev->options->root, name)) : NULL;
}

/*
 * The publication's server, opened as the worker opens every server: as
 * its owner, with the owner's user mapping (else PUBLIC's). The base of its
 * locations ("s3://<bucket>/"), or NULL with *error naming the server
 * (never a key).
 */
static char *
load_server(MarkerTarget *t, const char *name, char **error)
{
	ForeignServer *server = GetForeignServerByName(name, true);
	StoreError	err;

	if (server == NULL)
	{
		*error = psprintf("server \"%s\" of the publication was dropped or renamed", name);
		return NULL;
	}
	if (!store_try_open(name, server->owner, &t->store, &err))
	{
		*error = psprintf("server \"%s\" cannot write the markers: %s", name, err.message);
		return NULL;
	}
	return pstrdup(store_base(&t->store));
}

/*
 * A local store: the root that the location template's fixed part names
 * (marker_path.c). Its base ("file://<root>/"), or NULL with *error set.
 */
static char *
load_local(MarkerTarget *t, const char *template, char **error)
{
	int			len = marker_root_len(template);

	if (len < 0)
	{
		*error = psprintf("location \"%s\" names no local directory before its first placeholder", template);
		return NULL;
	}
	store_open_local(pnstrdup(template + strlen("file://"), len), &t->store);
	return pstrdup(store_base(&t->store));
}

/*
 * Whether the event's period is the last of its directory: the template
 * renders another directory for the next period (which starts at this
 * one's end), in the table's zone, as finalize.render_location renders
 * every location. In load()'s transaction.
 */
static bool
last_of_directory(const char *template, const PushEvent *ev)
{
	Oid			types[4] = {TEXTOID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[4];
	bool		isnull;
	bool		last;

	values[0] = CStringGetTextDatum(template);
	values[1] = TimestampTzGetDatum(ev->period_start);
	values[2] = CStringGetTextDatum(ev->period_zone);
	values[3] = TimestampTzGetDatum(ev->period_end);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (db_query("SELECT " FINALIZE_SCHEMA ".render_location($1, $2, $3) IS DISTINCT FROM "
				 FINALIZE_SCHEMA ".render_location($1, $4, $3)", 4, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not render the location of the next period");
	last = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	return !isnull && last;
}

/*
 * The event's table and period as its body gives them (what a marker
 * written for the same period repeats); false when the body lacks them.
 */
static bool
load_event(MarkerTarget *t, const PushEvent *ev)
{
	JsonbContainer *root;

	t->event = lake_parse_json(ev->body);
	if (t->event == NULL)
		return false;
	root = &t->event->root;
	t->table = lake_string_value(lake_field(root, "table"));
	t->period_start = lake_string_value(lake_field(root, "period_start"));
	t->period_end = lake_string_value(lake_field(root, "period_end"));
	return t->table != NULL && t->period_start != NULL && t->period_end != NULL;
}

/*
 * load(): the store and the marker's key, copied into cxt; NULL with
 * *error set when nothing can be written (the event then waits).
 */
static void *
marker_load(const PushEvent *ev, MemoryContext cxt, char **error)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	MarkerTarget *t = palloc0(sizeof(MarkerTarget));
	char	   *template = option_text(ev, "location");
	char	   *format = option_text(ev, "format");
	char	   *base = NULL;
	const char *dir = NULL;

	*error = NULL;
	t->format = format == NULL || strcmp(format, "paimon") == 0 ? MARKER_PAIMON
		: strcmp(format, "empty") == 0 ? MARKER_EMPTY : MARKER_S3A;
	if (format != NULL && t->format == MARKER_S3A && strcmp(format, "s3a") != 0)
		*error = psprintf("unknown marker format \"%s\"", format);
	else if (template == NULL || ev->location == NULL)
		*error = pstrdup("the publication has no location");
	else if (!load_event(t, ev))
		*error = pstrdup("the event's body lacks its table or period");
	else if ((base = ev->server_name ? load_server(t, ev->server_name, error) : load_local(t, template, error)) != NULL &&
			 (dir = marker_relative_dir(ev->location, base)) == NULL)
		*error = psprintf("location \"%s\" is not a directory below \"%s\"", ev->location, base);
	if (*error == NULL)
	{
		t->key = psprintf("%s_SUCCESS", dir);
		t->shown = psprintf("%s_SUCCESS", ev->location);
		/* Only a final period writes a marker: late data leaves it as it is. */
		t->waits = strcmp(ev->kind, "final") != 0 || !last_of_directory(template, ev);
	}
	MemoryContextSwitchTo(old);
	return *error == NULL ? t : NULL;
}

/* An instant as milliseconds since 1970 (Paimon's and Hadoop's times). */
static int64
unix_ms(TimestampTz t)
{
	return t / 1000 + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
}

/* Whether a string field of an object is the given value. */
static bool
field_is(JsonbContainer *obj, const char *key, const char *value)
{
	char	   *s = lake_string_value(lake_field(obj, key));

	return s != NULL && strcmp(s, value) == 0;
}

/*
 * Whether a marker was written for this table's period: its "finalize"
 * event (Paimon's format) or its diagnostics (S3A's) name them. *creation
 * is its creationTime when it has one (else left alone).
 */
static bool
marker_of_period(const MarkerTarget *t, const char *body, int64 *creation)
{
	Jsonb	   *old = body ? lake_parse_json(body) : NULL;
	JsonbContainer *root = old ? &old->root : NULL;
	JsonbContainer *fin;
	JsonbContainer *diag;

	if (root == NULL || !JsonContainerIsObject(root))
		return false;
	(void) lake_int64_value(lake_field(root, "creationTime"), creation);
	fin = lake_container(lake_field(root, "finalize"));
	diag = lake_container(lake_field(root, "diagnostics"));
	if (fin != NULL && field_is(fin, "table", t->table) && field_is(fin, "period_start", t->period_start) &&
		field_is(fin, "period_end", t->period_end))
		return true;
	return diag != NULL && field_is(diag, "finalize.table", t->table) &&
		field_is(diag, "finalize.period_start", t->period_start) &&
		field_is(diag, "finalize.period_end", t->period_end);
}

/* Hadoop's S3A committer SuccessData, finalize's fields in its diagnostics. */
static char *
s3a_body(const MarkerTarget *t, const PushEvent *ev, TimestampTz now)
{
	JsonbParseState *st = NULL;

	jb_begin_object(&st, NULL);
	jb_text(&st, "name", "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1");
	jb_bool(&st, "success", true);
	jb_int(&st, "timestamp", unix_ms(now));
	jb_text(&st, "date", timestamptz_to_str(now));
	jb_text(&st, "hostname", "");
	jb_text(&st, "committer", "finalize");
	jb_text(&st, "description", psprintf("period %s to %s of %s is final", t->period_start, t->period_end, t->table));
	jb_text(&st, "jobId", ev->event_id);
	jb_text(&st, "jobIdSource", "finalize event_id");
	jb_begin_object(&st, "metrics");
	jb_end_object(&st);
	jb_begin_object(&st, "diagnostics");
	jb_text(&st, "finalize.event_id", ev->event_id);
	jb_text(&st, "finalize.period_end", t->period_end);
	jb_text(&st, "finalize.period_start", t->period_start);
	jb_text(&st, "finalize.publication", ev->publication);
	jb_text(&st, "finalize.table", t->table);
	jb_end_object(&st);
	jb_begin_array(&st, "filenames");
	jb_end_array(&st);
	return jb_finish_text(jb_end_object(&st));
}

/*
 * The marker to write, or NULL when the one there (found, body) already
 * says this period is complete.
 */
static char *
marker_body(const MarkerTarget *t, const PushEvent *ev, bool found, const char *body)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		creation = unix_ms(now);
	JsonbParseState *st = NULL;

	if (found && (t->format == MARKER_EMPTY || marker_of_period(t, body, &creation)))
		return NULL;
	if (t->format == MARKER_EMPTY)
		return pstrdup("");
	if (t->format == MARKER_S3A)
		return s3a_body(t, ev, now);
	/* Paimon's re-marking keeps the creationTime of a marker already there. */
	jb_begin_object(&st, NULL);
	jb_int(&st, "creationTime", creation);
	jb_int(&st, "modificationTime", unix_ms(now));
	jb_jsonb(&st, "finalize", t->event);
	return jb_finish_text(jb_end_object(&st));
}

/*
 * Records a failed read or write in the store's own words (S3's Code and
 * Message, the system's for a local store), every key redacted; a refusal
 * of the keys (401, 403) is an auth failure.
 */
static void
store_failed(const MarkerTarget *t, const char *doing, const StoreError *err, PushResult *out)
{
	out->status = err->http_status;
	out->auth_failed = err->http_status == 401 || err->http_status == 403;
	out->error = redact_secrets(psprintf("could not %s marker \"%s\": %s%s%s", doing, t->shown, err->code,
										 err->message[0] ? ": " : "", err->message),
								t->store.secrets);
}

/*
 * send(): reads the marker, and writes it unless it already says this
 * period is complete; no transaction is open. The client is not used: a
 * store's requests go through objstore.c, on a connection of their own.
 */
static void
marker_send(void *target, const PushEvent *ev, HttpClient *client pg_attribute_unused(), PushResult *out)
{
	MarkerTarget *t = (MarkerTarget *) target;
	StoreError		err;
	char	   *old = NULL;
	size_t		old_len;
	bool		found;
	char	   *body;
	bool		ok;

	out->retry_after = -1;
	if (t->waits)
	{
		out->delivered = out->already = true;	/* its directory's last period writes it */
		return;
	}
	ok = store_read(&t->store, t->key, MARKER_MAX_BYTES, &old, &old_len, &found, &err);
	/* One too large to be ours is someone else's: replaced. */
	if (!ok && strcmp(err.code, "ResponseTooLarge") == 0)
		ok = found = true;
	if (!ok)
	{
		store_failed(t, "read", &err, out);
		return;
	}
	out->status = t->store.kind != STORE_FILE ? (found ? 200 : 404) : 0;
	body = marker_body(t, ev, found, old);
	if (body == NULL)
	{
		out->delivered = out->already = true;
		return;
	}
	ok = store_put(&t->store, t->key, body, strlen(body),
						  t->format == MARKER_EMPTY ? "application/octet-stream" : "application/json", &err);
	if (!ok)
	{
		store_failed(t, "write", &err, out);
		return;
	}
	out->status = t->store.kind != STORE_FILE ? 200 : 0;
	out->delivered = true;
}

const PushTargetKind push_success_marker_kind = {
	.name = "success_marker",
	.load = marker_load,
	.send = marker_send,
};
