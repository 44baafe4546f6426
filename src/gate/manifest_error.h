/*
 * manifest_error.h
 *     The error for a malformed field of a manifest or a release request
 *     (manifest_error.c).
 */
#ifndef FINALIZE_MANIFEST_ERROR_H
#define FINALIZE_MANIFEST_ERROR_H

#include "core/pg_compat.h"

pg_noreturn extern void manifest_error(const char *field, const char *fmt,...) pg_attribute_printf(2, 3);
pg_noreturn extern void request_error(const char *field, const char *fmt,...) pg_attribute_printf(2, 3);
pg_noreturn extern void manifest_field_error(bool request, const char *field, const char *detail);

#endif							/* FINALIZE_MANIFEST_ERROR_H */
