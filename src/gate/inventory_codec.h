/*
 * inventory_codec.h
 *     The compact stored form of a listing: the objects that differ from
 *     the manifest, front-coded. Pure: no PostgreSQL memory, no I/O.
 */
#ifndef FINALIZE_INVENTORY_CODEC_H
#define FINALIZE_INVENTORY_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest key the codec stores (S3 keys stop at 1024 bytes, paths at 4096). */
#define INVCODEC_MAX_KEY 65535

/* The first bytes of every stored form (and its version). */
#define INVCODEC_MAGIC "FIV1"
#define INVCODEC_MAGIC_LEN 4

/* What a record says about its path. */
#define INVCODEC_LISTED 'L'		/* listed with this size and ETag */
#define INVCODEC_ABSENT 'A'		/* in the manifest, not listed */

/* Where an encoder writes its bytes (a StringInfo in the server). */
typedef void (*InvCodecAppend) (void *arg, const void *data, size_t len);

typedef struct InvEncoder
{
	InvCodecAppend append;
	void	   *arg;
	uint64_t	records;
	size_t		prev_len;
	char		prev[INVCODEC_MAX_KEY];
} InvEncoder;

/* One decoded record; path and etag point into the decoder or its input. */
typedef struct InvRecord
{
	char		kind;
	const char *path;
	size_t		path_len;
	int64_t		size;
	const char *etag;			/* NULL when none */
	size_t		etag_len;
} InvRecord;

typedef struct InvDecoder
{
	const unsigned char *p;
	const unsigned char *end;
	bool		error;			/* malformed input: decoding stopped */
	size_t		prev_len;
	char		prev[INVCODEC_MAX_KEY];
	char		etag[36];		/* a packed MD5 ETag, unpacked ("..." quoted) */
} InvDecoder;

extern void inv_encoder_init(InvEncoder *e, InvCodecAppend append, void *arg);
extern bool inv_encode(InvEncoder *e, char kind, const char *path, size_t path_len, int64_t size,
					   const char *etag, size_t etag_len);
extern bool inv_decoder_init(InvDecoder *d, const void *data, size_t len);
extern bool inv_decode_next(InvDecoder *d, InvRecord *out);

#endif							/* FINALIZE_INVENTORY_CODEC_H */
