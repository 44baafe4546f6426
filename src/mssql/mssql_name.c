/*
 * mssql_name.c
 *     SQL Server names: parsing two-part names and quoting identifiers and
 *     string literals for T-SQL text.
 *
 * Every identifier that goes into T-SQL text passes through
 * mssql_quote_ident (brackets, ] doubled) and every string through
 * mssql_quote_literal (N'...', ' doubled), so no name can inject T-SQL.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "mssql/mssql_name.h"

PG_FUNCTION_INFO_V1(finalize_split_mssql_name);
PG_FUNCTION_INFO_V1(finalize_quote_mssql_ident);

/* sysname is nvarchar(128). */
#define MSSQL_MAX_IDENT_CHARS 128

/* Raises the one error for a name that cannot be parsed. */
static void
bad_name(const char *name, const char *argname, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid value for argument %s: \"%s\" is not a SQL Server table name", argname, name),
			 errdetail("%s", detail),
			 errhint("Write schema.table, quoting names with brackets where needed, for example dbo.orders or [sales data].[order lines].")));
}

/*
 * Reads one name part starting at *p: [bracketed]] with ]] escapes],
 * "double-quoted with "" escapes", or a run of characters that need no
 * quoting. Leaves *p after the part and returns the unquoted text.
 */
static char *
read_part(const char **p, const char *name, const char *argname)
{
	StringInfoData buf;
	const char *s = *p;

	initStringInfo(&buf);
	if (*s == '[' || *s == '"')
	{
		char		close = (*s == '[') ? ']' : '"';

		for (s++;; s++)
		{
			if (*s == '\0')
				bad_name(name, argname, "A quoted name is not closed.");
			if (*s == close)
			{
				if (s[1] != close)
					break;
				s++;			/* doubled quote: one literal character */
			}
			appendStringInfoChar(&buf, *s);
		}
		s++;
	}
	else
	{
		while (*s != '\0' && *s != '.' && *s != '[' && *s != ']' && *s != '"' &&
			   !isspace((unsigned char) *s))
			appendStringInfoChar(&buf, *s++);
		if (*s != '\0' && *s != '.')
			bad_name(name, argname,
					 "Names with spaces, brackets or quotes must be enclosed in brackets.");
	}
	if (buf.len == 0)
		bad_name(name, argname, "A name part is empty.");
	if (pg_mbstrlen(buf.data) > MSSQL_MAX_IDENT_CHARS)
		bad_name(name, argname, "A SQL Server identifier has at most 128 characters.");
	*p = s;
	return buf.data;
}

/*
 * Splits schema.table into its unquoted parts. The database is the server's,
 * so exactly two parts are accepted, and the schema is never guessed.
 */
void
mssql_split_name(const char *name, const char *argname, char **schema, char **object)
{
	const char *p = name;

	*schema = read_part(&p, name, argname);
	if (*p != '.')
		bad_name(name, argname, "The schema is missing: SQL Server tables are named schema.table.");
	p++;
	*object = read_part(&p, name, argname);
	if (*p != '\0')
		bad_name(name, argname,
				 *p == '.' ? "Give schema.table only: the database is the one of the server."
				 : "Unexpected characters follow the table name.");
}

/* Quotes an identifier for T-SQL: [name] with every ] doubled. */
char *
mssql_quote_ident(const char *ident)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (const char *s = ident; *s; s++)
	{
		if (*s == ']')
			appendStringInfoChar(&buf, ']');
		appendStringInfoChar(&buf, *s);
	}
	appendStringInfoChar(&buf, ']');
	return buf.data;
}

/* Quotes a string for T-SQL as a Unicode literal: N'text' with ' doubled. */
char *
mssql_quote_literal(const char *value)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "N'");
	for (const char *s = value; *s; s++)
	{
		if (*s == '\'')
			appendStringInfoChar(&buf, '\'');
		appendStringInfoChar(&buf, *s);
	}
	appendStringInfoChar(&buf, '\'');
	return buf.data;
}

/*
 * finalize_internal.split_mssql_name(name, argname) returns {schema, table}.
 */
Datum
finalize_split_mssql_name(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *argname = text_to_cstring(PG_GETARG_TEXT_PP(1));
	char	   *schema;
	char	   *object;
	Datum		parts[2];

	mssql_split_name(name, argname, &schema, &object);
	parts[0] = CStringGetTextDatum(schema);
	parts[1] = CStringGetTextDatum(object);
	PG_RETURN_ARRAYTYPE_P(construct_array(parts, 2, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * finalize.quote_mssql_ident(ident)
 */
Datum
finalize_quote_mssql_ident(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(mssql_quote_ident(text_to_cstring(PG_GETARG_TEXT_PP(0)))));
}
