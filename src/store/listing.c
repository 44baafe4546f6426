/*
 * listing.c
 *     Batches of listed objects, what every store's listing fills, and the
 *     errors stores report.
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "store/listing.h"

/* Makes room for one more object, doubling the array. */
static void
inventory_grow(Inventory *inv)
{
	if (inv->n == inv->capacity)
	{
		inv->capacity = inv->capacity ? inv->capacity * 2 : 64;
		inv->items = inv->items ? repalloc_huge(inv->items, sizeof(InvObject) * inv->capacity)
			: palloc_extended(sizeof(InvObject) * inv->capacity, MCXT_ALLOC_HUGE);
	}
}

/* Appends an object to an inventory (the strings are copied). */
void
inventory_add(Inventory *inv, const char *path, int64 size, const char *etag)
{
	inventory_grow(inv);
	inv->items[inv->n].path = pstrdup(path);
	inv->items[inv->n].path_len = strlen(path);
	inv->items[inv->n].size = size;
	inv->items[inv->n].etag = etag ? pstrdup(etag) : NULL;
	inv->items[inv->n].etag_len = etag ? strlen(etag) : 0;
	inv->n++;
}

/*
 * Appends an object whose strings stay where they are (a manifest's paths
 * and ETags point into its jsonb: a million of them are not copied).
 */
void
inventory_append(Inventory *inv, const InvObject *o)
{
	inventory_grow(inv);
	inv->items[inv->n++] = *o;
}

/* Sets an error's fields (NULL: empty). */
void
store_set_error(StoreError *err, long status, const char *code, const char *message)
{
	err->http_status = status;
	strlcpy(err->code, code ? code : "", sizeof(err->code));
	strlcpy(err->message, message ? message : "", sizeof(err->message));
}
