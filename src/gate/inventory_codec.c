/*
 * inventory_codec.c
 *     The compact stored form of a release's listing.
 *
 * A release used to store its whole listing as a jsonb object, one entry
 * per object: at a million objects, building that object (sorting its keys)
 * and compressing it cost more than the rest of the gate. The listing is
 * now stored as what it adds to the manifest, which is stored anyway (it is
 * the publisher's own input, kept as given): one record per listed object
 * whose size or ETag differs from its manifest entry, or that the manifest
 * does not have, and one per manifest object the store did not list. A
 * listing that agrees with its manifest stores nothing but the header, and
 * the full listing is rebuilt from the two (finalize.release_report).
 *
 * Records are written in listing order (a directory's files, an S3 page's
 * keys: neighbours share long prefixes), each key front-coded against the
 * previous record's key:
 *
 *   kind byte ('L' listed, 'A' absent)
 *   varint shared-prefix length, varint suffix length, suffix bytes
 *   'L' only: varint size, ETag byte (0 none, 1 a quoted 32-digit
 *   lower-case MD5 packed into 16 bytes, 2 raw: varint length, bytes)
 *
 * after a 4-byte magic. The bytes are compressed by TOAST (lz4 where the
 * server has it): what remains after front coding is what compresses.
 */
#include <string.h>

#include "gate/inventory_codec.h"

/* Writes an unsigned LEB128 varint. */
static void
put_varint(InvEncoder *e, uint64_t v)
{
	unsigned char buf[10];
	int			n = 0;

	do
	{
		buf[n] = (unsigned char) (v & 0x7f);
		v >>= 7;
		if (v != 0)
			buf[n] |= 0x80;
		n++;
	} while (v != 0);
	e->append(e->arg, buf, n);
}

/* Reads an unsigned varint; false (and d->error) when truncated or too long. */
static bool
get_varint(InvDecoder *d, uint64_t *out)
{
	uint64_t	v = 0;

	for (int shift = 0; shift < 64; shift += 7)
	{
		unsigned char b;

		if (d->p >= d->end)
			break;
		b = *d->p++;
		v |= (uint64_t) (b & 0x7f) << shift;
		if ((b & 0x80) == 0)
		{
			*out = v;
			return true;
		}
	}
	d->error = true;
	return false;
}

/* The value of a lower-case hex digit, or -1. */
static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/*
 * Whether an ETag is S3's usual form, "<32 lower-case hex digits>" with its
 * quotes: stored in 16 bytes instead of 34 (hex does not compress).
 */
static bool
etag_packable(const char *etag, size_t len)
{
	if (len != 34 || etag[0] != '"' || etag[33] != '"')
		return false;
	for (int i = 1; i < 33; i++)
		if (hex_value(etag[i]) < 0)
			return false;
	return true;
}

/* Starts a stored form: the magic. */
void
inv_encoder_init(InvEncoder *e, InvCodecAppend append, void *arg)
{
	e->append = append;
	e->arg = arg;
	e->records = 0;
	e->prev_len = 0;
	append(arg, INVCODEC_MAGIC, INVCODEC_MAGIC_LEN);
}

/*
 * Appends one record (size and etag are ignored for an absent one); false,
 * writing nothing, for a key longer than the codec stores or a negative
 * size.
 */
bool
inv_encode(InvEncoder *e, char kind, const char *path, size_t path_len, int64_t size,
		   const char *etag, size_t etag_len)
{
	size_t		shared = 0;
	unsigned char k = (unsigned char) kind;

	if (path_len > INVCODEC_MAX_KEY || (kind == INVCODEC_LISTED && size < 0) ||
		(kind != INVCODEC_LISTED && kind != INVCODEC_ABSENT))
		return false;
	while (shared < path_len && shared < e->prev_len && path[shared] == e->prev[shared])
		shared++;
	e->append(e->arg, &k, 1);
	put_varint(e, shared);
	put_varint(e, path_len - shared);
	e->append(e->arg, path + shared, path_len - shared);
	memcpy(e->prev + shared, path + shared, path_len - shared);
	e->prev_len = path_len;
	if (kind == INVCODEC_LISTED)
	{
		unsigned char tag;

		put_varint(e, (uint64_t) size);
		if (etag == NULL)
		{
			tag = 0;
			e->append(e->arg, &tag, 1);
		}
		else if (etag_packable(etag, etag_len))
		{
			unsigned char md5[16];

			tag = 1;
			for (int i = 0; i < 16; i++)
				md5[i] = (unsigned char) (hex_value(etag[1 + 2 * i]) << 4 | hex_value(etag[2 + 2 * i]));
			e->append(e->arg, &tag, 1);
			e->append(e->arg, md5, 16);
		}
		else
		{
			tag = 2;
			e->append(e->arg, &tag, 1);
			put_varint(e, etag_len);
			e->append(e->arg, etag, etag_len);
		}
	}
	e->records++;
	return true;
}

/* Starts decoding a stored form; false when it does not start with the magic. */
bool
inv_decoder_init(InvDecoder *d, const void *data, size_t len)
{
	d->p = data;
	d->end = d->p + len;
	d->prev_len = 0;
	d->error = len < INVCODEC_MAGIC_LEN || memcmp(data, INVCODEC_MAGIC, INVCODEC_MAGIC_LEN) != 0;
	if (!d->error)
		d->p += INVCODEC_MAGIC_LEN;
	return !d->error;
}

/*
 * The next record, or false at the end or on malformed input (then
 * d->error is set). The record's strings stay valid until the next call.
 */
bool
inv_decode_next(InvDecoder *d, InvRecord *out)
{
	uint64_t	shared;
	uint64_t	suffix;
	uint64_t	v;

	if (d->error || d->p >= d->end)
		return false;
	out->kind = (char) *d->p++;
	if ((out->kind != INVCODEC_LISTED && out->kind != INVCODEC_ABSENT) ||
		!get_varint(d, &shared) || !get_varint(d, &suffix) ||
		shared > d->prev_len || suffix > INVCODEC_MAX_KEY - shared || suffix > (uint64_t) (d->end - d->p))
	{
		d->error = true;
		return false;
	}
	memcpy(d->prev + shared, d->p, suffix);
	d->p += suffix;
	d->prev_len = shared + suffix;
	out->path = d->prev;
	out->path_len = d->prev_len;
	out->size = 0;
	out->etag = NULL;
	out->etag_len = 0;
	if (out->kind == INVCODEC_ABSENT)
		return true;
	if (!get_varint(d, &v) || v > (uint64_t) INT64_MAX || d->p >= d->end)
	{
		d->error = true;
		return false;
	}
	out->size = (int64_t) v;
	switch (*d->p++)
	{
		case 0:
			return true;
		case 1:
			if (d->end - d->p < 16)
				break;
			d->etag[0] = '"';
			for (int i = 0; i < 16; i++)
			{
				d->etag[1 + 2 * i] = "0123456789abcdef"[d->p[i] >> 4];
				d->etag[2 + 2 * i] = "0123456789abcdef"[d->p[i] & 0xf];
			}
			d->etag[33] = '"';
			d->p += 16;
			out->etag = d->etag;
			out->etag_len = 34;
			return true;
		case 2:
			if (!get_varint(d, &v) || v > (uint64_t) (d->end - d->p))
				break;
			out->etag = (const char *) d->p;
			out->etag_len = v;
			d->p += v;
			return true;
	}
	d->error = true;
	return false;
}
