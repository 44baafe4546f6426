/*
 * delete_counts.c
 *     How many of a partition's rows its position-delete files delete, as
 *     far as the manifests prove it (they hold no positions, only counts).
 *
 * A position-delete file's records are counted when it names the one data
 * file its deletes are in (referenced_data_file), that file is a live data
 * file of the partition, its data sequence number is at most the delete's
 * (a delete applies only to rows written before it), and no other delete
 * file names the same data file (two could delete the same row: the count
 * would be short by the overlap, which could hide extra rows). Any other
 * delete file, and every equality-delete file, is uncountable: the row
 * count is then unknown (row_count_unknown), never a guess.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/hsearch.h"

#include "publish/snapshot_files.h"

/* A data file of the partition, by its store key. */
typedef struct DataSlot
{
	const char *key;			/* hash key: the string it points to */
	int			index;			/* in the inventory */
	int			references;		/* delete files that name it */
} DataSlot;

/* Hashes the key a slot's key points to. */
static uint32
key_hash(const void *key, Size keysize pg_attribute_unused())
{
	const char *k = *(const char *const *) key;

	return hash_bytes((const unsigned char *) k, (int) strlen(k));
}

/* Compares the keys two slots point to. */
static int
key_match(const void *key1, const void *key2, Size keysize pg_attribute_unused())
{
	return strcmp(*(const char *const *) key1, *(const char *const *) key2);
}

/* The partition's data files by key, in the current memory context. */
static HTAB *
data_files_by_key(const SnapshotFiles *f)
{
	HASHCTL		ctl = {0};
	HTAB	   *tab;

	ctl.keysize = sizeof(const char *);
	ctl.entrysize = sizeof(DataSlot);
	ctl.hash = key_hash;
	ctl.match = key_match;
	ctl.hcxt = CurrentMemoryContext;
	tab = hash_create("finalize data files", Max(f->data_files, 16), &ctl,
					  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	for (int i = 0; i < f->files.n; i++)
	{
		DataSlot   *slot;
		bool		found;
		const char *key = f->files.items[i].path;

		if (f->sequences[i] == -2)
			continue;			/* a delete file */
		slot = hash_search(tab, &key, HASH_ENTER, &found);
		if (!found)
		{
			slot->index = i;
			slot->references = 0;
		}
	}
	return tab;
}

/*
 * The data file a position-delete file applies to, or NULL when its rows
 * cannot be counted (no reference, not a live data file of the partition,
 * a sequence number unknown, or the data file written after the delete).
 */
static DataSlot *
applies_to(const SnapshotFiles *f, HTAB *tab, const PositionDelete *d)
{
	DataSlot   *slot;
	int64		data_seq;

	if (d->referenced == NULL || d->sequence < 0)
		return NULL;
	slot = hash_search(tab, &d->referenced, HASH_FIND, NULL);
	if (slot == NULL)
		return NULL;
	data_seq = f->sequences[slot->index];
	return data_seq >= 0 && data_seq <= d->sequence ? slot : NULL;
}

/*
 * Sets f->position_deletes to the rows the countable position-delete files
 * delete, and adds the others to f->uncountable_deletes.
 */
void
count_position_deletes(SnapshotFiles *f)
{
	HTAB	   *tab;
	DataSlot  **target;

	f->position_deletes = 0;
	if (f->ndeletes == 0)
		return;
	tab = data_files_by_key(f);
	target = palloc(sizeof(DataSlot *) * f->ndeletes);
	for (int i = 0; i < f->ndeletes; i++)
		if ((target[i] = applies_to(f, tab, &f->deletes[i])) != NULL)
			target[i]->references++;
	for (int i = 0; i < f->ndeletes; i++)
	{
		if (target[i] != NULL && target[i]->references == 1)
			f->position_deletes += f->deletes[i].records;
		else
			f->uncountable_deletes++;
	}
	hash_destroy(tab);
	pfree(target);
}
