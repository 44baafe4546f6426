/*
 * sorted_inventory.h
 *     A set of objects too large to hold: sorted by path in a tuplesort
 *     (bounded by work_mem, spilling to temporary files), read back as a
 *     cursor for inv_merge.
 */
#ifndef FINALIZE_SORTED_INVENTORY_H
#define FINALIZE_SORTED_INVENTORY_H

#include "gate/inventory.h"

typedef struct SortedInventory SortedInventory;

extern SortedInventory *sorted_inventory_begin(void);
extern void sorted_inventory_put(SortedInventory *s, const InvObject *o);
extern void sorted_inventory_cursor(SortedInventory *s, InvCursor *cursor, const char *source);
extern void sorted_inventory_end(SortedInventory *s);

#endif							/* FINALIZE_SORTED_INVENTORY_H */
