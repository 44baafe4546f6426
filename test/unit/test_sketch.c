/*
 * Unit tests of the lateness sketch (sketch.c): quantiles within the
 * relative accuracy of the truth on skewed distributions (exponential and
 * heavy-tailed Pareto), merging, the compact serialized form and its
 * refusal of malformed input. Built and run by
 * test/offline/test_unit_c.py; prints TAP.
 */
#include "postgres.h"

#include <math.h>

#include "core/sketch.h"

#include "tap.h"

#define N 100000

static int64_t values[N];
static Sketch whole, half1, half2, back;

/* A deterministic uniform in (0, 1) (xorshift64*), so a failure repeats. */
static double
uniform(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return ((double) ((*state * 2685821657736338717ULL) >> 11) + 0.5) / 9007199254740992.0;
}

/* Sorts int64s ascending (for the true quantiles). */
static int
cmp64(const void *a, const void *b)
{
	int64_t		x = *(const int64_t *) a,
				y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

/* The true q-quantile of sorted values: rank ceil(q n), negatives as 0. */
static double
truth(double q)
{
	size_t		rank = (size_t) ceil(q * N);
	int64_t		v = values[(rank < 1 ? 1 : rank) - 1];

	return v < 0 ? 0.0 : (double) v;
}

/* Fills the sketches from values, and checks quantiles against the truth. */
static void
check_distribution(const char *name)
{
	static const double qs[] = {0.9, 0.99, 0.999, 1.0};
	static const double low[] = {0.01, 0.1, 0.25, 0.5, 0.75};
	char		what[160];
	uint8_t		buf[8192];
	int			len;
	bool		all_ok = true;
	bool		stored_ok = true;

	sketch_init(&whole);
	sketch_init(&half1);
	sketch_init(&half2);
	for (int i = 0; i < N; i++)
	{
		sketch_add(&whole, values[i], 1);
		sketch_add(i % 2 ? &half1 : &half2, values[i], 1);
	}
	qsort(values, N, sizeof(values[0]), cmp64);
	for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++)
	{
		double		est,
					t = truth(qs[k]);
		bool		ok = sketch_quantile(&whole, qs[k], &est) &&
			fabs(est - t) <= SKETCH_ALPHA * t + 1e-9;

		if (!ok)
			printf("# %s q=%g: estimate %.3f, truth %.3f\n", name, qs[k], est, t);
		all_ok = all_ok && ok;
	}
	snprintf(what, sizeof(what), "%s: quantiles 0.9 .. 1 within 1%% of the truth", name);
	check(all_ok, what);

	sketch_merge(&half1, &half2);
	snprintf(what, sizeof(what), "%s: two halves merged equal the whole", name);
	check(memcmp(&half1, &whole, sizeof(whole)) == 0, what);

	len = sketch_serialize(&whole, buf, sizeof(buf));
	snprintf(what, sizeof(what), "%s: %d rows stored in %d bytes (under 1 KB)", name, N, len);
	check(len > 0 && len < 1024, what);
	check(sketch_deserialize(buf, len, &back) && sketch_count(&back) == sketch_count(&whole),
		  "stored form reads back, every row counted");
	/* Stored (low buckets collapsed): high quantiles keep 1%, low ones only err upward. */
	for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++)
	{
		double		est,
					t = truth(qs[k]);

		if (!sketch_quantile(&back, qs[k], &est) || fabs(est - t) > SKETCH_ALPHA * t + 1e-9)
		{
			printf("# stored %s q=%g: estimate %.3f, truth %.3f\n", name, qs[k], est, t);
			stored_ok = false;
		}
	}
	for (size_t k = 0; k < sizeof(low) / sizeof(low[0]); k++)
	{
		double		est,
					t = truth(low[k]);

		if (!sketch_quantile(&back, low[k], &est) || est < t * (1.0 - SKETCH_ALPHA) - 1e-9)
		{
			printf("# stored %s q=%g: estimate %.3f below truth %.3f\n", name, low[k], est, t);
			stored_ok = false;
		}
	}
	snprintf(what, sizeof(what), "%s: stored sketch keeps 1%% on q >= 0.9 and never underestimates below", name);
	check(stored_ok, what);
}

