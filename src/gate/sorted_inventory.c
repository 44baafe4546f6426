/*
 * sorted_inventory.c
 *     Sets of objects kept in a tuplesort: the manifest read from the store
 *     (files_location) and the listing compared with it.
 *
 * A manifest of ten million files is neither passed as one jsonb nor held
 * in a hash table: its objects and the listing's each go into a tuplesort
 * of (path text, size int8, etag text) ordered by path in the C collation,
 * which keeps work_mem in memory and spills the rest to temporary files.
 * The two sorted streams are then merged (inventory_merge.c) in one pass.
 * Values handed to the sort are built in a scratch context reset every
 * thousand objects, so memory stays at work_mem per sort plus a batch.
 */
#include "postgres.h"

#include "access/tupdesc.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/tuplesort.h"

#include "gate/sorted_inventory.h"

/* Objects put between two resets of the scratch context. */
#define PUT_BATCH 1000

struct SortedInventory
{
	TupleDesc	desc;
	Tuplesortstate *sort;
	TupleTableSlot *put_slot;	/* virtual: the values of one put */
	TupleTableSlot *get_slot;	/* minimal: one sorted object */
	MemoryContext scratch;		/* the text values of the current batch */
	int			in_batch;
	int64		got;
	const char *source;			/* names the set in a duplicate's error */
	StringInfoData prev;		/* the previous path read back */
	bool		have_prev;
};

/*
 * Starts an empty set: the sort owns at most work_mem of memory; the rest
 * goes to temporary files (temp_tablespaces, temp_file_limit apply).
 */
SortedInventory *
sorted_inventory_begin(void)
{
	SortedInventory *s = palloc0(sizeof(SortedInventory));
	AttrNumber	keys[1] = {1};
	Oid			ops[1] = {TextLessOperator};
	Oid			colls[1] = {C_COLLATION_OID};
	bool		nulls_first[1] = {false};

	s->desc = CreateTemplateTupleDesc(3);
	TupleDescInitEntry(s->desc, 1, "path", TEXTOID, -1, 0);
	TupleDescInitEntry(s->desc, 2, "size", INT8OID, -1, 0);
	TupleDescInitEntry(s->desc, 3, "etag", TEXTOID, -1, 0);
	s->sort = tuplesort_begin_heap(s->desc, 1, keys, ops, colls, nulls_first, work_mem, NULL, TUPLESORT_NONE);
	s->put_slot = MakeSingleTupleTableSlot(s->desc, &TTSOpsVirtual);
	s->get_slot = MakeSingleTupleTableSlot(s->desc, &TTSOpsMinimalTuple);
	s->scratch = AllocSetContextCreate(CurrentMemoryContext, "finalize sorted inventory batch",
									   ALLOCSET_DEFAULT_SIZES);
	initStringInfo(&s->prev);
	return s;
}

/* Adds one object (copied by the sort; o may be freed afterwards). */
void
sorted_inventory_put(SortedInventory *s, const InvObject *o)
{
	MemoryContext old = MemoryContextSwitchTo(s->scratch);
	TupleTableSlot *slot = s->put_slot;

	ExecClearTuple(slot);
	slot->tts_values[0] = PointerGetDatum(cstring_to_text_with_len(o->path, o->path_len));
	slot->tts_isnull[0] = false;
	slot->tts_values[1] = Int64GetDatum(o->size);
	slot->tts_isnull[1] = false;
	slot->tts_isnull[2] = o->etag == NULL;
	slot->tts_values[2] = o->etag ? PointerGetDatum(cstring_to_text_with_len(o->etag, o->etag_len)) : (Datum) 0;
	ExecStoreVirtualTuple(slot);
	MemoryContextSwitchTo(old);
	tuplesort_puttupleslot(s->sort, slot);
	if (++s->in_batch >= PUT_BATCH)
	{
		ExecClearTuple(slot);
		MemoryContextReset(s->scratch);
		s->in_batch = 0;
	}
}

/*
 * Next object in path order; a path given twice is an error naming the
 * set (a manifest that lists a file twice says two things about it).
 */
static bool
sorted_next(InvCursor *cursor, InvObject *out)
{
	SortedInventory *s = (SortedInventory *) cursor->state;
	TupleTableSlot *slot = s->get_slot;
	text	   *path;
	bool		isnull;

	if ((++s->got & 1023) == 0)
		CHECK_FOR_INTERRUPTS();
	if (!tuplesort_gettupleslot(s->sort, true, false, slot, NULL))
		return false;
	path = DatumGetTextPP(slot_getattr(slot, 1, &isnull));
	out->path = VARDATA_ANY(path);
	out->path_len = VARSIZE_ANY_EXHDR(path);
	out->size = DatumGetInt64(slot_getattr(slot, 2, &isnull));
	out->etag = NULL;
	out->etag_len = 0;
	{
		Datum		e = slot_getattr(slot, 3, &isnull);

		if (!isnull)
		{
			text	   *etag = DatumGetTextPP(e);

			out->etag = VARDATA_ANY(etag);
			out->etag_len = VARSIZE_ANY_EXHDR(etag);
		}
	}
	if (s->source != NULL)
	{
		if (s->have_prev && s->prev.len == out->path_len && memcmp(s->prev.data, out->path, out->path_len) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid manifest: field \"files_location\": \"%s\" lists \"%s\" twice",
							s->source, pnstrdup(out->path, out->path_len)),
					 errdetail("A manifest names each file once, with one size and checksum."),
					 errhint("Write each file's line once in the manifest object.")));
		resetStringInfo(&s->prev);
		appendBinaryStringInfo(&s->prev, out->path, out->path_len);
		s->have_prev = true;
	}
	return true;
}

/*
 * Sorts the set and gives a cursor over it in path order (bytes, then
 * length: INV_ORDER_BYTES); an object is valid until the next call. With
 * source, a path given twice is an error naming it.
 */
void
sorted_inventory_cursor(SortedInventory *s, InvCursor *cursor, const char *source)
{
	ExecClearTuple(s->put_slot);
	MemoryContextReset(s->scratch);
	tuplesort_performsort(s->sort);
	s->source = source;
	cursor->next = sorted_next;
	cursor->state = s;
}

/* Frees the sort, its memory and its temporary files. */
void
sorted_inventory_end(SortedInventory *s)
{
	ExecDropSingleTupleTableSlot(s->put_slot);
	ExecDropSingleTupleTableSlot(s->get_slot);
	tuplesort_end(s->sort);
	MemoryContextDelete(s->scratch);
}
