/*
 * lsn.c
 *     SQL Server log sequence numbers.
 *
 * The CDC functions return binary(10); Microsoft documents no arithmetic
 * beyond "increment returns the next LSN, decrement the previous one", which
 * treating the value as an 80-bit unsigned big-endian integer satisfies.
 * Byte order equals LSN order, so comparison is memcmp, and the fixed-width
 * upper-case text form sorts the same way.
 */
#include <string.h>

#include "core/lsn.h"

/* Value of one hex digit, or -1. */
static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/*
 * Reads 2 * LSN_BYTES hex digits into an LSN; out is only written when
 * every digit is valid, so a refused text never leaves half an LSN behind.
 */
static bool
parse_digits(const char digits[2 * LSN_BYTES], Lsn *out)
{
	Lsn			r;

	for (int i = 0; i < LSN_BYTES; i++)
	{
		int			hi = hex_value(digits[2 * i]);
		int			lo = hex_value(digits[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		r.b[i] = (uint8_t) (hi << 4 | lo);
	}
	*out = r;
	return true;
}

/* Parses 0x followed by exactly 20 hex digits (either case). */
bool
lsn_parse(const char *text, Lsn *out)
{
	if (text == NULL || strlen(text) != LSN_TEXT_LEN ||
		text[0] != '0' || (text[1] != 'x' && text[1] != 'X'))
		return false;
	return parse_digits(text + 2, out);
}

/*
 * Parses what a pipeline reports: finalize's own form, or Debezium's
 * (source.commit_lsn of its SQL Server connector), which writes the same 10
 * bytes as three zero-padded hex groups of 8, 8 and 4 digits separated by
 * colons, "0000002d:00000f2a:0002". Strict: no spaces, no shorter groups,
 * no sign. A pipeline that reports a mangled LSN gets an error, never a
 * position it did not mean (which could let the verdict run ahead).
 */
bool
lsn_parse_any(const char *text, Lsn *out)
{
	char		digits[2 * LSN_BYTES];

	/* Both forms are 22 characters long; only Debezium's has colons. */
	if (text == NULL || strlen(text) != LSN_DEBEZIUM_LEN || text[8] != ':' || text[17] != ':')
		return lsn_parse(text, out);
	memcpy(digits, text, 8);
	memcpy(digits + 8, text + 9, 8);
	memcpy(digits + 16, text + 18, 4);
	return parse_digits(digits, out);
}

/* Writes the stored text form, 0x and 20 upper-case hex digits. */
void
lsn_format(const Lsn *lsn, char out[LSN_TEXT_LEN + 1])
{
	static const char digits[] = "0123456789ABCDEF";

	out[0] = '0';
	out[1] = 'x';
	for (int i = 0; i < LSN_BYTES; i++)
	{
		out[2 + 2 * i] = digits[lsn->b[i] >> 4];
		out[3 + 2 * i] = digits[lsn->b[i] & 0xF];
	}
	out[LSN_TEXT_LEN] = '\0';
}

/* Orders two LSNs: negative, zero or positive like memcmp. */
int
lsn_cmp(const Lsn *a, const Lsn *b)
{
	return memcmp(a->b, b->b, LSN_BYTES);
}

/* True for 0x00000000000000000000, what fn_cdc_get_min_lsn returns for an
 * unknown capture instance or a login without access. */
bool
lsn_is_zero(const Lsn *lsn)
{
	for (int i = 0; i < LSN_BYTES; i++)
		if (lsn->b[i] != 0)
			return false;
	return true;
}

/* The next LSN; false (and out unchanged) at the maximum. */
bool
lsn_increment(const Lsn *in, Lsn *out)
{
	Lsn			r = *in;

	for (int i = LSN_BYTES - 1; i >= 0; i--)
	{
		if (++r.b[i] != 0)
		{
			*out = r;
			return true;
		}
	}
	return false;
}

/* The previous LSN; false (and out unchanged) at zero. */
bool
lsn_decrement(const Lsn *in, Lsn *out)
{
	Lsn			r = *in;

	for (int i = LSN_BYTES - 1; i >= 0; i--)
	{
		if (r.b[i]-- != 0)
		{
			*out = r;
			return true;
		}
	}
	return false;
}

/*
 * Whether a range (start_exclusive, ...] reaches below the validity interval
 * that begins at min_lsn: its first possible row, start + 1, is below
 * min_lsn, so rows it should contain may have been cleaned up.
 */
bool
lsn_range_starts_below(const Lsn *start_exclusive, const Lsn *min_lsn)
{
	Lsn			first;

	if (!lsn_increment(start_exclusive, &first))
		return false;
	return lsn_cmp(&first, min_lsn) < 0;
}
