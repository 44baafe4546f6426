/*
 * listing.h
 *     What a store's listing is made of: objects (a key, a size, a
 *     checksum), batches of them, and the sink a listing goes to a batch at
 *     a time. The gate compares such batches with a manifest
 *     (gate/inventory.h); the lake reads them to find a table's log.
 */
#ifndef FINALIZE_LISTING_H
#define FINALIZE_LISTING_H

/* One object: a path (key) inside a store, its size and its checksum. */
typedef struct InvObject
{
	char	   *path;			/* NUL-terminated, except in cursors (path_len) */
	int			path_len;
	int64		size;
	char	   *etag;			/* NULL when not given / not known */
	int			etag_len;
} InvObject;

typedef struct Inventory
{
	InvObject  *items;
	int			n;
	int			capacity;
} Inventory;

/*
 * For a local store: whether a listed file needs its checksum computed
 * (reading every file for one would dominate a listing's cost).
 */
typedef bool (*WantsChecksum) (const char *path, void *arg);

/*
 * Where a store's listing goes, a batch at a time (a directory's files, an
 * S3 or Azure page): the listing is never held whole. The batch and its
 * strings are freed once consume returns. wants_checksum (NULL: none) is
 * asked with the sink itself as arg; in_order asks a local store for its
 * files in key order (remote stores list in that order anyway).
 */
typedef struct ListingSink
{
	void		(*consume) (struct ListingSink *sink, const Inventory *batch);
	WantsChecksum wants_checksum;
	bool		in_order;
} ListingSink;

/* Objects per batch of a listing (S3 and Azure pages hold 1,000 keys, 5,000 at most). */
#define LISTING_BATCH 1000

/* Where the bytes of an object go as they are read. */
typedef void (*FileChunkFn) (void *arg, const char *data, size_t len);

/*
 * What went wrong, in the store's words when it said something (S3's and
 * Azure's Code and Message; a local store's: the system's, see
 * filestore_write.c).
 */
typedef struct StoreError
{
	long		http_status;	/* 0 when no HTTP answer */
	char		code[128];		/* the store's error code, or a local one */
	char		message[1024];
} StoreError;

extern void store_set_error(StoreError *err, long status, const char *code, const char *message);
extern void inventory_add(Inventory *inv, const char *path, int64 size, const char *etag);
extern void inventory_append(Inventory *inv, const InvObject *o);

#endif							/* FINALIZE_LISTING_H */
