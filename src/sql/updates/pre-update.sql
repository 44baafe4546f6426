-- Before anything changes: the library this server loaded must be at least
-- the version this script updates to (it is preloaded, so `make install`
-- takes effect at the next restart; in a chain of updates, 0.2.0 to 0.3.0 to
-- 0.4.0, every script runs under the newest library). Failing here changes
-- nothing. The Makefile puts the version in place of @update_to@.
DO $probe$
DECLARE
    loaded text;
BEGIN
    BEGIN
        CREATE FUNCTION @extschema@._update_probe() RETURNS text
            AS 'MODULE_PATHNAME', 'finalize_library_version' LANGUAGE C;
        loaded := @extschema@._update_probe();
        DROP FUNCTION @extschema@._update_probe();
    EXCEPTION WHEN undefined_function THEN
        loaded := NULL;
    END;
    IF loaded IS NULL OR pg_catalog.string_to_array(loaded, '.')::integer[]
                         OPERATOR(pg_catalog.<) pg_catalog.string_to_array('@update_to@', '.')::integer[] THEN
        RAISE EXCEPTION 'the finalize library loaded in this server is older than @update_to@'
            USING DETAIL = pg_catalog.format('It is version %s.', coalesce(loaded, '0.2.0 or older')),
                  HINT = 'Restart PostgreSQL after installing the new version (the library is preloaded), '
                         'then run ALTER EXTENSION finalize UPDATE again.';
    END IF;
END
$probe$;
