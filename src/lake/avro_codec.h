/*
 * avro_codec.h
 *     The codecs of Avro object container files, one block at a time, under
 *     a cap on what a block may decompress to and with a way to stop:
 *     avro_codec.c is the one file that calls zlib (deflate, and snappy's
 *     CRC32), liblzma (lzma) and snappy. Pure: malloc'd buffers, no
 *     PostgreSQL, no libavro.
 */
#ifndef FINALIZE_LAKE_AVRO_CODEC_H
#define FINALIZE_LAKE_AVRO_CODEC_H

#include <stdbool.h>
#include <stddef.h>

/* The codecs finalize reads (libavro's names; its deflate is raw, RFC 1951). */
typedef enum BlockCodec
{
	BLOCK_CODEC_NULL,
	BLOCK_CODEC_DEFLATE,
	BLOCK_CODEC_SNAPPY,			/* snappy, then the CRC32 of the data (4 bytes, big-endian) */
	BLOCK_CODEC_LZMA			/* raw LZMA2, the dictionary of liblzma's default preset */
} BlockCodec;

/* What decompressing a block came to. */
typedef enum InflateResult
{
	INFLATE_OK,
	INFLATE_CORRUPT,			/* not that codec's data, or cut short: why says */
	INFLATE_TOO_LARGE,			/* it would pass the limit: stopped there */
	INFLATE_STOPPED,			/* the stop function asked to */
	INFLATE_NO_MEMORY
} InflateResult;

/* A malloc'd buffer reused from block to block; free(data) when done. */
typedef struct InflateBuf
{
	char	   *data;
	size_t		len;			/* the last block's bytes */
	size_t		cap;
} InflateBuf;

/* Called while decompressing (at least every MiB of output): true to stop. */
typedef bool (*InflateStopFn) (void);

extern bool block_codec_by_name(const char *name, size_t len, BlockCodec *codec);
extern InflateResult block_inflate(BlockCodec codec, const char *in, size_t inlen, size_t limit,
								   InflateStopFn stop, InflateBuf *out, char *why, size_t whylen);

#endif							/* FINALIZE_LAKE_AVRO_CODEC_H */
