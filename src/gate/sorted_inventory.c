/*
 * sorted_inventory.c
 *     Sets of objects kept in a tuplesort: the manifest read from the store
 *     (files_location) and the listing compared with it.
 *
 * A manifest of ten million files is neither passed as one jsonb nor held
 * in a hash table: its objects and the listing's each go into a set of
 * (path text, size int8, etag text) read back in path order (C collation:
 * bytes, then length), which keeps work_mem in memory and spills the rest
 * to temporary files. The two streams are then merged (inventory_merge.c)
 * in one pass.
 *
 * Most sets arrive in that order already (an S3 listing comes in key
 * order, a local store is walked in it, publishers often write their
 * manifest sorted), and sorting ten million objects that are in order
 * costs an external merge sort of a gigabyte per side. So a set is first
 * spooled as it comes into a tuplestore, each path checked against the
 * previous one with the merge's own comparison (inv_order_cmp); the first
 * object out of order moves what was spooled into a tuplesort, which then
 * takes the rest. The order the merge relies on is thus checked for every
 * object, never assumed. Values handed to the store are built in a scratch
 * context reset every thousand objects, so memory stays at work_mem per
 * set plus a batch; while a spool moves into its sort both are held (two
 * work_mem for that set, for the time of the move), and a file:// walk
 * holds up to a quarter of work_mem of directory entries (filestore.c).
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
#include "utils/tuplestore.h"

#include "gate/inventory_merge.h"
#include "gate/sorted_inventory.h"

/* Objects put between two resets of the scratch context. */
#define PUT_BATCH 1000

struct SortedInventory
{
	TupleDesc	desc;
	Tuplestorestate *spool;		/* while every object came in order */
	Tuplesortstate *sort;		/* once one did not: NULL before */
	StringInfoData last_put;	/* the path of the previous put (spooling) */
	bool		have_last_put;
	TupleTableSlot *put_slot;	/* virtual: the values of one put */
	TupleTableSlot *get_slot;	/* minimal: one sorted object */
	MemoryContext cxt;			/* where the set lives (begin's context) */
	MemoryContext scratch;		/* the text values of the current batch */
	int			in_batch;
	int64		got;
	const char *label;			/* what the set is, for the debug message */
	int64		put;
	const char *source;			/* names the set in a duplicate's error */
	StringInfoData prev;		/* the previous path read back */
	bool		have_prev;
};

/*
 * Starts an empty set: the spool (and later the sort) owns at most work_mem
 * of memory; the rest goes to temporary files (temp_tablespaces,
 * temp_file_limit apply).
 */
SortedInventory *
sorted_inventory_begin(const char *label)
{
	SortedInventory *s = palloc0(sizeof(SortedInventory));

	s->label = label;
	s->cxt = CurrentMemoryContext;

	s->desc = CreateTemplateTupleDesc(3);
	TupleDescInitEntry(s->desc, 1, "path", TEXTOID, -1, 0);
	TupleDescInitEntry(s->desc, 2, "size", INT8OID, -1, 0);
	TupleDescInitEntry(s->desc, 3, "etag", TEXTOID, -1, 0);
	s->spool = tuplestore_begin_heap(false, false, work_mem);
	initStringInfo(&s->last_put);
	s->put_slot = MakeSingleTupleTableSlot(s->desc, &TTSOpsVirtual);
	s->get_slot = MakeSingleTupleTableSlot(s->desc, &TTSOpsMinimalTuple);
	s->scratch = AllocSetContextCreate(CurrentMemoryContext, "finalize sorted inventory batch",
									   ALLOCSET_DEFAULT_SIZES);
	initStringInfo(&s->prev);
	return s;
}

/*
 * The first object out of order: what was spooled moves into a tuplesort
 * (by path in the C collation, the order inv_order_cmp names
 * INV_ORDER_BYTES), which takes every later object too.
 */
