-- The validator of the finalize_dagster wrapper (src/push/dagster_options.c):
-- Dagster webservers that dagster publications report materializations to.
-- The server holds the webserver's base URL and timeout; the API token
-- (Dagster+) lives in the user mapping of the server's owner, which only its
-- owner and superusers can read. Before 11e_wrappers.once.sql, which makes
-- the wrapper.
CREATE OR REPLACE FUNCTION finalize_internal.dagster_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_dagster_validator'
LANGUAGE C STRICT;
