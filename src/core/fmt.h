/*
 * fmt.h
 *     LSNs and times as text for messages and details (palloc'd, so several
 *     fit in one message).
 */
#ifndef FINALIZE_FMT_H
#define FINALIZE_FMT_H

#include "datatype/timestamp.h"

#include "core/lsn.h"

extern char *fmt_lsn(const Lsn *lsn);
extern char *fmt_local(Timestamp ts);
extern char *fmt_instant(TimestampTz ts);
extern char *fmt_usecs(int64 usecs);

#endif							/* FINALIZE_FMT_H */