static void
start_sorting(SortedInventory *s)
{
	AttrNumber	keys[1] = {1};
	Oid			ops[1] = {TextLessOperator};
	Oid			colls[1] = {C_COLLATION_OID};
	bool		nulls_first[1] = {false};
	int64		moved = 0;

	/* In the set's context: a put may come from a context reset meanwhile. */
	MemoryContext old = MemoryContextSwitchTo(s->cxt);

	s->sort = tuplesort_begin_heap(s->desc, 1, keys, ops, colls, nulls_first, work_mem, NULL, TUPLESORT_NONE);
	MemoryContextSwitchTo(old);
	while (tuplestore_gettupleslot(s->spool, true, false, s->get_slot))
	{
		if ((++moved & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		tuplesort_puttupleslot(s->sort, s->get_slot);
	}
	ExecClearTuple(s->get_slot);
	tuplestore_end(s->spool);
	s->spool = NULL;
}

/*
 * Adds one object (copied; o may be freed afterwards): spooled while the
 * paths come in order, sorted from the first that does not.
 */
void
sorted_inventory_put(SortedInventory *s, const InvObject *o)
{
	MemoryContext old;
	TupleTableSlot *slot = s->put_slot;

	s->put++;
	if (s->sort == NULL)
	{
		InvObject	last = {.path = s->last_put.data,.path_len = s->last_put.len};

		if (s->have_last_put && inv_order_cmp(INV_ORDER_BYTES, &last, o) > 0)
			start_sorting(s);
		else
		{
			resetStringInfo(&s->last_put);
			appendBinaryStringInfo(&s->last_put, o->path, o->path_len);
			s->have_last_put = true;
		}
	}
	old = MemoryContextSwitchTo(s->scratch);

	ExecClearTuple(slot);
	slot->tts_values[0] = PointerGetDatum(cstring_to_text_with_len(o->path, o->path_len));
	slot->tts_isnull[0] = false;
	slot->tts_values[1] = Int64GetDatum(o->size);
	slot->tts_isnull[1] = false;
	slot->tts_isnull[2] = o->etag == NULL;
	slot->tts_values[2] = o->etag ? PointerGetDatum(cstring_to_text_with_len(o->etag, o->etag_len)) : (Datum) 0;
	ExecStoreVirtualTuple(slot);
	MemoryContextSwitchTo(old);
	if (s->sort != NULL)
		tuplesort_puttupleslot(s->sort, slot);
	else
		tuplestore_puttupleslot(s->spool, slot);
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
	if (s->sort != NULL ? !tuplesort_gettupleslot(s->sort, true, false, slot, NULL)
		: !tuplestore_gettupleslot(s->spool, true, false, slot))
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
 * Sorts the set (unless it came in order) and gives a cursor over it in
 * path order (bytes, then length: INV_ORDER_BYTES); an object is valid
 * until the next call. With source, a path given twice is an error naming
 * it.
 */
void
sorted_inventory_cursor(SortedInventory *s, InvCursor *cursor, const char *source)
{
	ExecClearTuple(s->put_slot);
	MemoryContextReset(s->scratch);
	if (s->sort != NULL)
		tuplesort_performsort(s->sort);
	/* Says which path was taken: the tests check that ordered sets skip the sort. */
	ereport(DEBUG1,
			(errmsg_internal("finalize: %s of " INT64_FORMAT " objects %s", s->label, s->put,
							 s->sort != NULL ? "came out of order and was sorted" : "came in path order, not sorted")));
	s->source = source;
	cursor->next = sorted_next;
	cursor->state = s;
}

/* Frees the spool or sort, its memory and its temporary files. */
void
sorted_inventory_end(SortedInventory *s)
{
	ExecDropSingleTupleTableSlot(s->put_slot);
	ExecDropSingleTupleTableSlot(s->get_slot);
	if (s->sort != NULL)
		tuplesort_end(s->sort);
	else
		tuplestore_end(s->spool);
	MemoryContextDelete(s->scratch);
}
