/*
 * airflow_http.c
 *     One request of a publication's attempt to an Airflow API server,
 *     over core/http.c (the one file that calls libcurl): within what is
 *     left of the attempt's timeout, under a size cap, with the bearer
 *     token; and what Airflow said, read from its JSON answers (FastAPI's
 *     {"detail": ...}) with PostgreSQL's jsonb, every secret redacted.
 */
#include "postgres.h"

#include <time.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "utils/timestamp.h"

#include "alert/outcome.h"
#include "core/redact.h"
#include "lake/metadata.h"
#include "push/airflow.h"

/* The longest text of Airflow's that a message quotes. */
#define WORDS_MAX 300
/* How many of a validation error's items a message quotes. */
#define DETAIL_ITEMS 3

/* A text with every secret of the target (and the token sent) redacted. */
char *
airflow_redact(const AirflowCall *call, const char *text)
{
	List	   *secrets = list_copy(call->target->secrets);

	if (call->bearer != NULL)
		secrets = lappend(secrets, (char *) call->bearer);
	return redact_secrets(text, secrets);
}

/*
 * Sends one request of the attempt and fills answer. False, with the
 * event's error said, when no HTTP answer came (refused, reset, the
 * attempt's time spent). An answer over max_bytes still answered: its
 * status counts (a 2xx to a POST is a delivery), its body is not read.
 */
bool
airflow_request(AirflowCall *call, const char *method, const char *path, const char *body,
				size_t max_bytes, AirflowAnswer *answer)
{
	HttpRequest req;
	HttpResponse resp;
	List	   *headers = list_make1("Accept: application/json");
	long		left = (long) ((call->deadline - GetCurrentTimestamp()) / 1000);

	memset(answer, 0, sizeof(*answer));
	answer->body = "";
	if (left <= 0)
	{
		call->out->status = 0;
		call->out->error = psprintf("Airflow server \"%s\" did not answer within the attempt's timeout of %ld ms (%s %s was not sent)",
									call->target->server, call->target->timeout_ms, method, path);
		return false;
	}
	if (body != NULL)
		headers = lappend(headers, "Content-Type: application/json");
	if (call->bearer != NULL)
		headers = lappend(headers, psprintf("Authorization: Bearer %s", call->bearer));
	memset(&req, 0, sizeof(req));
	req.method = method;
	req.url = psprintf("%s%s", call->target->url, path);
	req.headers = headers;
	req.body = body;
	req.body_len = body != NULL ? strlen(body) : 0;
	req.connect_timeout_ms = left;
	req.timeout_ms = left;
	req.max_response_bytes = max_bytes;
	req.wait = FINALIZE_WAIT_WEBHOOK;
	pgstat_report_activity(STATE_RUNNING, psprintf("finalize: publishing to Airflow server \"%s\"", call->target->server));
	(void) http_perform(call->client, &req, &resp);
	pgstat_report_activity(STATE_IDLE, NULL);
	/* A cancel or a termination is served now, after libcurl returned. */
	CHECK_FOR_INTERRUPTS();
	call->out->status = resp.status;
	if (resp.failure != HTTP_OK && !(resp.failure == HTTP_TOO_LARGE && resp.status > 0))
	{
		/* Redacted whole, then cut: a cut must not split a secret. */
		call->out->error = text_excerpt(airflow_redact(call, psprintf("no answer from Airflow server \"%s\" to %s %s: %s",
																 call->target->server, method, path, resp.error)), WORDS_MAX);
		return false;
	}
	call->out->retry_after = delivery_retry_after(resp.retry_after, time(NULL));
	answer->status = resp.status;
	answer->too_large = resp.failure == HTTP_TOO_LARGE;
	if (resp.failure == HTTP_OK)
	{
		answer->body = resp.body;
		answer->json = resp.len > 0 ? lake_parse_json(resp.body) : NULL;
	}
	return true;
}

/*
 * Airflow's words in a parsed answer: FastAPI's "detail", a sentence or a
 * validation error's list of {"loc", "msg"}; NULL when there is none.
 */
static char *
detail_words(Jsonb *doc)
{
	char	   *text = airflow_json_text(doc, "detail");
	StringInfoData buf;
	int			count = 0;

	if (text != NULL)
		return text;
	initStringInfo(&buf);
	for (int i = 0; i < DETAIL_ITEMS; i++)
	{
		JsonbValue *item = airflow_json_item(doc, "detail", i, &count);
		char	   *msg = item != NULL ? airflow_member_text(item, "msg", NULL) : NULL;

		if (msg != NULL)
			appendStringInfo(&buf, "%s%s", buf.len > 0 ? "; " : "", msg);
	}
	if (count > DETAIL_ITEMS)
		appendStringInfo(&buf, " (and %d more)", count - DETAIL_ITEMS);
	return buf.len > 0 ? buf.data : NULL;
}

/*
 * Says why a request was refused, in Airflow's own words (its "detail",
 * else the start of its body), secrets redacted: redacted whole before
 * it is read, and again once read (a detail may quote a secret escaped).
 */
void
airflow_refusal(AirflowCall *call, const char *what, const AirflowAnswer *answer)
{
	char	   *body = airflow_redact(call, answer->body);
	Jsonb	   *doc = body[0] != '\0' ? lake_parse_json(body) : NULL;
	char	   *words = doc != NULL ? detail_words(doc) : NULL;

	if (words == NULL)
		words = body[0] != '\0' ? body : "(no body)";
	call->out->error = psprintf("Airflow server \"%s\" answered HTTP %ld to %s: %s", call->target->server,
								answer->status, what, text_excerpt(airflow_redact(call, words), WORDS_MAX));
}

/* A string member of a parsed answer's top object, or NULL. */
char *
airflow_json_text(Jsonb *doc, const char *key)
{
	if (doc == NULL)
		return NULL;
	return lake_string_value(lake_field(&doc->root, key));
}

/*
 * The i-th item of the array that is a member of a parsed answer's top
 * object (NULL past its end or when it is none), and in *count its length.
 */
JsonbValue *
airflow_json_item(Jsonb *doc, const char *key, int i, int *count)
{
	JsonbContainer *array = doc != NULL ? lake_container(lake_field(&doc->root, key)) : NULL;

	*count = 0;
	if (array == NULL || !JsonContainerIsArray(array))
		return NULL;
	*count = JsonContainerSize(array);
	return i < *count ? getIthJsonbValueFromContainer(array, i) : NULL;
}

/* An integer member of an object value, into *out. */
bool
airflow_json_int(JsonbValue *obj, const char *key, int64 *out)
{
	return lake_int64_value(lake_field(lake_container(obj), key), out);
}

/* A string member of an object value (key2: of its object member key1), or NULL. */
char *
airflow_member_text(JsonbValue *obj, const char *key1, const char *key2)
{
	JsonbValue *v = lake_field(lake_container(obj), key1);

	if (key2 != NULL)
		v = lake_field(lake_container(v), key2);
	return lake_string_value(v);
}
