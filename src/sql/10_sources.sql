-- Sources are foreign servers of this wrapper; credentials live only in user
-- mappings. The wrapper has no handler: it holds connection options, it does
-- not serve foreign tables.

CREATE FUNCTION @extschema@._mssql_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_mssql_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER finalize_mssql
    VALIDATOR @extschema@._mssql_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_mssql IS
    'SQL Server databases with change data capture, read by the finalize worker';

GRANT USAGE ON FOREIGN DATA WRAPPER finalize_mssql TO finalize_admin;

-- Splits a SQL Server two-part name (dbo.orders, [my schema].[odd]]name]) into
-- its unquoted parts; the error names the argument it was given as.
CREATE FUNCTION @extschema@._split_mssql_name(name text, argname text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'finalize_split_mssql_name'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Quotes one SQL Server identifier with brackets, doubling any ].
CREATE FUNCTION @extschema@.quote_mssql_ident(ident text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_quote_mssql_ident'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.quote_mssql_ident(text) IS
    'Quote a SQL Server identifier with brackets, doubling any ]';