int
main(void)
{
	uint64_t	state = 0x9E3779B97F4A7C15ULL;
	double		est;
	uint8_t		buf[64];
	int			len;

	/* Exponential lateness, mean one minute, with a few rows early (skew) or on time. */
	for (int i = 0; i < N; i++)
		values[i] = i % 1000 == 0 ? -250 : i % 997 == 0 ? 0 : (int64_t) llround(-60000.0 * log(uniform(&state)));
	check_distribution("exponential");

	/* Heavy-tailed lateness: Pareto, x_m 1 s, shape 1.2 (days-late rows in the tail). */
	for (int i = 0; i < N; i++)
		values[i] = (int64_t) llround(1000.0 * pow(uniform(&state), -1.0 / 1.2));
	check_distribution("pareto");

	/* Buckets: what SQL Server's CEILING(LOG(x) / LOG(gamma)) gives. */
	check(sketch_bucket(1) == 0 && sketch_bucket(2) == (int) ceil(log(2.0) / log(1.01 / 0.99)),
		  "bucket of 1 ms and 2 ms");
	check(sketch_bucket(INT64_MAX) == SKETCH_BUCKETS - 1, "an absurd lateness goes to the last bucket");
	for (int i = 1; i < 200; i++)
	{
		double		v = sketch_bucket_value(i);

		if (fabs(v - pow(1.01 / 0.99, i)) > SKETCH_ALPHA * pow(1.01 / 0.99, i) + 1e-9 ||
			fabs(v - pow(1.01 / 0.99, i - 1)) > SKETCH_ALPHA * pow(1.01 / 0.99, i - 1) * 1.0000001 + 1e-9)
		{
			check(false, "a bucket's estimate is within 1% of both its ends");
			return tap_done();
		}
	}
	check(true, "a bucket's estimate is within 1% of both its ends");

	/* Edges. */
	sketch_init(&whole);
	check(!sketch_quantile(&whole, 0.5, &est), "an empty sketch has no quantile");
	sketch_add(&whole, -5, 3);
	check(sketch_quantile(&whole, 1.0, &est) && est == 0.0, "only early rows: no allowance needed");
	check(!sketch_quantile(&whole, 0.0, &est) && !sketch_quantile(&whole, 1.5, &est), "q out of (0, 1] refused");
	check(!sketch_add_bucket(&whole, -1, 1) && !sketch_add_bucket(&whole, SKETCH_BUCKETS, 1),
		  "a bucket index out of range is refused");
	check(sketch_add_bucket(&whole, 100, 2) && sketch_count(&whole) == 5, "SQL Server's (bucket, count) pairs add");
	len = sketch_serialize(&whole, buf, sizeof(buf));
	check(len > 0 && sketch_deserialize(buf, len, &back) && sketch_count(&back) == 5, "small sketch round trip");
	check(sketch_serialize(&whole, buf, 3) == -1, "a buffer too small is refused, not truncated");
	buf[0] = 99;
	check(!sketch_deserialize(buf, len, &back), "an unknown version is refused");
	{
		uint8_t		bad[] = {1, 0, 0, 0, 0, 0x80};

		check(!sketch_deserialize(bad, sizeof(bad), &back), "a truncated varint is refused");
	}
	{
		uint8_t		bad[] = {1, 0, 0, 0, 0, 0x90, 0x10, 1};	/* index 2064 */

		check(!sketch_deserialize(bad, sizeof(bad), &back), "a bucket beyond the last is refused");
	}
	{
		/* a first delta of 2^64 - 2^40 would wrap the index below 0: refused, nothing written */
		uint8_t		bad[] = {1, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0xe0, 0xff, 0xff, 0xff, 0x01, 1};

		check(!sketch_deserialize(bad, sizeof(bad), &back), "a delta that wraps the index is refused");
	}
	{
		/* min 5 ms, max 1 ms, one row in bucket 10 */
		uint8_t		bad[] = {1, 0, 0, 10, 2, 10, 1};

		check(!sketch_deserialize(bad, sizeof(bad), &back), "min above max with rows is refused");
	}
	{
		uint8_t		bad[] = {1, 0, 0, 0, 0, 10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
		1, 2};

		check(!sketch_deserialize(bad, sizeof(bad), &back), "counts that overflow are refused");
	}
	return tap_done();
}
