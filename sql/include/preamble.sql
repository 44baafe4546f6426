-- Included by every regress test (\i from the top directory, where pg_regress
-- runs psql): errors without context; dates, intervals and zone fixed.
\set VERBOSITY default
\set SHOW_CONTEXT never
SET datestyle = 'ISO, YMD';
SET intervalstyle = 'postgres';
SET timezone = 'UTC';
