/*
 * fdw_options.h
 *     The checking of finalize's foreign-data wrapper options (each
 *     wrapper's validator gives its table of options), and reading the
 *     generic options they validated.
 */
#ifndef FINALIZE_FDW_OPTIONS_H
#define FINALIZE_FDW_OPTIONS_H

#include "nodes/pg_list.h"

/* The largest CA file handed to a TLS library (a bundle of PEM certificates). */
#define FDW_CA_FILE_MAX_BYTES (1024 * 1024)
/* fdw_ca_file_problem's answer when stat() failed (errno says why). */
#define FDW_CA_FILE_UNREADABLE "cannot be read"

/* Checks one option value; false means invalid. */
typedef bool (*OptionCheck) (const char *value);

/* One valid option of a wrapper (a table ends with {NULL}). */
typedef struct FdwOption
{
	const char *name;
	Oid			context;		/* catalog the option belongs to */
	bool		secret;			/* never echo its value */
	OptionCheck check;
	const char *rule;			/* errdetail when the check fails */
} FdwOption;

extern void fdw_validate_options(const char *wrapper, const FdwOption *options, List *opts, Oid context);
extern bool fdw_check_header_value(const char *value);
extern bool fdw_check_service_url(const char *value);
extern bool fdw_check_secret(const char *value);
extern bool fdw_check_ca_file(const char *value);
extern const char *fdw_ca_file_problem(const char *path);
extern bool fdw_check_delivery_timeout(const char *value);
extern const char *fdw_option_value(List *options, const char *name, const char *dflt);
extern bool fdw_option_usecs(const char *text, int64 *out);
extern long fdw_option_timeout_ms(List *options, long dflt_ms);
extern struct UserMapping *fdw_user_mapping(Oid user, Oid serverid);
extern List *fdw_user_mapping_options(Oid user, Oid serverid);

#endif							/* FINALIZE_FDW_OPTIONS_H */
