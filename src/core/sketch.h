/*
 * sketch.h
 *     A mergeable lateness sketch (DDSketch, relative accuracy 1%): the
 *     distribution of commit time minus event time of a range's rows, kept
 *     per range and merged across ranges (docs/design/event_time.md).
 *     Pure: no allocation, no I/O; the caller owns the memory.
 */
#ifndef FINALIZE_SKETCH_H
#define FINALIZE_SKETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SKETCH_ALPHA 0.01
/* (1 + alpha) / (1 - alpha): bucket i holds lateness in (gamma^(i-1), gamma^i] ms. */
#define SKETCH_GAMMA ((1.0 + SKETCH_ALPHA) / (1.0 - SKETCH_ALPHA))
/* Buckets 0 .. SKETCH_BUCKETS-1 cover 1 ms to beyond a century at 1%. */
#define SKETCH_BUCKETS 2048
/* At most this many non-empty buckets are stored: the lowest collapse upward. */
#define SKETCH_STORED_BUCKETS 256

typedef struct Sketch
{
	uint64_t	negative;		/* event after commit (clock skew): lateness < 0 */
	uint64_t	zero;			/* lateness 0 ms */
	uint64_t	positive;		/* lateness >= 1 ms, in counts[] */
	int64_t		min_ms;			/* over every row added (valid when any) */
	int64_t		max_ms;
	uint64_t	counts[SKETCH_BUCKETS];
} Sketch;

extern void sketch_init(Sketch *s);
extern int	sketch_bucket(int64_t lateness_ms);
extern double sketch_bucket_value(int index);
extern void sketch_add(Sketch *s, int64_t lateness_ms, uint64_t n);
extern bool sketch_add_bucket(Sketch *s, int index, uint64_t n);
extern void sketch_merge(Sketch *into, const Sketch *from);
extern uint64_t sketch_count(const Sketch *s);
extern bool sketch_quantile(const Sketch *s, double q, double *lateness_ms);
extern void sketch_collapse_low(Sketch *s, int max_buckets);
extern int	sketch_serialize(const Sketch *s, uint8_t *buf, size_t size);
extern bool sketch_deserialize(const uint8_t *buf, size_t len, Sketch *s);

#endif							/* FINALIZE_SKETCH_H */
