-- Before anything changes: the library this server loaded must be the
-- version this script updates to (it is preloaded, so `make install` takes
-- effect at the next restart). Failing here changes nothing. The Makefile
-- puts the version in place of @update_to@.
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
        loaded := 'older than 0.3.0';
    END;
    IF loaded IS DISTINCT FROM '@update_to@' THEN
        RAISE EXCEPTION 'the finalize library loaded in this server is version %, not @update_to@', loaded
            USING HINT = 'Restart PostgreSQL after installing the new version (the library is preloaded), '
                         'then run ALTER EXTENSION finalize UPDATE again.';
    END IF;
END
$probe$;

