/*
 * finalize.h
 *     Settings and small helpers shared by the parts of the extension.
 */
#ifndef FINALIZE_H
#define FINALIZE_H

#include "postgres.h"

/* Name of the extension's schema (the extension is not relocatable). */
#define FINALIZE_SCHEMA "finalize"

/* finalize.facts_retention, in minutes. */
extern int	finalize_facts_retention_min;

#endif							/* FINALIZE_H */
