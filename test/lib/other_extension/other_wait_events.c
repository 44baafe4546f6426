/*
 * other_wait_events.c
 *     A stand-in for the other extensions of a cluster (test only): takes
 *     custom wait events (PostgreSQL 17 on) until the cluster has none left,
 *     as extensions that each register a few of them do together.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/wait_event.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(take_all_wait_events);

/*
 * Registers "OtherExtensionN" for N = 0, 1, ... until PostgreSQL refuses
 * one ("too many custom wait events"); that error ends the call (and its
 * transaction releases the table's lock), which is how the caller knows
 * the table is full.
 */
Datum
take_all_wait_events(PG_FUNCTION_ARGS)
{
	for (int i = 0;; i++)
	{
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "OtherExtension%d", i);
		(void) WaitEventExtensionNew(name);
	}
	PG_RETURN_VOID();
}
