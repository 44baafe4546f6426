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

/*
 * Sets an error's fields (NULL: empty). A message longer than its field
 * loses the words that do not fit whole: it is redacted only when raised
 * (store_raise knows the store's secrets), and a cut inside a word could
 * leave part of a secret there that redaction no longer recognises.
 */
void
store_set_error(StoreError *err, long status, const char *code, const char *message)
{
	size_t		keep = message ? strlen(message) : 0;

	err->http_status = status;
	strlcpy(err->code, code ? code : "", sizeof(err->code));
	if (keep >= sizeof(err->message))
	{
		/* message[keep] is the first byte left out: a space ends a whole word. */
		keep = sizeof(err->message) - 1;
		while (keep > 0 && !isspace((unsigned char) message[keep]))
			keep--;
	}
	memcpy(err->message, message ? message : "", keep);
	err->message[keep] = '\0';
}
