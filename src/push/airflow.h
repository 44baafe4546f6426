/*
 * airflow.h
 *     An Airflow API server as a publication's target (airflow.c): the
 *     finalize_airflow server's options, its owner's credentials, and one
 *     attempt's requests to its REST API (airflow_http.c: bounded in time
 *     and size, Airflow's own words in errors, secrets redacted).
 */
#ifndef FINALIZE_PUSH_AIRFLOW_H
#define FINALIZE_PUSH_AIRFLOW_H

#include "push/target.h"

typedef struct AirflowTarget
{
	char	   *server;			/* the foreign server's name */
	char	   *url;			/* the API server's base URL, no trailing / */
	long		timeout_ms;		/* for the whole attempt */
	char	   *token;			/* the user mapping's token, or NULL */
	char	   *username;		/* or these, exchanged at /auth/token */
	char	   *password;
	List	   *secrets;		/* kept out of every message */
} AirflowTarget;

/* One attempt to deliver one event. */
typedef struct AirflowCall
{
	AirflowTarget *target;
	const PushEvent *event;
	HttpClient *client;
	PushResult *out;
	TimestampTz deadline;		/* the attempt's end: its timeout */
	const char *bearer;			/* the token sent, NULL for none */
	bool		bearer_fetched; /* got from /auth/token (may be replaced) */
} AirflowCall;

/* One answer of the REST API. */
typedef struct AirflowAnswer
{
	long		status;			/* 0: no answer (out->error says why) */
	char	   *body;
	Jsonb	   *json;			/* the body parsed, NULL when it is not JSON */
	bool		too_large;		/* the body was over the cap: not read */
} AirflowAnswer;

extern bool airflow_request(AirflowCall *call, const char *method, const char *path, const char *body,
							size_t max_bytes, AirflowAnswer *answer);
extern char *airflow_redact(const AirflowCall *call, const char *text);
extern void airflow_refusal(AirflowCall *call, const char *what, const AirflowAnswer *answer);
extern char *airflow_json_text(Jsonb *doc, const char *key);
extern JsonbValue *airflow_json_item(Jsonb *doc, const char *key, int i, int *count);
extern bool airflow_json_int(JsonbValue *obj, const char *key, int64 *out);
extern char *airflow_member_text(JsonbValue *obj, const char *key1, const char *key2);

#endif							/* FINALIZE_PUSH_AIRFLOW_H */
