/*
 * avro_container.h
 *     An Avro object container file in memory read without libavro: its
 *     header (magic, metadata map, sync marker), every block checked to lie
 *     in the buffer and end with the sync marker, then each block's records
 *     decompressed (avro_codec.c) for libavro to decode, under the limits
 *     of avro_manifest.h (avro_read_limits). Pure: malloc'd, no PostgreSQL.
 */
#ifndef FINALIZE_LAKE_AVRO_CONTAINER_H
#define FINALIZE_LAKE_AVRO_CONTAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lake/avro_codec.h"
#include "lake/avro_manifest.h"

/* One key-value pair of the header's metadata. */
typedef struct AvroMeta
{
	char	   *key;			/* malloc'd, NUL-terminated */
	const char *value;			/* in the buffer, len bytes */
	size_t		len;
} AvroMeta;

/* A container file being read, and where its errors are written. */
typedef struct AvroContainer
{
	const char *buf;
	size_t		len;
	const char *what;			/* "manifest list", "manifest", "Avro file" */
	char	   *err;
	size_t		errlen;
	AvroMeta   *meta;
	int			nmeta;
	BlockCodec	codec;
	char		sync[16];
	size_t		first;			/* where the first block starts */
	int64_t		records;		/* the sum of the blocks' counts */
	int64_t		nblocks;
	size_t		next;			/* the next block to hand out */
	int64_t		block;			/* its number, from 1 */
	size_t		left;			/* decompressed bytes still allowed */
	InflateBuf	plain;
} AvroContainer;

extern int	avro_container_open(AvroContainer *c, const char *buf, size_t len, const char *what,
								char *err, size_t errlen);
extern const AvroMeta *avro_container_meta(const AvroContainer *c, const char *key);
extern int	avro_container_next(AvroContainer *c, int64_t *count, const char **data, size_t *len);
extern bool avro_container_stop(void);
extern size_t avro_container_budget(void);
extern void avro_container_close(AvroContainer *c);

#endif							/* FINALIZE_LAKE_AVRO_CONTAINER_H */
