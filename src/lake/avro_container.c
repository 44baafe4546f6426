/*
 * avro_container.c
 *     Reads an Avro object container file (Avro specification, "Object
 *     Container Files") without libavro: the magic, the header's metadata
 *     (a map of bytes), the sync marker, then the blocks, each a count of
 *     records, a size, the records (compressed by the header's codec) and
 *     the sync marker again. avro_manifest.c hands libavro the records of
 *     one block at a time, decompressed here.
 *
 * Why not libavro's file reader: its codecs decompress a block whole, with
 * no cap and no way to stop, and never check that an allocation succeeded
 * (a block that inflated past what the allocator would give crashed the
 * backend); it decompressed the first block while opening the file; and it
 * takes any failure to read a block for the end of the file (datafile.c:
 * "For now, ignore errors (e.g. EOF)"), so a file cut inside a later block
 * would read as a shorter valid one. Here every block is checked first (it
 * lies in the buffer and ends with the sync marker) and its records
 * counted, then each is decompressed under what is left of the limit
 * (avro_read_limits: the decompressed bytes of all blocks together), with
 * the stop function asked while decompressing. A file cut exactly at a
 * block boundary is a valid, shorter container: only its recorded length
 * shows that (the caller's check).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lake/avro_container.h"

#define SYNC_SIZE 16
/* More metadata than any writer puts there (Iceberg: six keys or so). */
#define MAX_META 1024

/* The limits of every read (avro_read_limits). */
static size_t max_bytes = AVRO_DEFAULT_MAX_BYTES;
static InflateStopFn stop_fn = NULL;

/*
 * Sets the limits of the reads that follow: the most bytes a file's blocks
 * may hold once decompressed, all together (a larger file is refused with
 * AVRO_READ_TOO_LARGE, decompressed no further), and a function asked
 * while decompressing and between records (NULL: none) whose true ends the
 * read with AVRO_READ_STOPPED.
 */
void
avro_read_limits(size_t limit, bool (*stop) (void))
{
	max_bytes = limit;
	stop_fn = stop;
}

/* The limit: the most bytes of a file's blocks, and of one record's values. */
size_t
avro_container_budget(void)
{
	return max_bytes;
}

/* Whether the reader is asked to stop (between records). */
bool
avro_container_stop(void)
{
	return stop_fn != NULL && stop_fn();
}

/* Writes an error message (a sentence naming what was wrong); returns rc. */
static __attribute__((format(printf, 3, 4))) int
fail(AvroContainer *c, int rc, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	return rc;
}

/*
 * Reads a long (zig-zag, at most 10 bytes) at *off; false when the buffer
 * ends first or it is longer.
 */
static bool
read_long(const AvroContainer *c, size_t *off, int64_t *out)
{
	uint64_t	v = 0;

	for (int shift = 0; shift < 64; shift += 7)
	{
		unsigned char b;

		if (*off >= c->len)
			return false;
		b = (unsigned char) c->buf[(*off)++];
		v |= (uint64_t) (b & 0x7f) << shift;
		if ((b & 0x80) == 0)
		{
			*out = (int64_t) (v >> 1) ^ -(int64_t) (v & 1);
			return true;
		}
	}
	return false;
}

/* Reads a length and that many bytes at *off; false when they do not fit. */
static bool
read_bytes(const AvroContainer *c, size_t *off, const char **p, size_t *n)
{
	int64_t		len;

	if (!read_long(c, off, &len) || len < 0 || (uint64_t) len > c->len - *off)
		return false;
	*p = c->buf + *off;
	*n = (size_t) len;
	*off += *n;
	return true;
}

