/*
 * owner.h
 *     Running SQL as the extension's owner on behalf of a caller whose
 *     identity is taken before the switch.
 */
#ifndef FINALIZE_OWNER_H
#define FINALIZE_OWNER_H

#include "fmgr.h"

extern Oid	function_owner(Oid fn);
extern void run_as_owner(Oid owner, void (*step) (void *), void *arg);

#endif							/* FINALIZE_OWNER_H */
