/*
 * queue.h
 *     The publications' outbox as the delivery worker drains it (queue.c).
 */
#ifndef FINALIZE_PUSH_QUEUE_H
#define FINALIZE_PUSH_QUEUE_H

#include "core/http.h"

extern int	publication_deliver_round(MemoryContext cxt, HttpClient *client, bool (*must_stop) (void));
extern bool publication_round_full(int sent);
extern long publication_nap_ms(long nap);
extern void publication_release_claims(void);

#endif							/* FINALIZE_PUSH_QUEUE_H */
