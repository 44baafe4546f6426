/*
 * fdw_options.h
 *     Validators of the finalize_mssql and finalize_s3 wrappers, and reading
 *     the generic options they validated.
 */
#ifndef FINALIZE_FDW_OPTIONS_H
#define FINALIZE_FDW_OPTIONS_H

#include "nodes/pg_list.h"

extern const char *fdw_option_value(List *options, const char *name, const char *dflt);
extern bool fdw_option_usecs(const char *text, int64 *out);

#endif							/* FINALIZE_FDW_OPTIONS_H */