/* Reads the count items of one block of the metadata map at *off. */
static const char *
read_meta_items(AvroContainer *c, size_t *off, int64_t count)
{
	AvroMeta   *grown;

	if (count > MAX_META - c->nmeta)
		return "it has more than 1024 metadata entries";
	grown = realloc(c->meta, sizeof(AvroMeta) * (size_t) (c->nmeta + count));
	if (grown == NULL)
		return "out of memory";
	c->meta = grown;
	for (int64_t i = 0; i < count; i++)
	{
		AvroMeta   *m = &c->meta[c->nmeta];
		const char *key;
		size_t		klen;

		if (!read_bytes(c, off, &key, &klen) || !read_bytes(c, off, &m->value, &m->len))
			return "a metadata entry runs past the end";
		if ((m->key = malloc(klen + 1)) == NULL)
			return "out of memory";
		memcpy(m->key, key, klen);
		m->key[klen] = '\0';
		c->nmeta++;
	}
	return NULL;
}

/*
 * Reads the header after the magic: the metadata map (blocks of entries,
 * a negative count followed by the block's size, a count of 0 at the end)
 * and the sync marker.
 */
static int
read_header(AvroContainer *c)
{
	size_t		off = 4;
	int64_t		count;
	int64_t		size;
	const char *why = NULL;

	while (why == NULL)
	{
		if (!read_long(c, &off, &count) || count == INT64_MIN ||
			(count < 0 && !read_long(c, &off, &size)))
			why = "the metadata map ends early";
		else if (count == 0)
			break;
		else
			why = read_meta_items(c, &off, count < 0 ? -count : count);
	}
	if (why == NULL && c->len - off < SYNC_SIZE)
		why = "it ends before its sync marker";
	if (why != NULL)
		return fail(c, AVRO_READ_FAILED, "%s is cut short or corrupt: its Avro header does not decode (%s)",
					c->what, why);
	memcpy(c->sync, c->buf + off, SYNC_SIZE);
	c->first = off + SYNC_SIZE;
	return 0;
}

/*
 * Checks every block: its count and size, its bytes inside the buffer, the
 * sync marker after them; adds the counts up into c->records.
 */
static int
walk_blocks(AvroContainer *c)
{
	size_t		off = c->first;

	while (off < c->len)
	{
		int64_t		n,
					bytes;
		size_t		left;

		c->nblocks++;
		if (!read_long(c, &off, &n) || !read_long(c, &off, &bytes))
			return fail(c, AVRO_READ_FAILED, "%s is cut short: block %" PRId64 " ends inside its header",
						c->what, c->nblocks);
		left = c->len - off;
		if (n < 0 || bytes < 0 || n > INT64_MAX - c->records)
			return fail(c, AVRO_READ_FAILED, "%s is corrupt: block %" PRId64 " has a negative count or size",
						c->what, c->nblocks);
		if ((uint64_t) bytes > left || left - (size_t) bytes < SYNC_SIZE)
			return fail(c, AVRO_READ_FAILED, "%s is cut short: block %" PRId64 " needs %" PRId64
						" more bytes (its sync marker's included), %zu remain",
						c->what, c->nblocks, bytes + SYNC_SIZE, left);
		if (memcmp(c->buf + off + bytes, c->sync, SYNC_SIZE) != 0)
			return fail(c, AVRO_READ_FAILED, "%s is corrupt: block %" PRId64
						" does not end with the file's sync marker", c->what, c->nblocks);
		c->records += n;
		off += (size_t) bytes + SYNC_SIZE;
	}
	return 0;
}

/*
 * Opens a container: its magic, its header, its codec (one finalize
 * reads), every block checked. 0, or AVRO_READ_FAILED with err written;
 * avro_container_close frees what it allocated either way.
 */
