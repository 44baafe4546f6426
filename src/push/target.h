/*
 * target.h
 *     What every publication target (push/) is given and answers: one event
 *     of the outbox (finalize.publication_event) with what its publication
 *     declared, and the outcome of one attempt to deliver it.
 *
 * The delivery worker claims an event in a short transaction, calls the
 * target kind's load() in a transaction of its own (server options, the
 * server owner's user mapping), then send() with no transaction open, then
 * records the outcome. A target never decides whether a period is final:
 * the event exists only because the transaction that made its period final
 * recorded it.
 */
#ifndef FINALIZE_PUSH_TARGET_H
#define FINALIZE_PUSH_TARGET_H

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

#include "core/http.h"

/* One claimed event, everything palloc'd in the delivery's context. */
typedef struct PushEvent
{
	int64		event_seq;		/* the outbox row */
	char	   *event_id;		/* uuid text: the receiver's deduplication key */
	char	   *kind;			/* "final" or "late_data" */
	int64		publication_id;
	char	   *publication;	/* the publication's name */
	char	   *target_kind;	/* airflow | dagster | iceberg_property |
								 * success_marker | webhook */
	char	   *server_name;	/* the foreign server; NULL for a file://
								 * marker */
	char	   *table_name;
	TimestampTz period_start;
	TimestampTz period_end;
	char	   *period_zone;
	char	   *partition_key;	/* rendered from the publication's template */
	char	   *location;		/* success_marker: the rendered directory,
								 * ending in '/'; else NULL */
	Jsonb	   *options;		/* the publication's options (jsonb object) */
	char	   *body;			/* finalize's event object as JSON text
								 * (schema finalize.publication/1) */
	int			attempts;		/* this attempt included */
} PushEvent;

/* What one attempt came to. */
typedef struct PushResult
{
	bool		delivered;		/* the effect is at the target now */
	bool		already;		/* it was there before this attempt (nothing
								 * new was written) */
	long		status;			/* the last HTTP status, 0 when none */
	char	   *error;			/* why not delivered: the target's own words,
								 * every secret redacted */
	double		retry_after;	/* seconds the target asked for, -1 when none */
	bool		auth_failed;	/* the target refused the credentials (401,
								 * 403, a refused login) */
} PushResult;

/* A kind of target: how its server is read and how an event is sent. */
typedef struct PushTargetKind
{
	const char *name;
	/*
	 * In a transaction: the server's options and the secrets of its owner's
	 * user mapping, copied into cxt. NULL with *error set (naming the server,
	 * never a secret) when nothing can be sent: the event then waits.
	 */
	void	   *(*load) (const PushEvent *ev, MemoryContext cxt, char **error);
	/* No transaction open: one attempt, bounded in time and size. */
	void		(*send) (void *target, const PushEvent *ev, HttpClient *client, PushResult *out);
} PushTargetKind;

extern const PushTargetKind push_webhook_kind;
extern const PushTargetKind push_airflow_kind;
extern const PushTargetKind push_dagster_kind;
extern const PushTargetKind push_iceberg_property_kind;
extern const PushTargetKind push_success_marker_kind;

#endif							/* FINALIZE_PUSH_TARGET_H */
