/*
 * sketch.c
 *     A mergeable lateness sketch: DDSketch (Masson, Rim, Lee, VLDB 2019)
 *     with relative accuracy SKETCH_ALPHA. A lateness of x >= 1 ms goes to
 *     bucket ceil(ln x / ln gamma), gamma = (1 + alpha) / (1 - alpha); every
 *     value of a bucket lies within alpha of the bucket's estimate
 *     2 gamma^i / (gamma + 1). SQL Server computes the same bucket with
 *     CEILING(LOG(x) / LOG(gamma)) in a GROUP BY, so a range's sketch crosses
 *     the network as (bucket, count) pairs; sketch_bucket is the reference
 *     the tests hold SQL Server's (and the simulator's) figure to. Zero and
 *     negative lateness (an event time after its commit: clock skew) are
 *     counted apart. Sketches merge by adding counts, so ranges, periods and
 *     windows combine exactly.
 *
 * The serialized form (what a fact stores) is: a version byte, the three
 * counters and min/max as varints (zig-zag for the signed ones), then at
 * most SKETCH_STORED_BUCKETS non-empty buckets as (index delta, count)
 * varint pairs: a few hundred bytes, however many rows and however wide
 * their spread.
 */
#include <math.h>
#include <string.h>

#include "core/sketch.h"

#define SKETCH_VERSION 1

/* ln(gamma), computed once. */
static double
log_gamma(void)
{
	static double lg = 0.0;

	if (lg == 0.0)
		lg = log((1.0 + SKETCH_ALPHA) / (1.0 - SKETCH_ALPHA));
	return lg;
}

/* An empty sketch. */
void
sketch_init(Sketch *s)
{
	memset(s, 0, sizeof(*s));
}

/*
 * The bucket of a positive lateness (ms), clamped to the last bucket
 * (beyond a century) and to 0 (1 ms).
 */
int
sketch_bucket(int64_t lateness_ms)
{
	double		i;

	if (lateness_ms <= 1)
		return 0;
	i = ceil(log((double) lateness_ms) / log_gamma());
	return i >= SKETCH_BUCKETS - 1 ? SKETCH_BUCKETS - 1 : (int) i;
}

/* The estimate of a bucket: within SKETCH_ALPHA of every value in it. */
double
sketch_bucket_value(int index)
{
	double		gamma = (1.0 + SKETCH_ALPHA) / (1.0 - SKETCH_ALPHA);

	if (index <= 0)
		return 1.0;
	return 2.0 * pow(gamma, index) / (gamma + 1.0);
}

/* Keeps min and max over every row added. */
static void
note_extremes(Sketch *s, int64_t ms)
{
	if (sketch_count(s) == 0 || ms < s->min_ms)
		s->min_ms = ms;
	if (sketch_count(s) == 0 || ms > s->max_ms)
		s->max_ms = ms;
}

/* Adds n rows of one lateness. */
void
sketch_add(Sketch *s, int64_t lateness_ms, uint64_t n)
{
	if (n == 0)
		return;
	note_extremes(s, lateness_ms);
	if (lateness_ms < 0)
		s->negative += n;
	else if (lateness_ms == 0)
		s->zero += n;
	else
	{
		s->counts[sketch_bucket(lateness_ms)] += n;
		s->positive += n;
	}
}

/*
 * Adds n rows of a bucket as SQL Server counted them (min and max come
 * apart, from MIN and MAX). False for an index out of range.
 */
bool
sketch_add_bucket(Sketch *s, int index, uint64_t n)
{
	if (index < 0 || index >= SKETCH_BUCKETS)
		return false;
	s->counts[index] += n;
	s->positive += n;
	return true;
}

/* Adds every count of from into into. */
void
sketch_merge(Sketch *into, const Sketch *from)
{
	if (sketch_count(from) == 0)
		return;
	if (sketch_count(into) == 0 || from->min_ms < into->min_ms)
		into->min_ms = from->min_ms;
	if (sketch_count(into) == 0 || from->max_ms > into->max_ms)
		into->max_ms = from->max_ms;
	into->negative += from->negative;
	into->zero += from->zero;
	into->positive += from->positive;
	for (int i = 0; i < SKETCH_BUCKETS; i++)
		into->counts[i] += from->counts[i];
}

/* How many rows the sketch holds. */
uint64_t
sketch_count(const Sketch *s)
{
	return s->negative + s->zero + s->positive;
}

/*
 * The q-quantile of lateness (0 < q <= 1), in ms: the value of rank
 * ceil(q n), negative lateness counting as 0 (an early row needs no
 * allowance). Within SKETCH_ALPHA of the true value, and never more than
 * the largest lateness seen. False for an empty sketch or q out of range.
 */
bool
sketch_quantile(const Sketch *s, double q, double *lateness_ms)
{
	uint64_t	n = sketch_count(s);
	uint64_t	rank;
	uint64_t	seen;

	if (n == 0 || !(q > 0.0 && q <= 1.0))
		return false;
	rank = (uint64_t) ceil(q * (double) n);
	if (rank < 1)
		rank = 1;
	seen = s->negative + s->zero;
	if (rank <= seen)
	{
		*lateness_ms = 0.0;
		return true;
	}
	for (int i = 0; i < SKETCH_BUCKETS; i++)
	{
		seen += s->counts[i];
		if (seen >= rank)
		{
			double		v = sketch_bucket_value(i);

			*lateness_ms = s->max_ms > 0 && v > (double) s->max_ms ? (double) s->max_ms : v;
			return true;
		}
	}
	*lateness_ms = (double) s->max_ms;
	return true;
}

