/*
 * target.h
 *     A webhook target as the alerts worker sends to it: a foreign server of
 *     finalize_webhook, its options and the secrets of its user mapping.
 */
#ifndef FINALIZE_ALERT_TARGET_H
#define FINALIZE_ALERT_TARGET_H

#include "alert/payload.h"

typedef struct AlertTarget
{
	char	   *name;
	char	   *format;			/* json | slack | pagerduty_v2 | opsgenie */
	char	   *url;			/* the user mapping's, else the server's */
	long		timeout_ms;
	AlertSecrets secrets;
	List	   *secret_values;	/* every secret, to keep out of messages */
} AlertTarget;

extern AlertTarget *alert_target_load(const char *name, MemoryContext cxt, char **error);
extern char *alert_redact(const AlertTarget *target, const char *text);

#endif							/* FINALIZE_ALERT_TARGET_H */
