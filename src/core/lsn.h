/*
 * lsn.h
 *     SQL Server log sequence numbers: 10 bytes, compared as unsigned
 *     big-endian integers, written as 0x and 20 upper-case hex digits
 *     (read also in Debezium's 8:8:4 form). Pure functions; the SQL entry
 *     point is lsn_sql.c's.
 */
#ifndef FINALIZE_LSN_H
#define FINALIZE_LSN_H

#include <stdbool.h>
#include <stdint.h>

#define LSN_BYTES 10
#define LSN_TEXT_LEN (2 + 2 * LSN_BYTES)	/* "0x" + hex, without NUL */
#define LSN_DEBEZIUM_LEN (8 + 1 + 8 + 1 + 4)	/* "0000002d:00000f2a:0002" */

typedef struct Lsn
{
	uint8_t		b[LSN_BYTES];
} Lsn;

extern bool lsn_parse(const char *text, Lsn *out);
extern bool lsn_parse_any(const char *text, Lsn *out);
extern void lsn_format(const Lsn *lsn, char out[LSN_TEXT_LEN + 1]);
extern int	lsn_cmp(const Lsn *a, const Lsn *b);
extern bool lsn_is_zero(const Lsn *lsn);
extern bool lsn_increment(const Lsn *in, Lsn *out);
extern bool lsn_decrement(const Lsn *in, Lsn *out);
extern bool lsn_range_starts_below(const Lsn *start_exclusive, const Lsn *min_lsn);

#endif							/* FINALIZE_LSN_H */
