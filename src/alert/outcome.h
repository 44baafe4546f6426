/*
 * outcome.h
 *     What one webhook attempt's answer means for its delivery: done, try
 *     again later, or never (pure, unit-tested without a network).
 */
#ifndef FINALIZE_ALERT_OUTCOME_H
#define FINALIZE_ALERT_OUTCOME_H

#include <time.h>

typedef enum DeliveryVerdict
{
	DELIVERY_DONE,				/* a 2xx answer */
	DELIVERY_RETRY,				/* no answer, 408, 425, 429, 5xx, 401/403 */
	DELIVERY_PERMANENT			/* an answer that no retry can change */
} DeliveryVerdict;

extern DeliveryVerdict delivery_verdict(bool answered, long status);
extern double delivery_retry_after(const char *value, time_t now);

#endif							/* FINALIZE_ALERT_OUTCOME_H */
