/*
 * Unit tests of the compact stored form of a listing (inventory_codec.c):
 * records round-trip (front-coded keys, sizes, packed and raw ETags, absent
 * records), the form stays small for neighbouring keys, and malformed input
 * (bad magic, truncation, a shared prefix longer than the previous key) is
 * refused instead of read past its end. Built and run by
 * test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include "gate/inventory_codec.h"

#include "tap.h"

/* A growable byte buffer: what a StringInfo is in the server. */
typedef struct Buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} Buf;

/* The encoder's writer. */
static void
buf_append(void *arg, const void *data, size_t len)
{
	Buf		   *b = arg;

	if (b->len + len > b->cap)
	{
		b->cap = (b->len + len) * 2;
		b->data = realloc(b->data, b->cap);
	}
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

static InvEncoder enc;
static InvDecoder dec;

/* One record as written, to compare with what is read back. */
typedef struct Rec
{
	char		kind;
	const char *path;
	int64_t		size;
	const char *etag;
} Rec;

static const Rec recs[] = {
	{'L', "day=27/hour=08/gen-1/b=0000/part-0000001.parquet", 1048576, NULL},
	{'L', "day=27/hour=08/gen-1/b=0000/part-0000002.parquet", 0, "\"9b2cf535f27731c974343645a3985328\""},
	{'L', "day=27/hour=08/gen-1/b=0000/part-0000003.parquet", INT64_C(5000000000000), "\"abc-3\""},
	{'A', "day=27/hour=08/gen-1/b=0001/part-0001000.parquet", 0, NULL},
	{'L', "day=27/hour=08/gen-1/b=0001/part-0001000.parquet (copy)", 17, "9B2CF535F27731C974343645A3985328"},
	{'L', "x", 1, ""},
	{'A', "day=27/hour=08/gen-1/z", 0, NULL},
};
#define NRECS ((int) (sizeof(recs) / sizeof(recs[0])))

/* Whether every record reads back as written, and then the end. */
static bool
round_trips(const Buf *b)
{
	InvRecord	r;

	if (!inv_decoder_init(&dec, b->data, b->len))
		return false;
	for (int i = 0; i < NRECS; i++)
	{
		if (!inv_decode_next(&dec, &r) || r.kind != recs[i].kind || r.path_len != strlen(recs[i].path) ||
			memcmp(r.path, recs[i].path, r.path_len) != 0)
			return false;
		if (r.kind == 'A')
			continue;
		if (r.size != recs[i].size || (r.etag == NULL) != (recs[i].etag == NULL))
			return false;
		if (r.etag != NULL && (r.etag_len != strlen(recs[i].etag) || memcmp(r.etag, recs[i].etag, r.etag_len) != 0))
			return false;
	}
	return !inv_decode_next(&dec, &r) && !dec.error;
}

/* Whether decoding data stops with an error (and never crashes). */
static bool
refused(const char *data, size_t len)
{
	InvRecord	r;

	if (!inv_decoder_init(&dec, data, len))
		return true;
	while (inv_decode_next(&dec, &r))
		;
	return dec.error;
}

int
main(void)
{
	Buf			b = {0};
	Buf			big = {0};
	char		path[64];
	bool		all_rejected = true;

	inv_encoder_init(&enc, buf_append, &b);
	for (int i = 0; i < NRECS; i++)
		inv_encode(&enc, recs[i].kind, recs[i].path, strlen(recs[i].path), recs[i].size,
				   recs[i].etag, recs[i].etag ? strlen(recs[i].etag) : 0);
	check(enc.records == NRECS, "every record is counted");
	check(round_trips(&b), "records round-trip: keys, sizes, packed and raw etags, absent ones");
	check(!inv_encode(&enc, 'L', "p", 1, -1, NULL, 0), "a negative size is refused");
	check(!inv_encode(&enc, 'Q', "p", 1, 1, NULL, 0), "an unknown kind is refused");

	/* Neighbouring keys (a directory's files) share their prefix. */
	inv_encoder_init(&enc, buf_append, &big);
	for (int i = 0; i < 10000; i++)
	{
		snprintf(path, sizeof(path), "day=27/hour=08/gen-1/b=%04d/part-%07d.parquet", i / 1000, i);
		inv_encode(&enc, 'L', path, strlen(path), 1000 + i % 5000, "\"9b2cf535f27731c974343645a3985328\"", 34);
	}
	/* As jsonb, each would take over 90 bytes (key, etag text, size, entries). */
	check(big.len < 10000 * 40, "10,000 neighbouring keys with md5 etags take under 40 bytes each");

	check(refused("XXXX", 4), "a wrong magic is refused");
	check(refused(b.data, 3), "a form shorter than its magic is refused");
	for (size_t cut = INVCODEC_MAGIC_LEN + 1; cut < b.len; cut++)
	{
		InvRecord	r;
		int			n = 0;

		/* Cut anywhere: never more records than fit, never a read past the end. */
		if (inv_decoder_init(&dec, b.data, cut))
			while (inv_decode_next(&dec, &r))
				n++;
		if (n >= NRECS)
			all_rejected = false;
	}
	check(all_rejected, "a truncated form never yields every record");
	{
		/* A shared prefix longer than the previous key. */
		const char	bad[] = {'F', 'I', 'V', '1', 'L', 5, 1, 'a', 1, 0};

		check(refused(bad, sizeof(bad)), "a shared prefix longer than the previous key is refused");
	}
	{
		/* A suffix longer than what is left. */
		const char	bad[] = {'F', 'I', 'V', '1', 'A', 0, 100, 'a'};

		check(refused(bad, sizeof(bad)), "a suffix running past the end is refused");
	}
	free(b.data);
	free(big.data);
	return tap_done();
}
