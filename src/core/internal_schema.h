/*
 * Where finalize's internal functions are: schema finalize_internal, but
 * only when the extension owns it (a catalog older than 0.3.0 keeps them as
 * finalize._<name>, and a schema of that name that someone else created is
 * never called).
 */
#ifndef FINALIZE_INTERNAL_SCHEMA_H
#define FINALIZE_INTERNAL_SCHEMA_H

extern bool internal_schema_is_ours(void);
extern char *internal_function_name(const char *name);
extern bool internal_function_exists(const char *signature);

#endif
