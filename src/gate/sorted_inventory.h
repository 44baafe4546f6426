/*
 * sorted_inventory.h
 *     A set of objects too large to hold, read back in path order as a
 *     cursor for inv_merge: spooled in a tuplestore while it arrives in
 *     order, sorted in a tuplesort once it does not (each bounded by
 *     work_mem, spilling to temporary files).
 */
#ifndef FINALIZE_SORTED_INVENTORY_H
#define FINALIZE_SORTED_INVENTORY_H

#include "gate/inventory.h"

typedef struct SortedInventory SortedInventory;

extern SortedInventory *sorted_inventory_begin(const char *label);
extern void sorted_inventory_put(SortedInventory *s, const InvObject *o);
extern void sorted_inventory_cursor(SortedInventory *s, InvCursor *cursor, const char *source);
extern void sorted_inventory_end(SortedInventory *s);

#endif							/* FINALIZE_SORTED_INVENTORY_H */