int
avro_container_open(AvroContainer *c, const char *buf, size_t len, const char *what, char *err, size_t errlen)
{
	const AvroMeta *codec;

	memset(c, 0, sizeof(*c));
	c->buf = buf;
	c->len = len;
	c->what = what;
	c->err = err;
	c->errlen = errlen;
	c->left = max_bytes;
	if (buf == NULL || len < 4 || memcmp(buf, "Obj\001", 4) != 0)
		return fail(c, AVRO_READ_FAILED,
					"%s is not an Avro object container file (it does not begin with \"Obj\" and 1)", what);
	if (read_header(c) != 0)
		return AVRO_READ_FAILED;
	if ((codec = avro_container_meta(c, "avro.codec")) == NULL)
		return fail(c, AVRO_READ_FAILED, "%s: its Avro header names no codec (avro.codec)", what);
	if (!block_codec_by_name(codec->value, codec->len, &c->codec))
		return fail(c, AVRO_READ_FAILED,
					"%s: its Avro codec \"%.*s\" is not one finalize reads (null, deflate, snappy, lzma)",
					what, (int) (codec->len > 32 ? 32 : codec->len), codec->value);
	c->next = c->first;
	return walk_blocks(c);
}

/* The header's value of a key (the last one, as a map keeps it), or NULL. */
const AvroMeta *
avro_container_meta(const AvroContainer *c, const char *key)
{
	for (int i = c->nmeta; i > 0; i--)
		if (strcmp(c->meta[i - 1].key, key) == 0)
			return &c->meta[i - 1];
	return NULL;
}

/* The error of a block that inflate did not decompress; returns its code. */
static int
inflate_failed(AvroContainer *c, InflateResult res, const char *why)
{
	switch (res)
	{
		case INFLATE_OK:
			break;
		case INFLATE_STOPPED:
			return fail(c, AVRO_READ_STOPPED, "%s: the read was interrupted", c->what);
		case INFLATE_TOO_LARGE:
			break;
		case INFLATE_NO_MEMORY:
			return fail(c, AVRO_READ_FAILED, "%s: out of memory decompressing block %" PRId64,
						c->what, c->block);
		case INFLATE_CORRUPT:
			return fail(c, AVRO_READ_FAILED, "%s is corrupt: block %" PRId64 " does not decompress (%s)",
						c->what, c->block, why);
	}
	return fail(c, AVRO_READ_TOO_LARGE, "%s holds more than %zu bytes once decompressed (block %" PRId64
				" of %" PRId64 " passes that): a decompression bomb, or a file larger than the limit",
				c->what, max_bytes, c->block, c->nblocks);
}

/*
 * The next block: its count of records, and its records' bytes
 * decompressed (valid until the next call). 1 when a block was handed
 * out, 0 after the last, or a negative code with err written: the
 * decompressed bytes pass the limit (AVRO_READ_TOO_LARGE), a stop, a block
 * that is not its codec's.
 */
int
avro_container_next(AvroContainer *c, int64_t *count, const char **data, size_t *len)
{
	int64_t		bytes;
	const char *in;
	InflateResult res;
	char		why[256] = "";

	if (c->next >= c->len)
		return 0;
	/* walk_blocks has checked them */
	(void) read_long(c, &c->next, count);
	(void) read_long(c, &c->next, &bytes);
	in = c->buf + c->next;
	c->next += (size_t) bytes + SYNC_SIZE;
	c->block++;
	if (c->codec == BLOCK_CODEC_NULL)
	{
		*data = in;
		*len = (size_t) bytes;
		res = *len > c->left ? INFLATE_TOO_LARGE : INFLATE_OK;
	}
	else
	{
		res = block_inflate(c->codec, in, (size_t) bytes, c->left, stop_fn, &c->plain, why, sizeof(why));
		*data = c->plain.data != NULL ? c->plain.data : "";
		*len = c->plain.len;
	}
	if (res != INFLATE_OK)
		return inflate_failed(c, res, why);
	c->left -= *len;
	return 1;
}

/* Frees what avro_container_open and the blocks allocated. */
void
avro_container_close(AvroContainer *c)
{
	for (int i = 0; i < c->nmeta; i++)
		free(c->meta[i].key);
	free(c->meta);
	free(c->plain.data);
	c->meta = NULL;
	c->nmeta = 0;
	c->plain.data = NULL;
}
