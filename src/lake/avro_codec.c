/*
 * avro_codec.c
 *     Decompresses the blocks of an Avro object container file as libavro's
 *     codecs read them (deflate: raw RFC 1951; snappy: the data's CRC32
 *     after it, big-endian; lzma: raw LZMA2 with the dictionary of
 *     liblzma's default preset), but bounded: the output grows only up to
 *     the caller's limit (one byte past it shows that the block passes it,
 *     and nothing more is produced), the stop function is asked at least
 *     every CHUNK bytes of output, and every allocation is checked. libavro's
 *     own codecs had none of that: they inflated whatever a block held
 *     (1 GiB from a 1 MB block, and more) and used the NULL of a refused
 *     allocation.
 *
 * The one file that calls zlib, liblzma and snappy. Nothing here raises
 * or longjmps (no PostgreSQL): a stop is a result, the caller serves the
 * interrupt once the libraries' state is freed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lzma.h>
#include <snappy-c.h>
#include <zlib.h>

#include "lake/avro_codec.h"

/* The most output between two questions to the stop function. */
#define CHUNK ((size_t) 1 << 20)

/* Which codec a header's avro.codec names (len bytes, no NUL); false for one finalize does not read. */
bool
block_codec_by_name(const char *name, size_t len, BlockCodec *codec)
{
	static const char *const names[] = {"null", "deflate", "snappy", "lzma"};

	for (int i = 0; i < (int) (sizeof(names) / sizeof(names[0])); i++)
		if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
		{
			*codec = (BlockCodec) i;
			return true;
		}
	return false;
}

/*
 * Makes room for more output, the buffer never larger than limit + 1
 * bytes; false when memory ran out. Called only while out->len <= limit.
 */
static bool
room(InflateBuf *out, size_t limit)
{
	size_t		cap;
	char	   *grown;

	if (out->len < out->cap)
		return true;
	cap = out->cap < CHUNK ? CHUNK : out->cap * 2;
	if (cap > limit + 1)
		cap = limit + 1;
	grown = realloc(out->data, cap);
	if (grown == NULL)
		return false;
	out->data = grown;
	out->cap = cap;
	return true;
}

/* How much the next step may write: what the buffer holds, up to one past the limit, a CHUNK at most. */
static size_t
step(const InflateBuf *out, size_t limit)
{
	size_t		n = out->cap - out->len;

	if (n > limit + 1 - out->len)
		n = limit + 1 - out->len;
	return n < CHUNK ? n : CHUNK;
}

/* Writes why a block does not decompress; returns INFLATE_CORRUPT. */
static InflateResult
corrupt(char *why, size_t whylen, const char *text)
{
	snprintf(why, whylen, "%s", text);
	return INFLATE_CORRUPT;
}

/*
 * What ends a step of the loops below, before it decompresses: a stop, the
 * limit passed, no room; INFLATE_OK to go on.
 */
static InflateResult
before_step(InflateBuf *out, size_t limit, InflateStopFn stop)
{
	if (stop != NULL && stop())
		return INFLATE_STOPPED;
	if (out->len > limit)
		return INFLATE_TOO_LARGE;
	return room(out, limit) ? INFLATE_OK : INFLATE_NO_MEMORY;
}

/* deflate (raw, as libavro writes it) with zlib, a step at a time. */
static InflateResult
inflate_deflate(const char *in, size_t inlen, size_t limit, InflateStopFn stop, InflateBuf *out,
				char *why, size_t whylen)
{
	z_stream	zs;
	int			zrc = Z_OK;
	InflateResult res = INFLATE_OK;

	memset(&zs, 0, sizeof(zs));
	if (inflateInit2(&zs, -15) != Z_OK)
		return INFLATE_NO_MEMORY;
	zs.next_in = (Bytef *) in;
	zs.avail_in = (uInt) inlen;
	while (res == INFLATE_OK && zrc != Z_STREAM_END)
	{
		size_t		n;

		if ((res = before_step(out, limit, stop)) != INFLATE_OK)
			break;
		n = step(out, limit);
		zs.next_out = (Bytef *) out->data + out->len;
		zs.avail_out = (uInt) n;
		zrc = inflate(&zs, Z_NO_FLUSH);
		out->len += n - zs.avail_out;
		if (zrc == Z_MEM_ERROR)
			res = INFLATE_NO_MEMORY;
		else if (zrc == Z_BUF_ERROR)	/* no input left, output room given */
			res = corrupt(why, whylen, "deflate: the data is cut short");
		else if (zrc != Z_OK && zrc != Z_STREAM_END)
		{
			snprintf(why, whylen, "deflate: %s", zs.msg != NULL ? zs.msg : "the data is corrupt");
			res = INFLATE_CORRUPT;
		}
	}
	if (res == INFLATE_OK && out->len > limit)
		res = INFLATE_TOO_LARGE;
	inflateEnd(&zs);
	return res;
}