/*
 * Keeps at most max_buckets non-empty buckets by moving the lowest ones'
 * counts into the next one up (DDSketch's "collapsing lowest buckets"): the
 * high quantiles a lateness allowance is taken from keep their accuracy,
 * and a low quantile can only come out higher than it was, never lower, so
 * an allowance drawn from it only makes a verdict wait longer.
 */
void
sketch_collapse_low(Sketch *s, int max_buckets)
{
	int			nonempty = 0;
	int			i = 0;

	for (int k = 0; k < SKETCH_BUCKETS; k++)
		if (s->counts[k] != 0)
			nonempty++;
	while (nonempty > max_buckets && max_buckets > 0)
	{
		int			j;

		while (s->counts[i] == 0)
			i++;
		for (j = i + 1; s->counts[j] == 0; j++)
			;
		s->counts[j] += s->counts[i];
		s->counts[i] = 0;
		nonempty--;
		i = j;
	}
}

/* Appends an unsigned varint; false when buf is full. */
static bool
put_varint(uint8_t *buf, size_t size, size_t *pos, uint64_t v)
{
	do
	{
		if (*pos >= size)
			return false;
		buf[(*pos)++] = (uint8_t) ((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
		v >>= 7;
	} while (v != 0);
	return true;
}

/* Reads an unsigned varint; false when buf ends or it is too long. */
static bool
get_varint(const uint8_t *buf, size_t len, size_t *pos, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64; shift += 7)
	{
		if (*pos >= len)
			return false;
		*v |= (uint64_t) (buf[*pos] & 0x7F) << shift;
		if ((buf[(*pos)++] & 0x80) == 0)
			return true;
	}
	return false;
}

/* Zig-zag: small negative numbers stay short. */
static uint64_t
zigzag(int64_t v)
{
	return ((uint64_t) v << 1) ^ (uint64_t) (v >> 63);
}

/* The inverse of zigzag. */
static int64_t
unzigzag(uint64_t v)
{
	return (int64_t) (v >> 1) ^ -(int64_t) (v & 1);
}

/*
 * The sketch into buf, its lowest buckets collapsed to keep at most
 * SKETCH_STORED_BUCKETS (a few hundred bytes); its length, or -1 when buf
 * is too small.
 */
int
sketch_serialize(const Sketch *in, uint8_t *buf, size_t size)
{
	static Sketch copy;
	const Sketch *s = &copy;
	size_t		pos = 0;
	int			last = 0;
	bool		ok;

	copy = *in;
	sketch_collapse_low(&copy, SKETCH_STORED_BUCKETS);

	if (size < 1)
		return -1;
	buf[pos++] = SKETCH_VERSION;
	ok = put_varint(buf, size, &pos, s->negative) && put_varint(buf, size, &pos, s->zero) &&
		put_varint(buf, size, &pos, zigzag(s->min_ms)) && put_varint(buf, size, &pos, zigzag(s->max_ms));
	for (int i = 0; ok && i < SKETCH_BUCKETS; i++)
	{
		if (s->counts[i] == 0)
			continue;
		ok = put_varint(buf, size, &pos, (uint64_t) (i - last)) && put_varint(buf, size, &pos, s->counts[i]);
		last = i;
	}
	return ok ? (int) pos : -1;
}

/* A serialized sketch back; false for anything malformed. */
bool
sketch_deserialize(const uint8_t *buf, size_t len, Sketch *s)
{
	size_t		pos = 0;
	uint64_t	v,
				count;
	int64_t		index = 0;
	bool		first = true;

	sketch_init(s);
	if (len < 1 || buf[pos++] != SKETCH_VERSION)
		return false;
	if (!get_varint(buf, len, &pos, &s->negative) || !get_varint(buf, len, &pos, &s->zero) ||
		!get_varint(buf, len, &pos, &v))
		return false;
	s->min_ms = unzigzag(v);
	if (!get_varint(buf, len, &pos, &v))
		return false;
	s->max_ms = unzigzag(v);
	while (pos < len)
	{
		if (!get_varint(buf, len, &pos, &v) || !get_varint(buf, len, &pos, &count) || count == 0)
			return false;
		if (!first && v == 0)
			return false;
		/* checked before adding: a delta of 2^64 - k must not wrap the index below 0 */
		if (v >= SKETCH_BUCKETS || index + (int64_t) v >= SKETCH_BUCKETS)
			return false;
		index += (int64_t) v;
		if (s->positive + count < s->positive)
			return false;
		s->counts[index] = count;
		s->positive += count;
		first = false;
	}
	/* the totals must add up, and a sketch with rows has min <= max */
	if (s->positive + s->negative < s->positive || s->positive + s->negative + s->zero < s->zero)
		return false;
	if (sketch_count(s) > 0 && s->min_ms > s->max_ms)
		return false;
	return true;
}
