/*
 * delivery.h
 *     The alert webhooks' queue (delivery.c), as the delivery worker
 *     (push/worker.c) drains it beside the publications' outbox.
 */
#ifndef FINALIZE_ALERT_DELIVERY_H
#define FINALIZE_ALERT_DELIVERY_H

#include "core/http.h"

extern int	alert_deliver_round(MemoryContext cxt, HttpClient *client, bool (*must_stop) (void));
extern bool alert_round_full(int sent);
extern long alert_nap_ms(long nap);
extern void alert_release_claims(void);

#endif							/* FINALIZE_ALERT_DELIVERY_H */
