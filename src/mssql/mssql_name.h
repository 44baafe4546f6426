/*
 * mssql_name.h
 *     SQL Server names: parsing two-part names and quoting identifiers and
 *     string literals for T-SQL text. Pure functions.
 */
#ifndef FINALIZE_MSSQL_NAME_H
#define FINALIZE_MSSQL_NAME_H

extern void mssql_split_name(const char *name, const char *argname,
							 char **schema, char **object);
extern char *mssql_quote_ident(const char *ident);
extern char *mssql_quote_literal(const char *value);

#endif							/* FINALIZE_MSSQL_NAME_H */