/* lzma (raw LZMA2, as libavro writes it) with liblzma, a step at a time. */
static InflateResult
inflate_lzma(const char *in, size_t inlen, size_t limit, InflateStopFn stop, InflateBuf *out,
			 char *why, size_t whylen)
{
	lzma_stream ls = LZMA_STREAM_INIT;
	lzma_options_lzma opt;
	lzma_filter filters[2];
	lzma_ret	lrc = LZMA_OK;
	InflateResult res = INFLATE_OK;

	if (lzma_lzma_preset(&opt, LZMA_PRESET_DEFAULT))
		return corrupt(why, whylen, "lzma: liblzma has no default preset");
	filters[0].id = LZMA_FILTER_LZMA2;
	filters[0].options = &opt;
	filters[1].id = LZMA_VLI_UNKNOWN;
	filters[1].options = NULL;
	if (lzma_raw_decoder(&ls, filters) != LZMA_OK)
		return INFLATE_NO_MEMORY;
	ls.next_in = (const uint8_t *) in;
	ls.avail_in = inlen;
	while (res == INFLATE_OK && lrc != LZMA_STREAM_END)
	{
		size_t		n;

		if ((res = before_step(out, limit, stop)) != INFLATE_OK)
			break;
		n = step(out, limit);
		ls.next_out = (uint8_t *) out->data + out->len;
		ls.avail_out = n;
		lrc = lzma_code(&ls, LZMA_FINISH);
		out->len += n - ls.avail_out;
		if (lrc == LZMA_MEM_ERROR)
			res = INFLATE_NO_MEMORY;
		else if (lrc == LZMA_BUF_ERROR)
			res = corrupt(why, whylen, "lzma: the data is cut short");
		else if (lrc != LZMA_OK && lrc != LZMA_STREAM_END)
			res = corrupt(why, whylen, "lzma: the data is corrupt");
	}
	if (res == INFLATE_OK && out->len > limit)
		res = INFLATE_TOO_LARGE;
	lzma_end(&ls);
	return res;
}

/*
 * snappy with its CRC32: the length snappy's preamble declares is checked
 * against the limit before anything is allocated; snappy decompresses in
 * one call (at most limit bytes, a fraction of a second), so the stop
 * function is asked before and after.
 */
static InflateResult
inflate_snappy(const char *in, size_t inlen, size_t limit, InflateStopFn stop, InflateBuf *out,
			   char *why, size_t whylen)
{
	size_t		n;
	uLong		crc;
	const unsigned char *want = (const unsigned char *) in + inlen - 4;

	if (inlen < 4)
		return corrupt(why, whylen, "snappy: the block is shorter than its CRC32");
	if (snappy_uncompressed_length(in, inlen - 4, &n) != SNAPPY_OK)
		return corrupt(why, whylen, "snappy: the data does not begin with a length");
	if (n > limit)
	{
		out->len = n;
		return INFLATE_TOO_LARGE;
	}
	if (stop != NULL && stop())
		return INFLATE_STOPPED;
	if (n > out->cap)
	{
		char	   *grown = realloc(out->data, n);

		if (grown == NULL)
			return INFLATE_NO_MEMORY;
		out->data = grown;
		out->cap = n;
	}
	if (n > 0 && snappy_uncompress(in, inlen - 4, out->data, &n) != SNAPPY_OK)
		return corrupt(why, whylen, "snappy: the data is corrupt");
	out->len = n;
	crc = crc32_z(0L, (const Bytef *) out->data, n);
	if (want[0] != ((crc >> 24) & 0xff) || want[1] != ((crc >> 16) & 0xff) ||
		want[2] != ((crc >> 8) & 0xff) || want[3] != (crc & 0xff))
		return corrupt(why, whylen, "snappy: the CRC32 after the data does not match it");
	return stop != NULL && stop() ? INFLATE_STOPPED : INFLATE_OK;
}

/*
 * Decompresses one block of a codec other than null into out (its len
 * reset), never past limit bytes: INFLATE_TOO_LARGE when the block holds
 * more (out->len then a byte past the limit, or snappy's declared length).
 * why gets the codec's words when the data is not the codec's. The stop
 * function (NULL: none) ends it with INFLATE_STOPPED.
 */
InflateResult
block_inflate(BlockCodec codec, const char *in, size_t inlen, size_t limit, InflateStopFn stop,
			  InflateBuf *out, char *why, size_t whylen)
{
	out->len = 0;
	if (inlen > (size_t) UINT32_MAX)
		return corrupt(why, whylen, "the compressed block is larger than 4 GiB");
	switch (codec)
	{
		case BLOCK_CODEC_DEFLATE:
			return inflate_deflate(in, inlen, limit, stop, out, why, whylen);
		case BLOCK_CODEC_LZMA:
			return inflate_lzma(in, inlen, limit, stop, out, why, whylen);
		case BLOCK_CODEC_SNAPPY:
			return inflate_snappy(in, inlen, limit, stop, out, why, whylen);
		case BLOCK_CODEC_NULL:
			break;
	}
	return corrupt(why, whylen, "the null codec has nothing to decompress");
}
